//! How a planned step reaches a server.
//!
//! [`Transport`] runs one [`Step`] on one server and returns when the server
//! has done it (or failed), and checks an installed component's health
//! ([`Transport::check_health`], the plan's `gz health` gate); it only
//! carries: when a gate runs, and what an unhealthy one leads to, is the
//! turn's ([`crate::executor::gate`]). Three real carriers exist, all through CNAPI,
//! and [`CnapiTransport`] implements them, choosing by the step's
//! [`TransportKind`] (the plan decided it):
//!
//! - **install-agent**: `POST /servers/:uuid/install-agent {image_uuid}`
//!   (cn-agent's `agent_install` task; every Triton has it) and
//!   `uninstall-agents` for removals. Waiting uses `GET /tasks/:id/wait`
//!   in chunks, never tight polling. It only knows apm packages, which is
//!   why the default ("auto") mode sends gz-tools, dockerlogger and sdcadm
//!   through execute.
//! - **execute**: CNAPI CommandExecute of `agentsadm gz install|remove ...
//!   --json` on the server ([`agentsadm_api::remote`]), parsing the printed
//!   [`GzResult`]. It gives the atomic install with rollback and handles
//!   every component kind. CNAPI documents execute as deprecated, but it is
//!   the only way to run an installer without Ur; a dedicated cn-agent task
//!   would slot in here as another carrier.
//! - **bootstrap** (agentsadm, where its copy is missing or too old): the
//!   script of [`agentsadm_api::bootstrap`] through execute ([`bootstrap`]).
//!
//! Every `agentsadm` command line is built by [`agentsadm_api::compat`]
//! (its words dated: the plan made sure the server's copy parses them).
//!
//! cn-agent cannot replace itself in-process: its task finishes (or is cut)
//! before the new cn-agent runs. For it (the catalog's `core-last`
//! component) success is confirmed through CNAPI `server.agents` showing
//! the new image, whatever the task said, as sdcadm does.
//!
//! What the real CNAPI and cn-agent require of both carriers
//! (docs/triton/apis.md §3.12):
//!
//! - Execute goes through Ur or cn-agent per server ([`execmode`]):
//!   `timeout` is sent only where the running CNAPI was seen using
//!   cn-agent, and every execute is bounded here (the step's timeout for
//!   `gz install|remove`, the short
//!   [`CnapiTransportConfig::health_check_bound`] for `gz health`): through
//!   Ur a server whose ur-agent is down never answers, so a longer execute
//!   there is preceded by a probe that gives up within minutes ([`probe`]).
//! - A task whose result CNAPI lost (a restart mid-task) is settled by the
//!   server itself ([`recover`]), and `server.agents` is put right.
//! - uninstall-agents is only asked of a server whose `server.agents`
//!   lists cn-agent >= 2.8.0: CNAPI answers 412 below that and crashes
//!   without the entry.
//! - One server is read through ServerList, never ServerGet (which waits
//!   for VMAPI).
//!
//! [`execmode`]: super::execmode
//! [`recover`]: super::recover
//! [`probe`]: self::probe

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsadm_api::remote::FailureStep;
use agentsadm_plan::HealthFlags;

use futures::future::BoxFuture;

use agentsadm_plan::Action;

use agentsadm_plan::Step;

mod bootstrap;
mod health;
mod probe;
mod step_reads;
mod together;
mod uninstall;
use crate::carriers::execmode::ExecuteModes;
use crate::carriers::guard::{Fence, Unfenced, fenced};
use crate::carriers::recover::RecoveryConfig;
use crate::carriers::recover::TaskGoal;
use crate::carriers::recover::TaskPeers;
use crate::carriers::recover::TaskWaiter;
use crate::carriers::recover::Waited;
pub use crate::vocabulary::outcomes::{StepFailure, TaskRef};
use crate::vocabulary::report::FailureStage;
use agentsadm_api::ApiError;
use agentsadm_api::ImgapiClient;
use agentsadm_api::SapiClient;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::cnapi::CnapiClient;
use agentsadm_api::cnapi::ExecuteAnswer;
use agentsadm_api::cnapi::ExecuteMode;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::cnapi::Server;
use agentsadm_api::compat;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_plan::TransportKind;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;
use step_reads::StepReads;

