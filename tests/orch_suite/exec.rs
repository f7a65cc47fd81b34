//! Execution tests against the fake datacenter, with tokio's paused clock:
//! sleeps advance virtual time, so timings are exact and tests are instant.
//! Plans are carried out through the run the binary goes through (the
//! lock, `-y`, the history entry), with a scripted operator.
//!
//! Includes the convergence test: plan, execute, gather again, re-plan,
//! and the plan must be empty.

use std::time::Duration;

use agentsadm_orchestrate::execute::ExecError;

use agentsadm_orchestrate::execute::ExecOptions;

use agentsadm_orchestrate::lock;
use agentsadm_orchestrate::lock::LockError;
use agentsadm_orchestrate::lock::LockOptions;
use agentsadm_orchestrate::lock::LockRecord;
use agentsadm_orchestrate::lock::LockStore;
use agentsadm_orchestrate::outlier::OutlierPolicy;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::report::StepStatus;
use agentsadm_orchestrate::run::RunError;
use agentsadm_plan::ImageRef;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::ResolvedImages;
use agentsadm_plan::RolloutPolicy;
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::recording::RecordingReporter;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::request;

fn plan_on(fake: &FakeDc, req: &Request, images: &ResolvedImages) -> Plan {
    plan_with(fake, req, images, RolloutPolicy::default())
}

/// The plan with `rollout` (concurrency, canary, budget) decided in it.
fn plan_with(
    fake: &FakeDc,
    req: &Request,
    images: &agentsadm_plan::ResolvedImages,
    rollout: RolloutPolicy,
) -> Plan {
    fake.plan(req, images, rollout)
}

/// `plan` carried out with `-y` through the run, as the binary does.
async fn run(fake: &FakeDc, plan: &Plan, options: &ExecOptions) -> ExecReport {
    let reporter = RecordingReporter::default();
    crate::sim_common::run_yes(fake, plan, options, &reporter).await
}

/// A fake datacenter with `n` CNs and `component` published at 2.0.0.
fn setup(n: usize, components: &[&str]) -> (FakeDc, Vec<ImageRef>) {
    let mut dc = ExampleDc::new(n);
    let targets = components.iter().map(|c| dc.publish(c, "2.0.0")).collect();
    (FakeDc::new(dc), targets)
}

fn images(fake: &FakeDc, targets: &[ImageRef]) -> ResolvedImages {
    fake.dc().images_with_targets(targets)
}

#[tokio::test(start_paused = true)]
async fn update_all_converges_and_replans_empty() {
    let names: Vec<String> = agentsadm_types::catalog::Catalog::builtin()
        .names()
        .map(ToString::to_string)
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (fake, targets) = setup(12, &refs);
    fake.faults().latency = Duration::from_millis(100);
    let images = images(&fake, &targets);
    let req = request(Operation::Update, &["--all"], &[]);
    let p = plan_on(&fake, &req, &images);
    assert_eq!(p.servers().len(), 13);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert_eq!(report.exit_status(&p), 0);
    assert_eq!(report.service_changes, p.service_changes().len());
    let again = plan_on(&fake, &req, &images);
    assert!(again.is_empty(), "re-plan is not empty:\n{again}");
    // And without naming images: intent alone now says 2.0.0.
    let known = fake.dc().known_images();
    let again = plan_on(&fake, &req, &known);
    assert!(
        again.is_empty(),
        "re-plan from intent is not empty:\n{again}"
    );
}

#[tokio::test(start_paused = true)]
async fn install_and_remove_converge() {
    let (fake, _) = setup(4, &[]);
    let images = fake.dc().known_images();
    let req = request(Operation::Install, &["dockerlogger"], &["cn001", "cn002"]);
    let p = plan_on(&fake, &req, &images);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let (intent, reality) = fake.snapshot();
    let cn1 = fake.dc().server_named("cn001");
    let inst = intent.instance(&cn1, "dockerlogger").expect("adopted");
    assert_eq!(
        Some(inst.uuid),
        reality.get(&cn1).unwrap().components["dockerlogger"].instance
    );
    assert!(inst.has_params());
    assert!(plan_on(&fake, &req, &images).servers().is_empty());

    let req = request(Operation::Remove, &["dockerlogger"], &["cn001", "cn002"]);
    let p = plan_on(&fake, &req, &images);
    assert_eq!(p.servers().len(), 2);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert!(report.all_succeeded());
    let again = plan_on(&fake, &req, &images);
    assert!(again.is_empty(), "{again}");
    assert!(fake.snapshot().0.instance(&cn1, "dockerlogger").is_none());
}

