//! One orchestrator at a time, end to end (issue 22), through the one run
//! every changing command uses, against the simulated datacenter:
//!
//! - two `update -y` started together while SAPI takes 0-200 ms per write
//!   never both proceed, trial after trial;
//! - the lock record deleted mid-run (an operator's cleanup) or broken by
//!   a colleague's `--break-lock`: the run stops starting anything the
//!   moment it notices, exits 2 and names the servers it changed, which
//!   may since have been changed by the other run; the other run finishes
//!   and the SAPI and CNAPI records end on its version;
//! - a lock record that cannot be read, or is dated in the future, is
//!   reported and nothing is written; `--break-lock` removes it, saying so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentsadm_api::Apis;
use agentsadm_api::sapi::{Update, UpdateAction, object};
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::lock::{self, LockBoard, LockError};
use agentsadm_orchestrate::report::{ExecEvent, ExecReport, FailureStage, Reporter, ServerStatus};
use agentsadm_orchestrate::run::{Run, RunError, RunOutcome, RunSettings};
use agentsadm_orchestrate::session::{RequestPlanner, Session};
use agentsadm_orchestrate::transport::{StepDone, StepFailure};
use agentsadm_plan::{Operation, Plan, PlanOptions, RolloutPolicy, TransportMode};
use agentsadm_sim::faults::{Distribution, LatencySpec, SimApi};
use agentsadm_sim::testkit::request;
use agentsadm_sim::{BuildOptions, PublishTarget, SeedSpec, SimConfig, SimDc};
use agentsadm_types::ids::{ImageUuid, ServerUuid};

use crate::flows_common::{Script, exec_options, instance_of, server, transport};

pub(crate) const COMPONENT: &str = "cmon-agent";

/// `cns` compute nodes, every instance with its params.
pub(crate) async fn sim(cns: usize) -> SimDc {
    SimDc::start(SimConfig::default().servers(cns).populate(SeedSpec {
        agents_without_params: Vec::new(),
        ..SeedSpec::default()
    }))
    .await
    .expect("simulator starts")
}

pub(crate) fn publish(dc: &SimDc, version: &str) -> ImageUuid {
    dc.publish_component(COMPONENT, &BuildOptions::new(version), PublishTarget::Dc)
        .unwrap()
        .uuid
}

/// Counts the servers a run started and finished.
#[derive(Default)]
pub(crate) struct Progress {
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
}

