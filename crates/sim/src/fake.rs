//! A fake datacenter for executor tests and benchmarks: one in-memory
//! [`ExampleDc`] that is at once the [`Transport`] (servers), the
//! [`IntentStore`] (SAPI) and the [`LockStore`] (SAPI application
//! metadata), with injectable faults.
//!
//! - Every step sleeps the configured install latency (a tokio sleep: no
//!   CPU, and deterministic under `tokio::time::pause()`), times a per-server
//!   factor for slow servers.
//! - Faults: failing steps (per server, optionally per component), hung
//!   steps (never return), failing SAPI writes (per server), unhealthy
//!   builds (the step fails its health gate and the server keeps its
//!   previous image).
//! - A successful step changes the server's CNAPI record the way the real
//!   installer's report would, so re-gathering intent and reality after a
//!   run and re-planning shows what converged.
//!
//! It is also a whole [`Datacenter`] for the orchestrator's one run
//! (`Run::on`): tests and benchmarks drive a run on it as the binary
//! drives one on the APIs, lock and questions included.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;

use super::testkit::ExampleDc;
use super::testkit::instance_uuid;
use agentsadm_orchestrate::datacenter::{
    CarrierSettings, Carriers, Datacenter, DatacenterError, Part,
};
use agentsadm_orchestrate::guard::NoProbe;
use agentsadm_orchestrate::lock::LockBoard;
use agentsadm_orchestrate::lock::LockError;
use agentsadm_orchestrate::lock::LockRecord;
use agentsadm_orchestrate::lock::LockStore;
use agentsadm_orchestrate::lock::board::GENERATION_KEY;
use agentsadm_orchestrate::records::NoRecords;
use agentsadm_orchestrate::report::FailureStage;
use agentsadm_orchestrate::store::IntentStore;
use agentsadm_orchestrate::store::IntentWriteError;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_orchestrate::transport::StepDone;
use agentsadm_orchestrate::transport::StepFailure;
use agentsadm_orchestrate::transport::TaskLedger;
use agentsadm_orchestrate::transport::TaskRef;
use agentsadm_orchestrate::transport::Transport;
use agentsadm_plan::Action;
use agentsadm_plan::Gate;
use agentsadm_plan::IntentChange;
use agentsadm_plan::ServiceChange;
use agentsadm_plan::Step;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_plan::{
    Plan, PlanOptions, PlanningInput, Request, ResolvedImages, RolloutPolicy, TransportMode,
};
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

/// Faults and timing of a [`FakeDc`].
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Time every step takes.
    pub latency: Duration,
    /// Multiplies `latency` for these servers.
    pub slow: BTreeMap<ServerUuid, f64>,
    /// Steps on these servers fail with this message (all components, or
    /// only the named one).
    pub fail: BTreeMap<ServerUuid, (Option<String>, String)>,
    /// Steps on these servers never finish.
    pub hang: BTreeSet<ServerUuid>,
    /// SAPI writes for these servers fail.
    pub sapi_fail: BTreeSet<ServerUuid>,
    /// Added to every lock store call (to widen races in tests).
    pub lock_latency: Duration,
    /// The new build of this component goes to maintenance on these
    /// servers: the step fails its health gate (`unhealthy`). Gated in the
    /// installer, the server keeps the image it had (rolled back there);
    /// gated by `gz health` after the install, the new image stays until
    /// the executor sends the revert.
    pub unhealthy: BTreeMap<ServerUuid, String>,
    /// How long each `gz health` gate takes (a tokio sleep, like
    /// `latency`).
    pub gate: Duration,
    /// How long the installer's own gate takes inside a step through
    /// execute (plan gate `installer`), on top of `latency`; one run of
    /// several components gates them at once (default: none).
    pub installer_gate: Duration,
    /// Steps through execute on one server wait for each other, as each
    /// real `gz install` run holds the server's lock for its whole length
    /// (default off: the fake's older tests run them at once).
    pub one_run_per_server: bool,
}

impl Faults {
    /// Whether `step` installs a build that goes to maintenance on
    /// `server`.
    fn unhealthy_build(&self, server: ServerUuid, step: &Step) -> bool {
        self.unhealthy
            .get(&server)
            .is_some_and(|c| step.component == *c)
            && step.action.target().is_some()
    }
}

