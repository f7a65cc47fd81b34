//! The simulated CNAPI, cn-agent and Ur when parts of Triton go away or
//! misbehave, as the real ones do (docs/triton/apis.md §3.12): CNAPI
//! restarts orphan tasks and lose agent reports, cn-agent keeps its own
//! task history, a stopped ur-agent answers nothing, Ur's reports of
//! signal deaths, oversized output and exit 113 (a reboot), deleted
//! servers registering again when cn-agent starts, ServerGet waiting for
//! VMAPI, and the SAPI `cnapi` service carrying the execute flag.

use std::time::{Duration, Instant};

use agentsadm_api::cnapi::CnAgentTask;
use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_orchestrate::execmode::read_cn_agent_flag;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::CommandFault;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::LatencySpec;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::ServerStatus;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::ServerUuid;

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + crate::HANG_BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `agentsadm gz report` through execute, the client's Ur-safe way.
async fn report(dc: &SimDc, server: ServerUuid, bound: Duration) -> ExecuteAnswer {
    let req = gz_execute_request(
        &["gz".into(), "report".into(), "--json".into()],
        Default::default(),
    );
    dc.apis().cnapi.execute(server, &req, bound).await.unwrap()
}

#[tokio::test]
async fn cnapi_restart_orphans_tasks_and_loses_reports_sent_meanwhile() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .install_latency(LatencySpec::fixed(300)),
    )
    .await
    .unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    let new = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap();
    let id = cnapi.install_agent(cn.uuid, new.uuid).await.unwrap();
    // A TaskWait in flight is cut when CNAPI dies.
    let waiting = cnapi.wait_task_once(id, Duration::from_secs(10));
    let restart = async {
        // Once the wait is in flight (a fixed 50 ms could come after it).
        let deadline = Instant::now() + crate::HANG_BOUND;
        while dc.task_waiters() == 0 {
            assert!(Instant::now() < deadline, "the TaskWait never arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        dc.restart_cnapi(Some(Duration::from_millis(3000)));
    };
    let (waited, ()) = tokio::join!(waiting, restart);
    assert!(waited.unwrap_err().is_unreachable());
    assert_eq!(dc.cnapi_crashes(), 1);
    until("CNAPI is back", || !dc.cnapi_down()).await;
    // cn-agent finished while CNAPI was down: its own history says so...
    let history = cnapi.task_history(cn.uuid).await.unwrap();
    let last: &CnAgentTask = history.last().unwrap();
    assert_eq!(last.task, "agent_install");
    assert!(last.is_finished() && !last.failed(), "{last:?}");
    assert_eq!(last.params["image_uuid"], new.uuid.to_string());
    // ...CNAPI's record stays active for good, and server.agents is stale.
    let t = cnapi.wait_task(id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(t.status, TaskStatus::Active);
    let vm = dc
        .server_agents(cn.uuid)
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .unwrap();
    assert_ne!(vm.image_uuid, Some(new.uuid));
    // The server itself runs the new image.
    let live = dc.gz_report(cn.uuid).await.unwrap();
    assert!(live.agents.iter().any(|a| a.image_uuid == Some(new.uuid)));
    // A failing task: the history carries cn-agent's error.
    dc.faults().fail_installs_on(cn.uuid);
    let id = cnapi.install_agent(cn.uuid, new.uuid).await.unwrap();
    let t = cnapi.wait_task(id, crate::HANG_BOUND).await.unwrap();
    assert_eq!(t.status, TaskStatus::Failure);
    let last = cnapi.task_history(cn.uuid).await.unwrap().pop().unwrap();
    assert_eq!(last.error_message(), t.error_message());
    dc.shutdown().await;
}

#[tokio::test]
async fn a_stopped_ur_agent_answers_nothing() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .ur_reply_timeout(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    dc.faults().stop_ur(cn.uuid);
    // The client's own bound ends the wait (CNAPI's hour would not).
    let req = gz_execute_request(&["gz".into(), "report".into()], Default::default());
    let err = dc
        .apis()
        .cnapi
        .execute(cn.uuid, &req, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    // Left alone, CNAPI gives up after its Ur timeout.
    let err = dc
        .apis()
        .cnapi
        .execute(cn.uuid, &req, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(500));
    dc.faults().start_ur(cn.uuid);
    assert_eq!(
        report(&dc, cn.uuid, Duration::from_secs(10))
            .await
            .exit_status,
        0
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn ur_reports_signal_deaths_oversized_output_and_reboots_on_113() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .server_reboot(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let cn = dc.server("cn0001").unwrap();
    let bound = Duration::from_secs(10);
    dc.faults().command_fault_on(cn.uuid, CommandFault::Signal);
    let a = report(&dc, cn.uuid, bound).await;
    assert_eq!((a.exit_status, a.stderr_missing), (1, true));
    dc.faults()
        .command_fault_on(cn.uuid, CommandFault::Oversized);
    let a = report(&dc, cn.uuid, bound).await;
    assert_eq!(a.exit_status, ExecuteAnswer::STOPPED);
    assert_eq!(
        a.exit_error.as_deref(),
        Some("ERR_CHILD_PROCESS_STDIO_MAXBUFFER")
    );
    // agentsadm's own 113 comes out of the script as 1.
    dc.faults()
        .command_fault_on(cn.uuid, CommandFault::Exit(113));
    assert_eq!(report(&dc, cn.uuid, bound).await.exit_status, 1);
    assert_eq!(dc.reboots(), 0);
    // A script that exits 113 reads as success, and the server reboots.
    dc.faults()
        .command_fault_on(cn.uuid, CommandFault::ScriptExit(113));
    assert_eq!(report(&dc, cn.uuid, bound).await.exit_status, 0);
    assert_eq!(dc.reboots(), 1);
    until("the server goes down", || {
        dc.record(cn.uuid).unwrap().status == ServerStatus::Unknown
    })
    .await;
    until("the server is back", || {
        dc.record(cn.uuid).unwrap().status == ServerStatus::Running
    })
    .await;
    // With a fresh cn-agent, which remembers no task.
    let history = dc.apis().cnapi.task_history(cn.uuid).await.unwrap();
    assert!(history.is_empty(), "{history:?}");
    dc.shutdown().await;
}

#[tokio::test]
async fn a_deleted_server_registers_again_when_its_cn_agent_starts() {
    let dc = SimDc::start(SimConfig::default().servers(1)).await.unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    cnapi.delete_server(cn.uuid).await.unwrap();
    assert!(cnapi.list_server(cn.uuid).await.unwrap().is_none());
    // cn-agent starting while CNAPI is down: nothing arrives.
    dc.restart_cnapi(Some(Duration::from_millis(500)));
    dc.restart_cn_agent(cn.uuid).await.unwrap();
    until("CNAPI is back", || !dc.cnapi_down()).await;
    assert!(cnapi.list_server(cn.uuid).await.unwrap().is_none());
    // Its next start registers the server again, with what it runs.
    dc.restart_cn_agent(cn.uuid).await.unwrap();
    let back = cnapi.list_server(cn.uuid).await.unwrap().unwrap();
    assert!(back.setup);
    assert_eq!(
        back.agents.unwrap().len(),
        dc.catalog().default_set(false).len()
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn server_get_waits_for_vmapi_and_server_list_does_not() {
    let mut config = SimConfig::default().servers(1);
    config.vmapi_down_server_get_ms = 300;
    let dc = SimDc::start(config).await.unwrap();
    let cnapi = dc.apis().cnapi;
    let cn = dc.server("cn0001").unwrap();
    dc.faults().set_vmapi_down(true);
    let one = cnapi.list_server(cn.uuid).await.unwrap().unwrap();
    assert_eq!(dc.server_gets(), 0);
    let started = Instant::now();
    let full = cnapi.get_server(cn.uuid).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(dc.server_gets(), 1);
    assert_eq!(one.agents, full.agents);
    dc.shutdown().await;
}

#[tokio::test]
async fn the_sapi_cnapi_service_carries_the_execute_flag() {
    let dc = SimDc::start(SimConfig::default().servers(0)).await.unwrap();
    assert!(!read_cn_agent_flag(&dc.apis().sapi).await.unwrap());
    dc.shutdown().await;
    let dc = SimDc::start(
        SimConfig::default()
            .servers(0)
            .execute_transport(ExecuteTransport::CnAgent),
    )
    .await
    .unwrap();
    let sapi = dc.apis().sapi;
    assert!(read_cn_agent_flag(&sapi).await.unwrap());
    // An instance's metadata wins over its service's.
    let cnapi = sapi
        .list_services(Some("cnapi"), None, None)
        .await
        .unwrap()
        .remove(0);
    let inst = sapi
        .list_service_instances(cnapi.uuid)
        .await
        .unwrap()
        .remove(0);
    sapi.update_instance(
        inst.uuid,
        &agentsadm_api::sapi::Update::metadata(agentsadm_api::sapi::object([(
            "FEATURE_USE_CNAGENT_COMMAND_EXECUTE",
            serde_json::json!(false),
        )])),
    )
    .await
    .unwrap();
    assert!(!read_cn_agent_flag(&sapi).await.unwrap());
    dc.shutdown().await;
}

/// The SAPI latency model against the simulator's own speed: ListInstances
/// and UpdateInstance with the model off and on, at about 24,000 agent
/// instances (2,000 mockcloud compute nodes). `cargo test --test sim_suite
/// measure_sapi_timing -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, prints figures"]
async fn measure_sapi_timing() {
    use agentsadm_sim::{GzLayout, SapiTiming};
    let n: usize = std::env::var("SIM_MEASURE_SERVERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for timing in [SapiTiming::off(), SapiTiming::default()] {
        let dc = SimDc::start(
            SimConfig::default()
                .servers(n)
                .gz_layout(GzLayout::Mockcloud)
                .sapi_timing(timing),
        )
        .await
        .unwrap();
        let sapi = dc.apis().sapi;
        let started = Instant::now();
        let all = sapi.list_agent_instances().await.unwrap();
        let list = started.elapsed();
        let one = all[0].uuid;
        let started = Instant::now();
        for _ in 0..20 {
            sapi.update_instance(
                one,
                &agentsadm_api::sapi::Update::metadata(agentsadm_api::sapi::object([(
                    "x",
                    serde_json::json!(1),
                )])),
            )
            .await
            .unwrap();
        }
        let write = started.elapsed() / 20;
        println!(
            "sapi timing scale {}: ListInstances of {} instances {:?}, UpdateInstance {:?}",
            timing.scale,
            all.len(),
            list,
            write
        );
        dc.shutdown().await;
    }
}