/// How often a `gz health` check whose request failed quickly is asked
/// again (within its bound), and the pause before the first retry (growing
/// linearly).
const HEALTH_CHECK_RETRIES: u32 = 3;
const HEALTH_CHECK_PAUSE: Duration = Duration::from_millis(500);

/// Over the health gate's own time (`--min-healthy` + `--health-timeout`),
/// what one `gz health` through CNAPI may take before it counts as not
/// answered.
const HEALTH_CHECK_MARGIN: Duration = Duration::from_secs(30);

/// What a successful step reports back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepDone {
    /// The instance UUID the server keeps for the component, when known
    /// (needed to adopt a fresh install into SAPI).
    pub instance: Option<InstanceUuid>,
}

/// `gz disable NAME --by --at [--reason]` (`Some`) or `gz enable NAME`
/// ([`agentsadm_api::compat::switch_args`]).
pub(crate) fn switch_args(component: &str, mark: Option<&agentsadm_plan::Mark>) -> Vec<String> {
    agentsadm_api::compat::switch_args(
        component,
        mark.map(|m| (m.by.as_str(), m.at.as_str(), m.reason.as_deref())),
    )
}

/// Runs one step on one server.
pub trait Transport: Send + Sync {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>>;

    /// [`Transport::run`] under the run's datacenter lock: the step is
    /// refused (`lock lost`, or the API that did not answer) unless the
    /// lock is confirmed first. A transport that can, confirms it at the
    /// last moment before the request that changes the server.
    fn run_fenced<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
        fence: &'a dyn Fence,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(async move {
            fenced(fence, server, step).await?;
            self.run(server, step).await
        })
    }

    /// Several steps of one server sent together (the plan's
    /// [`agentsadm_plan::ServerPlan::execute_groups`]: installs through
    /// execute that share one `gz install A B ...`), under the run's lock
    /// like [`Transport::run_fenced`]: each step's result, in the order
    /// given. A transport without such a request runs each on its own, at
    /// once (what the executor did before it sent groups).
    fn run_together<'a>(
        &'a self,
        server: ServerUuid,
        steps: &'a [&'a Step],
        fence: &'a dyn Fence,
    ) -> BoxFuture<'a, Vec<Result<StepDone, StepFailure>>> {
        Box::pin(futures::future::join_all(
            steps.iter().map(|st| self.run_fenced(server, st, fence)),
        ))
    }

    /// The health check after `step` installed (plan gate `gz health`):
    /// `Ok` with how long it took, or the failure (`unhealthy`, or the
    /// check could not run). Only the check: what an unhealthy one leads
    /// to is the turn's ([`crate::executor::gate`]). A transport without
    /// such checks passes every one at once.
    fn check_health<'a>(
        &'a self,
        _server: ServerUuid,
        _step: &'a Step,
    ) -> BoxFuture<'a, Result<Duration, StepFailure>> {
        Box::pin(async { Ok(Duration::ZERO) })
    }

    /// The CNAPI tasks this transport started on `server` so far, oldest
    /// first: what an operator looks up with `sdc-cnapi /tasks/<id>` when a
    /// run was interrupted or a step timed out. None for transports without
    /// tasks (CNAPI execute answers in the same request).
    fn tasks(&self, _server: ServerUuid) -> Vec<TaskRef> {
        Vec::new()
    }
}

/// The tasks a transport started, by server (shared by the clones of a
/// transport).
#[derive(Clone, Debug, Default)]
pub struct TaskLedger(Arc<Mutex<BTreeMap<ServerUuid, Vec<TaskRef>>>>);

impl TaskLedger {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<ServerUuid, Vec<TaskRef>>) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// `task` was started for `component` on `server`.
    pub fn started(&self, server: ServerUuid, component: &str, task: TaskId) {
        self.with(|m| {
            m.entry(server).or_default().push(TaskRef {
                component: component.to_string(),
                task,
                waiting: true,
            })
        });
    }

    /// Waiting for `task` ended (it finished, failed, or waiting failed).
    pub fn ended(&self, server: ServerUuid, task: TaskId) {
        self.with(|m| {
            for t in m.get_mut(&server).into_iter().flatten() {
                if t.task == task {
                    t.waiting = false;
                }
            }
        });
    }

    /// The tasks started on `server`, oldest first.
    pub fn of(&self, server: ServerUuid) -> Vec<TaskRef> {
        self.with(|m| m.get(&server).cloned().unwrap_or_default())
    }
}

