//! One run of a command that changes the datacenter: `update`, `install`,
//! `remove`, `check --fix`, `adopt`, `server delete|factory-reset`. Each
//! brings its [`Planner`] (how it reads the datacenter and makes its
//! [`Plan`]) and an [`Operator`] (the command line, or a test's script,
//! which shows plans and answers questions); [`Run::go`] does the rest,
//! the same way for all of them:
//!
//! 1. `-n`: plan once, show it, stop (nothing written, not even the lock).
//! 2. A held lock is reported before a long plan, unless `--break-lock`.
//! 3. A first plan without the lock: bad input, nothing to do, or no way
//!    to confirm (no `-y`, no terminal) ends here with nothing written.
//! 4. Under the datacenter lock (refreshed while the run lasts): plan
//!    again and show it; with `-y` it is confirmed as it is; otherwise ask,
//!    and after a yes plan once more: only a plan equal to the one
//!    confirmed runs (a changed one is shown and asked about again,
//!    [`crate::fence`]). The answer is a [`Confirmed`] token.
//! 5. Import the plan's images, execute it (the lock's loss stops new
//!    starts), release the lock, and hand back the report.

use std::future::Future;

use futures::future::LocalBoxFuture;

use crate::carriers::guard::{Fence, Hold};
use crate::carriers::images::ImageError;
use crate::carriers::transport::CnapiTransportConfig;
use crate::executor::execute::{ExecError, ExecOptions, Executor, RunGate};
use crate::runner::datacenter::{ApiDatacenter, CarrierSettings, DatacenterError, RunOn};
use crate::runner::fence::{Fenced, fence};
use crate::runner::history::{HistorySettings, Recorder, RecordingTee, SapiHistory};
use crate::runner::lock::LockFence;
use crate::runner::lock::holding;
use crate::runner::lock::{self, LockError, LockOptions};
use crate::vocabulary::confirm::{AgreesInAdvance, Confirmed};
use crate::vocabulary::report::{ExecReport, InFlight, Outage, Reporter};
use agentsadm_api::Apis;
use agentsadm_api::SapiClient;
use agentsadm_plan::timing::Durations;
use agentsadm_plan::{ExplicitYes, Plan, PlanOptions, RolloutPolicy, TransportMode};
use agentsadm_types::catalog::Catalog;

/// What every changing command's arguments come to, made once from the
/// command line (one set of execution options for all of them).
#[derive(Clone, Debug, Default)]
pub struct RunSettings {
    /// `-n`: show the plan only.
    pub dry_run: bool,
    /// `-y`: agree to the plan made under the lock without being asked.
    pub yes: bool,
    /// `--break-lock`: take the datacenter lock whoever holds it.
    pub break_lock: bool,
    /// `--transport` (update, install, remove).
    pub transport: TransportMode,
    /// `-J`, `--canary`, `--max-failures`, `--max-per-rack`.
    pub rollout: RolloutPolicy,
    /// `--ignore-holds` (update, install, remove).
    pub ignore_holds: bool,
    /// `--task-timeout` and the rest of the executor's settings.
    pub options: ExecOptions,
    /// On a headnode: sdcadm's lock, held with the datacenter lock.
    pub sdcadm_lock: Option<crate::runner::lock::SdcadmLockOptions>,
    /// Who runs it, as the lock and the history name them (resolved by
    /// the command line).
    pub login: crate::runner::lock::Login,
}

impl crate::vocabulary::confirm::sealed::Sealed for RunSettings {}

impl AgreesInAdvance for RunSettings {
    fn yes(&self) -> bool {
        self.yes
    }
}

impl RunSettings {
    /// The planner's options these settings ask for.
    pub fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            transport: self.transport,
            rollout: self.rollout,
            ignore_holds: self.ignore_holds,
        }
    }
}

/// What a command plans: its [`Plan`] and whatever it shows with it (a
/// check's findings, a cleanup's instances).
pub trait Planned {
    fn plan(&self) -> &Plan;
}

impl Planned for Plan {
    fn plan(&self) -> &Plan {
        self
    }
}

