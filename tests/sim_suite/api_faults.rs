//! The clients' retry, timeout and error handling against injected faults:
//! 5xx bursts are retried for idempotent calls and never for calls that
//! start work (install-agent), timeouts bound every call, connect errors
//! and error bodies become typed errors whose message names the API, the
//! call and what to do.

use crate::sim_common;

use std::time::{Duration, Instant};

use agentsadm_api::cnapi::CnapiClient;

use agentsadm_api::cnapi::ServerListFilter;

use agentsadm_api::Api;
use agentsadm_api::ApiConfig;
use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::sapi::SapiClient;
use agentsadm_sim::LatencySpec;
use agentsadm_sim::SimApi;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::sim_api_config;
use sim_common::small_dc;

fn quick(retries: u32, timeout: Duration) -> ApiConfig {
    ApiConfig {
        timeout,
        retries,
        backoff: Duration::from_millis(10),
        ..ApiConfig::default()
    }
}

#[tokio::test]
async fn idempotent_calls_ride_out_a_5xx_burst() {
    let dc = small_dc(2).await;
    let cnapi = dc.apis().cnapi;
    dc.faults().burst(SimApi::Cnapi, 3, 503);
    let servers = cnapi
        .list_servers(&ServerListFilter::default())
        .await
        .unwrap();
    assert_eq!(servers.len(), 3);
    dc.faults().burst(SimApi::Sapi, 2, 500);
    let insts = dc.apis().sapi.list_agent_instances().await.unwrap();
    assert!(!insts.is_empty());
    dc.faults().burst(SimApi::Imgapi, 1, 503);
    assert!(
        dc.apis()
            .imgapi
            .latest_image("vm-agent")
            .await
            .unwrap()
            .is_some()
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn a_burst_longer_than_the_retries_is_reported() {
    let dc = small_dc(0).await;
    let cnapi = CnapiClient::new(&dc.urls().cnapi, quick(2, Duration::from_secs(5))).unwrap();
    dc.faults().burst(SimApi::Cnapi, 10, 503);
    let err = cnapi
        .list_servers(&ServerListFilter::default())
        .await
        .unwrap_err();
    let ApiError::Status {
        api, status, body, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!((*api, *status), (Api::Cnapi, 503));
    assert_eq!(body.code.as_deref(), Some("ServiceUnavailableError"));
    assert!(err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.starts_with("CNAPI GET /servers returned HTTP 503"),
        "{msg}"
    );
    // Three attempts consumed three of the ten.
    dc.faults().burst(SimApi::Cnapi, 0, 503);
    dc.shutdown().await;
}

#[tokio::test]
async fn install_agent_is_never_retried() {
    let dc = small_dc(1).await;
    let cn = dc.server("cn0001").unwrap();
    let image = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap()
        .image_uuid
        .unwrap();
    let cnapi = dc.apis().cnapi;
    // One 503: a retry would succeed, so an error proves there was none.
    dc.faults().burst(SimApi::Cnapi, 1, 503);
    let err = cnapi.install_agent(cn.uuid, image).await.unwrap_err();
    assert_eq!(err.status(), Some(503));
    // Same for uninstall-agents and execute.
    dc.faults().burst(SimApi::Cnapi, 1, 500);
    assert!(
        cnapi
            .uninstall_agents(cn.uuid, &["vm-agent".into()])
            .await
            .is_err()
    );
    // After the burst, it works.
    let id = cnapi.install_agent(cn.uuid, image).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Complete);
    dc.shutdown().await;
}

#[tokio::test]
async fn every_call_has_a_timeout() {
    let dc = small_dc(0).await;
    dc.faults()
        .set_request_latency(SimApi::Sapi, Duration::from_secs(3));
    let sapi = SapiClient::new(&dc.urls().sapi, quick(1, Duration::from_millis(200))).unwrap();
    let started = Instant::now();
    let err = sapi.list_agent_instances().await.unwrap_err();
    assert!(
        matches!(err, ApiError::Timeout { api: Api::Sapi, .. }),
        "{err}"
    );
    assert!(err.is_unreachable() && err.is_transient());
    // Two attempts of 200 ms, not the 3 s of latency.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(err.to_string().contains("timed out after 200ms"), "{err}");
    // Added latency below the timeout only slows calls down.
    dc.faults()
        .set_request_latency(SimApi::Sapi, Duration::from_millis(50));
    let started = Instant::now();
    sapi.list_agent_instances().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(50));
    dc.shutdown().await;
}

#[tokio::test]
async fn connect_errors_are_typed_and_retried() {
    // A port nobody listens on: bind one, then free it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let apis = Apis::new(&url, &url, &url, quick(2, Duration::from_secs(2))).unwrap();
    let err = apis
        .cnapi
        .list_servers(&ServerListFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Connect { .. }), "{err}");
    assert!(err.is_unreachable());
    let msg = err.to_string();
    assert!(msg.contains("cannot connect to"), "{msg}");
    assert!(msg.contains("check the URL"), "{msg}");
    let err = Apis::new("not a url", &url, &url, sim_api_config()).unwrap_err();
    assert!(matches!(err, ApiError::BadUrl { .. }));
}