/// Tuning of [`CnapiTransport`].
#[derive(Clone, Debug)]
pub struct CnapiTransportConfig {
    /// How long one `GET /tasks/:id/wait` may block server-side. The whole
    /// step is bounded by the executor's task timeout, not by this.
    pub wait_chunk: Duration,
    /// Timeout given to CNAPI execute (and so to `agentsadm gz`).
    pub execute_timeout: Duration,
    /// Environment for `agentsadm gz` on the server (API URLs when the
    /// server cannot read its SDC config, as in the simulator).
    pub execute_env: BTreeMap<String, String>,
    /// First and longest pause between `GET /servers/:uuid` while waiting
    /// for cn-agent to report its new image.
    pub confirm_poll: (Duration, Duration),
    /// How long to keep looking at `server.agents` after cn-agent's own
    /// task reported a failure (the self-update cuts that task, so a
    /// failure there is expected and not conclusive).
    pub confirm_grace_after_failure: Duration,
    /// How long to wait for the new cn-agent to report after its task
    /// completed (it restarts, then reports).
    pub confirm_timeout: Duration,
    /// `--min-healthy` and `--health-timeout` for `agentsadm gz` on the
    /// servers (`None`: the installer's defaults).
    pub health: Option<HealthFlags>,
    /// How long the `gz health` check after an install-agent task may take
    /// in all, retries included (`None`: the gate's own time plus a
    /// margin). Not the step's timeout: a server whose ur-agent is down
    /// never answers, and the install itself is done by then.
    pub health_check_bound: Option<Duration>,
    /// When a task is settled by asking the server.
    pub recovery: RecoveryConfig,
    /// How long the probe sent before an execute through Ur longer than
    /// this and the health check (or before the first one while CNAPI's
    /// mode is unsure) may take: the time after which a server whose
    /// ur-agent does not answer is given up on ([`probe`]).
    pub ur_probe_bound: Duration,
}

impl CnapiTransportConfig {
    /// The bound of one whole `gz health` check.
    pub fn health_bound(&self) -> Duration {
        self.health_check_bound.unwrap_or_else(|| {
            let gate = self
                .health
                .map(|h| h.min_healthy + h.timeout)
                .unwrap_or(gate_defaults::MIN_HEALTHY + gate_defaults::HEALTH_TIMEOUT);
            gate + HEALTH_CHECK_MARGIN
        })
    }
}

/// The installer's health-gate defaults on a real server (`agentsadm gz
/// health` without flags), as the installer documents them.
mod gate_defaults {
    use std::time::Duration;
    pub const MIN_HEALTHY: Duration = Duration::from_secs(10);
    pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(120);
}

impl Default for CnapiTransportConfig {
    fn default() -> Self {
        CnapiTransportConfig {
            wait_chunk: Duration::from_secs(60),
            execute_timeout: Duration::from_secs(30 * 60),
            execute_env: BTreeMap::new(),
            confirm_poll: (Duration::from_millis(200), Duration::from_secs(5)),
            confirm_grace_after_failure: Duration::from_secs(30),
            confirm_timeout: Duration::from_secs(10 * 60),
            health: None,
            health_check_bound: None,
            recovery: RecoveryConfig::default(),
            ur_probe_bound: Duration::from_secs(2 * 60),
        }
    }
}

/// The real transport: CNAPI install-agent / uninstall-agents tasks and
/// CNAPI execute of `agentsadm gz`.
#[derive(Clone, Debug)]
pub struct CnapiTransport {
    cnapi: CnapiClient,
    catalog: Catalog,
    config: CnapiTransportConfig,
    tasks: TaskLedger,
    modes: ExecuteModes,
    peers: TaskPeers,
    /// The server records steps read, for their own health checks.
    reads: StepReads,
    /// Where the bootstrap reads an agentsadm image's manifest.
    imgapi: Option<ImgapiClient>,
}