#[tokio::test(start_paused = true)]
async fn runs_concurrency_servers_at_a_time() {
    let (fake, targets) = setup(39, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(1);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    assert_eq!(p.servers().len(), 40);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    // 40 servers, 20 at a time, 1 s each: two rounds.
    assert_eq!(report.elapsed.as_secs(), 2, "{:?}", report.elapsed);
    let (fake, targets) = setup(39, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(1);
    let p = plan_with(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
        RolloutPolicy {
            concurrency: 5,
            ..Default::default()
        },
    );
    assert_eq!(p.rollout().concurrency, 5);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert_eq!(report.elapsed.as_secs(), 8, "{:?}", report.elapsed);
}

#[tokio::test(start_paused = true)]
async fn parallel_safe_components_share_a_server() {
    let comps = [
        "agents_core",
        "config-agent",
        "vm-agent",
        "net-agent",
        "cmon-agent",
        "smartlogin",
        "cn-agent",
    ];
    let (fake, targets) = setup(0, &comps);
    fake.faults().latency = Duration::from_secs(1);
    let imgs = images(&fake, &targets);
    let p = plan_on(&fake, &request(Operation::Update, &comps, &[]), &imgs);
    let report = run(&fake, &p, &ExecOptions::default()).await;
    // core-first, core-second, the four parallel-safe ones together, cn-agent.
    assert_eq!(report.elapsed.as_secs(), 4);
    let order: Vec<String> = fake.steps_run().into_iter().map(|(_, c)| c).collect();
    assert_eq!(order.first().map(String::as_str), Some("agents_core"));
    assert_eq!(order.get(1).map(String::as_str), Some("config-agent"));
    assert_eq!(order.last().map(String::as_str), Some("cn-agent"));

    // Shar-style: one after the other.
    let (fake, targets) = setup(0, &comps);
    fake.faults().latency = Duration::from_secs(1);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &comps, &[]),
        &images(&fake, &targets),
    );
    let options = ExecOptions {
        parallel_within_server: false,
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    assert_eq!(report.elapsed.as_secs(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_failing_server_is_isolated_and_reported() {
    let (fake, targets) = setup(5, &["agents_core", "vm-agent"]);
    let cn2 = fake.dc().server_named("cn002");
    let cn3 = fake.dc().server_named("cn003");
    fake.faults().fail.insert(
        cn2,
        (
            Some("vm-agent".into()),
            "AgentInstall error: postinstall exited 1".into(),
        ),
    );
    fake.faults().fail.insert(
        cn3,
        (
            Some("agents_core".into()),
            "AgentInstall error: disk full".into(),
        ),
    );
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["agents_core", "vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert_eq!(report.exit_status(&p), 2);
    let c = report.counts();
    assert_eq!((c.succeeded, c.failed), (4, 2));
    let o2 = &report.servers[&cn2];
    let f = o2.failure.as_ref().unwrap();
    assert_eq!(f.component.as_deref(), Some("vm-agent"));
    assert_eq!(f.stage, "agent_install task");
    assert!(f.message.contains("postinstall exited 1"));
    // agents_core failed on cn003: vm-agent was never attempted there.
    let o3 = &report.servers[&cn3];
    assert_eq!(
        o3.steps.iter().map(|s| s.status).collect::<Vec<_>>(),
        [StepStatus::Failed, StepStatus::NotRun]
    );
    let text = report.render(&p);
    assert!(
        text.contains("cn002 (")
            && text
                .contains("vm-agent: agent_install task: AgentInstall error: postinstall exited 1"),
        "{text}"
    );
    assert!(text.contains("Updated 4 of 6 servers (2 failed)"), "{text}");
    // The summary counts per component.
    let rows = report.summary(&p);
    let vm = rows.iter().find(|r| r.component == "vm-agent").unwrap();
    assert_eq!((vm.done, vm.failed, vm.skipped), (4, 1, 1));
    assert!(vm.p50.is_some() && vm.max.is_some());
}

/// firewaller's postinstall keeps its SAPI instance: its target is written
/// before the step, and a refused write stops the server before it.
/// vm-agent's replaces it: its one write comes after the step, and a
/// refused write fails the server there (the next plan writes it).
#[tokio::test(start_paused = true)]
async fn a_refused_sapi_write_fails_the_server_before_or_after_its_step() {
    for (component, step_ran) in [("firewaller", false), ("vm-agent", true)] {
        let (fake, targets) = setup(2, &[component]);
        let cn1 = fake.dc().server_named("cn001");
        fake.faults().sapi_fail.insert(cn1);
        let p = plan_on(
            &fake,
            &request(Operation::Update, &[component], &[]),
            &images(&fake, &targets),
        );
        let report = run(&fake, &p, &ExecOptions::default()).await;
        let o = &report.servers[&cn1];
        assert_eq!(o.status, ServerStatus::Failed, "{component}");
        assert_eq!(o.failure.as_ref().unwrap().stage, "sapi", "{component}");
        assert_eq!(
            fake.steps_run().iter().any(|(s, _)| *s == cn1),
            step_ran,
            "{component}"
        );
        assert_eq!(report.counts().succeeded, 2, "{component}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_task_times_out_without_holding_up_the_rest() {
    let (fake, targets) = setup(3, &["vm-agent"]);
    let cn1 = fake.dc().server_named("cn001");
    fake.faults().hang.insert(cn1);
    fake.faults().latency = Duration::from_secs(1);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let options = ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    let o = &report.servers[&cn1];
    assert_eq!(o.status, ServerStatus::TimedOut);
    assert!(
        o.failure
            .as_ref()
            .unwrap()
            .message
            .contains("--task-timeout")
    );
    assert_eq!(report.counts().succeeded, 3);
    assert_eq!(report.elapsed.as_secs(), 60);
}

#[tokio::test(start_paused = true)]
async fn outliers_are_warned_once_and_stragglers_abandoned() {
    let (fake, targets) = setup(9, &["vm-agent"]);
    let cn4 = fake.dc().server_named("cn004");
    fake.faults().latency = Duration::from_secs(10);
    fake.faults().slow.insert(cn4, 100.0);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );

    let reporter = RecordingReporter::default();
    let options = ExecOptions::default();
    let report = crate::sim_common::run_yes(&fake, &p, &options, &reporter).await;
    // Median 10 s: threshold max(30 s, 40 s) = 40 s; cn004 runs 1000 s.
    assert_eq!(report.outliers.len(), 1);
    assert_eq!(report.outliers[0].hostname, "cn004");
    assert_eq!(report.outliers[0].median, Duration::from_secs(10));
    assert!(
        report.outliers[0].elapsed > Duration::from_secs(40)
            && report.outliers[0].elapsed <= Duration::from_secs(42)
    );
    assert_eq!(
        reporter
            .lines()
            .iter()
            .filter(|l| l.starts_with("outlier"))
            .count(),
        1
    );
    assert!(report.all_succeeded());
    assert!(
        report
            .render(&p)
            .contains("Outliers (slow servers):\n  cn004")
    );

    // With a straggler timeout the run ends 30 s after only cn004 is left.
    let (fake, targets) = setup(9, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(10);
    fake.faults().slow.insert(cn4, 100.0);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let options = ExecOptions {
        straggler_timeout: Some(Duration::from_secs(30)),
        outlier: OutlierPolicy {
            factor: 2.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    let o = &report.servers[&cn4];
    assert_eq!(o.status, ServerStatus::TimedOut);
    assert_eq!(o.failure.as_ref().unwrap().stage, "straggler");
    assert!(
        report.elapsed < Duration::from_secs(80),
        "{:?}",
        report.elapsed
    );
    assert_eq!(report.exit_status(&p), 2);
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_run_run_again_finishes_the_job() {
    let (fake, targets) = setup(9, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(1);
    let imgs = images(&fake, &targets);
    let req = request(Operation::Update, &["vm-agent"], &[]);
    let two = RolloutPolicy {
        concurrency: 2,
        ..Default::default()
    };
    let p = plan_with(&fake, &req, &imgs, two);
    let options = ExecOptions::default();
    let reporter = RecordingReporter::default();
    let catalog = fake.dc().catalog.clone();
    let report = crate::sim_common::executed(
        crate::sim_common::run_on(
            &fake,
            &catalog,
            &p,
            &crate::sim_common::yes_with(&options),
            &reporter,
            &crate::sim_common::Scripted::yes(),
            crate::sim_common::interrupt_after(Duration::from_millis(2500)),
        )
        .await,
    );
    assert!(report.interrupted);
    let c = report.counts();
    assert_eq!((c.succeeded, c.interrupted, c.not_started), (4, 2, 4));
    assert_eq!(report.exit_status(&p), 2);
    // Like every halt, the interrupt put the service default back: new
    // servers do not get a build the rollout did not finish.
    assert_eq!(report.service_changes_reverted, 1);

    // The same command again: only what is left, and the default again.
    let again = plan_with(&fake, &req, &imgs, two);
    assert_eq!(again.servers().len(), 6);
    assert_eq!(
        again.service_changes().len(),
        1,
        "the rerun moves the service default again"
    );
    let report = run(&fake, &again, &options).await;
    assert!(report.all_succeeded());
    assert!(plan_on(&fake, &req, &imgs).is_empty());
}

struct FailingStore;
impl agentsadm_orchestrate::store::IntentStore for FailingStore {
    fn apply<'a>(
        &'a self,
        _: agentsadm_types::ids::ServerUuid,
        _: &'a agentsadm_plan::IntentChange,
        _: Option<agentsadm_types::ids::InstanceUuid>,
    ) -> futures::future::BoxFuture<'a, Result<(), agentsadm_orchestrate::store::IntentWriteError>>
    {
        Box::pin(async { Ok(()) })
    }
    fn set_service_image<'a>(
        &'a self,
        _: &'a agentsadm_plan::ServiceChange,
    ) -> futures::future::BoxFuture<'a, Result<(), agentsadm_orchestrate::store::IntentWriteError>>
    {
        Box::pin(async {
            Err(agentsadm_sim::fake::sapi_unavailable(
                "set the service default",
            ))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_service_change_touches_no_server() {
    let (fake, targets) = setup(2, &["vm-agent"]);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let reporter = RecordingReporter::default();
    let options = ExecOptions::default();
    let failing = crate::sim_common::FakeWith {
        fake: &fake,
        transport: &fake,
        store: &FailingStore,
    };
    let catalog = fake.dc().catalog.clone();
    let err = crate::sim_common::run_on(
        failing,
        &catalog,
        &p,
        &crate::sim_common::yes_with(&options),
        &reporter,
        &crate::sim_common::Scripted::yes(),
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(matches!(
        err,
        RunError::Exec(ExecError::ServiceChange { .. })
    ));
    assert!(err.to_string().contains("no server was touched"));
    assert!(fake.steps_run().is_empty());
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_two_concurrent_orchestrators_gets_the_lock() {
    let fake = FakeDc::new(ExampleDc::empty());
    fake.faults().lock_latency = Duration::from_millis(20);
    let opts = LockOptions::default();
    let (a, b) = tokio::join!(
        lock::acquire(&fake, "root@hn:1", "update vm-agent", &opts),
        lock::acquire(&fake, "root@hn:2", "update cn-agent", &opts),
    );
    let (winner, loser) = match (a, b) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        (a, b) => panic!("expected exactly one winner: {a:?} {b:?}"),
    };
    match &loser {
        LockError::Held { owner, .. } => assert_eq!(owner, &winner.record().owner),
        other => panic!("unexpected {other:?}"),
    }
    assert!(loser.to_string().contains("--break-lock"));
    // A third one later is refused too, naming the holder.
    let err = lock::acquire(&fake, "root@hn:3", "remove x", &opts)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&winner.record().owner));
    winner.release().await.unwrap();
    assert!(fake.lock_record().is_none());
    let l = lock::acquire(&fake, "root@hn:3", "remove x", &opts)
        .await
        .unwrap();
    l.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stale_locks_are_broken_and_a_taken_over_lock_is_not_released() {
    let fake = FakeDc::new(ExampleDc::empty());
    let old = LockRecord {
        owner: "root@elsewhere:99".into(),
        token: "old".into(),
        generation: 4,
        stage: agentsadm_orchestrate::lock::Stage::Held,
        operation: "update --all".into(),
        started: "2020-01-01T00:00:00Z".into(),
        refreshed: "2020-01-01T00:00:00Z".into(),
    };
    fake.write(&old).await.unwrap();
    let opts = LockOptions::default();
    let l = lock::acquire(&fake, "root@hn:1", "update vm-agent", &opts)
        .await
        .unwrap();
    assert_eq!(
        l.broke.iter().map(|r| r.owner.as_str()).collect::<Vec<_>>(),
        ["root@elsewhere:99"]
    );
    assert_eq!(l.generation(), 5, "the generation only grows");
    l.refresh().await.unwrap();

    // Someone breaks it (a later generation, held): refresh notices,
    // release leaves theirs alone.
    let mut theirs = l.record().clone();
    theirs.token = "theirs".into();
    theirs.owner = "root@hn:2".into();
    theirs.generation += 1;
    fake.write(&theirs).await.unwrap();
    assert!(matches!(l.refresh().await, Err(LockError::Lost { .. })));
    l.release().await.unwrap();
    assert_eq!(fake.lock_record().unwrap().token, "theirs");

    // --break-lock takes a fresh lock.
    let forced = LockOptions {
        break_lock: true,
        ..LockOptions::default()
    };
    let l = lock::acquire(&fake, "root@hn:3", "update", &forced)
        .await
        .unwrap();
    assert_eq!(l.broke[0].owner, "root@hn:2");
    assert_eq!(l.generation(), 7);
}

#[tokio::test(start_paused = true)]
async fn command_line_progress_handles_every_event() {
    use agentsadm_cli::progress::CliProgress;
    use agentsadm_cli::progress::ProgressMode;
    for mode in [ProgressMode::Bars, ProgressMode::Lines, ProgressMode::Quiet] {
        let (fake, targets) = setup(6, &["vm-agent", "cn-agent"]);
        let cn2 = fake.dc().server_named("cn002");
        let cn3 = fake.dc().server_named("cn003");
        fake.faults().latency = Duration::from_secs(10);
        fake.faults().fail.insert(cn2, (None, "boom".into()));
        fake.faults().slow.insert(cn3, 50.0);
        let p = plan_on(
            &fake,
            &request(Operation::Update, &["vm-agent", "cn-agent"], &[]),
            &images(&fake, &targets),
        );
        let progress = CliProgress::new(mode, "update");
        let options = ExecOptions {
            // Past the outlier threshold (60 s), so cn003 is flagged first.
            straggler_timeout: Some(Duration::from_secs(90)),
            ..Default::default()
        };
        let report = crate::sim_common::run_yes(&fake, &p, &options, &progress).await;
        assert_eq!(report.counts().failed, 1);
        assert_eq!(report.counts().timed_out, 1);
        assert_eq!(report.outliers.len(), 1);
    }
}

/// A run on four servers, none of which has finished when cn002 is flagged:
/// it is judged against its own history (it usually takes 40 s), while
/// cn003, slow every time (it usually takes 5 min), is not flagged at all.
#[tokio::test(start_paused = true)]
async fn a_server_with_history_is_flagged_against_itself_in_a_small_run() {
    use agentsadm_orchestrate::baseline::OutlierBasis;
    use agentsadm_plan::timing::{Durations, Sample};
    let (fake, targets) = setup(3, &["vm-agent"]);
    // One at a time: the fake datacenter is behind one lock.
    let cn2 = fake.dc().server_named("cn002");
    let cn3 = fake.dc().server_named("cn003");
    fake.faults().latency = Duration::from_secs(40);
    fake.faults().slow.insert(cn2, 4.5); // 3 min this time
    fake.faults().slow.insert(cn3, 7.5); // 5 min, as usual
    let history = Durations::from_samples(fake.dc().reality().servers.keys().map(|s| Sample {
        server: *s,
        component: "vm-agent".into(),
        elapsed: if *s == cn3 {
            Duration::from_secs(300)
        } else {
            Duration::from_secs(40)
        },
        outcome: agentsadm_plan::timing::SampleOutcome::Completed,
    }));
    let (intent, reality) = fake.snapshot();
    let catalog = fake.dc().catalog.clone();
    let images = images(&fake, &targets);
    let p = agentsadm_plan::plan(&agentsadm_plan::PlanningInput {
        catalog: &catalog,
        intent: &intent,
        reality: &reality,
        request: &request(Operation::Update, &["vm-agent"], &[]),
        options: agentsadm_plan::PlanOptions::default(),
        images: &images,
        durations: Some(&history),
    })
    .unwrap();
    // The slowest first: cn003, then the others.
    assert_eq!(p.rollout().order().next().unwrap().hostname, "cn003");
    // The executor judges by what the history knows (as Run feeds it).
    let mut options = ExecOptions::default();
    options.known.add_history(&history);
    let reporter = RecordingReporter::default();
    let report = crate::sim_common::run_yes(&fake, &p, &options, &reporter).await;
    assert_eq!(report.outliers.len(), 1, "{:?}", report.outliers);
    let o = &report.outliers[0];
    assert_eq!(o.hostname, "cn002");
    assert_eq!(o.basis, OutlierBasis::History);
    assert_eq!(o.median, Duration::from_secs(40));
    // max(3 x 40 s, 40 s + 30 s) = 2 min, checked every second.
    assert!(o.elapsed > Duration::from_secs(120) && o.elapsed <= Duration::from_secs(122));
    assert!(
        o.describe()
            .starts_with("usually takes 40.0s and is at 2m0"),
        "{}",
        o.describe()
    );
    assert!(
        report
            .render(&p)
            .contains("elapsed when flagged, usually 40.0s")
    );
}

#[tokio::test(start_paused = true)]
async fn a_small_rollout_stops_waiting_for_a_hung_server_after_the_straggler_timeout() {
    // Four servers, one hung: too few for a median, yet --straggler-timeout
    // applies from the first server, not after the 30-minute task timeout.
    let (fake, targets) = setup(3, &["vm-agent"]);
    let cn2 = fake.dc().server_named("cn002");
    fake.faults().latency = Duration::from_secs(1);
    fake.faults().hang.insert(cn2);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    assert!(p.servers().len() <= OutlierPolicy::default().min_finished);
    let options = ExecOptions {
        straggler_timeout: Some(Duration::from_secs(3)),
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    let o = &report.servers[&cn2];
    assert_eq!(o.status, ServerStatus::TimedOut);
    let failure = o.failure.as_ref().unwrap();
    assert_eq!(failure.stage, "straggler");
    assert!(
        failure
            .message
            .contains("stopped waiting after 3.0s (--straggler-timeout)"),
        "{}",
        failure.message
    );
    assert!(
        report.elapsed < Duration::from_secs(6),
        "{:?}",
        report.elapsed
    );
    assert_eq!(report.counts().succeeded, p.servers().len() - 1);
    assert_eq!(report.exit_status(&p), 2);
}

#[tokio::test(start_paused = true)]
async fn a_small_rollout_judges_slow_servers_against_what_is_known() {
    use agentsadm_orchestrate::baseline::{KnownDurations, OutlierBasis};
    let (fake, targets) = setup(3, &["vm-agent"]);
    let cn2 = fake.dc().server_named("cn002");
    fake.faults().latency = Duration::from_secs(10);
    fake.faults().slow.insert(cn2, 30.0);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    // The catalog's expected time: vm-agent 1m00s, so slow past
    // max(3 x 60 s, 60 s + 30 s) = 3 minutes; cn002 takes 5.
    let catalog = fake.dc().catalog.clone();
    let known = KnownDurations::from_catalog(&catalog);
    let options = ExecOptions {
        known: known.clone(),
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    assert_eq!(report.outliers.len(), 1, "{:?}", report.outliers);
    let o = &report.outliers[0];
    assert_eq!(
        (o.hostname.as_str(), o.basis),
        ("cn002", OutlierBasis::Catalog)
    );
    assert_eq!(o.median, Duration::from_secs(60));
    assert!(o.elapsed > Duration::from_secs(180) && o.elapsed <= Duration::from_secs(182));
    assert_eq!(
        o.compared_with(),
        "expected 1m00s (the catalog's install times)"
    );
    assert!(report.all_succeeded());

    // Its own earlier runs (run history) win: 10 s, so slow past 40 s.
    let (fake, targets) = setup(3, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(10);
    fake.faults().slow.insert(cn2, 30.0);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let mut known = known;
    known.record_history(cn2, "vm-agent", Duration::from_secs(10));
    let options = ExecOptions {
        known,
        ..Default::default()
    };
    let report = run(&fake, &p, &options).await;
    let o = &report.outliers[0];
    assert_eq!(o.basis, OutlierBasis::History);
    assert!(o.elapsed > Duration::from_secs(40) && o.elapsed <= Duration::from_secs(42));
    assert_eq!(o.compared_with(), "it took 10.0s in earlier runs");

    // Given nothing, a run still knows the catalog's times, as the binary
    // does. (Nothing known at all, no judgement, cannot happen in a run:
    // baseline::tests::a_hung_server_is_an_outlier_against_its_baseline
    // keeps that case.)
    let (fake, targets) = setup(3, &["vm-agent"]);
    fake.faults().latency = Duration::from_secs(10);
    fake.faults().slow.insert(cn2, 30.0);
    let p = plan_on(
        &fake,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images(&fake, &targets),
    );
    let report = run(&fake, &p, &ExecOptions::default()).await;
    assert_eq!(report.outliers.len(), 1, "{:?}", report.outliers);
    assert_eq!(report.outliers[0].basis, OutlierBasis::Catalog);
}