impl Reporter for Progress {
    fn event(&self, event: &ExecEvent<'_>) {
        match event {
            ExecEvent::ServerStarted { .. } => {
                self.started.fetch_add(1, Ordering::SeqCst);
            }
            ExecEvent::ServerFinished { .. } => {
                self.finished.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
    }
}

impl Progress {
    /// Wait until `n` servers finished.
    pub(crate) async fn finished(&self, n: usize) {
        for _ in 0..6000 {
            if self.finished.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} servers never finished");
    }
}

/// The settings of `update -y -J concurrency`, fit for loopback.
pub(crate) fn settings(concurrency: usize, break_lock: bool) -> RunSettings {
    RunSettings {
        yes: true,
        break_lock,
        rollout: RolloutPolicy {
            concurrency,
            canary: Some(0),
            ..RolloutPolicy::default()
        },
        options: exec_options(),
        ..RunSettings::default()
    }
}

/// `update cmon-agent --image image` through the one run.
pub(crate) async fn update(
    apis: &Apis,
    dc: &SimDc,
    image: ImageUuid,
    settings: &RunSettings,
    reporter: &dyn Reporter,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<RunOutcome<Plan>, RunError<agentsadm_orchestrate::session::SessionError>> {
    let planner = RequestPlanner {
        session: Session {
            apis,
            catalog: dc.catalog(),
            updates: None,
        },
        request: request(Operation::Update, &[COMPONENT], &[]),
        choice: ImageChoice::Image(image),
        options: PlanOptions {
            transport: TransportMode::Auto,
            ignore_holds: false,
            rollout: settings.rollout,
        },
        durations: None,
        overlay: None,
    };
    let mut run = Run::new(apis, dc.catalog(), settings, reporter, "update cmon-agent");
    run.transport = transport();
    run.lock.settle = Duration::from_millis(20);
    run.lock.release_backoff = Duration::from_millis(300);
    let operator = Script::new(&[], false, hostnames);
    run.go(&planner, &operator, cancel).await
}

fn hostnames(p: &Plan) -> Vec<String> {
    p.servers().values().map(|s| s.hostname.clone()).collect()
}

/// What SAPI and CNAPI say of the component, by hostname: the instance's
/// `params.image_uuid` and the image `server.agents` lists.
pub(crate) async fn records(
    dc: &SimDc,
) -> BTreeMap<String, (Option<ImageUuid>, Option<ImageUuid>)> {
    let mut out = BTreeMap::new();
    for s in dc.servers().into_iter().filter(|s| !s.headnode) {
        let sapi = instance_of(dc, s.uuid, COMPONENT)
            .await
            .and_then(|i| i.image_uuid());
        let cnapi = dc
            .server_agents(s.uuid)
            .into_iter()
            .find(|a| a.name == COMPONENT)
            .and_then(|a| a.image_uuid);
        out.insert(s.hostname.clone(), (sapi, cnapi));
    }
    out
}

/// Every server's SAPI instance and CNAPI entry name `image`.
pub(crate) async fn all_on(dc: &SimDc, image: ImageUuid) -> bool {
    records(dc)
        .await
        .values()
        .all(|(s, c)| *s == Some(image) && *c == Some(image))
}

pub(crate) async fn lock_board(apis: &Apis) -> LockBoard {
    let app = apis.sapi.sdc_application().await.unwrap().unwrap();
    LockBoard::from_metadata(&app.metadata)
}

/// The lock records' keys in the `sdc` application's metadata.
pub(crate) async fn lock_keys(apis: &Apis) -> Vec<String> {
    lock_board(apis)
        .await
        .entries
        .iter()
        .map(|e| e.key.clone())
        .collect()
}

/// Delete `keys` from the `sdc` application's metadata, as an operator
/// cleaning up (or a colleague's tooling) would.
pub(crate) async fn delete_metadata_keys(apis: &Apis, keys: &[String]) {
    let app = apis.sapi.sdc_application().await.unwrap().unwrap();
    let cleanup = Update {
        action: Some(UpdateAction::Delete),
        params: None,
        metadata: Some(object(keys.iter().map(|k| (k.as_str(), "")))),
    };
    apis.sapi
        .update_application(app.uuid, &cleanup)
        .await
        .unwrap();
}

fn executed(o: &Result<RunOutcome<Plan>, impl std::fmt::Debug>) -> bool {
    matches!(o, Ok(RunOutcome::Executed { .. }))
}

/// Two `update -y` at once, SAPI taking 0-200 ms per write (the old lock,
/// last-writer-wins with a settle pause, let both through): whatever the
/// order their writes land in, at most one proceeds, the other is told who
/// holds the lock (or finds nothing left to do), and no lock record stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_updates_at_once_never_both_proceed_however_slow_sapi_is() {
    let dc = sim(2).await;
    let apis = dc.apis();
    let builds = [publish(&dc, "1.1.0"), publish(&dc, "1.2.0")];
    dc.faults().set_write_latency(
        SimApi::Sapi,
        LatencySpec {
            base_ms: 0,
            jitter_ms: 200,
            distribution: Distribution::Uniform,
        },
    );
    let s = settings(4, false);
    let mut one_ran = 0;
    for trial in 0..10 {
        let image = builds[trial % 2];
        let quiet = Progress::default();
        let (a, b) = tokio::join!(
            update(&apis, &dc, image, &s, &quiet, std::future::pending()),
            update(&apis, &dc, image, &s, &quiet, std::future::pending()),
        );
        assert!(
            !(executed(&a) && executed(&b)),
            "trial {trial}: both runs proceeded"
        );
        for o in [&a, &b] {
            match o {
                Ok(RunOutcome::Executed { report, planned }) => {
                    assert_eq!(report.exit_status(planned), 0, "{}", report.render(planned));
                }
                Ok(RunOutcome::Empty(_)) => {}
                Err(RunError::Lock(LockError::Held { .. } | LockError::Contended { .. })) => {}
                other => panic!("trial {trial}: {other:?}"),
            }
        }
        if executed(&a) || executed(&b) {
            one_ran += 1;
            assert!(all_on(&dc, image).await, "{:?}", records(&dc).await);
        }
        assert!(lock_board(&apis).await.entries.is_empty(), "trial {trial}");
    }
    assert!(
        one_ran >= 8,
        "the lock let a run through in {one_ran} of 10 trials"
    );
    // The generation grew with every lock taken.
    assert!(lock_board(&apis).await.generation >= one_ran as u64);
    dc.shutdown().await;
}

/// What a run that lost its lock reports: exit 2, the loss, the servers it
/// changed (and only those), never "failed 0" as if all were well.
fn assert_lost(report: &ExecReport, plan: &Plan, holder: Option<&str>) {
    let text = report.render(plan);
    assert_eq!(report.exit_status(plan), 2, "{text}");
    let loss = report.lock_lost.as_ref().expect("the loss is reported");
    if let Some(h) = holder {
        assert!(loss.holder.contains(h), "{loss:?}");
    }
    let touched = report.touched();
    assert!(!touched.is_empty() && touched.len() < 4, "{text}");
    assert!(
        text.contains("The datacenter lock was lost")
            && text.contains("may since have been changed by someone else")
            && touched.iter().all(|t| text.contains(t.as_str())),
        "{text}"
    );
    let c = report.counts();
    assert!(c.not_started + c.stopped > 0, "{text}");
    assert_eq!(c.failed, 0, "{text}");
    let json = serde_json::to_value(report).unwrap();
    assert!(json["lock_lost"]["noticed"].is_string(), "{json}");
    let changed: Vec<String> = report
        .touched_servers()
        .iter()
        .map(|(_, s)| s.to_string())
        .collect();
    assert_eq!(
        json["lock_lost"]["may_have_changed"],
        serde_json::json!(changed),
        "the JSON names the servers too"
    );
}

/// Run A updates four servers one at a time; after its first server, the
/// lock record is deleted (an operator's cleanup) and run B updates to
/// another build. A stops before its next server, exits 2 and names the
/// servers it changed; B finishes (once more if A's last step was under
/// way when B planned), and every SAPI instance and CNAPI entry ends on
/// B's build, the one the last run to succeed reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_deleted_mid_run_stops_the_run_and_it_says_so() {
    lost_mid_run(false).await;
}

/// The same, with a colleague's `--break-lock` instead of the cleanup: A
/// names the new holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_colleagues_break_lock_mid_run_stops_the_run_and_it_says_so() {
    lost_mid_run(true).await;
}