#[tokio::test]
async fn a_crashing_sapi_gives_a_transport_error_then_recovers() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(0)
            .sapi_crash_restart(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let inst = dc
        .apis()
        .sapi
        .list_agent_instances()
        .await
        .unwrap()
        .remove(0);
    // UpgradeInstance on an agent (what agentsadm never does) kills SAPI.
    let r = sim_common::raw(
        reqwest::Method::PUT,
        &format!("{}/instances/{}/upgrade", dc.urls().sapi, inst.uuid),
        &[],
        Some(serde_json::json!({"image_uuid": "11111111-2222-3333-4444-555555555555"})),
    )
    .await;
    assert!(r.is_err());
    // While it restarts, calls fail as unreachable and are retried; a
    // client with enough retries rides it out.
    let no_retry = SapiClient::new(&dc.urls().sapi, quick(0, Duration::from_secs(2))).unwrap();
    let err = no_retry.get_instance(inst.uuid).await.unwrap_err();
    assert!(matches!(err, ApiError::Transport { .. }), "{err}");
    let patient = SapiClient::new(
        &dc.urls().sapi,
        ApiConfig {
            backoff: Duration::from_millis(100),
            ..quick(5, Duration::from_secs(2))
        },
    )
    .unwrap();
    assert_eq!(patient.get_instance(inst.uuid).await.unwrap(), inst);
    dc.shutdown().await;
}

#[tokio::test]
async fn hung_and_slow_servers_and_install_failures() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .install_latency(LatencySpec::fixed(100)),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cns = dc.compute_nodes();
    let image = dc
        .server_agents(cns[0].uuid)
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap()
        .image_uuid
        .unwrap();
    dc.faults().set_slow(cns[1].uuid, 5.0);
    dc.faults().hang_tasks_on(cns[2].uuid);
    dc.faults().fail_installs_on(cns[3].uuid);
    let started = Instant::now();
    let mut ids = Vec::new();
    for s in &cns {
        ids.push(cnapi.install_agent(s.uuid, image).await.unwrap());
    }
    let normal = cnapi.wait_task(ids[0], crate::HANG_BOUND).await.unwrap();
    let normal_took = started.elapsed();
    assert_eq!(normal.status, TaskStatus::Complete);
    let slow = cnapi.wait_task(ids[1], crate::HANG_BOUND).await.unwrap();
    assert_eq!(slow.status, TaskStatus::Complete);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "5 x 100 ms"
    );
    assert!(normal_took < started.elapsed());
    let hung = cnapi
        .wait_task(ids[2], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(hung.status, TaskStatus::Active);
    let failed = cnapi.wait_task(ids[3], crate::HANG_BOUND).await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failure);
    assert!(failed.error_message().unwrap().contains("injected failure"));
    dc.shutdown().await;
}

