//! Reliability: an orchestrated rollout across 500 simulated servers with
//! faults — 5% of installs failing (seeded), a few tasks that never finish
//! (ended by the task timeout), and bursts of 5xx answers from CNAPI and
//! SAPI while it runs.
//!
//! - every server ends converged, or reported as failed or timed out with
//!   its cause (stage and message; the component for failed installs), or
//!   unknown when the bursts cut its turn more often than the run restarts
//!   one (the run goes on);
//! - once the faults are cleared, the same request plans exactly the
//!   servers that did not converge, and a second run converges them all;
//! - SAPI intent is never lost or duplicated: one instance per (server,
//!   component) before, during and after, each pointing at its server and,
//!   for the updated components, at the target image.
//!
//! The run goes through the orchestrator's [`Session`] against an
//! in-process simulated datacenter over loopback HTTP (the command line
//! is a thin layer over the same call; `orch_suite/sim.rs` covers it). Two
//! components, so both transports run: vm-agent through CNAPI
//! install-agent tasks, gz-tools through CNAPI execute of `agentsadm gz`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentsadm_types::ids::ImageUuid;

use agentsadm_types::ids::InstanceUuid;

use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::report::StepStatus;
use agentsadm_orchestrate::session::Session;
use agentsadm_orchestrate::transport::CnapiTransportConfig;
use agentsadm_plan::ComponentSelection;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::ServerSelection;
use agentsadm_plan::Step;
use agentsadm_plan::TransportKind;
use agentsadm_plan::TransportMode;
use agentsadm_sim::LatencySpec;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimApi;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::ServerUuid;

/// Servers in the datacenter, the headnode included.
const SERVERS: usize = 500;
const COMPONENTS: [&str; 2] = ["vm-agent", "gz-tools"];
const FAIL_RATE: f64 = 0.05;
/// Servers whose tasks never finish: early in the run, so that their
/// wait for the task timeout passes while the others run.
const HUNG: [&str; 3] = ["cn0007", "cn0015", "cn0033"];
/// Requests answered 503 per burst (one every `BURST_EVERY` requests to
/// CNAPI, and likewise to SAPI).
const BURST: u32 = 2;
const BURST_EVERY: u64 = 40;
/// What ends the hung servers' steps, and only theirs: an install takes a
/// few ms, but a step waits for its share of 2 cores among 20 servers at
/// once (up to 11 s at load 20; at 3 s, hundreds of servers timed out at
/// load 13-19). The hung servers wait it out while the others run.
const TASK_TIMEOUT: Duration = Duration::from_secs(30);

fn request() -> Request {
    Request {
        operation: Operation::Update,
        components: ComponentSelection::Named(
            COMPONENTS.iter().map(|c| c.parse().unwrap()).collect(),
        ),
        servers: ServerSelection::All,
        exclude: Vec::new(),
    }
}

fn exec_options() -> ExecOptions {
    ExecOptions {
        task_timeout: TASK_TIMEOUT,
        tick: Duration::from_millis(200),
        ..Default::default()
    }
}

fn transport() -> CnapiTransportConfig {
    CnapiTransportConfig {
        // One wait per hung step, not one every 2 s for a burst to hit.
        wait_chunk: TASK_TIMEOUT,
        execute_timeout: TASK_TIMEOUT,
        confirm_poll: (Duration::from_millis(10), Duration::from_millis(100)),
        confirm_grace_after_failure: Duration::from_millis(500),
        ..Default::default()
    }
}

