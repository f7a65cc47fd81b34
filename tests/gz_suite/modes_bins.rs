//! Modes and bins of a package (issue 22). Modes are normalised as the
//! package is unpacked: nothing world-writable (a 0777 hook script root
//! runs at the next upgrade would be anyone's), no sticky directory left
//! 0777, no setuid or setgid bit unless the catalog allows it for that
//! file. A `bin` that links to a missing file (it would be installed
//! dangling) or is named after agentsadm or a system command is refused,
//! with the reason, and the server, a sentinel outside it and the SAPI and
//! CNAPI records stay as they were.

use std::os::unix::fs::PermissionsExt;

use crate::gz_common::*;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::TreeBuilder;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;

const TREE: &str = "opt/smartdc/agents/lib/node_modules/vm-agent";

/// A vm-agent 2.0.0 package with `bins` (name -> path in the package), a
/// postinstall script of mode 0777, and whatever `extra` adds.
fn vm_agent(bins: &[(&str, &str)], extra: impl FnOnce(&mut TreeBuilder)) -> BuiltImage {
    let uuid = ImageUuid::new_v4();
    let bin: serde_json::Map<String, serde_json::Value> = bins
        .iter()
        .map(|(n, p)| (n.to_string(), serde_json::Value::from(*p)))
        .collect();
    let pj = serde_json::json!({"name": "vm-agent", "version": "2.0.0", "bin": bin,
        "scripts": {"postinstall": "npm/postinstall.sh"}});
    let mut t = TreeBuilder::new();
    t.dir("vm-agent")
        .file("vm-agent/package.json", 0o644, pj.to_string().as_bytes())
        .file("vm-agent/image_uuid", 0o644, format!("{uuid}\n").as_bytes())
        .dir("vm-agent/npm")
        .file("vm-agent/npm/postinstall.sh", 0o777, b"#!/bin/bash\ntrue\n")
        .dir("vm-agent/bin")
        .file("vm-agent/bin/vm-agent", 0o755, b"#!/bin/sh\necho hi\n");
    extra(&mut t);
    raw_image("vm-agent", uuid, &t.finish())
}

fn mode(g: &Guarded, rel: &str) -> u32 {
    std::fs::symlink_metadata(g.srv.at(&format!("{TREE}/{rel}")))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_are_normalised() {
    let g = Guarded::new(&[]).await;
    g.apis.add_service("vm-agent");
    let img = vm_agent(&[("vm-agent", "./bin/vm-agent")], |t| {
        t.file("vm-agent/data.json", 0o666, b"{}")
            .dir_mode("vm-agent/open", 0o777)
            .dir_mode("vm-agent/tmp", 0o1777)
            .file("vm-agent/bin/suid", 0o4755, b"#!/bin/sh\n")
            .file("vm-agent/bin/sgid", 0o2775, b"#!/bin/sh\n")
            .file("vm-agent/bin/both", 0o6777, b"#!/bin/sh\n");
    });
    ok(&g.gz(&["install", &g.publish(&img)]).await);
    for (rel, want) in [
        // The hook script root runs at every upgrade.
        ("npm/postinstall.sh", 0o775),
        ("data.json", 0o664),
        ("open", 0o775),
        // A sticky directory does not come out 0777.
        ("tmp", 0o775),
        ("bin/suid", 0o755),
        ("bin/sgid", 0o775),
        ("bin/both", 0o775),
    ] {
        assert_eq!(mode(&g, rel), want, "{rel}: {:o}", mode(&g, rel));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setuid_stays_only_where_the_catalog_allows_it() {
    // The builtin catalog, with vm-agent allowed a setuid bin/suid.
    let mut doc: serde_json::Value =
        serde_json::from_str(agentsadm_types::catalog::BUILTIN_CATALOG).unwrap();
    for c in doc["components"].as_array_mut().unwrap() {
        if c["name"] == "vm-agent" {
            c["setid_files"] = serde_json::json!(["bin/suid"]);
        }
    }
    let catalog = Catalog::parse(&doc.to_string(), "test").unwrap();
    let g = Guarded::new(&[]).await;
    let img = vm_agent(&[("vm-agent", "./bin/vm-agent")], |t| {
        t.file("vm-agent/bin/suid", 0o4755, b"#!/bin/sh\n")
            .file("vm-agent/bin/other", 0o4755, b"#!/bin/sh\n")
            .file("vm-agent/bin/wide", 0o4777, b"#!/bin/sh\n");
    });
    g.imgapi.publish(&img);
    let mut settings = GzSettings::new(g.srv.root(), PlatformKind::Rooted);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    settings.imgapi_url = Some(g.imgapi.url());
    settings.catalog = catalog;
    let mut session = GzSession::open(settings, true).await.unwrap();
    let r = session
        .install(&[agentsadm_gz::fetch::ImageSource::Imgapi(img.manifest.uuid)])
        .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(mode(&g, "bin/suid"), 0o4755);
    assert_eq!(mode(&g, "bin/other"), 0o755);
    assert_eq!(mode(&g, "bin/wide"), 0o775);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bins_that_dangle_or_shadow_a_system_command_are_refused() {
    let mut v1 = spec("vm-agent", "1.0.0");
    v1.hooks.postuninstall = Some("true".into());
    let g = Guarded::new(&[agentsadm_sim::imagebuild::build(&v1)]).await;
    let before = g.state();
    for (what, bins, expect) in [
        (
            "a bin to a missing file",
            vec![
                ("vm-agent", "./bin/vm-agent"),
                ("vm-agent-ctl", "./bin/nowhere"),
            ],
            "bin \"vm-agent-ctl\" (-> vm-agent/bin/nowhere) is refused: the package has no such file",
        ),
        (
            "a bin to a directory",
            vec![("vm-agent-ctl", "./npm")],
            "bin \"vm-agent-ctl\" (-> vm-agent/npm) is refused: it names a directory, not a file",
        ),
        (
            "a bin named agentsadm",
            vec![("agentsadm", "./bin/vm-agent")],
            "bin \"agentsadm\" (-> vm-agent/bin/vm-agent) is refused: it is named after the system command /opt/smartdc/bin/agentsadm",
        ),
        (
            "a bin named svcadm",
            vec![("svcadm", "./bin/vm-agent")],
            "is refused: it is named after the system command /usr/sbin/svcadm",
        ),
        (
            "a bin named ls",
            vec![("ls", "./bin/vm-agent")],
            "is refused: it is named after the system command /usr/bin/ls",
        ),
    ] {
        let img = vm_agent(&bins, |_| {});
        let msg = failed(&g.gz(&["install", &g.publish(&img)]).await);
        eprintln!("CASE {what}: {msg}");
        assert!(msg.starts_with("validate: "), "{what}: {msg}");
        assert!(msg.contains(expect), "{what}: {msg:?} lacks {expect:?}");
        g.assert_unchanged(&before, what);
    }
}