#[tokio::test]
async fn scenario_faults_resolve_hostnames_and_reject_unknown_ones() {
    let mut config = SimConfig::default().servers(2).not_running(["cn0002"]);
    config.faults.failing_installs.servers = vec!["cn0001".into()];
    config.faults.api_bursts.insert(
        "sapi".into(),
        agentsadm_sim::BurstSpec {
            count: 1,
            status: 503,
        },
    );
    let dc = SimDc::start(config.clone()).await.unwrap();
    let cn2 = dc.server("cn0002").unwrap();
    let s = dc.apis().cnapi.get_server(cn2.uuid).await.unwrap();
    assert_eq!(s.status.as_deref(), Some("unknown"));
    // The SAPI burst is there: a client without retries sees it.
    let sapi = SapiClient::new(&dc.urls().sapi, quick(0, Duration::from_secs(2))).unwrap();
    assert_eq!(sapi.ping().await.unwrap_err().status(), Some(503));
    dc.shutdown().await;
    let bad = SimConfig::default().servers(1).not_running(["cn0009"]);
    let err = SimDc::start(bad).await.unwrap_err();
    assert!(err.to_string().contains("\"cn0009\""), "{err}");
}

#[tokio::test]
async fn downloads_are_checked_against_their_headers() {
    let dc = small_dc(0).await;
    let img = dc.apis().imgapi;
    // Without Content-MD5 (vm-agent's file, as seeded) a corrupt download
    // passes the header checks: only the manifest's sha1 catches it.
    dc.faults().corrupt_image("vm-agent");
    let vm = img.latest_image("vm-agent").await.unwrap().unwrap();
    let d = img.get_image_file(vm.uuid).await.unwrap();
    assert!(d.content_md5.is_none());
    let bytes = d.verified_bytes().await.unwrap();
    use sha1::Digest;
    assert_ne!(
        format!("{:x}", sha1::Sha1::digest(&bytes)),
        vm.files[0].sha1
    );
    dc.faults().clear();
    let m = img.latest_image("cmon-agent").await.unwrap().unwrap();
    let good = img
        .get_image_file(m.uuid)
        .await
        .unwrap()
        .verified_bytes()
        .await
        .unwrap();
    assert_eq!(good.len() as u64, m.files[0].size);
    dc.faults().corrupt_image("cmon-agent");
    let err = img
        .get_image_file(m.uuid)
        .await
        .unwrap()
        .verified_bytes()
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Integrity { .. }), "{err}");
    assert!(err.to_string().contains("Content-MD5"), "{err}");
    dc.faults().clear();
    dc.faults().truncate_image(&m.uuid.to_string());
    let err = img
        .get_image_file(m.uuid)
        .await
        .unwrap()
        .verified_bytes()
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Transport { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("/images/{}/file", m.uuid))
    );
    dc.shutdown().await;
}

/// Each way the simulator makes an API stop answering reaches a client
/// as the real outage would, and every one of them is an outage
/// (`is_outage`): the request cut with no answer, the connection reset,
/// an answer whose body stops short of its Content-Length, a gateway's
/// 502/503/504 HTML page, and silence until the client's own timeout. A
/// 500 the API answers itself is not.
#[tokio::test]
async fn every_kind_of_outage_reaches_the_client_as_one() {
    use agentsadm_sim::OutageKind;
    let dc = small_dc(1).await;
    let sapi = SapiClient::new(&dc.urls().sapi, quick(0, Duration::from_millis(500))).unwrap();
    for kind in OutageKind::ALL {
        dc.faults().set_api_outage(SimApi::Sapi, Some(kind));
        let err = sapi.list_agent_instances().await.unwrap_err();
        assert!(err.is_outage(), "{kind:?}: {err:?}");
        assert_eq!(err.api(), Api::Sapi);
        let shape = match &err {
            ApiError::Status { status, body, .. } => {
                assert!(
                    body.message.contains("nginx") || body.code.is_none(),
                    "{body:?}"
                );
                format!("status {status}")
            }
            ApiError::Timeout { .. } => "timeout".into(),
            ApiError::Transport { .. } => "transport".into(),
            other => format!("{other:?}"),
        };
        let want = match kind {
            OutageKind::Gateway(s) => format!("status {s}"),
            OutageKind::Silent => "timeout".into(),
            _ => "transport".into(),
        };
        assert_eq!(shape, want, "{kind:?}: {err:?}");
    }
    dc.faults().set_api_outage(SimApi::Sapi, None);
    assert!(sapi.list_agent_instances().await.is_ok());
    dc.faults().burst(SimApi::Sapi, 1, 500);
    let err = sapi.list_agent_instances().await.unwrap_err();
    assert!(!err.is_outage(), "{err:?}");
    dc.shutdown().await;
}