async fn lost_mid_run(break_lock: bool) {
    let dc = sim(4).await;
    let apis = dc.apis();
    let (a_build, b_build) = (publish(&dc, "1.1.0"), publish(&dc, "1.2.0"));
    let before = records(&dc).await;
    assert!(before.values().all(|(s, c)| s == c && s.is_some()));
    dc.faults().set_install_latency(LatencySpec::fixed(400));
    let progress = Progress::default();
    let a_settings = settings(1, false);
    let b_settings = settings(4, break_lock);
    let a = update(
        &apis,
        &dc,
        a_build,
        &a_settings,
        &progress,
        std::future::pending(),
    );
    let b = async {
        progress.finished(1).await;
        if !break_lock {
            let keys = lock_keys(&apis).await;
            assert_eq!(keys.len(), 1);
            delete_metadata_keys(&apis, &keys).await;
        }
        update(
            &apis,
            &dc,
            b_build,
            &b_settings,
            &Progress::default(),
            std::future::pending(),
        )
        .await
    };
    let (a, b) = tokio::join!(a, b);
    let Ok(RunOutcome::Executed { planned, report }) = a else {
        panic!("A ran: {a:?}")
    };
    let holder = break_lock.then(|| lock::Login::default().owner());
    assert_lost(&report, &planned, holder.as_deref());
    let b_done = match b {
        Ok(RunOutcome::Executed { planned, report }) => report.exit_status(&planned) == 0,
        other => panic!("B ran: {other:?}"),
    };
    if !b_done {
        // A server A had under way when B planned: B's step found it
        // changed since its plan and refused; the same command finishes.
        let again = update(
            &apis,
            &dc,
            b_build,
            &settings(4, false),
            &Progress::default(),
            std::future::pending(),
        )
        .await;
        assert!(
            matches!(&again, Ok(RunOutcome::Executed { planned, report }) if report.exit_status(planned) == 0),
            "{again:?}"
        );
    }
    assert!(all_on(&dc, b_build).await, "{:?}", records(&dc).await);
    assert!(lock_board(&apis).await.entries.is_empty());
    dc.shutdown().await;
}