impl CnapiTransport {
    /// A transport that treats every server as executing through Ur (no
    /// `timeout` ever sent); [`CnapiTransport::with_sapi`] reads CNAPI's
    /// flag instead.
    pub fn new(
        cnapi: CnapiClient,
        catalog: Catalog,
        config: CnapiTransportConfig,
    ) -> CnapiTransport {
        CnapiTransport {
            cnapi,
            catalog,
            config,
            tasks: TaskLedger::default(),
            modes: ExecuteModes::default(),
            peers: TaskPeers::default(),
            reads: StepReads::default(),
            imgapi: None,
        }
    }

    /// Read agentsadm images' manifests here for the bootstrap (the
    /// datacenter IMGAPI servers download from).
    pub fn with_imgapi(mut self, imgapi: ImgapiClient) -> CnapiTransport {
        self.imgapi = Some(imgapi);
        self
    }

    /// The health gate's flags for `agentsadm gz`, if set.
    fn health_args(&self) -> Vec<String> {
        self.config.health.map(|h| h.gz_args()).unwrap_or_default()
    }

    /// Read CNAPI's `FEATURE_USE_CNAGENT_COMMAND_EXECUTE` from this SAPI
    /// (once, when first needed) to tell each server's execute mode.
    pub fn with_sapi(mut self, sapi: SapiClient) -> CnapiTransport {
        self.modes = ExecuteModes::from_sapi(sapi);
        self
    }

    /// Use this execute-mode source (tests).
    pub fn with_modes(mut self, modes: ExecuteModes) -> CnapiTransport {
        self.modes = modes;
        self
    }

    fn package_name(&self, component: &ComponentName) -> ComponentName {
        self.catalog
            .get(component)
            .map_or(component, |c| c.package_name())
            .clone()
    }

    /// `gz disable` after installing a component disabled there, before
    /// its gate (cn-agent's task does not know the server's record). Not
    /// fenced: a lost lock must not leave it enabled.
    async fn keep_off_after(&self, server: ServerUuid, step: &Step) -> Result<(), StepFailure> {
        let Some(mark) = &step.keep_off else {
            return Ok(());
        };
        let args = switch_args(&step.component, Some(mark));
        self.execute(server, step, &args, self.config.execute_timeout, None)
            .await
            .map(drop)
    }

    async fn run_step(
        &self,
        server: ServerUuid,
        step: &Step,
        fence: &dyn Fence,
    ) -> Result<StepDone, StepFailure> {
        let self_replacing = step.order == OrderClass::CoreLast;
        self.reads.starting(server, step);
        match (step.transport, &step.action) {
            (_, Action::Disable { .. } | Action::Enable) => {
                let mark = match &step.action {
                    Action::Disable { mark } => Some(mark),
                    _ => None,
                };
                let args = switch_args(&step.component, mark);
                let bound = self.config.execute_timeout;
                self.execute(server, step, &args, bound, Some(fence)).await
            }
            (TransportKind::InstallAgent, Action::Install { to } | Action::Upgrade { to, .. }) => {
                // cn-agent's task has no --expect-current: the server's
                // image is checked here, then the lock, then the task.
                if self.expect_current(server, step).await? == Current::Target {
                    // An earlier run's task (left running at an interrupt)
                    // finished on the target: done (its gate follows, as
                    // after any install).
                    let done = self.done(server, step).await?;
                    self.keep_off_after(server, step).await?;
                    return Ok(done);
                }
                fenced(fence, server, step).await?;
                let id = self
                    .cnapi
                    .install_agent(server, to.uuid)
                    .await
                    .map_err(|e| StepFailure::api(FailureStage::InstallAgent, &e))?;
                let goal = TaskGoal::Install {
                    package: self.package_name(&step.component),
                    image: to.uuid,
                    version: to.version.to_string(),
                };
                let task = self.wait(server, &step.component, id, &goal).await;
                if self_replacing {
                    let failed = task.err();
                    let done = self.confirm_image(server, step, to.uuid, failed).await?;
                    self.keep_off_after(server, step).await?;
                    return Ok(done);
                }
                task?;
                let done = self.done(server, step).await?;
                self.keep_off_after(server, step).await?;
                Ok(done)
            }
            (TransportKind::InstallAgent, Action::Remove { .. }) => {
                let package = self.package_name(&step.component);
                self.uninstall(server, &step.component, &package, Some((fence, step)))
                    .await?;
                Ok(StepDone::default())
            }
            (TransportKind::Bootstrap, Action::Install { to } | Action::Upgrade { to, .. }) => {
                self.bootstrap(server, step, to, fence).await
            }
            (TransportKind::Bootstrap, Action::Remove { .. }) => Err(StepFailure::new(
                FailureStage::Bootstrap,
                "the bootstrap only installs agentsadm; a removal goes through execute",
            )),
            (TransportKind::Execute, action) => {
                // `--inside-cn-agent` on every execute: compat::install_args.
                let health = self.health_args();
                let args: Vec<String> = match action {
                    Action::Install { to } | Action::Upgrade { to, .. } => {
                        // The server refuses if it changed since the plan.
                        compat::install_args(to.uuid, step.expect_current(), &health)
                    }
                    Action::Disable { .. } | Action::Enable => {
                        // Routed to the switch arm above; never here.
                        return Err(StepFailure::new(
                            FailureStage::Execute,
                            "a disable or enable step goes through gz disable|enable",
                        ));
                    }
                    Action::Remove { .. } => compat::remove_args(&step.component),
                };
                let done = self
                    .execute(
                        server,
                        step,
                        &args,
                        self.config.execute_timeout,
                        Some(fence),
                    )
                    .await?;
                match action {
                    Action::Install { to } | Action::Upgrade { to, .. } if self_replacing => {
                        // The installer handed the swap to a transient SMF
                        // service; the new cn-agent reports when it runs.
                        let mut confirmed = self.confirm_image(server, step, to.uuid, None).await?;
                        confirmed.instance = confirmed.instance.or(done.instance);
                        Ok(confirmed)
                    }
                    _ => {
                        self.keep_off_after(server, step).await?;
                        Ok(done)
                    }
                }
            }
        }
    }