/// The fake datacenter.
#[derive(Debug)]
pub struct FakeDc {
    dc: Mutex<ExampleDc>,
    faults: Mutex<Faults>,
    /// The lock keys, as the `sdc` application's metadata holds them.
    lock: Mutex<serde_json::Map<String, serde_json::Value>>,
    steps_run: Mutex<Vec<(ServerUuid, String)>>,
    /// Each request through execute: its server and the components it
    /// carried (several for a `gz install A B`).
    executes: Mutex<Vec<(ServerUuid, Vec<String>)>>,
    /// Each server's installer lock ([`Faults::one_run_per_server`]).
    server_locks: Mutex<BTreeMap<ServerUuid, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    /// Every step is one task, numbered from 1 in start order.
    tasks: TaskLedger,
    next_task: std::sync::atomic::AtomicU64,
}

impl FakeDc {
    pub fn new(dc: ExampleDc) -> FakeDc {
        FakeDc {
            dc: Mutex::new(dc),
            faults: Mutex::new(Faults::default()),
            lock: Mutex::new(serde_json::Map::new()),
            steps_run: Mutex::new(Vec::new()),
            executes: Mutex::new(Vec::new()),
            server_locks: Mutex::new(BTreeMap::new()),
            tasks: TaskLedger::default(),
            next_task: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The current state. A plain mutex guard: drop it before the next
    /// call into the fake (a guard kept alive in the same statement deadlocks).
    pub fn dc(&self) -> MutexGuard<'_, ExampleDc> {
        self.dc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Change the faults.
    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gather intent and reality again, as a new run would.
    pub fn snapshot(&self) -> (Intent, Reality) {
        let dc = self.dc();
        (dc.intent(), dc.reality())
    }

    /// The plan for `request` on what the fake datacenter holds now, with
    /// `rollout` (concurrency, canary, budget) decided in it.
    pub fn plan(&self, request: &Request, images: &ResolvedImages, rollout: RolloutPolicy) -> Plan {
        self.plan_with(request, images, rollout, None)
            .expect("the fake datacenter's request plans")
    }

    /// [`FakeDc::plan`] with what servers took in earlier runs (`None`:
    /// nothing known), and the planner's error instead of a panic.
    pub fn plan_with(
        &self,
        request: &Request,
        images: &ResolvedImages,
        rollout: RolloutPolicy,
        durations: Option<&agentsadm_plan::timing::Durations>,
    ) -> Result<Plan, agentsadm_plan::PlanError> {
        let (intent, reality) = self.snapshot();
        let catalog = self.dc().catalog.clone();
        agentsadm_plan::plan(&PlanningInput {
            catalog: &catalog,
            intent: &intent,
            reality: &reality,
            request,
            options: PlanOptions {
                transport: TransportMode::Auto,
                ignore_holds: false,
                rollout,
            },
            images,
            durations,
        })
    }

    /// Every (server, component) a step completed for, in completion order.
    pub fn steps_run(&self) -> Vec<(ServerUuid, String)> {
        self.steps_run.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Every request that went through execute, in start order: its
    /// server and the components it carried.
    pub fn executes(&self) -> Vec<(ServerUuid, Vec<String>)> {
        self.executes.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Wait for `server`'s installer lock when `steps` go through execute
    /// and the fake models it; count the request.
    async fn execute_begins(
        &self,
        server: ServerUuid,
        steps: &[&Step],
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        if steps
            .iter()
            .any(|st| st.transport != agentsadm_plan::TransportKind::Execute)
        {
            return None;
        }
        let lock = self.faults().one_run_per_server.then(|| {
            let mut locks = self.server_locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(server).or_default().clone()
        });
        let guard = match lock {
            Some(l) => Some(l.lock_owned().await),
            None => None,
        };
        if let Ok(mut v) = self.executes.lock() {
            v.push((
                server,
                steps.iter().map(|st| st.component.to_string()).collect(),
            ));
        }
        guard
    }

    /// Several steps in one run of the installer: one lock, one latency,
    /// one installer gate for all (they gate at once); then each member
    /// ends on its own (a failure or an unhealthy build is that member's).
    async fn run_together_steps(
        &self,
        server: ServerUuid,
        steps: &[&Step],
        fence: &dyn agentsadm_orchestrate::guard::Fence,
    ) -> Vec<Result<StepDone, StepFailure>> {
        if let Some(first) = steps.first()
            && let Err(f) = agentsadm_orchestrate::guard::fenced(fence, server, first).await
        {
            return steps.iter().map(|_| Err(f.clone())).collect();
        }
        let ids: Vec<TaskId> = steps
            .iter()
            .map(|st| {
                let id = FakeDc::task_id(
                    self.next_task
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                );
                self.tasks.started(server, &st.component, id);
                id
            })
            .collect();
        let _lock = self.execute_begins(server, steps).await;
        let (delay, hang) = steps
            .iter()
            .map(|st| self.timing(server, st))
            .fold((Duration::ZERO, false), |(d, h), (d2, h2)| {
                (d.max(d2), h || h2)
            });
        if hang {
            std::future::pending::<()>().await;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let out = steps.iter().map(|st| self.settle(server, st)).collect();
        for id in ids {
            self.tasks.ended(server, id);
        }
        out
    }

    /// How long `step` takes on `server`, and whether it hangs.
    fn timing(&self, server: ServerUuid, step: &Step) -> (Duration, bool) {
        let f = self.faults();
        let factor = f.slow.get(&server).copied().unwrap_or(1.0);
        let gate = if step.gate == Gate::Installer {
            f.installer_gate
        } else {
            Duration::ZERO
        };
        (f.latency.mul_f64(factor) + gate, f.hang.contains(&server))
    }

    /// The holder's lock record as stored.
    pub fn lock_record(&self) -> Option<LockRecord> {
        LockBoard::from_metadata(&self.lock_metadata())
            .holder()
            .cloned()
    }

    /// Every lock key as stored.
    pub fn lock_metadata(&self) -> serde_json::Map<String, serde_json::Value> {
        self.lock.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Change the lock keys directly (an operator's cleanup, a garbage
    /// record).
    pub fn edit_lock_metadata(
        &self,
        f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
    ) {
        if let Ok(mut l) = self.lock.lock() {
            f(&mut l);
        }
    }

    /// The task id the `n`th step started gets (from 1).
    pub fn task_id(n: u64) -> TaskId {
        TaskId::from_u128(0x7a5c_0000_0000_0000_0000_0000_0000_0000 | u128::from(n))
    }

    async fn run_step(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        let id = FakeDc::task_id(
            self.next_task
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        );
        self.tasks.started(server, &step.component, id);
        let r = self.run_task(server, step).await;
        self.tasks.ended(server, id);
        r
    }

    async fn run_task(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        let _lock = self.execute_begins(server, &[step]).await;
        let (delay, hang) = self.timing(server, step);
        if hang {
            std::future::pending::<()>().await;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.settle(server, step)
    }

    /// How `step` ends on `server` once its time is over: the faults, else
    /// the server's record changed as the installer's report would.
    fn settle(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        let (fail, unhealthy) = {
            let f = self.faults();
            let fail = f
                .fail
                .get(&server)
                .filter(|(c, _)| c.as_deref().is_none_or(|c| c == step.component))
                .map(|(_, m)| m.clone());
            // Only the installer's own gate is inside the step.
            let unhealthy = f.unhealthy_build(server, step) && step.gate == Gate::Installer;
            (fail, unhealthy)
        };
        if let Some(message) = fail {
            return Err(StepFailure::new(agent_install_failure(), message));
        }
        if unhealthy {
            return Err(StepFailure::new(
                FailureStage::Unhealthy,
                format!(
                    "svc:/smartdc/agent/{c}:default is maintenance (Start method exited with $SMF_EXIT_ERR_FATAL.); rolled back",
                    c = step.component
                ),
            ));
        }
        let instance = {
            let mut dc = self.dc();
            match &step.action {
                Action::Install { to } | Action::Upgrade { to, .. } => {
                    let instance = dc
                        .installed(server, &step.component)
                        .and_then(|a| a.uuid)
                        .unwrap_or_else(|| instance_uuid(server, &step.component));
                    if !dc.images.contains_key(&to.uuid) {
                        return Err(StepFailure::new(
                            agent_install_failure(),
                            format!("AgentInstall error: Image not found: {}", to.uuid),
                        ));
                    }
                    dc.set_installed(server, &step.component, to.uuid, Some(instance));
                    Some(instance)
                }
                Action::Remove { .. } => {
                    dc.remove_installed(server, &step.component);
                    None
                }
                // The fake keeps no SMF state.
                Action::Disable { .. } | Action::Enable => None,
            }
        };
        if let Ok(mut v) = self.steps_run.lock() {
            v.push((server, step.component.to_string()));
        }
        Ok(StepDone { instance })
    }

    fn apply_change(
        &self,
        server: ServerUuid,
        change: &IntentChange,
        reported: Option<InstanceUuid>,
    ) -> Result<(), IntentWriteError> {
        if self.faults().sapi_fail.contains(&server) {
            return Err(sapi_write_refused("update instance"));
        }
        let mut dc = self.dc();
        match change {
            IntentChange::UpdateInstance {
                service,
                instance,
                image,
                marks,
                ..
            } => {
                let params = agentsadm_orchestrate::store::restored_params(server, *image, marks);
                if !dc.sapi_merge_params(*instance, params.clone()) {
                    dc.sapi_put_instance(*instance, *service, Some(params));
                }
            }
            IntentChange::Restore {
                service,
                instance,
                image,
                marks,
                ..
            } => {
                let params = agentsadm_orchestrate::store::restored_params(server, *image, marks);
                if !dc.sapi_merge_params(*instance, params.clone()) {
                    dc.sapi_put_instance(*instance, *service, Some(params));
                }
            }
            IntentChange::CreateInstance {
                service,
                instance,
                image,
                ..
            } => dc.sapi_put_instance(*instance, *service, Some(instance_params(server, *image))),
            IntentChange::AdoptInstalled {
                component,
                service,
                image,
            } => {
                let instance = reported.ok_or_else(|| IntentWriteError::NoInstanceReported {
                    component: component.to_string(),
                })?;
                dc.sapi_put_instance(instance, *service, Some(instance_params(server, *image)));
            }
            IntentChange::DeleteInstance { instance, .. } => {
                dc.sapi_delete_instance(*instance);
            }
            IntentChange::DeleteReplaced { instance, .. } => {
                if reported.is_some_and(|r| r != *instance) {
                    dc.sapi_delete_instance(*instance);
                }
            }
            IntentChange::Mark {
                instance,
                key,
                mark,
                ..
            } => {
                if let Some(i) = dc.instances.get_mut(instance) {
                    let params = i.params.get_or_insert_with(Default::default);
                    match mark {
                        Some(m) => {
                            params.insert(key.param().into(), m.to_value());
                        }
                        None => {
                            params.remove(key.param());
                        }
                    }
                }
            }
            // The fake keeps marks on instances only (no service ledger).
            IntentChange::ForgetMark { .. } => {}
        }
        Ok(())
    }

    async fn lock_delay(&self) {
        let d = self.faults().lock_latency;
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

impl Transport for FakeDc {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(self.run_step(server, step))
    }

    fn run_together<'a>(
        &'a self,
        server: ServerUuid,
        steps: &'a [&'a Step],
        fence: &'a dyn agentsadm_orchestrate::guard::Fence,
    ) -> BoxFuture<'a, Vec<Result<StepDone, StepFailure>>> {
        Box::pin(self.run_together_steps(server, steps, fence))
    }

    fn check_health<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<Duration, StepFailure>> {
        Box::pin(async move {
            let (took, unhealthy) = {
                let f = self.faults();
                (f.gate, f.unhealthy_build(server, step))
            };
            if !took.is_zero() {
                tokio::time::sleep(took).await;
            }
            if unhealthy {
                return Err(StepFailure::new(
                    FailureStage::Unhealthy,
                    format!(
                        "svc:/smartdc/agent/{c}:default is maintenance (Start method exited with $SMF_EXIT_ERR_FATAL.)",
                        c = step.component
                    ),
                ));
            }
            Ok(took)
        })
    }

    fn tasks(&self, server: ServerUuid) -> Vec<TaskRef> {
        self.tasks.of(server)
    }
}

impl IntentStore for FakeDc {
    fn apply<'a>(
        &'a self,
        server: ServerUuid,
        change: &'a IntentChange,
        reported: Option<InstanceUuid>,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>> {
        Box::pin(async move { self.apply_change(server, change, reported) })
    }

    fn set_service_image<'a>(
        &'a self,
        change: &'a ServiceChange,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>> {
        Box::pin(async move {
            self.dc()
                .set_service_default(&change.component, Some(change.to.uuid));
            Ok(())
        })
    }
}

impl LockStore for FakeDc {
    fn read(&self) -> BoxFuture<'_, Result<LockBoard, LockError>> {
        Box::pin(async move {
            self.lock_delay().await;
            Ok(LockBoard::from_metadata(&self.lock_metadata()))
        })
    }

    fn write<'a>(&'a self, record: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.lock_delay().await;
            let value = serde_json::to_value(record).unwrap_or_default();
            self.edit_lock_metadata(|m| {
                m.insert(record.key(), value);
            });
            Ok(())
        })
    }

    fn remove<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.lock_delay().await;
            self.edit_lock_metadata(|m| {
                for k in keys {
                    m.remove(k);
                }
            });
            Ok(())
        })
    }

    fn mark_generation(&self, generation: u64) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            self.lock_delay().await;
            self.edit_lock_metadata(|m| {
                m.insert(GENERATION_KEY.to_string(), generation.into());
            });
            Ok(())
        })
    }
}