/// SAPI agent instances by (server, component), with their image. An
/// instance without params (vm-agent's and net-agent's, as the real
/// postinstalls create them) belongs to the server whose `server.agents`
/// lists it and runs its service's default image. Panics on an instance no
/// server claims, or with an unknown service.
async fn intent(dc: &SimDc) -> BTreeMap<(ServerUuid, String), Vec<Option<ImageUuid>>> {
    let sapi = dc.apis().sapi;
    let services: BTreeMap<_, _> = sapi
        .list_agent_services()
        .await
        .expect("SAPI lists services")
        .into_iter()
        .map(|s| (s.uuid, (s.name.clone(), s.image_uuid())))
        .collect();
    let reported: BTreeMap<InstanceUuid, ServerUuid> = dc
        .servers()
        .iter()
        .flat_map(|s| {
            dc.server_agents(s.uuid)
                .into_iter()
                .filter_map(move |a| a.uuid.map(|i| (i, s.uuid)))
        })
        .collect();
    let mut out: BTreeMap<(ServerUuid, String), Vec<Option<ImageUuid>>> = BTreeMap::new();
    for i in sapi
        .list_agent_instances()
        .await
        .expect("SAPI lists instances")
    {
        let (name, default) = services
            .get(&i.service_uuid)
            .unwrap_or_else(|| panic!("instance {} of an unknown service", i.uuid))
            .clone();
        let (server, image) = match i.server_uuid() {
            Some(server) => (server, i.image_uuid()),
            None => {
                let server = reported.get(&i.uuid).copied().unwrap_or_else(|| {
                    panic!("instance {} has no params and no server lists it", i.uuid)
                });
                (server, i.image_uuid().or(default))
            }
        };
        out.entry((server, name)).or_default().push(image);
    }
    out
}

/// Exactly one instance per (server, component), as before the run; the
/// updated components' instances on `converged` servers point at their
/// target.
fn assert_intent(
    before: &BTreeMap<(ServerUuid, String), Vec<Option<ImageUuid>>>,
    now: &BTreeMap<(ServerUuid, String), Vec<Option<ImageUuid>>>,
    targets: &BTreeMap<String, ImageUuid>,
    converged: &BTreeSet<ServerUuid>,
    what: &str,
) {
    let keys_before: BTreeSet<_> = before.keys().collect();
    let keys_now: BTreeSet<_> = now.keys().collect();
    assert_eq!(keys_before, keys_now, "{what}: instances lost or added");
    for ((server, component), images) in now {
        assert_eq!(
            images.len(),
            1,
            "{what}: {component} on {server} has {} instances",
            images.len()
        );
        if let Some(target) = targets.get(component)
            && converged.contains(server)
        {
            assert_eq!(
                images[0],
                Some(*target),
                "{what}: {component} on {server}: intent is not the target"
            );
        }
    }
}

/// CNAPI `server.agents` shows every target on the server.
fn shows_targets(dc: &SimDc, server: ServerUuid, targets: &BTreeMap<String, ImageUuid>) -> bool {
    let agents = dc.server_agents(server);
    targets.iter().all(|(name, image)| {
        agents
            .iter()
            .any(|a| &a.name == name && a.image_uuid == Some(*image))
    })
}