    /// The install-agent equivalent of `gz install --expect-current`: the
    /// image CNAPI's `server.agents` lists for the component must be the
    /// one the plan saw (nothing, for an install), or the step's target
    /// already (as `gz install` finds it unchanged: a task an interrupted
    /// run left running finished there); otherwise someone changed the
    /// server since the plan and the task is not started.
    async fn expect_current(
        &self,
        server: ServerUuid,
        step: &Step,
    ) -> Result<Current, StepFailure> {
        let Some(expected) = step.expect_current() else {
            return Ok(Current::AsPlanned);
        };
        let entry = self
            .reported_entry(server, step, FailureStage::InstallAgent)
            .await?;
        let now = entry.as_ref().map(|a| a.image_uuid);
        let same = match (expected, now) {
            (None, None) => true,
            (Some(image), Some(Some(current))) => image == current,
            _ => false,
        };
        if same {
            return Ok(Current::AsPlanned);
        }
        if let (Some(target), Some(Some(current))) = (step.action.target(), now)
            && target.uuid == current
        {
            return Ok(Current::Target);
        }
        let shown =
            |i: Option<ImageUuid>| i.map_or_else(|| "nothing".to_string(), |i| i.to_string());
        Err(StepFailure::new(
            FailureStage::Changed,
            format!(
                "CNAPI's server.agents lists {} for {}, not {} as the plan saw: the server changed since the plan (another run?); not started: plan again",
                match now {
                    None => "nothing".to_string(),
                    Some(i) => format!("image {}", shown(i)),
                },
                step.component,
                shown(expected)
            ),
        ))
    }

    /// Wait for a task, keeping it in the ledger while it is waited for.
    /// When CNAPI could not say how it ended and the server did, the
    /// server's `server.agents` is put right too.
    async fn wait(
        &self,
        server: ServerUuid,
        component: &str,
        id: TaskId,
        goal: &TaskGoal,
    ) -> Result<(), StepFailure> {
        match self.wait_for(server, component, id, goal).await? {
            Waited::Unsettled { failure } => Err(failure),
            Waited::Complete | Waited::FromServer { .. } => Ok(()),
        }
    }