/// How a command reads the datacenter and plans (I/O, then the pure
/// planner). Called again under the lock and after the answer.
pub trait Planner {
    type Planned: Planned;
    type Error: std::error::Error + Send + Sync + 'static;
    fn plan(&self) -> impl Future<Output = Result<Self::Planned, Self::Error>>;
}

/// When a plan is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The plan as it is (made under the lock, or for `-n`).
    Plan,
    /// The plan made without the lock, shown because the run stops there
    /// (nothing to do, or no way to confirm).
    Unlocked,
    /// The plan changed since it was shown (made again after the answer).
    Changed,
}

/// Why asking failed (the operator refused, the answer could not be read).
pub type AskError = Box<dyn std::error::Error + Send + Sync>;

/// The one who reads plans and answers: the command line's terminal, or a
/// test. Rendering is the operator's; deciding is the run's.
pub trait Operator<P> {
    /// Show a plan.
    fn show(&self, planned: &P, shown: Shown);
    /// Whether a question can be answered here (a terminal, not `--json`).
    fn interactive(&self) -> bool;
    /// Ask whether to carry out the plan just shown. An error refuses.
    fn ask(&self, planned: &P) -> impl Future<Output = Result<bool, AskError>>;
    /// Something the operator should read (a broken stale lock, a lost
    /// lock, images being imported).
    fn note(&self, message: &str);
    /// The canary wave passed: go on with the `remaining` servers? (`yes`:
    /// `-y` was given, so the answer is yes.)
    fn canary_passed(
        &self,
        canaries: &[String],
        remaining: usize,
        yes: bool,
    ) -> impl Future<Output = bool>;
    /// Interrupted with servers in flight: keep waiting for them until the
    /// returned future resolves (see [`RunGate::keep_waiting`]).
    fn keep_waiting(&self, _in_flight: &[InFlight]) -> Option<LocalBoxFuture<'_, ()>> {
        None
    }
}

/// A run that did not get to execute, or failed while starting.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Plan(E),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("refusing to change anything without confirmation: pass -y (nothing was changed)")]
    NeedsYes,
    /// The plan needs `-y` itself ([`ExplicitYes`]); `why` says what it
    /// does that needs it.
    #[error("this plan needs -y: {why}; re-run with -y to confirm (nothing was changed)")]
    NeedsExplicitYes { why: String },
    /// The operator refused, or the answer could not be read; nothing was
    /// changed.
    #[error(transparent)]
    Ask(AskError),
    #[error("this plan needs {api}, which this run has no URL for; nothing was changed")]
    MissingApi { api: &'static str },
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl<E: std::error::Error + 'static> From<DatacenterError> for RunError<E> {
    fn from(e: DatacenterError) -> Self {
        match e {
            DatacenterError::MissingApi { api } => RunError::MissingApi { api },
            DatacenterError::Image(e) => RunError::Image(e),
        }
    }
}

/// How a run ended (without an error).
// One value per run, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RunOutcome<P> {
    /// `-n`: shown; nothing was written, not even the lock.
    DryRun(P),
    /// Nothing to do (found before or under the lock).
    Empty(P),
    /// The operator said no: nothing was changed.
    Declined(P),
    /// Carried out: the plan that ran and what happened.
    Executed { planned: P, report: ExecReport },
}

/// One run against a datacenter.
pub struct Run<'a> {
    /// What the run reads and changes: the datacenter's APIs
    /// ([`ApiDatacenter`]), or a test's fake one
    /// ([`crate::datacenter::Datacenter`]).
    pub datacenter: RunOn<'a>,
    pub catalog: &'a Catalog,
    pub settings: &'a RunSettings,
    pub reporter: &'a dyn Reporter,
    /// How steps reach servers through CNAPI.
    pub transport: CnapiTransportConfig,
    /// What the lock record says this run does (`update vm-agent`).
    pub operation: String,
    /// The lock's timing (tests shorten the settle interval).
    pub lock: LockOptions,
    /// Where the run is recorded ([`crate::history`]); `None`: not at
    /// all. The caller says where (the command line resolves the
    /// headnode's journal directory and its command line once, in its
    /// settings); by default only the datacenter's copy in SAPI
    /// ([`HistorySettings::datacenter_only`]).
    pub history: Option<HistorySettings>,
    /// What servers took in earlier runs, as the history had it when the
    /// plan was made ([`crate::history::HistoryStore::durations`], the same
    /// the planner scheduled from): a server with times of its own is
    /// judged against them ([`crate::baseline`]). `None`: no history.
    pub durations: Option<&'a Durations>,
}

