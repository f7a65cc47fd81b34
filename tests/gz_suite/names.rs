//! Component names where they reach a server: a name on the `gz` command
//! line becomes a path component (`node_modules/<name>`, `etc/<name>`,
//! the journal), so one that is not a component name (`../x`, `A B`) is
//! refused before anything is read or changed; and a directory under
//! `node_modules` that no component could have made is reported as
//! unreadable, never as an agent, so the report the headnode decodes
//! stays valid.

use std::collections::BTreeMap;

use crate::gz_common::*;
use agentsadm_sim::standin::ImgapiStandIn;

/// Names a hostile or mistaken caller could pass.
const HOSTILE: &[&str] = &[
    "../x",
    "..",
    ".",
    "A B",
    "VM-AGENT",
    "vm-agent/../../../../etc",
    "vm-agent\n",
    "",
];

#[tokio::test]
async fn hostile_names_on_the_command_line_are_refused_and_change_nothing() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let srv = TestServer::new(false);
    let v1 = image("vm-agent", "1.0.0");
    imgapi.publish(&v1);
    let env = BTreeMap::from([("IMGAPI_URL".to_string(), imgapi.url())]);
    ok(&srv
        .gz(
            &[
                "install",
                &v1.manifest.uuid.to_string(),
                "--no-sapi",
                "--no-cnapi",
            ],
            &env,
        )
        .await);
    // A file outside the root, where `../` names would lead.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, b"top secret\n").unwrap();
    let before = snapshot(srv.root());
    let smf = srv.smf_state();
    for name in HOSTILE {
        for command in ["remove", "rollback", "disable", "enable", "health"] {
            let out = srv.gz_offline(&[command, name]).await;
            let said = format!("{}{}", out.stdout, out.stderr);
            assert_ne!(out.exit_status, 0, "gz {command} {name:?}: {said}");
            assert!(
                said.contains("is not a component name"),
                "gz {command} {name:?}: {said}"
            );
            assert_eq!(
                snapshot(srv.root()),
                before,
                "gz {command} {name:?} changed the server"
            );
            assert_eq!(srv.smf_state(), smf, "gz {command} {name:?}");
            assert_eq!(std::fs::read(&secret).unwrap(), b"top secret\n");
        }
    }
    // The installed component is still what a valid name reaches.
    let r = ok(&srv.gz_offline(&["health", "vm-agent"]).await);
    assert_eq!(r.components[0].name, "vm-agent");
}

#[tokio::test]
async fn a_directory_no_component_could_make_is_reported_as_unreadable() {
    let srv = TestServer::new(false);
    let node_modules = srv.at("opt/smartdc/agents/lib/node_modules");
    for dir in ["A B", "Evil.Agent"] {
        let d = node_modules.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("package.json"),
            format!(r#"{{"name":"{dir}","version":"1.0.0"}}"#),
        )
        .unwrap();
        std::fs::write(
            d.join("image_uuid"),
            "2d11ad57-389f-4eff-abcb-6dd51646cf80\n",
        )
        .unwrap();
    }
    let before = snapshot(srv.root());
    let out = srv.gz_offline(&["report"]).await;
    // What the headnode decodes: the report reads (no entry refuses it),
    // lists neither directory as an agent and says what is wrong with each.
    let rep = report(&out);
    assert!(rep.agents.is_empty(), "{:?}", rep.agents);
    let mut errors: Vec<(&str, &str)> = rep
        .errors
        .iter()
        .map(|e| (e.name.as_str(), e.message.as_str()))
        .collect();
    errors.sort();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for ((name, message), want) in errors.iter().zip(["A B", "Evil.Agent"]) {
        assert_eq!(*name, want);
        assert!(message.contains("is not a component name"), "{message}");
    }
    assert_eq!(snapshot(srv.root()), before, "a report changes nothing");
}