    /// [`CnapiTransport::wait`], saying how the wait ended.
    async fn wait_for(
        &self,
        server: ServerUuid,
        component: &str,
        id: TaskId,
        goal: &TaskGoal,
    ) -> Result<Waited, StepFailure> {
        self.tasks.started(server, component, id);
        let waiter = TaskWaiter {
            cnapi: &self.cnapi,
            config: &self.config.recovery,
            peers: &self.peers,
            chunk: self.config.wait_chunk,
        };
        let r = waiter.wait(server, id, goal).await;
        self.tasks.ended(server, id);
        if let Ok(Waited::FromServer { why }) = &r {
            tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET, %server, %component, task = %id, "{why}");
            self.refresh_agents(server, goal).await;
        }
        r
    }

    /// Put `server.agents` right after a task CNAPI lost: from the server's
    /// own report where execute reaches it, else the entry the task
    /// changed. A failure here leaves the install done and is logged.
    async fn refresh_agents(&self, server: ServerUuid, goal: &TaskGoal) {
        let live = self.live_agents(server).await;
        match crate::carriers::recover::refresh_agents(&self.cnapi, server, goal, live).await {
            Ok(true) => tracing::info!(%server, "server.agents refreshed after a task CNAPI lost"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%server, error = %error_chain(&e), "cannot refresh server.agents after a task CNAPI lost; 'agentsadm check --fix' posts it later")
            }
        }
    }

    /// The server's own `agentsadm gz report`, when CNAPI execute reaches
    /// it and it answers within the health-check bound.
    async fn live_agents(&self, server: ServerUuid) -> Option<Vec<AgentEntry>> {
        let record = self.cnapi.list_server(server).await.ok()??;
        if record.is_mockcloud() {
            return None;
        }
        let bound = self.config.health_bound();
        let mode = self.mode_for(server, Some(&record), bound).await.ok()?;
        let request = gz_execute_request(&compat::report_args(), self.config.execute_env.clone());
        let answer = self
            .send_execute(server, Some(&record), &request, mode, bound)
            .await
            .ok()?;
        if answer.exit_status != 0 {
            return None;
        }
        let report: AgentsReport = parse_last_document(&answer.stdout)?;
        (report.server_uuid == server).then_some(report.agents)
    }

    /// After a successful install: the instance UUID the server reports.
    async fn done(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        if !matches!(step.action, Action::Install { .. }) {
            return Ok(StepDone::default());
        }
        let instance = self
            .reported_entry(server, step, FailureStage::ReadServerAgents)
            .await?
            .and_then(|a| a.uuid);
        Ok(StepDone { instance })
    }

    /// The step's component as CNAPI's `server.agents` lists it now (by
    /// package or component name); a failed read fails the step at `stage`.
    async fn reported_entry(
        &self,
        server: ServerUuid,
        step: &Step,
        stage: FailureStage,
    ) -> Result<Option<AgentEntry>, StepFailure> {
        let record = self
            .cnapi
            .list_server(server)
            .await
            .map_err(|e| StepFailure::api(stage, &e))?;
        self.reads.read(server, step, &record);
        let package = self.package_name(&step.component);
        Ok(record
            .map(|r| r.reported_agents().0)
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.name == package || a.name == step.component))
    }

    /// Poll `server.agents` (ServerList) until the component reports
    /// `image`. When it does not in time, the server's own report (where
    /// execute reaches it) settles it: the new cn-agent's report may have
    /// reached a CNAPI that was down.
    async fn confirm_image(
        &self,
        server: ServerUuid,
        step: &Step,
        image: ImageUuid,
        task_failure: Option<StepFailure>,
    ) -> Result<StepDone, StepFailure> {
        let package = self.package_name(&step.component);
        let started = tokio::time::Instant::now();
        let (mut pause, max_pause) = self.config.confirm_poll;
        let find = |agents: Vec<AgentEntry>| {
            agents
                .into_iter()
                .find(|a| a.name == package || a.name == step.component)
        };
        loop {
            let reported = self
                .reported_entry(server, step, FailureStage::ConfirmServerAgents)
                .await?;
            if let Some(a) = &reported
                && a.image_uuid == Some(image)
            {
                return Ok(StepDone { instance: a.uuid });
            }
            let out_of_time = match &task_failure {
                None => started.elapsed() >= self.config.confirm_timeout,
                Some(_) => started.elapsed() >= self.config.confirm_grace_after_failure,
            };
            if out_of_time {
                if let Some(live) = self.live_agents(server).await
                    && let Some(a) = find(live.clone())
                    && a.image_uuid == Some(image)
                {
                    tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET, %server, component = %step.component, "server.agents missed the new image; the server's own report shows it");
                    if let Err(e) = self.cnapi.update_server_agents(server, &live).await {
                        tracing::warn!(%server, error = %error_chain(&e), "cannot post the server's report to server.agents");
                    }
                    return Ok(StepDone { instance: a.uuid });
                }
                let now = reported
                    .and_then(|a| a.image_uuid)
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "nothing".to_string());
                return Err(match task_failure {
                    None => StepFailure::new(
                        FailureStage::ConfirmServerAgents,
                        format!(
                            "the install finished but after {:?} server.agents still reports {now}, not {image}: the new {} did not report (check its SMF service on the server)",
                            self.config.confirm_timeout, step.component
                        ),
                    ),
                    Some(f) => StepFailure::new(
                        f.stage.clone(),
                        format!(
                            "{} (and server.agents still does not show image {image} after {:?})",
                            f.message, self.config.confirm_grace_after_failure
                        ),
                    ),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(max_pause);
        }
    }

    /// `agentsadm <args>` on the server through CNAPI execute, in the
    /// server's execute mode, within `bound`; a command that changes the
    /// server goes only under a `fence` confirmed at the last moment.
    async fn execute(
        &self,
        server: ServerUuid,
        step: &Step,
        args: &[String],
        bound: Duration,
        fence: Option<&dyn Fence>,
    ) -> Result<StepDone, StepFailure> {
        let request = gz_execute_request(args, self.config.execute_env.clone());
        let mut result = self
            .execute_request(server, step, request.clone(), bound, fence)
            .await?;
        // The copy CNAPI lists is not there (removed by hand, a damaged
        // disk): put it back through the bootstrap, then run the line
        // again, rather than failing with 127 on every run.
        if let Some(fence) = fence
            && bootstrap::missing_binary(&result)
        {
            self.bootstrap_listed(server, step, fence).await?;
            result = self
                .execute_request(server, step, request, bound, Some(fence))
                .await?;
        }
        self.gz_outcome(step, &result)
    }

    /// [`Self::execute`] without putting a missing copy back (the
    /// bootstrap's own record step).
    async fn execute_once(
        &self,
        server: ServerUuid,
        step: &Step,
        args: &[String],
        fence: &dyn Fence,
    ) -> Result<StepDone, StepFailure> {
        let request = gz_execute_request(args, self.config.execute_env.clone());
        let bound = self.config.execute_timeout;
        let result = self
            .execute_request(server, step, request, bound, Some(fence))
            .await?;
        self.gz_outcome(step, &result)
    }

    /// Run `request` on the server through CNAPI execute, in the server's
    /// execute mode, within `bound`; with a `fence`, only while the run
    /// still holds the lock.
    async fn execute_request(
        &self,
        server: ServerUuid,
        step: &Step,
        request: ExecuteRequest,
        bound: Duration,
        fence: Option<&dyn Fence>,
    ) -> Result<ExecuteAnswer, StepFailure> {
        let record = self
            .cnapi
            .list_server(server)
            .await
            .map_err(|e| StepFailure::api(FailureStage::Execute, &e))?;
        self.execute_on(server, step, record, request, bound, fence)
            .await
    }

    /// [`Self::execute_request`] to a server whose CNAPI `record` (with its
    /// agents: the execute mode) was read just before.
    async fn execute_on(
        &self,
        server: ServerUuid,
        step: &Step,
        record: Option<Server>,
        request: ExecuteRequest,
        bound: Duration,
        fence: Option<&dyn Fence>,
    ) -> Result<ExecuteAnswer, StepFailure> {
        let mode = self.mode_for(server, record.as_ref(), bound).await?;
        if let Some(fence) = fence {
            fenced(fence, server, step).await?;
        }
        self.send_execute(server, record.as_ref(), &request, mode, bound)
            .await
            .map_err(|e| {
                if matches!(e, ApiError::Timeout { .. }) {
                    let hint = match mode {
                        ExecuteMode::Ur => {
                            "through Ur, a server whose ur-agent is down or restarting never answers: check 'svcs ur' on the server"
                        }
                        ExecuteMode::CnAgent => "check cn-agent on the server",
                    };
                    StepFailure::new(
                        FailureStage::Execute,
                        format!(
                            "{NO_ANSWER} within {} ({hint})",
                            crate::vocabulary::report::fmt_duration(bound)
                        ),
                    )
                } else {
                    StepFailure::api(FailureStage::Execute, &e)
                }
            })
    }

    /// What `agentsadm gz ... --json` printed and its exit status come to.
    fn gz_outcome(&self, step: &Step, result: &ExecuteAnswer) -> Result<StepDone, StepFailure> {
        match parse_gz_result(&result.stdout) {
            Some(gz) => {
                if let Some(err) = gz.error {
                    return Err(StepFailure::new(stage_of(err.step), err.message));
                }
                if result.exit_status != 0 {
                    return Err(StepFailure::new(
                        FailureStage::Gz,
                        format!("{} ({})", result.describe_exit(), tail(&result.stderr)),
                    ));
                }
                let package = self.package_name(&step.component);
                let instance = gz
                    .components
                    .iter()
                    .find(|c| c.name == step.component || c.name == package)
                    .and_then(|c| c.instance_uuid);
                Ok(StepDone { instance })
            }
            None => Err(StepFailure::new(
                FailureStage::Execute,
                format!(
                    "agentsadm gz {} without a result document (is agentsadm installed at {}?): {}",
                    result.describe_exit(),
                    agentsadm_api::remote::GZ_BINARY,
                    tail(if result.stderr.trim().is_empty() {
                        &result.stdout
                    } else {
                        &result.stderr
                    })
                ),
            )),
        }
    }
}