/// A lock record that cannot be read (garbage, an escape sequence, a
/// 1 MB owner) and one dated a year ahead are each reported, naming the
/// key or owner, with nothing written (the old lock overwrote the first
/// and held off every run until the date); `--break-lock` removes them and
/// says so, and the run goes ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_and_future_dated_lock_records_are_reported_not_overwritten() {
    let dc = sim(2).await;
    let apis = dc.apis();
    let images = [publish(&dc, "1.1.0"), publish(&dc, "1.2.0")];
    let app = apis.sapi.sdc_application().await.unwrap().unwrap();
    let future = serde_json::json!({
        "owner": "ops@elsewhere:77", "token": "f00d", "generation": 3, "stage": "held",
        "operation": "update --all",
        "started": "2099-01-01T00:00:00Z", "refreshed": "2099-01-01T00:00:00Z"
    });
    let garbage = serde_json::json!({"owner": "x".repeat(1 << 20), "token": "\u{1b}[2J"});
    for (key, value, expect, image) in [
        (
            "agentsadm_lock_claim_zz",
            garbage,
            "cannot be read",
            images[0],
        ),
        (
            "agentsadm_lock_claim_f00d",
            future,
            "in the future",
            images[1],
        ),
    ] {
        apis.sapi
            .update_application(app.uuid, &Update::metadata(object([(key, value.clone())])))
            .await
            .unwrap();
        let before = records(&dc).await;
        let mutations = dc.mutation_count();
        let err = update(
            &apis,
            &dc,
            image,
            &settings(4, false),
            &Progress::default(),
            std::future::pending(),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(expect) && text.contains("--break-lock"),
            "{text}"
        );
        assert!(
            text.len() < 1000 && !text.contains('\u{1b}'),
            "bounded: {}",
            text.len()
        );
        assert_eq!(dc.mutation_count(), mutations, "nothing written");
        assert_eq!(records(&dc).await, before);
        let meta = apis.sapi.sdc_application().await.unwrap().unwrap().metadata;
        assert_eq!(meta.get(key), Some(&value), "left as it was");
        // --break-lock removes it (with a warning) and runs.
        let outcome = update(
            &apis,
            &dc,
            image,
            &settings(4, true),
            &Progress::default(),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert!(
            matches!(outcome, RunOutcome::Executed { .. }),
            "{outcome:?}"
        );
        let meta = apis.sapi.sdc_application().await.unwrap().unwrap().metadata;
        assert!(!meta.contains_key(key));
        assert!(LockBoard::from_metadata(&meta).is_empty());
        assert!(all_on(&dc, image).await);
    }
    dc.shutdown().await;
}

/// Before the summary, the lock is confirmed once more: lost after the
/// last server started (its record removed while that server ran), the
/// run still exits 2 and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_confirmed_once_more_before_the_summary() {
    let dc = sim(1).await;
    let apis = dc.apis();
    let image = publish(&dc, "1.1.0");
    dc.faults().set_install_latency(LatencySpec::fixed(800));
    let progress = Progress::default();
    let s = settings(1, false);
    let run = update(&apis, &dc, image, &s, &progress, std::future::pending());
    let cleanup = async {
        // The headnode, then cn0001, one at a time: cn0001 is the last.
        while progress.started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The step is under way (its lock confirmed): remove the record.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let keys = lock_keys(&apis).await;
        delete_metadata_keys(&apis, &keys).await;
    };
    let (outcome, ()) = tokio::join!(run, cleanup);
    let Ok(RunOutcome::Executed { planned, report }) = outcome else {
        panic!("{outcome:?}")
    };
    let text = report.render(&planned);
    assert_eq!(report.counts().succeeded, 2, "{text}");
    assert_eq!(report.exit_status(&planned), 2, "{text}");
    let loss = report.lock_lost.as_ref().expect("noticed");
    assert_eq!(loss.noticed, "before the summary");
    assert!(
        text.contains(&format!("cn0001 ({})", server(&dc, "cn0001"))),
        "{text}"
    );
    assert!(
        report
            .servers
            .values()
            .all(|o| o.status == ServerStatus::Succeeded)
    );
    dc.shutdown().await;
}

