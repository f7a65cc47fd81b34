//! Smoke test: a small datacenter starts, is populated, and runs an install.

use std::time::Duration;

use agentsadm::api::cnapi::{ServerListFilter, TaskStatus};
use agentsadm::sim::{BuildOptions, PublishTarget, SimConfig, SimDc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn populated_dc_installs_an_agent() {
    let dc = SimDc::start(SimConfig::default().servers(3)).await.unwrap();
    let apis = dc.apis();
    let servers = apis
        .cnapi
        .list_servers(&ServerListFilter {
            extras: vec!["agents".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(servers.len(), 4);
    let cn = dc.server("cn0001").unwrap();
    let before = dc.server_agents(cn.uuid);
    assert!(before.iter().any(|a| a.name == "vm-agent"));
    let img = dc
        .publish_component("vm-agent", &BuildOptions::new("1.5.0"), PublishTarget::Dc)
        .unwrap();
    let task = apis.cnapi.install_agent(cn.uuid, img.uuid).await.unwrap();
    let t = apis
        .cnapi
        .wait_task(task, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Complete, "{t:?}");
    let after = dc.server_agents(cn.uuid);
    let vm = after.iter().find(|a| a.name == "vm-agent").unwrap();
    assert_eq!(vm.image_uuid, Some(img.uuid));
    let old = before.iter().find(|a| a.name == "vm-agent").unwrap();
    assert_eq!(vm.uuid, old.uuid, "instance uuid kept");
    dc.shutdown().await;
}
