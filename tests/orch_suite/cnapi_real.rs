//! The orchestrator against a simulated CNAPI and cn-agent that behave as
//! the real ones do (docs/triton/apis.md §3.12, issue 20), in the
//! simulator's default strict mode: execute mode per server (`timeout`
//! only where commands go through cn-agent), the health gate's own bound
//! and Ur's ways of reporting, removals only where CNAPI accepts them, one
//! server read through ServerList, tasks whose result CNAPI lost (a
//! restart mid-task, a failed write) settled by the server itself, and
//! cn-agent adopting its instance before agentsadm does.

use std::time::Duration;

use agentsadm_api::Apis;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_orchestrate::execmode::read_cn_agent_flag;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::recover::RecoveryConfig;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::session::Session;
use agentsadm_orchestrate::transport::CnapiTransportConfig;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::TransportMode;
use agentsadm_sim::CommandFault;
use agentsadm_sim::ExecuteTransport;
use agentsadm_sim::GzLayout;
use agentsadm_sim::LatencySpec;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::testkit::request;
use agentsadm_types::ids::ServerUuid;

fn config(cns: usize) -> SimConfig {
    SimConfig::default()
        .servers(cns)
        .populate(SeedSpec::with_newer())
}

async fn start(config: SimConfig) -> SimDc {
    SimDc::start(config).await.expect("simulator starts")
}

fn transport() -> CnapiTransportConfig {
    CnapiTransportConfig {
        wait_chunk: Duration::from_secs(5),
        execute_timeout: Duration::from_secs(60),
        confirm_poll: (Duration::from_millis(20), Duration::from_millis(200)),
        confirm_grace_after_failure: Duration::from_secs(2),
        recovery: RecoveryConfig {
            stale_floor: Duration::from_secs(1),
            server_poll: Duration::from_millis(200),
            cnapi_poll: (Duration::from_millis(50), Duration::from_millis(500)),
            ..RecoveryConfig::default()
        },
        ..Default::default()
    }
}