impl<'a> Run<'a> {
    /// A run with the transport and lock settings `settings` imply.
    pub fn new(
        apis: &'a Apis,
        catalog: &'a Catalog,
        settings: &'a RunSettings,
        reporter: &'a dyn Reporter,
        operation: impl Into<String>,
    ) -> Run<'a> {
        let datacenter = ApiDatacenter {
            sapi: &apis.sapi,
            cnapi: Some(&apis.cnapi),
            imgapi: Some(&apis.imgapi),
        };
        Run::on(
            RunOn::Apis(datacenter),
            catalog,
            settings,
            reporter,
            operation,
        )
    }

    /// A run with only SAPI (headnode setup, before CNAPI and IMGAPI run):
    /// a plan that needs either fails before it changes anything.
    pub fn sapi_only(
        sapi: &'a SapiClient,
        catalog: &'a Catalog,
        settings: &'a RunSettings,
        reporter: &'a dyn Reporter,
        operation: impl Into<String>,
    ) -> Run<'a> {
        let datacenter = ApiDatacenter {
            sapi,
            cnapi: None,
            imgapi: None,
        };
        Run::on(
            RunOn::Apis(datacenter),
            catalog,
            settings,
            reporter,
            operation,
        )
    }

    /// A run on `datacenter` (the APIs, or a test's fake datacenter) with
    /// the transport and lock settings `settings` imply.
    pub fn on(
        datacenter: RunOn<'a>,
        catalog: &'a Catalog,
        settings: &'a RunSettings,
        reporter: &'a dyn Reporter,
        operation: impl Into<String>,
    ) -> Run<'a> {
        Run {
            datacenter,
            catalog,
            settings,
            reporter,
            // `agentsadm gz` on a server may take as long as one step may.
            transport: CnapiTransportConfig {
                execute_timeout: settings.options.task_timeout,
                health: settings.options.health,
                ..Default::default()
            },
            operation: operation.into(),
            lock: LockOptions {
                break_lock: settings.break_lock,
                sdcadm: settings.sdcadm_lock.clone(),
                login: settings.login.clone(),
                ..LockOptions::default()
            },
            history: Some(HistorySettings::datacenter_only()),
            durations: None,
        }
    }

    /// Work that is not a plan (`self-update`) under this run's datacenter
    /// lock (and sdcadm's, on a headnode): taken as [`Run::go`] takes it,
    /// refreshed while `work` runs, released after. `lost` is set when the
    /// lock was lost meanwhile. Only a run takes the lock: the command
    /// line never does.
    pub async fn outside<T>(
        &self,
        lost: &std::sync::atomic::AtomicBool,
        note: impl Fn(&str),
        work: impl Future<Output = T>,
    ) -> Result<T, LockError> {
        let store = self.datacenter.lock_store().await?;
        holding::hold(&*store, &self.operation, &self.lock, lost, note, work).await
    }

    /// Plan, confirm under the lock, execute. See the module documentation.
    pub async fn go<P, O>(
        &self,
        planner: &P,
        operator: &O,
        cancel: impl Future<Output = ()>,
    ) -> Result<RunOutcome<P::Planned>, RunError<P::Error>>
    where
        P: Planner,
        O: Operator<P::Planned> + Sync,
    {
        if self.settings.dry_run {
            let planned = planner.plan().await.map_err(RunError::Plan)?;
            log_plan(planned.plan());
            log_skips(planned.plan());
            operator.show(&planned, Shown::Plan);
            return Ok(RunOutcome::DryRun(planned));
        }
        let store = self.datacenter.lock_store().await?;
        lock::check_free(&*store, &self.lock).await?;
        let unlocked = planner.plan().await.map_err(RunError::Plan)?;
        if unlocked.plan().is_empty() {
            // Nothing to change, but records of earlier versions still
            // move out of `sdc` (under the locks) on this run.
            if let Some(sapi) = self.datacenter.sapi() {
                let cnapi = self.datacenter.cnapi();
                crate::runner::shape::move_when_idle(&*store, sapi, cnapi, &self.lock, |m| {
                    operator.note(m)
                })
                .await;
            }
            log_skips(unlocked.plan());
            operator.show(&unlocked, Shown::Unlocked);
            return Ok(RunOutcome::Empty(unlocked));
        }
        if !self.settings.yes && !operator.interactive() {
            operator.show(&unlocked, Shown::Unlocked);
            return Err(if unlocked.plan().needs_explicit_yes() {
                RunError::NeedsExplicitYes {
                    why: ExplicitYes::clauses(unlocked.plan().explicit_yes()),
                }
            } else {
                RunError::NeedsYes
            });
        }
        drop(unlocked);
        let owner = self.lock.login.owner();
        let dc_lock = lock::acquire(&*store, &owner, &self.operation, &self.lock).await?;
        holding::log_acquired(&owner, &self.operation, &dc_lock);
        for old in &dc_lock.broke {
            operator.note(&format!(
                "warning: broke the orchestrator lock of {} ({:?}, last seen {})",
                old.owner, old.operation, old.refreshed
            ));
        }
        // Records of earlier versions move out of `sdc` before the plan
        // is made again under the lock (issue 29).
        if let Some(sapi) = self.datacenter.sapi() {
            let cnapi = self.datacenter.cnapi();
            crate::runner::shape::move_and_note(sapi, cnapi, |m| operator.note(m)).await;
        }
        let fence = LockFence::new(&dc_lock);
        let work = self.locked(planner, operator, &fence, cancel);
        let mut outcome =
            holding::refreshing(&dc_lock, &fence, &self.lock, |m| operator.note(m), work).await;
        drop(fence);
        let released = dc_lock.release().await;
        holding::log_released(&released);
        if let Ok(RunOutcome::Executed { planned, report }) = &mut outcome {
            if let Err(e) = released {
                report.lock_release = Some(holding::release_failed(&e));
            }
            log_summary(planned.plan(), report);
        } else if let Err(e) = released {
            operator.note(&format!("warning: {}", holding::release_failed(&e)));
        }
        outcome
    }

    /// Under the lock: plan, confirm (fenced), import, execute.
    async fn locked<P, O>(
        &self,
        planner: &P,
        operator: &O,
        lock: &LockFence<'_>,
        cancel: impl Future<Output = ()>,
    ) -> Result<RunOutcome<P::Planned>, RunError<P::Error>>
    where
        P: Planner,
        O: Operator<P::Planned> + Sync,
    {
        let first = planner.plan().await.map_err(RunError::Plan)?;
        log_plan(first.plan());
        operator.show(&first, Shown::Plan);
        let fenced = fence(
            first,
            self.settings.yes,
            |p: &P::Planned| p.plan().is_empty(),
            async |p: &P::Planned| {
                let answer = operator.ask(p).await;
                log_answer("proceed with the plan shown", &answer);
                answer.map_err(RunError::Ask)
            },
            async || {
                let again = planner.plan().await.map_err(RunError::Plan)?;
                log_plan(again.plan());
                Ok(again)
            },
            |again| {
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = "fence", event = "plan-changed",
                    "the plan made again after the answer differs from the one confirmed: shown and asked again");
                operator.show(again, Shown::Changed)
            },
            |a: &P::Planned, b: &P::Planned| a.plan() == b.plan(),
        )
        .await?;
        let (planned, consent) = match fenced {
            Fenced::Confirmed(p, consent) => (p, consent),
            Fenced::Empty(p) => {
                log_skips(p.plan());
                return Ok(RunOutcome::Empty(p));
            }
            Fenced::Declined(p) => return Ok(RunOutcome::Declined(p)),
        };
        log_skips(planned.plan());
        if consent == crate::vocabulary::confirm::Consent::Yes {
            log_answer(
                "proceed with the plan shown (-y: agreed in advance)",
                &Ok(true),
            );
        }
        let confirmed = match consent {
            crate::vocabulary::confirm::Consent::Yes => {
                Confirmed::by_yes(self.settings, planned.plan())
            }
            crate::vocabulary::confirm::Consent::Prompt => {
                Some(Confirmed::by_prompt(planned.plan()))
            }
        };
        // `fence` confirms with -y only when the settings say -y.
        let Some(confirmed) = confirmed else {
            return Err(RunError::NeedsYes);
        };
        let gate = Gate {
            fence: lock,
            operator,
            yes: self.settings.yes,
            _planned: std::marker::PhantomData,
        };
        let mut report = self.execute(confirmed, operator, cancel, &gate).await?;
        // Once more before the summary: a run that lost the lock at any
        // point says so.
        if let Hold::Unconfirmed(api) = lock.confirm_now("before the summary").await
            && report.outage.is_none()
        {
            report.outage = Some(Outage {
                api,
                noticed: "when the lock was confirmed before the summary".to_string(),
            });
        }
        report.lock_lost = lock.loss().map(|mut loss| {
            loss.may_have_changed = report
                .touched_servers()
                .into_iter()
                .map(|(_, s)| s)
                .collect();
            loss
        });
        Ok(RunOutcome::Executed { planned, report })
    }

    /// Record the run ([`crate::history`]), import the plan's images, then
    /// carry it out through CNAPI and SAPI.
    async fn execute<P, O, E>(
        &self,
        confirmed: Confirmed<'_>,
        operator: &O,
        cancel: impl Future<Output = ()>,
        gate: &Gate<'_, O, P>,
    ) -> Result<ExecReport, RunError<E>>
    where
        O: Operator<P> + Sync,
        E: std::error::Error + 'static,
    {
        let plan = confirmed.plan();
        let recorder = match &self.history {
            Some(settings) => {
                let (tx, rx) = std::sync::mpsc::channel::<String>();
                let recorder = Recorder::begin(
                    settings,
                    self.datacenter.sapi().map(|s| SapiHistory::new(s.clone())),
                    plan,
                    &self.operation,
                    plan.reverts().map(|r| r.run),
                    self.lock.login.owner(),
                    move |m| {
                        let _ = tx.send(m.to_string());
                    },
                )
                .await;
                for m in rx.try_iter() {
                    operator.note(&m);
                }
                Some(recorder)
            }
            None => None,
        };
        let every = self
            .history
            .as_ref()
            .map_or(std::time::Duration::from_secs(3600), |h| h.mirror_every);
        let result = {
            let work = self.execute_recorded(confirmed, operator, cancel, gate, recorder.as_ref());
            tokio::pin!(work);
            let mut mirror = tokio::time::interval(every);
            mirror.tick().await;
            loop {
                tokio::select! {
                    r = &mut work => break r,
                    _ = mirror.tick() => {
                        if let Some(r) = &recorder {
                            r.mirror_if_changed().await;
                        }
                    }
                }
            }
        };
        let Some(recorder) = recorder else {
            return result;
        };
        let id = recorder.id();
        match result {
            Ok(mut report) => {
                recorder.finish_report(&report).await;
                report.run = id;
                Ok(report)
            }
            Err(e) => {
                recorder
                    .finish_error(&agentsadm_types::error::error_chain(&e))
                    .await;
                Err(e)
            }
        }
    }

    /// Import the plan's images, then carry it out through CNAPI and SAPI,
    /// every event also going to the run's recorder.
    async fn execute_recorded<P, O, E>(
        &self,
        confirmed: Confirmed<'_>,
        operator: &O,
        cancel: impl Future<Output = ()>,
        gate: &Gate<'_, O, P>,
        recorder: Option<&Recorder>,
    ) -> Result<ExecReport, RunError<E>>
    where
        O: Operator<P> + Sync,
        E: std::error::Error + 'static,
    {
        let plan = confirmed.plan();
        if !plan.imports().is_empty() {
            operator.note(&format!(
                "Importing {} image(s) into the datacenter IMGAPI...",
                plan.imports().len()
            ));
        }
        self.datacenter.import(plan.imports()).await?;
        let carriers = self.datacenter.carriers(
            plan,
            &CarrierSettings {
                catalog: self.catalog,
                transport: self.transport.clone(),
                probe_bound: self.settings.options.probe_bound,
            },
        )?;
        let tee;
        let reporter: &dyn Reporter = match recorder {
            Some(recorder) => {
                tee = RecordingTee {
                    inner: self.reporter,
                    recorder,
                };
                &tee
            }
            None => self.reporter,
        };
        // Slow servers are judged against their own earlier runs (the
        // history the plan was scheduled from), and before the run has a
        // median the others against the catalog's expected times (and
        // any history the caller added).
        let mut options = self.settings.options.clone();
        options.known.add_catalog(self.catalog);
        if let Some(durations) = self.durations {
            options.known.add_history(durations);
        }
        let executor = Executor::new(&*carriers.transport, &*carriers.store, reporter, &options)
            .with_records(&*carriers.records)
            .with_guard(gate.fence, &*carriers.probe);
        Ok(executor.execute_gated(confirmed, cancel, gate).await?)
    }
}