/// The stage of a step the installer failed at `step`.
fn stage_of(step: FailureStep) -> FailureStage {
    match step {
        FailureStep::Unhealthy => FailureStage::Unhealthy,
        FailureStep::ExpectCurrent => FailureStage::Changed,
        step => FailureStage::GzStep { step },
    }
}

/// What a server runs of a step's component before its install task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Current {
    /// What the plan saw.
    AsPlanned,
    /// The step's target already.
    Target,
}

/// How an execute that got no answer in time is described (and told apart
/// from one that failed quickly).
const NO_ANSWER: &str = "no answer from CNAPI execute";

/// The last JSON document a command printed: all of stdout, or the part
/// from the last line that opens a JSON object.
fn parse_last_document<T: serde::de::DeserializeOwned>(stdout: &str) -> Option<T> {
    let text = stdout.trim();
    if let Ok(r) = serde_json::from_str(text) {
        return Some(r);
    }
    text.rmatch_indices("\n{")
        .map(|(i, _)| i + 1)
        .find_map(|i| serde_json::from_str(&text[i..]).ok())
}

/// The [`GzResult`] `agentsadm gz ... --json` printed: the whole of stdout,
/// or, if something was printed before it, the document starting at the
/// last line that opens a JSON object.
fn parse_gz_result(stdout: &str) -> Option<GzResult> {
    parse_last_document(stdout)
}