/// The fake datacenter as a run sees it: the lock in its `sdc`
/// metadata, steps on its servers, intent in its SAPI. It has no SAPI of
/// the real kind (nothing to move out of `sdc`, no history copy), no
/// IMGAPI (its images are all there: a plan that imports fails), no
/// record changes and never an outage.
impl Datacenter for FakeDc {
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>> {
        Box::pin(async move { Ok(Part::Lent(self as &dyn LockStore)) })
    }

    fn sapi(&self) -> Option<&agentsadm_api::SapiClient> {
        None
    }

    fn import<'a>(
        &'a self,
        images: &'a [agentsadm_plan::ImageRef],
    ) -> BoxFuture<'a, Result<(), DatacenterError>> {
        Box::pin(async move {
            if images.iter().any(|i| i.import_from.is_some()) {
                return Err(DatacenterError::MissingApi { api: "IMGAPI" });
            }
            Ok(())
        })
    }

    fn carriers<'a>(
        &'a self,
        _plan: &Plan,
        _settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError> {
        Ok(Carriers {
            transport: Part::Lent(self),
            store: Part::Lent(self),
            records: Part::Made(Box::new(NoRecords)),
            probe: Part::Made(Box::new(NoProbe)),
        })
    }
}

/// The stage of a failure the fake reports: cn-agent's install task,
/// without a task id.
fn agent_install_failure() -> FailureStage {
    FailureStage::Task {
        task: "agent_install".to_string(),
        id: None,
    }
}