/// The end of an executed run in the run's log: its summary, outliers
/// and exit status (after the lock was released, so that a release that
/// failed is in it).
fn log_summary(plan: &Plan, report: &ExecReport) {
    tracing::info!(
        target: agentsadm_types::log::FILE_ONLY_TARGET,
        component = "summary",
        summary = serde_json::to_string(&report.summary(plan)).unwrap_or_default(),
        outliers = serde_json::to_string(&report.outliers).unwrap_or_default(),
        exit_status = report.exit_status(plan),
        "{}",
        report.render(plan).trim_end()
    );
}

/// The operator's answer to a question, in the run's log.
fn log_answer(question: &str, answer: &Result<bool, AskError>) {
    let said = match answer {
        Ok(true) => "yes".to_string(),
        Ok(false) => "no".to_string(),
        Err(e) => format!("no answer ({e})"),
    };
    tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
        component = "operator", question, answer = said.as_str(),
        "{question}? {said}");
}

/// The servers and components a plan leaves out, one record each, with
/// why (the plan holds them too; the log answers "what happened to cn7").
fn log_skips(plan: &Plan) {
    for s in plan.skips() {
        tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "planner",
            event = "skipped",
            server = s.server.map(|u| u.to_string()),
            server_name = s.hostname.as_deref(),
            agent = s.component.as_deref(),
            blocking = s.blocking,
            reason = s.reason.describe().as_str(),
            "skipped {}{}: {}{}",
            s.hostname.as_deref().unwrap_or("every server"),
            s.component.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(),
            s.reason.describe(),
            if s.blocking { " (blocking: exit status 2)" } else { "" }
        );
    }
}

