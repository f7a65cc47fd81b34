//! Client-level tests of every wire quirk the simulator reproduces
//! (docs/triton/apis.md §5, the simulator checklist), through the real
//! clients where they can express the call and raw HTTP where a client
//! deliberately never does it (no Accept-Version, UpgradeInstance...).
//! IMGAPI's are in `quirks_imgapi`, SAPI's in `quirks_sapi`; CNAPI's, image
//! files and publishing here.

use std::time::Duration;

use crate::sim_common::{get, raw, small_dc};

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::cnapi::ServerListFilter;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::imgapi::ImgapiClient;
use agentsadm_api::imgapi::ListImagesFilter;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::image_spec;
use agentsadm_sim::imagebuild::build;
use agentsadm_sim::publish_via_client;
use agentsadm_sim::sim_api_config;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use reqwest::Method;
use serde_json::json;

pub(crate) fn code_of(e: &ApiError) -> (Option<u16>, Option<String>) {
    (e.status(), e.code().map(str::to_string))
}

// ---------------------------------------------------------------- CNAPI

#[tokio::test]
async fn cnapi_strict_params_validation_and_limits() {
    let dc = small_dc(1).await;
    let c = &dc.urls().cnapi;
    let r = get(&format!("{c}/servers?foo=1")).await;
    assert_eq!(
        (r.status, r.json()),
        (
            409,
            json!({"code": "InvalidArgument", "message": "foo is not an explicitly defined parameter"})
        )
    );
    let hn = dc.headnode();
    let r = get(&format!("{c}/servers/{}?extras=agents", hn.uuid)).await;
    assert_eq!(r.status, 409, "ServerGet takes no extras");
    for l in ["0", "1001"] {
        let r = get(&format!("{c}/servers?limit={l}")).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json()["errors"][0]["message"],
            "limit must be in the range 1-1000 (inclusive)"
        );
    }
    let r = get(&format!("{c}/servers?setup=maybe")).await;
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (500, json!("InvalidParameters"))
    );
    let cnapi = dc.apis().cnapi;
    let err = cnapi
        .update_server(hn.uuid, &json!({"reserved": "yes"}))
        .await
        .unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!(
        (*status, body.code.as_deref()),
        (500, Some("InvalidParameters"))
    );
    assert_eq!(body.errors[0].field, "reserved");
    assert_eq!(
        body.errors[0].message.as_deref(),
        Some("value was not true or false")
    );
    assert!(!err.is_transient(), "validation 500s are not retried");
    let err = cnapi
        .update_server(hn.uuid, &json!({"hostname": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(409), Some("InvalidArgument".into())));
    let r = get(&format!("{c}/servers/not-a-uuid")).await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (409, json!("Invalid server_uuid"))
    );
    let r = get(&format!("{c}/servers/{}", InstanceUuid::from_u128(9))).await;
    assert_eq!(r.status, 404);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_list_projection_order_and_paging() {
    let dc = small_dc(5).await;
    let c = &dc.urls().cnapi;
    let bare = get(&format!("{c}/servers")).await.json();
    let first = bare[0].as_object().unwrap();
    assert!(first.contains_key("status"));
    for k in [
        "sysinfo",
        "agents",
        "vms",
        "last_heartbeat",
        "memory_total_bytes",
    ] {
        assert!(!first.contains_key(k), "{k} without extras");
    }
    let uuids: Vec<String> = bare
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["uuid"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = uuids.clone();
    sorted.sort();
    assert_eq!(uuids, sorted, "uuid order");
    let agents = get(&format!("{c}/servers?extras=agents")).await.json();
    let s0 = agents[0].as_object().unwrap();
    assert!(s0.contains_key("agents") && s0.contains_key("last_heartbeat"));
    assert!(!s0.contains_key("sysinfo"));
    let sys = get(&format!("{c}/servers?extras=sysinfo&fields=uuid,sysinfo"))
        .await
        .json();
    assert_eq!(sys[0].as_object().unwrap().len(), 2);
    assert!(sys[0]["sysinfo"]["UUID"].is_string());
    let page = get(&format!("{c}/servers?limit=2&offset=4")).await.json();
    assert_eq!(page.as_array().unwrap().len(), 2);
    assert_eq!(page[0]["uuid"], json!(uuids[4]));
    let filtered = dc
        .apis()
        .cnapi
        .list_servers(&ServerListFilter {
            headnode: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].hostname, "headnode");
    let by_host = dc
        .apis()
        .cnapi
        .list_servers(&ServerListFilter {
            hostname: Some("cn0003".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_host.len(), 1);
    // ServerGet has every group.
    let one = dc
        .apis()
        .cnapi
        .get_server(dc.headnode().uuid)
        .await
        .unwrap();
    assert!(one.sysinfo.is_some() && one.agents.is_some() && one.vms.is_some());
    assert_eq!(one.sysinfo.unwrap()["Boot Parameters"]["headnode"], "true");
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_install_agent_task_lifecycle_and_failure_history() {
    let dc = small_dc(2).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let img = dc
        .publish_component("net-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    dc.faults()
        .set_install_latency(agentsadm_sim::LatencySpec::fixed(300));
    let id = cnapi.install_agent(cn.uuid, img.uuid).await.unwrap();
    let t = cnapi.get_task(id).await.unwrap();
    assert_eq!(t.status, TaskStatus::Active);
    assert!(t.history.is_none(), "no history while active");
    let done = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(done.status, TaskStatus::Complete);
    assert_eq!(done.history.as_ref().unwrap()[0].name, "finish");
    let agents = dc.server_agents(cn.uuid);
    assert!(
        agents
            .iter()
            .any(|a| a.name == "net-agent" && a.image_uuid == Some(img.uuid))
    );
    // Adopted in SAPI by net-agent's own postinstall, as the real one
    // does it: a bare create over the whole object, no params left
    // (docs/triton/agent-install.md §2.6); the orchestrator writes them
    // again after its step.
    let inst = agents
        .iter()
        .find(|a| a.name == "net-agent")
        .unwrap()
        .uuid
        .unwrap();
    let si = dc.apis().sapi.get_instance(inst).await.unwrap();
    assert_eq!(si.image_uuid(), None, "{si:?}");
    assert_eq!(si.server_uuid(), None, "{si:?}");
    // Failure: history [error, finish], message where sdcadm reads it.
    dc.faults().set_install_latency(Default::default());
    let cn2 = dc.server("cn0002").unwrap();
    dc.faults().fail_installs_on(cn2.uuid);
    let id = cnapi.install_agent(cn2.uuid, img.uuid).await.unwrap();
    let failed = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failure);
    let h = failed.history.as_ref().unwrap();
    assert_eq!(
        (h[0].name.as_str(), h[1].name.as_str()),
        ("error", "finish")
    );
    assert!(
        failed
            .error_message()
            .unwrap()
            .starts_with("AgentInstall error: ")
    );
    // A missing image fails the task the way cn-agent does.
    dc.faults().clear();
    let id = cnapi
        .install_agent(cn2.uuid, ImageUuid::from_u128(1))
        .await
        .unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert!(
        t.error_message().unwrap().contains("Image not found at"),
        "{t:?}"
    );
    let err = cnapi
        .get_task(agentsadm_types::ids::TaskId::from_u128(1))
        .await
        .unwrap_err();
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(body.message, "no such task found");
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_wait_returns_the_active_task_on_timeout() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    dc.faults().hang_tasks_on(cn.uuid);
    let img = cnapi
        .get_server(cn.uuid)
        .await
        .unwrap()
        .agents
        .unwrap()
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap()
        .image_uuid
        .unwrap();
    let id = cnapi.install_agent(cn.uuid, img).await.unwrap();
    let started = std::time::Instant::now();
    let t = cnapi.wait_task(id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Active, "timeout is not an error");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let t = cnapi
        .wait_task_done(id, Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Active);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_cn_agent_task_completes_before_agents_change() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .cn_agent_restart(Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let img = dc
        .publish_component("cn-agent", &BuildOptions::new("2.15.0"), PublishTarget::Dc)
        .unwrap();
    let id = cnapi.install_agent(cn.uuid, img.uuid).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete);
    let cn_agent = |dc: &SimDc| {
        dc.server_agents(cn.uuid)
            .into_iter()
            .find(|a| a.name == "cn-agent")
            .unwrap()
    };
    assert_ne!(cn_agent(&dc).image_uuid, Some(img.uuid), "not yet reported");
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while cn_agent(&dc).image_uuid != Some(img.uuid) {
        assert!(
            std::time::Instant::now() < deadline,
            "cn-agent never reported"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_setup_reset_delete_update_and_not_running() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(3)
            .not_setup(["cn0003"])
            .with_vms("cn0002", 2),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn1 = dc.server("cn0001").unwrap();
    let cn2 = dc.server("cn0002").unwrap();
    let cn3 = dc.server("cn0003").unwrap();
    // Setup: 204 when set up, 202 + job otherwise; the job installs the
    // default set from SAPI and marks the server set up.
    assert_eq!(cnapi.setup_server(cn1.uuid, None).await.unwrap(), None);
    let s3 = cnapi.get_server(cn3.uuid).await.unwrap();
    assert!(!s3.setup && s3.agents.as_ref().unwrap().is_empty());
    // No cn-agent on a server that is not set up: tasks fail to connect.
    let image = dc.default_image("vm-agent").unwrap();
    let id = cnapi.install_agent(cn3.uuid, image).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert!(t.error_message().unwrap().contains("ECONNREFUSED"), "{t:?}");
    assert!(
        cnapi
            .setup_server(cn3.uuid, Some("cn0003"))
            .await
            .unwrap()
            .is_some()
    );
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    loop {
        let s = cnapi.get_server(cn3.uuid).await.unwrap();
        if s.setup {
            assert_eq!(
                s.agents.unwrap().len(),
                dc.catalog().default_set(false).len()
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "setup never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Factory reset: 409 with a bare string body when the server has VMs.
    let err = cnapi.factory_reset(cn2.uuid).await.unwrap_err();
    let ApiError::Status { status, body, .. } = &err else {
        panic!()
    };
    assert_eq!(*status, 409);
    assert_eq!(body.code, None);
    assert_eq!(body.message, "Server may not be reset because it has 2 vms");
    let r = raw(
        Method::PUT,
        &format!("{}/servers/{}/factory-reset", dc.urls().cnapi, cn2.uuid),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.text, "\"Server may not be reset because it has 2 vms\"");
    let instances_before = dc.apis().sapi.list_agent_instances().await.unwrap().len();
    cnapi.factory_reset(cn1.uuid).await.unwrap();
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while cnapi.get_server(cn1.uuid).await.unwrap().setup {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = dc.apis().sapi.list_agent_instances().await.unwrap().len();
    assert_eq!(after, instances_before, "factory reset leaves SAPI alone");
    // ServerUpdate answers 204; ServerDelete 200 with an empty body and
    // leaves SAPI alone too.
    cnapi
        .update_server(cn1.uuid, &json!({"comments": "hello", "reserved": true}))
        .await
        .unwrap();
    let s = cnapi.get_server(cn1.uuid).await.unwrap();
    assert_eq!(s.extra["comments"], "hello");
    let del = raw(
        Method::DELETE,
        &format!("{}/servers/{}", dc.urls().cnapi, cn2.uuid),
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!((del.status, del.text.as_str()), (200, ""));
    assert!(cnapi.get_server(cn2.uuid).await.unwrap_err().is_not_found());
    assert_eq!(
        dc.apis().sapi.list_agent_instances().await.unwrap().len(),
        instances_before
    );
    cnapi.delete_server(cn3.uuid).await.unwrap();
    // A cn-agent still running on a deleted server registers it again.
    dc.reregister(cn2.uuid).await.unwrap();
    let back = cnapi.get_server(cn2.uuid).await.unwrap();
    assert!(back.setup);
    assert_eq!(
        back.agents.unwrap().len(),
        dc.catalog().default_set(false).len()
    );
    // Not running: task routes refuse with ServerNotRunning.
    dc.set_running(cn1.uuid, false);
    let err = cnapi
        .install_agent(cn1.uuid, ImageUuid::from_u128(1))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), (Some(409), Some("ServerNotRunning".into())));
    let ApiError::Status { body, .. } = &err else {
        panic!()
    };
    assert_eq!(
        body.message,
        "Operation attempted on server which is not running"
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_execute_runs_gz_commands_and_nothing_else() {
    // Through cn-agent (`timeout` honoured); Ur is in strict.rs.
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::CnAgent),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let req = gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    let report: AgentsReport = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report.server_uuid, cn.uuid);
    assert_eq!(report.agents, dc.server_agents(cn.uuid));
    // gz install through execute: GzResult on stdout, CNAPI updated.
    let img = dc
        .publish_component("smartlogin", &BuildOptions::new("1.3.0"), PublishTarget::Dc)
        .unwrap();
    let req = gz_execute_request(
        &[
            "gz".into(),
            "install".into(),
            img.uuid.to_string(),
            "--json".into(),
        ],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    let result: GzResult = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(result.components[0].image_uuid, Some(img.uuid));
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .any(|a| a.image_uuid == Some(img.uuid))
    );
    // The real installer put it in the server's rooted GZ.
    let installed = cn
        .root
        .join("opt/smartdc/agents/lib/node_modules/smartlogin/image_uuid");
    assert_eq!(
        std::fs::read_to_string(installed).unwrap().trim(),
        img.uuid.to_string()
    );
    // gz setup --source imgapi on a factory-reset server installs the
    // default set at the SAPI services' images.
    cnapi.factory_reset(cn.uuid).await.unwrap();
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while cnapi.get_server(cn.uuid).await.unwrap().setup {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        dc.gz_report(cn.uuid).await.unwrap().agents.is_empty(),
        "wiped"
    );
    // Its agentsadm went with the rest: the script's shell finds none
    // (strict execute), and CN setup puts one there first, here through
    // the orchestrator's bootstrap.
    let req = gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 127, "{}", r.stderr);
    let agentsadm = dc.default_image("agentsadm").unwrap();
    let manifest = dc.apis().imgapi.get_image(agentsadm).await.unwrap();
    let req = agentsadm_api::bootstrap::bootstrap_request(
        &agentsadm_api::bootstrap::BootstrapImage {
            image: agentsadm,
            sha1: manifest.files[0].sha1.clone(),
            size: manifest.files[0].size,
        },
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    let req = gz_execute_request(
        &[
            "gz".into(),
            "setup".into(),
            "--source".into(),
            "imgapi".into(),
            "--json".into(),
            "--inside-cn-agent".into(),
        ],
        Default::default(),
    );
    let r = cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0, "{}", r.stderr);
    // The set includes cn-agent, and the command line says it runs inside
    // cn-agent's SMF contract (`--inside-cn-agent`, as the orchestrator
    // says): the whole job goes to the agentsadm-install service,
    // which runs it after cn-agent's restart delay and reports to CNAPI.
    let setup: GzResult = serde_json::from_str(&r.stdout).unwrap();
    assert!(setup.error.is_none(), "{setup:?}");
    assert!(
        setup
            .warnings
            .iter()
            .any(|w| w.contains("agentsadm-install")),
        "{setup:?}"
    );
    // (A factory reset leaves server.agents as it was: watch the GZ.)
    let want = dc.catalog().default_set(false).len();
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    loop {
        let report = dc.gz_report(cn.uuid).await.unwrap();
        if report.agents.len() == want && dc.server_agents(cn.uuid) == report.agents {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "setup job never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Any other script is not run: exit 127.
    let other = ExecuteRequest {
        script: "#!/bin/bash\nrm -rf /\n".into(),
        ..Default::default()
    };
    let r = cnapi
        .execute(cn.uuid, &other, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 127);
    assert!(r.stderr.contains("only run agentsadm command lines"));
    // Raw shape: exitCode/stdout/stderr with json, stdout only without.
    let url = format!("{}/servers/{}/execute", dc.urls().cnapi, cn.uuid);
    let body = serde_json::to_value(gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    ))
    .unwrap();
    let j = raw(Method::POST, &url, &[], Some(body.clone()))
        .await
        .unwrap();
    assert_eq!(j.json()["exitCode"], 0);
    let mut plain = body.clone();
    plain["json"] = json!(false);
    let p = raw(Method::POST, &url, &[], Some(plain)).await.unwrap();
    assert!(p.json().as_str().unwrap().starts_with('{'), "stdout only");
    let mut failing = body;
    failing["json"] = json!(false);
    failing["args"] = json!(["gz", "frobnicate"]);
    let f = raw(Method::POST, &url, &[], Some(failing)).await.unwrap();
    assert_eq!(
        (f.status, f.json()["message"].clone()),
        (500, json!("Error executing on remote system"))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_execute_through_ur_with_timeout_kills_cnapi_and_the_client_never_sends_it() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .execute_transport(ExecuteTransport::Ur)
            .cnapi_restart(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let mut req = gz_execute_request(&["gz".into(), "report".into()], Default::default());
    req.timeout = Some(30_000);
    let raw_r = raw(
        Method::POST,
        &format!("{}/servers/{}/execute", dc.urls().cnapi, cn.uuid),
        &[],
        Some(serde_json::to_value(&req).unwrap()),
    )
    .await;
    assert!(raw_r.is_err(), "the connection drops: {raw_r:?}");
    assert_eq!(dc.cnapi_crashes(), 1);
    // The client's execute never sends `timeout` unless told the server is
    // in cn-agent mode, whatever the request says.
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while dc.cnapi_down() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = dc
        .apis()
        .cnapi
        .execute(cn.uuid, &req, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_status, 0);
    assert_eq!(dc.cnapi_crashes(), 1);
    assert_eq!(dc.executes().last().unwrap().timeout, None);
    dc.shutdown().await;
}

#[tokio::test]
async fn cnapi_uninstall_agents_and_old_cn_agent_precondition() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let relay = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "amon-relay")
        .unwrap();
    let id = cnapi
        .uninstall_agents(cn.uuid, &["amon-relay".to_string()])
        .await
        .unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete);
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .all(|a| a.name != "amon-relay")
    );
    // SAPI is not touched by agents_uninstall.
    dc.apis()
        .sapi
        .get_instance(relay.uuid.unwrap())
        .await
        .unwrap();
    // The seeded cn-agent is on the real 2.x line, a build above the floor.
    let cn_agent = |dc: &SimDc| {
        dc.server_agents(cn.uuid)
            .into_iter()
            .find(|a| a.name == "cn-agent")
    };
    assert!(cn_agent(&dc).unwrap().version.starts_with("2.9.0-master-"));
    // An older cn-agent, and a build of 2.8.0 itself (CNAPI's node-semver
    // reads its `-master-<stamp>-g<sha>` as a pre-release, below 2.8.0):
    // 412 with the real CNAPI's words.
    let mut agents = dc.server_agents(cn.uuid);
    for old in ["2.7.1", "2.8.0-master-20231010T000000Z-g1234567"] {
        for a in agents.iter_mut().filter(|a| a.name == "cn-agent") {
            a.version = old.parse().unwrap();
        }
        cnapi.update_server_agents(cn.uuid, &agents).await.unwrap();
        let err = cnapi
            .uninstall_agents(cn.uuid, &["vm-agent".to_string()])
            .await
            .unwrap_err();
        assert_eq!(
            code_of(&err),
            (Some(412), Some("PreconditionFailed".into())),
            "{old}"
        );
        let ApiError::Status { body, .. } = &err else {
            panic!()
        };
        assert_eq!(
            body.message,
            format!(
                "cn-agent (v{old}) on server {} does not support \"agents_uninstall\": require at least cn-agent v2.8.0",
                cn.uuid
            )
        );
    }
    assert_eq!(dc.cnapi_crashes(), 0);
    // No cn-agent entry at all: formatting the refusal throws, CNAPI dies.
    agents.retain(|a| a.name != "cn-agent");
    cnapi.update_server_agents(cn.uuid, &agents).await.unwrap();
    let err = cnapi
        .uninstall_agents(cn.uuid, &["vm-agent".to_string()])
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert_eq!(dc.cnapi_crashes(), 1);
    dc.shutdown().await;
}

#[tokio::test]
async fn corrupt_and_truncated_files_fail_installs() {
    let dc = small_dc(1).await;
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let good = dc
        .publish_component("firewaller", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    dc.faults().corrupt_image(&good.uuid.to_string());
    let id = cnapi.install_agent(cn.uuid, good.uuid).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Failure);
    // The installer's verifier: the sha1 the manifest records.
    let message = t.error_message().unwrap();
    assert!(message.contains("sha1"), "{t:?}");
    assert!(message.contains("nothing changed"), "{t:?}");
    dc.faults().clear();
    dc.faults().truncate_image("firewaller");
    // The client sees the download break mid-body.
    let dl = dc.apis().imgapi.get_image_file(good.uuid).await.unwrap();
    assert_eq!(dl.content_length, Some(good.files[0].size));
    assert!(dl.response.bytes().await.is_err());
    let id = cnapi.install_agent(cn.uuid, good.uuid).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Failure);
    // Nothing changed on the server.
    assert!(
        dc.server_agents(cn.uuid)
            .iter()
            .all(|a| a.image_uuid != Some(good.uuid))
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn publish_via_client_to_the_updates_server_channel() {
    let dc = SimDc::start(SimConfig::default().servers(0).empty())
        .await
        .unwrap();
    let c = dc.catalog().get("vm-agent").unwrap();
    let built = build(&image_spec(c, &BuildOptions::new("4.0.0")));
    let client = ImgapiClient::new(&dc.urls().updates, sim_api_config()).unwrap();
    let m = publish_via_client(&client, &built, Some("staging"))
        .await
        .unwrap();
    assert_eq!(m.channels, Some(vec!["staging".to_string()]));
    assert!(m.version.starts_with("4.0.0-master-"));
    let in_dev = client.get_image(m.uuid).await.unwrap_err();
    assert!(in_dev.is_not_found(), "not in the default channel");
    // A private (non-dc) IMGAPI lists only active images to anonymous
    // clients, whatever `state` asks for.
    let mut unfinished = build(&image_spec(c, &BuildOptions::new("4.1.0"))).manifest;
    unfinished.files.clear();
    client.import_manifest(&unfinished).await.unwrap();
    for state in ["unactivated", "all"] {
        let listed = client
            .list_images(&ListImagesFilter {
                state: Some(state.into()),
                channel: Some("*".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(listed.iter().all(|i| i.uuid != unfinished.uuid), "{state}");
    }
    dc.shutdown().await;
}

/// The real server-setup job (sdc-cnapi `lib/workflows/server-setup.js`)
/// sets `setting_up` in its first task and clears it only in its last one
/// (mark_server_as_setup); its onerror just fails the job. A failed setup
/// therefore leaves the record "setting up" and not set up, and ServerSetup
/// (which looks only at `setup`) starts a second one, which then clears it.
/// A factory-reset job writes nothing to the record either.
#[tokio::test]
async fn cnapi_failed_setup_keeps_setting_up_until_a_setup_succeeds() {
    let dc = SimDc::start(SimConfig::default().servers(2).not_setup(["cn0002"]))
        .await
        .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn2 = dc.server("cn0002").unwrap();
    // vm-agent's default image is missing from IMGAPI: the job's gz setup fails.
    let svc = dc
        .apis()
        .sapi
        .list_agent_services()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "vm-agent")
        .unwrap();
    let set_image = |image: String| {
        let url = format!("{}/services/{}", dc.urls().sapi, svc.uuid);
        async move {
            let r = raw(
                Method::PUT,
                &url,
                &[],
                Some(json!({"action": "update", "params": {"image_uuid": image}})),
            )
            .await
            .unwrap();
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    let good = svc
        .params
        .as_ref()
        .and_then(|p| p.get("image_uuid"))
        .cloned()
        .unwrap();
    set_image(ImageUuid::from_u128(7).to_string()).await;
    assert!(cnapi.setup_server(cn2.uuid, None).await.unwrap().is_some());
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while dc.jobs_ended() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "setup job never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = cnapi.get_server(cn2.uuid).await.unwrap();
    assert!(!s.setup);
    assert_eq!(
        s.setting_up,
        Some(true),
        "a failed setup job clears nothing"
    );
    // A factory reset leaves setting_up as it was.
    cnapi.factory_reset(cn2.uuid).await.unwrap();
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    while dc.jobs_ended() == 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "factory reset job never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        cnapi.get_server(cn2.uuid).await.unwrap().setting_up,
        Some(true)
    );
    // The image back: a second setup is accepted and clears it.
    set_image(good.as_str().unwrap().to_string()).await;
    assert!(cnapi.setup_server(cn2.uuid, None).await.unwrap().is_some());
    let deadline = std::time::Instant::now() + crate::HANG_BOUND;
    loop {
        let s = cnapi.get_server(cn2.uuid).await.unwrap();
        if s.setup {
            assert_eq!(s.setting_up, Some(false));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "second setup never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dc.shutdown().await;
}