fn options() -> ExecOptions {
    ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

fn session<'a>(dc: &'a SimDc, apis: &'a Apis) -> Session<'a> {
    Session {
        apis,
        catalog: dc.catalog(),
        updates: None,
    }
}

/// Plan `req` (newest DC images) and execute it with `transport`.
async fn run(dc: &SimDc, req: &Request, transport: CnapiTransportConfig) -> (Plan, ExecReport) {
    run_with(dc, req, transport, &options()).await
}

/// [`run`] with these executor options.
async fn run_with(
    dc: &SimDc,
    req: &Request,
    transport: CnapiTransportConfig,
    options: &ExecOptions,
) -> (Plan, ExecReport) {
    let apis = dc.apis();
    let s = session(dc, &apis);
    let planned = s
        .plan(req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    let report = crate::flows_common::execute_yes(
        s.apis,
        s.catalog,
        &planned.plan,
        options,
        transport,
        &NullReporter,
    )
    .await;
    (planned.plan, report)
}

fn failure(report: &ExecReport, server: ServerUuid) -> String {
    let o = &report.servers[&server];
    assert_eq!(o.status, ServerStatus::Failed, "{o:?}");
    o.failure.as_ref().unwrap().message.clone()
}

fn agent(dc: &SimDc, server: ServerUuid, name: &str) -> Option<AgentEntry> {
    dc.server_agents(server)
        .into_iter()
        .find(|a| a.name == name)
}

/// Set the cn-agent entry of a server's `server.agents` (`None`: drop it).
/// A version is also written into the server's cn-agent package.json,
/// which is where the simulated cn-agent reads it back after its tasks, as
/// the real one does.
async fn set_cn_agent(dc: &SimDc, server: ServerUuid, version: Option<&str>) {
    let mut agents = dc.server_agents(server);
    match version {
        Some(v) => {
            // The server's GZ is laid out on first use.
            dc.gz_report(server).await.unwrap();
            agents
                .iter_mut()
                .filter(|a| a.name == "cn-agent")
                .for_each(|a| a.version = v.parse().unwrap());
            let root = dc
                .servers()
                .into_iter()
                .find(|s| s.uuid == server)
                .unwrap()
                .root;
            let file = root.join("opt/smartdc/agents/lib/node_modules/cn-agent/package.json");
            let mut package: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            package["version"] = v.into();
            std::fs::write(&file, serde_json::to_vec(&package).unwrap()).unwrap();
        }
        None => agents.retain(|a| a.name != "cn-agent"),
    }
    dc.apis()
        .cnapi
        .update_server_agents(server, &agents)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_gate_through_ur_sends_no_timeout_and_cnapi_survives() {
    let dc = start(config(2)).await;
    assert_eq!(SimConfig::default().execute_transport, ExecuteTransport::Ur);
    assert!(!read_cn_agent_flag(&dc.apis().sapi).await.unwrap());
    let (p, report) = run(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        transport(),
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let executes = dc.executes();
    assert_eq!(executes.len(), 3, "one gz health per server");
    for e in &executes {
        assert_eq!((e.path, e.timeout), (ExecuteTransport::Ur, None), "{e:?}");
        // Ur gives the script exactly the request's env.
        for var in ["PATH", "HOME", "TZ", "LANG"] {
            assert!(e.env.contains_key(var), "{var} missing: {e:?}");
        }
    }
    assert_eq!(dc.cnapi_crashes(), 0);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cn_agent_mode_gets_timeout_only_where_cn_agent_is_new_enough() {
    let dc = start(config(2).execute_transport(ExecuteTransport::CnAgent)).await;
    assert!(read_cn_agent_flag(&dc.apis().sapi).await.unwrap());
    let (cn1, cn2) = (dc.server("cn0001").unwrap(), dc.server("cn0002").unwrap());
    // CNAPI sends cn2's commands through Ur: its cn-agent is too old.
    set_cn_agent(&dc, cn2.uuid, Some("2.5.0")).await;
    let req = request(Operation::Update, &["vm-agent"], &["cn0001", "cn0002"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let of = |s: ServerUuid| -> Vec<(ExecuteTransport, bool)> {
        dc.executes()
            .iter()
            .filter(|e| e.server == s)
            .map(|e| (e.path, e.timeout.is_some()))
            .collect()
    };
    // The first execute of the run is a probe without `timeout`: SAPI's
    // flag alone does not say what the running CNAPI does.
    assert_eq!(
        of(cn1.uuid),
        [
            (ExecuteTransport::CnAgent, false),
            (ExecuteTransport::CnAgent, true)
        ]
    );
    assert_eq!(of(cn2.uuid), [(ExecuteTransport::Ur, false)]);
    assert_eq!(dc.cnapi_crashes(), 0);
    dc.shutdown().await;
}

/// Every execute so far: whether it carried `timeout`, by path.
fn timeouts(dc: &SimDc) -> Vec<(ExecuteTransport, bool)> {
    dc.executes()
        .iter()
        .map(|e| (e.path, e.timeout.is_some()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_agent_window_never_kills_cnapi() {
    // SAPI already says cn-agent; config-agent has not rewritten CNAPI's
    // config yet, so the running CNAPI still carries execute through Ur.
    let mut c = config(2);
    c.cnapi_restart_ms = 200;
    let dc = start(c).await;
    dc.set_sapi_cn_agent_execute(true);
    assert!(read_cn_agent_flag(&dc.apis().sapi).await.unwrap());
    assert_eq!(dc.cnapi_execute_mode(), ExecuteTransport::Ur);
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(dc.cnapi_crashes(), 0, "{:?}", dc.executes());
    assert!(timeouts(&dc).iter().all(|(_, t)| !t), "{:?}", dc.executes());
    // config-agent catches up: CNAPI restarts (its only restart) into
    // cn-agent mode, which agentsadm sees and then uses.
    assert_eq!(dc.config_agent_sync(), Some(ExecuteTransport::CnAgent));
    while dc.cnapi_down() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = dc.executes().len();
    let req = request(Operation::Update, &["vm-agent"], &["cn0002"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(
        timeouts(&dc)[seen..],
        [
            (ExecuteTransport::CnAgent, false),
            (ExecuteTransport::CnAgent, true)
        ]
    );
    assert_eq!(dc.cnapi_crashes(), 1, "config-agent's restart only");
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_turned_off_in_sapi_before_cnapi_restarts_sends_no_timeout() {
    // The other side of the window: CNAPI still runs cn-agent mode, SAPI
    // already says off.
    let dc = start(config(1).execute_transport(ExecuteTransport::CnAgent)).await;
    dc.set_sapi_cn_agent_execute(false);
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(timeouts(&dc), [(ExecuteTransport::CnAgent, false)]);
    // config-agent applies it; Ur from then on, still no timeout.
    assert_eq!(dc.config_agent_sync(), Some(ExecuteTransport::Ur));
    assert_eq!(dc.cnapi_crashes(), 1, "config-agent's restart only");
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_gate_gives_up_within_its_bound_when_ur_is_down() {
    let dc = start(config(1)).await;
    let cn1 = dc.server("cn0001").unwrap();
    dc.faults().stop_ur(cn1.uuid);
    let t = CnapiTransportConfig {
        health_check_bound: Some(Duration::from_secs(2)),
        ..transport()
    };
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (p, report) = run(&dc, &req, t).await;
    let message = failure(&report, cn1.uuid);
    assert!(
        message.contains("the install itself finished")
            && message.contains("only its health check could not run")
            && message.contains("ur-agent"),
        "{message}"
    );
    // The install stands.
    let target = p.targets()["vm-agent"].uuid;
    let installed = agent(&dc, cn1.uuid, "vm-agent").unwrap();
    assert_eq!(installed.image_uuid, Some(target));
    // So does its intent: vm-agent's postinstall re-adopted its SAPI
    // instance bare, and the params are written again although the step
    // failed at its gate.
    let apis = dc.apis();
    let services = apis.sapi.list_agent_services().await.unwrap();
    let service = services.iter().find(|s| s.name == "vm-agent").unwrap();
    let instances = apis
        .sapi
        .list_service_instances(service.uuid)
        .await
        .unwrap();
    let instance = instances
        .iter()
        .find(|i| Some(i.uuid) == installed.uuid)
        .unwrap();
    assert_eq!(
        (instance.server_uuid(), instance.image_uuid()),
        (Some(cn1.uuid), Some(target)),
        "{instance:?}"
    );
    assert_eq!(dc.cnapi_crashes(), 0);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urs_signal_deaths_oversized_output_and_113_are_reported_as_such() {
    let dc = start(config(3)).await;
    let cn = |n: &str| dc.server(n).unwrap().uuid;
    dc.faults()
        .command_fault_on(cn("cn0001"), CommandFault::Signal);
    dc.faults()
        .command_fault_on(cn("cn0002"), CommandFault::Oversized);
    dc.faults()
        .command_fault_on(cn("cn0003"), CommandFault::Exit(113));
    let req = request(
        Operation::Update,
        &["vm-agent"],
        &["cn0001", "cn0002", "cn0003"],
    );
    let (_, report) = run(&dc, &req, transport()).await;
    let m = failure(&report, cn("cn0001"));
    assert!(
        m.contains("how Ur reports a command killed by a signal"),
        "{m}"
    );
    let m = failure(&report, cn("cn0002"));
    assert!(
        m.contains("ERR_CHILD_PROCESS_STDIO_MAXBUFFER") && m.contains("5 MB"),
        "{m}"
    );
    // agentsadm's 113 leaves the script as 1: Ur does not reboot the server.
    let m = failure(&report, cn("cn0003"));
    assert!(m.contains("exited 1"), "{m}");
    assert_eq!(dc.reboots(), 0);
    for m in ["cn0001", "cn0002", "cn0003"].map(|n| failure(&report, cn(n))) {
        assert!(m.contains("the install itself finished"), "{m}");
    }
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_go_to_cnapi_only_where_it_accepts_them() {
    let dc = start(config(4)).await;
    assert_eq!(SimConfig::default().uninstall_min_cn_agent, "2.8.0");
    let cn = |n: &str| dc.server(n).unwrap().uuid;
    set_cn_agent(&dc, cn("cn0001"), None).await;
    set_cn_agent(&dc, cn("cn0002"), Some("2.7.0")).await;
    // A build of the floor itself: CNAPI's node-semver reads its suffix
    // as a pre-release, below 2.8.0, and answers 412.
    let build = "2.8.0-master-20231010T000000Z-g1234567";
    set_cn_agent(&dc, cn("cn0004"), Some(build)).await;
    let req = request(
        Operation::Remove,
        &["amon-relay"],
        &["cn0001", "cn0002", "cn0003", "cn0004"],
    );
    let (p, report) = run(&dc, &req, transport()).await;
    let m = failure(&report, cn("cn0001"));
    assert!(
        m.contains("lists no cn-agent") && m.contains("agentsadm install cn-agent"),
        "{m}"
    );
    let m = failure(&report, cn("cn0002"));
    assert!(
        m.contains("2.7.0") && m.contains("needs cn-agent 2.8.0"),
        "{m}"
    );
    let m = failure(&report, cn("cn0004"));
    assert!(
        m.contains(build) && m.contains("pre-release of 2.8.0") && m.contains("node-semver"),
        "{m}"
    );
    assert!(agent(&dc, cn("cn0004"), "amon-relay").is_some());
    // The seeded cn-agent (a 2.9.0 build, above the real floor) takes
    // CNAPI's path.
    assert_eq!(
        report.servers[&cn("cn0003")].status,
        ServerStatus::Succeeded,
        "{}",
        report.render(&p)
    );
    assert!(agent(&dc, cn("cn0003"), "amon-relay").is_none());
    assert!(agent(&dc, cn("cn0001"), "amon-relay").is_some());
    assert_eq!(dc.cnapi_crashes(), 0);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_read_one_server_through_server_list() {
    let dc = start(config(1)).await;
    dc.faults().set_vmapi_down(true);
    // A fresh install (its instance is read back) and cn-agent's own
    // update (confirmed through server.agents).
    let req = request(Operation::Install, &["marlin-agent"], &["cn0001"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let req = request(Operation::Update, &["cn-agent"], &["cn0001"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(dc.server_gets(), 0, "no ServerGet: it waits for VMAPI");
    dc.shutdown().await;
}

/// Run `req` while CNAPI restarts (down `down`) as soon as a task is in
/// flight.
async fn run_through_cnapi_restart(
    dc: &SimDc,
    req: &Request,
    down: Duration,
) -> (Plan, ExecReport) {
    // Once agentsadm waits on the task: restarted before its wait arrives,
    // CNAPI would only hold an orphaned active task, which agentsadm can
    // tell from a slow one only by its peers (5 minutes with none), and a
    // loaded machine can delay that first wait past the outage.
    let restart = async {
        loop {
            if !dc.active_tasks().is_empty() && dc.task_waiters() > 0 {
                dc.restart_cnapi(Some(down));
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (ran, ()) = tokio::join!(run(dc, req, transport()), restart);
    ran
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cnapi_restart_mid_task_reports_the_finished_install() {
    // The install finishes while CNAPI is down: the task stays active in
    // CNAPI and cn-agent's server.agents report is lost.
    let dc = start(config(1).install_latency(LatencySpec::fixed(500))).await;
    let cn1 = dc.server("cn0001").unwrap();
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (p, report) = run_through_cnapi_restart(&dc, &req, Duration::from_millis(2000)).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(dc.active_tasks().len(), 1, "CNAPI never finishes the task");
    // server.agents (what `list` reads) shows the new version.
    let target = &p.targets()["vm-agent"];
    let listed = dc
        .apis()
        .cnapi
        .list_server(cn1.uuid)
        .await
        .unwrap()
        .unwrap()
        .agents
        .unwrap();
    let vm = listed.iter().find(|a| a.name == "vm-agent").unwrap();
    assert_eq!(vm.image_uuid, Some(target.uuid));
    // And a new plan has nothing left to do.
    let apis = dc.apis();
    let again = session(&dc, &apis)
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    assert!(again.plan.is_empty(), "{}", again.plan);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cnapi_back_before_the_task_ends_still_settles_it() {
    let dc = start(config(1).install_latency(LatencySpec::fixed(1500))).await;
    let cn1 = dc.server("cn0001").unwrap();
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (p, report) = run_through_cnapi_restart(&dc, &req, Duration::from_millis(300)).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let target = p.targets()["vm-agent"].uuid;
    assert_eq!(
        agent(&dc, cn1.uuid, "vm-agent").unwrap().image_uuid,
        Some(target)
    );
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_active_far_longer_than_its_peers_is_settled_by_the_server() {
    let dc = start(config(4)).await;
    let cn1 = dc.server("cn0001").unwrap();
    dc.faults().lose_task_results_on(cn1.uuid);
    let req = request(Operation::Update, &["vm-agent"], &[]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(dc.active_tasks().len(), 1);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cn_agent_adopts_first_and_a_reinstall_gets_a_new_instance_uuid() {
    let dc = start(config(1)).await;
    let cn1 = dc.server("cn0001").unwrap();
    let sapi = dc.apis().sapi;
    let before = agent(&dc, cn1.uuid, "amon-relay").unwrap().uuid.unwrap();
    let cn1_relays = || async {
        sapi.list_agent_instances()
            .await
            .unwrap()
            .into_iter()
            .filter(|i| {
                i.server_uuid() == Some(cn1.uuid)
                    && i.service_uuid == dc.seed_report().unwrap().services["amon-relay"]
            })
            .collect::<Vec<_>>()
    };
    let remove = request(Operation::Remove, &["amon-relay"], &["cn0001"]);
    let (p, report) = run(&dc, &remove, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert!(cn1_relays().await.is_empty());
    // The reinstall: cn-agent's agent_install adopts the instance into SAPI
    // under a new random UUID (the old one went with the uninstall), then
    // agentsadm's own adoption finds it and completes it.
    let install = request(Operation::Install, &["amon-relay"], &["cn0001"]);
    let (p, report) = run(&dc, &install, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let after = agent(&dc, cn1.uuid, "amon-relay").unwrap();
    let new = after.uuid.unwrap();
    assert_ne!(new, before);
    let relays = cn1_relays().await;
    assert_eq!(relays.len(), 1, "{relays:?}");
    assert_eq!(relays[0].uuid, new);
    assert_eq!(relays[0].image_uuid(), after.image_uuid);
    let apis = dc.apis();
    let again = session(&dc, &apis)
        .plan(&install, ImageChoice::Intent, TransportMode::Auto)
        .await
        .unwrap();
    assert!(again.plan.is_empty(), "{}", again.plan);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_to_a_server_whose_ur_agent_is_down_gives_up_within_minutes() {
    let dc = start(config(2)).await;
    let cn = |n: &str| dc.server(n).unwrap().uuid;
    dc.faults().stop_ur(cn("cn0001"));
    // The step's bound is the real default (30 minutes); the probe's is
    // cut to 2 s so that the test is quick.
    let long = Duration::from_secs(30 * 60);
    let t = CnapiTransportConfig {
        execute_timeout: long,
        ur_probe_bound: Duration::from_secs(2),
        ..transport()
    };
    let o = ExecOptions {
        task_timeout: long,
        ..options()
    };
    // gz-tools goes through execute; cn0002's ur-agent answers.
    let req = request(Operation::Update, &["gz-tools"], &["cn0001", "cn0002"]);
    let started = std::time::Instant::now();
    let (p, report) = tokio::time::timeout(Duration::from_secs(90), run_with(&dc, &req, t, &o))
        .await
        .expect("gives up within the probe's bound, not the step's 30 minutes");
    assert!(started.elapsed() < Duration::from_secs(60));
    let m = failure(&report, cn("cn0001"));
    assert!(
        m.contains("ur-agent does not answer") && m.contains("check 'svcs ur' on that server"),
        "{m}"
    );
    assert_eq!(
        report.servers[&cn("cn0002")].status,
        ServerStatus::Succeeded,
        "{}",
        report.render(&p)
    );
    // Nothing reached cn0001 but the probe.
    let to_cn1: Vec<_> = dc
        .executes()
        .into_iter()
        .filter(|e| e.server == cn("cn0001"))
        .collect();
    assert_eq!(to_cn1.len(), 1, "{to_cn1:?}");
    assert_eq!(dc.cnapi_crashes(), 0);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cnapi_restart_mid_uninstall_reports_the_removal() {
    // The mockcloud (dummy) backend's agents_uninstall fails when its
    // final POST of server.agents meets a CNAPI that is down, although the
    // agent is gone; a Triton GZ's (SmartOS) only logs that POST's failure.
    for layout in [GzLayout::Mockcloud, GzLayout::Rooted] {
        let dc = start(
            config(1)
                .gz_layout(layout)
                .install_latency(LatencySpec::fixed(500)),
        )
        .await;
        let cn1 = dc.server("cn0001").unwrap();
        let service = dc.seed_report().unwrap().services["amon-relay"];
        let sapi = dc.apis().sapi;
        let relays = || async {
            sapi.list_agent_instances()
                .await
                .unwrap()
                .into_iter()
                .filter(|i| i.server_uuid() == Some(cn1.uuid) && i.service_uuid == service)
                .count()
        };
        assert_eq!(relays().await, 1);
        let req = request(Operation::Remove, &["amon-relay"], &["cn0001"]);
        let (p, report) = run_through_cnapi_restart(&dc, &req, Duration::from_millis(2000)).await;
        assert!(report.all_succeeded(), "{layout:?}\n{}", report.render(&p));
        // server.agents (what `list` reads) no longer shows it, and its
        // SAPI instance is gone.
        assert!(agent(&dc, cn1.uuid, "amon-relay").is_none(), "{layout:?}");
        assert_eq!(relays().await, 0, "{layout:?}");
        let apis = dc.apis();
        let again = session(&dc, &apis)
            .plan(&req, ImageChoice::Latest, TransportMode::Auto)
            .await
            .unwrap();
        assert!(again.plan.is_empty(), "{layout:?}: {}", again.plan);
        dc.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_that_failed_only_at_its_refresh_is_settled_by_the_server() {
    // SmartOS cn-agent fails agents_uninstall when its final refresh
    // cannot list node_modules (here an entry without image_uuid), after
    // the removal; CNAPI reports the task failed.
    let dc = start(config(1)).await;
    let cn1 = dc.server("cn0001").unwrap();
    dc.gz_report(cn1.uuid).await.unwrap();
    let root = dc
        .servers()
        .into_iter()
        .find(|s| s.uuid == cn1.uuid)
        .unwrap()
        .root;
    let stray = root.join("opt/smartdc/agents/lib/node_modules/stray");
    std::fs::create_dir_all(&stray).unwrap();
    let req = request(Operation::Remove, &["amon-relay"], &["cn0001"]);
    let (p, report) = run(&dc, &req, transport()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert!(agent(&dc, cn1.uuid, "amon-relay").is_none());
    assert!(dc.active_tasks().is_empty());
    dc.shutdown().await;
}

/// A health check that ran on the server and failed (here the script exits
/// 1 without a result) is not asked again: the same check would fail the
/// same way, only later (before, three more attempts and 3 s of pauses per
/// server). A request that failed before the server answered still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_the_server_answered_is_not_asked_again() {
    let dc = start(config(1)).await;
    let cn1 = dc.server("cn0001").unwrap().uuid;
    dc.faults().command_fault_on(cn1, CommandFault::Exit(1));
    let req = request(Operation::Update, &["vm-agent"], &["cn0001"]);
    let (_, report) = run(&dc, &req, transport()).await;
    let m = failure(&report, cn1);
    assert!(
        m.contains("exited 1") && m.contains("the install itself finished"),
        "{m}"
    );
    let health_checks = dc
        .executes()
        .iter()
        .filter(|e| e.server == cn1 && e.args.iter().any(|a| a.contains("health")))
        .count();
    assert_eq!(health_checks, 1, "{:?}", dc.executes());
    dc.shutdown().await;
}

/// A server already at the step's target when its turn comes (a task an
/// interrupted run left running finished there) is done once its health
/// gate passes: not "changed since the plan", not a failure that eats the
/// budget, and no second install task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_already_at_the_target_is_done_not_changed_since_the_plan() {
    let dc = start(config(2)).await;
    let apis = dc.apis();
    let s = session(&dc, &apis);
    let cn1 = dc.server("cn0001").unwrap().uuid;
    let req = request(Operation::Update, &["vm-agent"], &["cn0001", "cn0002"]);
    let planned = s
        .plan(&req, ImageChoice::Latest, TransportMode::Auto)
        .await
        .unwrap();
    let target = planned.plan.servers()[&cn1].steps[0]
        .action
        .target()
        .unwrap()
        .uuid;
    // The earlier run's task, finishing after this plan was made.
    let task = apis.cnapi.install_agent(cn1, target).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while agent(&dc, cn1, "vm-agent").and_then(|a| a.image_uuid) != Some(target) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {task} never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tasks_before = apis.cnapi.task_history(cn1).await.unwrap().len();
    let report = crate::flows_common::execute_yes(
        s.apis,
        s.catalog,
        &planned.plan,
        &options(),
        transport(),
        &NullReporter,
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(&planned.plan));
    assert_eq!(
        apis.cnapi.task_history(cn1).await.unwrap().len(),
        tasks_before,
        "no second install task"
    );
    let gates = dc
        .executes()
        .iter()
        .filter(|e| e.server == cn1 && e.args.iter().any(|a| a == "health"))
        .count();
    assert_eq!(gates, 1, "its gate ran");
    dc.shutdown().await;
}