/// The last few lines of command output, for error messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    let start = lines.len().saturating_sub(3);
    let joined = lines[start..].join(" | ");
    if joined.is_empty() {
        "no output".to_string()
    } else {
        joined
    }
}

impl Transport for CnapiTransport {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(self.run_step(server, step, &Unfenced))
    }

    fn run_fenced<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
        fence: &'a dyn Fence,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(self.run_step(server, step, fence))
    }

    fn run_together<'a>(
        &'a self,
        server: ServerUuid,
        steps: &'a [&'a Step],
        fence: &'a dyn Fence,
    ) -> BoxFuture<'a, Vec<Result<StepDone, StepFailure>>> {
        Box::pin(self.install_together(server, steps, fence))
    }

    fn check_health<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<Duration, StepFailure>> {
        Box::pin(self.gz_health(server, step))
    }

    fn tasks(&self, server: ServerUuid) -> Vec<TaskRef> {
        self.tasks.of(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_result_document_after_other_output() {
        let doc = r#"{
  "server_uuid": "44454c4c-4800-1034-804a-b2c04f354d31",
  "components": []
}"#;
        assert!(parse_gz_result(doc).is_some());
        assert!(parse_gz_result(&format!("note: something\n{doc}\n")).is_some());
        assert!(parse_gz_result("no json here").is_none());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\nd\n"), "b | c | d");
        assert_eq!(tail("  "), "no output");
    }
}
