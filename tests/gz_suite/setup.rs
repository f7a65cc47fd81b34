//! `gz setup`: the default set of a server's role, from a USB-key style
//! directory (headnode setup, before any API exists) or from IMGAPI with
//! each SAPI agent service's params.image_uuid (compute node setup); and the
//! bunyan log file.

use std::collections::BTreeMap;

use crate::gz_common::*;
use agentsadm_api::remote::ComponentAction;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::catalog::Catalog;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headnode_setup_from_a_directory_then_again_changes_nothing() {
    let hn = TestServer::new(true);
    let usb = tempfile::tempdir().unwrap();
    let cat = Catalog::builtin();
    let mut index = BTreeMap::new();
    for c in cat.default_set(true) {
        let old = image(&c.name, "0.9.0");
        let new = image(&c.name, "1.0.0");
        write_image(&old, &usb.path().join(&c.name));
        write_image(&new, &usb.path().join(&c.name));
        index.insert(c.name.clone(), new.manifest.uuid.to_string());
    }
    std::fs::write(
        usb.path().join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    let log = hn.at("setup.log");
    let usb_arg = usb.path().to_str().unwrap().to_string();
    let log_arg = log.to_str().unwrap().to_string();
    let args = [
        "setup",
        "--source",
        &usb_arg,
        "--no-sapi",
        "--no-cnapi",
        "--log-file",
        &log_arg,
    ];
    let r = ok(&hn.gz(&args, &BTreeMap::new()).await);
    assert_eq!(r.components.len(), index.len());
    for c in &r.components {
        assert_eq!(c.action, ComponentAction::Installed);
        assert_eq!(c.image_uuid.unwrap().to_string(), index[&c.name]);
    }
    assert!(hn.at("opt/smartdc/sdcadm/bin/sdcadm").exists());
    let r = ok(&hn.gz(&args, &BTreeMap::new()).await);
    assert!(
        r.components
            .iter()
            .all(|c| c.action == ComponentAction::Unchanged)
    );
    // Bunyan records: one JSON object per line with v, level, msg, time.
    let text = std::fs::read_to_string(&log).unwrap();
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        recs.iter()
            .any(|r| r["msg"] == "component done" && r["component"] == "cn-agent")
    );
    assert!(
        recs.iter()
            .all(|r| r["v"] == 0 && r["level"].is_number() && r["time"].is_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_node_setup_from_imgapi_uses_service_images() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let cn = TestServer::new(false);
    let cat = Catalog::builtin();
    let set: Vec<String> = cat
        .default_set(false)
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    // Every default component but one has a service image.
    for name in set.iter().filter(|n| *n != "amon-relay") {
        let img = image(name, "1.0.0");
        imgapi.publish(&img);
        apis.add_service_with_image(name, &img.manifest.uuid.to_string());
    }
    let r = ok(&cn
        .gz(&["setup", "--source", "imgapi"], &apis.env(&imgapi.url()))
        .await);
    assert_eq!(r.components.len(), set.len() - 1);
    assert!(
        r.warnings.iter().any(|w| w.contains("amon-relay")),
        "{:?}",
        r.warnings
    );
    let st = apis.state.lock().unwrap();
    assert_eq!(st.instances.len(), set.len() - 1);
    assert!(
        st.instances
            .values()
            .all(|i| i["params"]["server_uuid"] == cn.uuid.to_string().as_str())
    );
}

/// A SAPI default image missing from IMGAPI (CN setup through CNAPI's
/// server-setup job, tests/real-triton's cn-setup-failure): the failure
/// names the component and the step, since that is all the operator sees in
/// agent-setup.log (CNAPI's job only says the script failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_node_setup_names_the_component_whose_image_is_missing() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let cn = TestServer::new(false);
    for c in Catalog::builtin().default_set(false) {
        let name = c.name.to_string();
        if name == "vm-agent" {
            apis.add_service_with_image(&name, "00000000-0000-4000-8000-00000000dead");
            continue;
        }
        let img = image(&name, "1.0.0");
        imgapi.publish(&img);
        apis.add_service_with_image(&name, &img.manifest.uuid.to_string());
    }
    let out = cn
        .gz(&["setup", "--source", "imgapi"], &apis.env(&imgapi.url()))
        .await;
    let msg = failed(&out);
    let e = result(&out).error.unwrap();
    assert_eq!(
        e.component.as_ref().map(|c| c.to_string()).as_deref(),
        Some("vm-agent"),
        "{msg}"
    );
    assert!(msg.starts_with("resolve: "), "{msg}");
    assert!(
        msg.contains("00000000-0000-4000-8000-00000000dead"),
        "{msg}"
    );
}

/// A real headnode has no `gz-tools` or `sdcadm` SAPI service until
/// `agentsadm adopt` creates them: setup says what it skipped (from
/// IMGAPI) or did not adopt (from a directory), why, and what to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headnode_setup_without_gz_tools_and_sdcadm_services_says_what_to_run() {
    let imgapi = ImgapiStandIn::start().await.unwrap();
    let apis = Apis::start().await;
    let cat = Catalog::builtin();
    let set: Vec<String> = cat
        .default_set(true)
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    let serviceless = ["gz-tools", "sdcadm"];
    assert!(serviceless.iter().all(|n| set.iter().any(|s| s == n)));
    let usb = tempfile::tempdir().unwrap();
    for name in &set {
        let img = image(name, "1.0.0");
        imgapi.publish(&img);
        write_image(&img, &usb.path().join(name));
        if !serviceless.contains(&name.as_str()) {
            apis.add_service_with_image(name, &img.manifest.uuid.to_string());
        }
    }
    let env = apis.env(&imgapi.url());

    // From IMGAPI: nothing names their images; both are skipped.
    let hn = TestServer::new(true);
    let r = ok(&hn.gz(&["setup", "--source", "imgapi"], &env).await);
    assert_eq!(r.components.len(), set.len() - 2, "{:?}", r.components);
    for name in serviceless {
        let w = r
            .warnings
            .iter()
            .find(|w| w.starts_with(&format!("not installed: {name}: ")))
            .unwrap_or_else(|| panic!("{name}: {:?}", r.warnings));
        assert!(
            w.contains(&format!("SAPI has no agent service \"{name}\""))
                && w.contains("'agentsadm adopt' creates them")
                && w.contains("run 'agentsadm adopt' on the headnode, then setup again"),
            "{w}"
        );
    }
    assert!(!hn.at("opt/smartdc/sdcadm/bin/sdcadm").exists());

    // From the USB key: installed, and not adopted, saying why.
    let hn = TestServer::new(true);
    let usb_arg = usb.path().to_str().unwrap().to_string();
    let r = ok(&hn.gz(&["setup", "--source", &usb_arg], &env).await);
    assert_eq!(r.components.len(), set.len());
    for name in serviceless {
        let w = r
            .warnings
            .iter()
            .find(|w| w.starts_with(&format!("{name}: not adopted into SAPI: ")))
            .unwrap_or_else(|| panic!("{name}: {:?}", r.warnings));
        assert!(
            w.contains("run 'agentsadm adopt' on the headnode to create the service"),
            "{w}"
        );
    }
    let st = apis.state.lock().unwrap();
    assert_eq!(st.instances.len(), 2 * (set.len() - 2));
}