/// Every server converged or failed with a cause; returns the ones that
/// did not converge.
fn check_outcomes(
    dc: &SimDc,
    plan: &Plan,
    report: &ExecReport,
    targets: &BTreeMap<String, ImageUuid>,
) -> BTreeSet<ServerUuid> {
    assert_eq!(
        report.servers.len(),
        plan.servers().len(),
        "every planned server has an outcome"
    );
    let mut not_converged = BTreeSet::new();
    for (uuid, o) in &report.servers {
        match o.status {
            ServerStatus::Succeeded => {
                assert!(o.failure.is_none(), "{}: {:?}", o.hostname, o.failure);
                assert!(
                    shows_targets(dc, *uuid, targets),
                    "{} succeeded but CNAPI shows {:?}",
                    o.hostname,
                    dc.server_agents(*uuid)
                );
            }
            // Unknown: a turn the 5xx bursts cut more often than the run
            // restarts one (the run goes on without it).
            ServerStatus::Failed | ServerStatus::TimedOut | ServerStatus::Unknown => {
                let f = o
                    .failure
                    .as_ref()
                    .unwrap_or_else(|| panic!("{} {:?} without a cause", o.hostname, o.status));
                assert!(
                    !f.stage.as_str().is_empty() && !f.message.is_empty(),
                    "{}: empty cause {f:?}",
                    o.hostname
                );
                not_converged.insert(*uuid);
            }
            other => panic!(
                "{}: {other:?} in a run nobody interrupted (halted {:?}, outage {:?}, pauses {:?}): {:?}",
                o.hostname, report.halted, report.outage, report.pauses, o.failure
            ),
        }
    }
    not_converged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_of_500_servers_with_faults_converges_on_the_second_run() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(SERVERS - 1)
            .rng_seed(6)
            .populate(SeedSpec {
                dc_newer: Some("1.1.0".to_string()),
                ..SeedSpec::default()
            })
            .install_latency(LatencySpec::fixed(2)),
    )
    .await
    .expect("simulator starts");
    let apis = dc.apis();
    let catalog = dc.catalog().clone();
    let session = Session {
        apis: &apis,
        catalog: &catalog,
        updates: None,
    };
    let before = intent(&dc).await;
    for s in dc.servers() {
        for c in COMPONENTS {
            assert!(
                before.contains_key(&(s.uuid, c.to_string())),
                "{c} on {}",
                s.hostname
            );
        }
    }

    let planned = session
        .plan(&request(), ImageChoice::Latest, TransportMode::Auto)
        .await
        .expect("plan");
    let plan = &planned.plan;
    assert_eq!(plan.servers().len(), SERVERS, "{plan}");
    let targets: BTreeMap<String, ImageUuid> = plan
        .targets()
        .iter()
        .map(|(name, t)| (name.to_string(), t.uuid))
        .collect();
    assert_eq!(targets.len(), COMPONENTS.len());

    // Faults: 5% failing installs, hung tasks, 5xx bursts during the run.
    let faults = dc.faults();
    faults.set_fail_rate(FAIL_RATE);
    let hung: BTreeSet<ServerUuid> = HUNG
        .iter()
        .map(|h| dc.server(h).expect("hung server exists").uuid)
        .collect();
    for h in &hung {
        faults.hang_tasks_on(*h);
    }
    // 5xx bursts from CNAPI and SAPI, alternately, while the run lasts.
    let running = AtomicBool::new(true);
    let run = async {
        // Through the run, with the simulator's APIs carrying the steps,
        // but the lock held in memory and no API probed after a failure:
        // through SAPI's lock, a SAPI burst that outlasts the lock's
        // confirmation stops the run from starting more servers (an
        // outage, as it should), so the transport's own retries would not
        // be what is measured.
        let lock = agentsadm_sim::fake::FakeDc::new(agentsadm_sim::testkit::ExampleDc::empty());
        let datacenter = crate::sim_common::LockInMemory {
            apis: agentsadm_orchestrate::datacenter::ApiDatacenter {
                sapi: &session.apis.sapi,
                cnapi: Some(&session.apis.cnapi),
                imgapi: Some(&session.apis.imgapi),
            },
            lock: &lock,
        };
        let settings = crate::sim_common::yes_with(&exec_options());
        let mut run = agentsadm_orchestrate::run::Run::on(
            agentsadm_orchestrate::datacenter::RunOn::Lent(&datacenter),
            session.catalog,
            &settings,
            &NullReporter,
            "update",
        );
        run.transport = transport();
        let r = crate::sim_common::executed(
            run.go(
                &crate::sim_common::Made(plan),
                &crate::sim_common::Scripted::yes(),
                std::future::pending(),
            )
            .await,
        );
        running.store(false, Ordering::Relaxed);
        r
    };
    let inject = async {
        let mut n = 0u32;
        let calls = |api| {
            let c = dc.client_calls(api);
            c.reads + c.writes
        };
        let mut last = [calls(SimApi::Cnapi), calls(SimApi::Sapi)];
        while running.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // Short bursts: an idempotent request outlives one with its
            // retries, a POST that lands in one fails its server. Paced by
            // each API's own traffic, not by the clock: on a slow machine
            // a burst every 150 ms hit most requests of the run's last
            // servers (and a hung server's every wait), which then failed
            // as an outage, several times over.
            for (i, api) in [SimApi::Cnapi, SimApi::Sapi].into_iter().enumerate() {
                if calls(api) >= last[i] + BURST_EVERY {
                    faults.burst(api, BURST, 503);
                    last[i] = calls(api);
                    n += 1;
                }
            }
        }
        n
    };
    let (report, bursts) = tokio::join!(run, inject);
    assert!(bursts >= 2, "the run was over before any 5xx burst");

    let failed = check_outcomes(&dc, plan, &report, &targets);
    let counts = report.counts();
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for o in report.servers.values() {
        if let Some(f) = &o.failure {
            let c = f.component.as_deref().unwrap_or("-");
            let stage = f.stage.to_string();
            let stage = stage.split(" task ").next().unwrap_or_default();
            *causes.entry(format!("{c}: {stage}")).or_default() += 1;
            if std::env::var_os("REL_VERBOSE").is_some() {
                eprintln!("  {}: {f}", o.hostname);
            }
        }
    }
    // Shown with --nocapture: what the faults did.
    let mut restarts: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &report.pauses {
        for h in &p.restarted {
            *restarts.entry(h.as_str()).or_default() += 1;
        }
    }
    eprintln!(
        "first run: {counts:?}, {bursts} bursts, causes {causes:?}, {} pauses, restarts {restarts:?}",
        report.pauses.len()
    );
    // The faults did something, and not everything failed.
    // A hung server never converges; the task timeout ends its hung step
    // (reported as the server's cause unless another fault on it, a failed
    // install or a 5xx, comes first in the plan's order).
    for h in &hung {
        let o = &report.servers[h];
        assert!(failed.contains(h), "hung server: {o:?}");
        assert!(
            o.steps.iter().all(|st| st.status != StepStatus::Done),
            "{o:?}"
        );
    }
    assert!(
        hung.iter()
            .flat_map(|h| &report.servers[h].steps)
            .any(|st| st.elapsed >= TASK_TIMEOUT),
        "no hung step ran into the task timeout: {:?}",
        hung.iter().map(|h| &report.servers[h]).collect::<Vec<_>>()
    );
    for o in report.servers.values() {
        if o.status == ServerStatus::TimedOut {
            let f = o.failure.as_ref().unwrap();
            assert_eq!(f.stage, "timeout", "{o:?}");
            assert!(f.message.contains("--task-timeout"), "{o:?}");
        }
    }
    assert!(
        counts.failed >= 5,
        "too few injected failures: {counts:?}\n{}",
        report.render(plan)
    );
    assert!(
        failed.len() < SERVERS / 4,
        "too many failures: {counts:?}\n{}",
        report.render(plan)
    );
    assert_eq!(report.exit_status(plan), 2);
    // A failed install names its component.
    assert!(
        report
            .servers
            .values()
            .filter(|o| o.status == ServerStatus::Failed)
            .any(|o| o.failure.as_ref().unwrap().component.is_some())
    );
    let converged: BTreeSet<ServerUuid> = plan
        .servers()
        .keys()
        .filter(|s| !failed.contains(s))
        .copied()
        .collect();
    assert_intent(
        &before,
        &intent(&dc).await,
        &targets,
        &converged,
        "first run",
    );

    // Faults cleared: the same request plans exactly the unconverged servers.
    faults.clear();
    // A step that timed out (or a turn cut too often) on a server that is
    // not hung gave up on work still running there (late because the
    // installer's own API calls met the 5xx bursts, which hit the last few
    // servers of a run hard): once it ends, the server may run the targets
    // after all.
    let mut settled_late = BTreeSet::new();
    for (u, o) in &report.servers {
        if matches!(o.status, ServerStatus::TimedOut | ServerStatus::Unknown) && !hung.contains(u) {
            dc.settle(*u).await;
            if shows_targets(&dc, *u, &targets) {
                settled_late.insert(*u);
            }
        }
    }
    let again = session
        .plan(&request(), ImageChoice::Latest, TransportMode::Auto)
        .await
        .expect("re-plan");
    let replanned: BTreeSet<ServerUuid> = again.plan.servers().keys().copied().collect();
    // A server whose install finished but whose health check could not be
    // run (its execute hit a 5xx burst) failed unconfirmed: it runs the
    // targets, so there is nothing to plan for it.
    let unconfirmed: BTreeSet<ServerUuid> = report
        .servers
        .iter()
        .filter(|(_, o)| {
            o.failure
                .as_ref()
                .is_some_and(|f| f.message.contains("only its health check could not run"))
        })
        .map(|(u, _)| *u)
        .collect();
    for u in &unconfirmed {
        assert!(
            shows_targets(&dc, *u, &targets),
            "unconfirmed {u} runs the targets"
        );
    }
    let failed: BTreeSet<ServerUuid> = failed
        .difference(&unconfirmed)
        .filter(|u| !settled_late.contains(u))
        .copied()
        .collect();
    let differing: Vec<String> = replanned
        .symmetric_difference(&failed)
        .map(|u| {
            format!(
                "{u} planned={}: {:?}",
                replanned.contains(u),
                report.servers.get(u)
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "the re-plan is not the unconverged servers: {differing:#?}\n{}",
        again.plan
    );
    let report = crate::flows_common::execute_yes(
        session.apis,
        session.catalog,
        &again.plan,
        &exec_options(),
        transport(),
        &NullReporter,
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(&again.plan));
    assert_eq!(report.exit_status(&again.plan), 0);
    check_outcomes(&dc, &again.plan, &report, &targets);

    let all: BTreeSet<ServerUuid> = plan.servers().keys().copied().collect();
    assert_intent(&before, &intent(&dc).await, &targets, &all, "second run");
    for s in &all {
        assert!(shows_targets(&dc, *s, &targets), "{s} not converged");
    }
    let last = session
        .plan(&request(), ImageChoice::Latest, TransportMode::Auto)
        .await
        .expect("final plan");
    assert!(last.plan.is_empty(), "{}", last.plan);
    dc.shutdown().await;
}

/// Records when each step starts and ends, around the fake transport.
struct Recording<'a> {
    inner: &'a agentsadm_sim::fake::FakeDc,
    events: std::sync::Mutex<Vec<(ServerUuid, TransportKind, bool)>>,
}