/// Work held under the lock outside a run (self-update's `lock::hold`):
/// the lock record removed while the work ran, between two refreshes, is
/// noticed when the work is done (said, `lost` set, so the command exits
/// 2), and no record stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_work_notices_a_lock_lost_between_refreshes() {
    let dc = sim(1).await;
    let apis = dc.apis();
    let store = lock::SapiLockStore::new(apis.sapi.clone()).await.unwrap();
    let options = lock::LockOptions {
        settle: Duration::from_millis(20),
        ..lock::LockOptions::default()
    };
    let lost = std::sync::atomic::AtomicBool::new(false);
    let notes = std::sync::Mutex::new(Vec::<String>::new());
    let work = async {
        let keys = lock_keys(&apis).await;
        assert!(!keys.is_empty(), "held while the work runs");
        delete_metadata_keys(&apis, &keys).await;
        "done"
    };
    let note = |l: &str| notes.lock().unwrap().push(l.to_string());
    let result = lock::hold(&store, "self-update", &options, &lost, note, work)
        .await
        .unwrap();
    assert_eq!(result, "done");
    assert!(lost.load(Ordering::SeqCst), "{:?}", notes.lock().unwrap());
    assert!(
        notes
            .lock()
            .unwrap()
            .iter()
            .any(|n| n.contains("lock was lost")),
        "{:?}",
        notes.lock().unwrap()
    );
    assert!(lock_board(&apis).await.entries.is_empty());
    dc.shutdown().await;
}

/// The fake datacenter's transport, except that a colleague breaks the
/// lock while the first step runs (which takes a second, longer than a
/// confirmation of the lock stands), and that step then fails as a step
/// does when the new holder's own step removes the package it checks
/// (`gz health`: not installed).
struct BrokenDuringStep<'a> {
    inner: &'a agentsadm_sim::fake::FakeDc,
    broke: std::sync::atomic::AtomicBool,
}

impl agentsadm_orchestrate::transport::Transport for BrokenDuringStep<'_> {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a agentsadm_plan::Step,
    ) -> futures::future::BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(async move {
            if self.broke.swap(true, Ordering::SeqCst) {
                return self.inner.run(server, step).await;
            }
            crate::sim_common::break_lock(self.inner);
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(StepFailure::new(
                FailureStage::Execute,
                format!("{} is not installed on server {server}", step.component),
            ))
        })
    }
}

/// The lock-tamper residual (issue 32): a step that fails while the run no
/// longer holds the lock, because its new holder was changing the same
/// server, was reported as the server's failure (1 of 8 runs of
/// `a_colleagues_break_lock_mid_run...` on a loaded machine). How it ended
/// is not known: the server is `unknown`, not failed, and the run reports
/// the loss and that the server may since have been changed.
#[tokio::test(start_paused = true)]
async fn a_step_failing_after_the_lock_was_broken_is_not_the_servers_failure() {
    let (fake, p) = crate::sim_common::net_agent_one_at_a_time(3);
    let transport = BrokenDuringStep {
        inner: &fake,
        broke: Default::default(),
    };
    let report = crate::sim_common::run_through(&fake, &transport, &p, &exec_options()).await;
    let text = report.render(&p);
    let c = report.counts();
    assert_eq!(c.failed, 0, "{text}");
    assert_eq!(c.succeeded, 0, "nothing started after the loss: {text}");
    let touched = report.touched_servers();
    assert_eq!(touched.len(), 1, "{text}");
    let outcome = &report.servers[&touched[0].1];
    assert_eq!(outcome.status, ServerStatus::Unknown, "{text}");
    let why = &outcome.failure.as_ref().unwrap().message;
    assert!(
        why.contains("the datacenter lock was lost while it ran") && why.contains("not installed"),
        "{why}"
    );
}