/// The plan in the run's log, each time it is made.
fn log_plan(plan: &Plan) {
    tracing::info!(
        target: agentsadm_types::log::FILE_ONLY_TARGET,
        component = "planner",
        plan = serde_json::to_string(plan).unwrap_or_default(),
        "{}",
        plan.display_compact(50)
    );
}

/// The run's answers to the executor: the lock as the refresh found it,
/// the operator for the canary wave and interrupts.
struct Gate<'a, O, P> {
    fence: &'a LockFence<'a>,
    operator: &'a O,
    yes: bool,
    _planned: std::marker::PhantomData<fn(&P)>,
}

impl<O: Operator<P> + Sync, P> RunGate for Gate<'_, O, P> {
    fn lock_lost(&self) -> bool {
        self.fence.is_lost()
    }

    async fn canary_passed(&self, canaries: &[String], remaining: usize) -> bool {
        let go_on = self
            .operator
            .canary_passed(canaries, remaining, self.yes)
            .await;
        let answer: Result<bool, AskError> = Ok(go_on);
        // The question as the operator was asked it ("1 server", as the
        // terminal says it).
        let servers = if remaining == 1 { "server" } else { "servers" };
        log_answer(
            &format!(
                "canary passed on {}: continue with {remaining} {servers}{}",
                canaries.join(", "),
                if self.yes { " (-y)" } else { "" }
            ),
            &answer,
        );
        go_on
    }

    fn keep_waiting(&self, in_flight: &[InFlight]) -> Option<LocalBoxFuture<'_, ()>> {
        self.operator.keep_waiting(in_flight)
    }
}