impl agentsadm_orchestrate::transport::Transport for Recording<'_> {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> futures::future::BoxFuture<
        'a,
        Result<
            agentsadm_orchestrate::transport::StepDone,
            agentsadm_orchestrate::transport::StepFailure,
        >,
    > {
        Box::pin(async move {
            self.events
                .lock()
                .unwrap()
                .push((server, step.transport, true));
            let r = self.inner.run(server, step).await;
            self.events
                .lock()
                .unwrap()
                .push((server, step.transport, false));
            r
        })
    }
}

/// cn-agent's report and the installer's both carry a server's whole agent
/// set; the executor starts a server's `agentsadm gz` steps only once its
/// cn-agent tasks are done, so the installer's report (read last) cannot
/// undo cn-agent's. The 500-server run above caught the lost update.
#[tokio::test(start_paused = true)]
async fn execute_steps_start_after_the_servers_cn_agent_tasks() {
    use agentsadm_plan::PlanningInput;
    use agentsadm_plan::plan;
    use agentsadm_sim::fake::FakeDc;
    use agentsadm_sim::testkit::ExampleDc;

    let mut dc = ExampleDc::new(3);
    let names = ["gz-tools", "net-agent", "vm-agent"];
    let targets: Vec<_> = names.iter().map(|c| dc.publish(c, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    let fake = FakeDc::new(dc);
    fake.faults().latency = Duration::from_millis(50);
    let (intent, reality) = fake.snapshot();
    let catalog = fake.dc().catalog.clone();
    let request = Request {
        operation: Operation::Update,
        components: ComponentSelection::Named(names.iter().map(|s| s.parse().unwrap()).collect()),
        servers: ServerSelection::All,
        exclude: Vec::new(),
    };
    let p = plan(&PlanningInput {
        catalog: &catalog,
        intent: &intent,
        reality: &reality,
        request: &request,
        options: TransportMode::Auto.into(),
        images: &images,
        durations: None,
    })
    .unwrap();
    let recording = Recording {
        inner: &fake,
        events: Default::default(),
    };
    let report =
        crate::sim_common::run_through(&fake, &recording, &p, &ExecOptions::default()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let events = recording.events.into_inner().unwrap();
    for server in p.servers().keys() {
        let mine: Vec<(TransportKind, bool)> = events
            .iter()
            .filter(|e| e.0 == *server)
            .map(|e| (e.1, e.2))
            .collect();
        let last_cn_agent_end = mine
            .iter()
            .rposition(|&(k, start)| k == TransportKind::InstallAgent && !start)
            .expect("cn-agent steps ran");
        let first_gz_start = mine
            .iter()
            .position(|&(k, start)| k == TransportKind::Execute && start)
            .expect("a gz step ran");
        assert!(last_cn_agent_end < first_gz_start, "{mine:?}");
        // The two cn-agent steps still ran together.
        assert_eq!(
            mine[..2],
            [
                (TransportKind::InstallAgent, true),
                (TransportKind::InstallAgent, true)
            ]
        );
    }
}