/// A SAPI write of one server's instance refused as a storage error
/// refuses it (a plain 500 `{message}`): SAPI answers, so it is that
/// server's failure, not an outage.
pub fn sapi_write_refused(what: &str) -> IntentWriteError {
    let body = agentsadm_api::ErrorBody {
        code: None,
        message: "putObject sapi_instances failed".to_string(),
        errors: Vec::new(),
    };
    sapi_write_error(what, 500, body)
}

/// A SAPI write refused as a SAPI that is down refuses it (HTTP 503), for
/// fakes that fail writes: the product's own error, not a fake-only one.
pub fn sapi_unavailable(what: &str) -> IntentWriteError {
    let body = agentsadm_api::ErrorBody::new("ServiceUnavailableError", "SAPI is unavailable");
    sapi_write_error(what, 503, body)
}

/// SAPI's answer `status` with `body` to a PUT of an instance.
fn sapi_write_error(what: &str, status: u16, body: agentsadm_api::ErrorBody) -> IntentWriteError {
    IntentWriteError::Api {
        what: what.to_string(),
        err: Box::new(agentsadm_api::ApiError::Status {
            api: agentsadm_api::Api::Sapi,
            method: reqwest::Method::PUT,
            path: "/instances".to_string(),
            status,
            body,
        }),
    }
}
