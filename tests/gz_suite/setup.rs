//! `gz setup`: the default set of a server's role, from a USB-key style
//! directory (headnode setup, before any API exists) or from IMGAPI with
//! each SAPI agent service's params.image_uuid (compute node setup); and the
//! bunyan log file.

use std::collections::BTreeMap;

use crate::gz_common::*;
use agentsadm::catalog::Catalog;
use agentsadm::remote::ComponentAction;
use agentsadm::sim::standin::ImgapiStandIn;

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
        .map(|c| c.name.clone())
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
