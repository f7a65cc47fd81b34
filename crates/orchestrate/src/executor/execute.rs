//! The executor: carries out a confirmed [`Plan`].
//!
//! - Nothing runs without the operator's consent: the executor takes a
//!   [`Confirmed`] plan, which only the prompt or `-y` can make.
//! - Service default images are set first; if SAPI refuses, nothing else
//!   happens (exit status 1).
//! - Then the record changes ([`crate::records`]: CNAPI reports, SAPI
//!   services and instances, a server's CNAPI record), phase by phase.
//! - Then the servers, in the plan's waves ([`crate::waves`]): the order,
//!   canaries, concurrency, rack limit and failure budget are the plan's,
//!   shown to the operator before the confirmation. A server's turn is in
//!   [`crate::turn`]. A failing server never stops the others.
//! - A rollout halted by a failed canary or the failure budget puts intent
//!   back for what did not converge: the service defaults this run set,
//!   and the instance targets of the servers that failed, so that a server
//!   set up before the re-run does not get the build that was halted.

use std::future::Future;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use tokio::time::Instant;

use crate::carriers::guard::{ApiProbe, Fence, Hold, NoProbe, Unfenced};
use crate::carriers::records::{NoRecords, RecordStore, make_records};
use crate::carriers::store::IntentStore;
use crate::carriers::store::IntentWriteError;
use crate::carriers::transport::Transport;
use crate::vocabulary::confirm::Confirmed;
use crate::vocabulary::outlier::OutlierPolicy;
use crate::vocabulary::report::ExecEvent;
use crate::vocabulary::report::ExecReport;
use crate::vocabulary::report::Halted;
use crate::vocabulary::report::InFlight;
use crate::vocabulary::report::IntentRevert;
use crate::vocabulary::report::Outage;
use crate::vocabulary::report::Reporter;
use crate::vocabulary::report::ServerStatus;
use crate::vocabulary::report::StepStatus;
use agentsadm_plan::Action;
use agentsadm_plan::ImageRef;
use agentsadm_plan::Plan;
use agentsadm_plan::ServiceChange;
use agentsadm_types::error::error_chain;

pub use agentsadm_plan::rollout::{
    DEFAULT_CONCURRENCY, FailureBudget, default_canary, pick_canaries,
};

/// Default per-step timeout: sdcadm's 30 minutes of polling.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long a rollout waits for an API that stopped answering: a CNAPI
/// or SAPI restart (`sdcadm update`, a zone reboot) takes a few minutes.
pub const DEFAULT_OUTAGE_WAIT: Duration = Duration::from_secs(10 * 60);

/// Executor settings. The rollout itself (waves, concurrency, budget,
/// rack limit) is the plan's.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// `--task-timeout`: how long one step's install may take (its health
    /// gate is not part of it: a `gz health` check has its own bound).
    pub task_timeout: Duration,
    pub outlier: OutlierPolicy,
    /// `--straggler-timeout`: stop waiting for a server that has been
    /// running this long (from its own start, whatever the others do); its
    /// work may still complete on the server.
    pub straggler_timeout: Option<Duration>,
    /// Run parallel-safe components of one server concurrently. Off only to
    /// imitate the shar (one component after the other) in benchmarks.
    pub parallel_within_server: bool,
    /// How often running servers are checked for outliers.
    pub tick: Duration,
    /// `--min-healthy` / `--health-timeout` for the servers' health gate
    /// (`None`: the installer's defaults).
    pub health: Option<agentsadm_plan::HealthFlags>,
    /// What is known about install times, for slow servers before the run
    /// has a median ([`crate::baseline`]): the catalog's expected times,
    /// and servers' own times from earlier runs.
    pub known: crate::executor::baseline::KnownDurations,
    /// How long a rollout paused for an API outage waits for it to
    /// answer again before it stops (no server is counted as failed
    /// either way).
    pub outage_wait: Duration,
    /// How long an API may take to answer a ping before it counts as
    /// not answering (a silent API is an outage, not slow servers).
    pub probe_bound: Duration,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            task_timeout: DEFAULT_TASK_TIMEOUT,
            outlier: OutlierPolicy::default(),
            straggler_timeout: None,
            parallel_within_server: true,
            tick: Duration::from_secs(1),
            health: None,
            known: crate::executor::baseline::KnownDurations::default(),
            outage_wait: DEFAULT_OUTAGE_WAIT,
            probe_bound: Duration::from_secs(10),
        }
    }
}

/// Execution could not start; nothing was changed on any server.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot set the default image of {component} before executing; no server was touched")]
    ServiceChange {
        component: String,
        #[source]
        err: IntentWriteError,
    },
}

/// What the executor asks while it runs.
pub trait RunGate: Sync {
    /// Whether another process broke the datacenter lock: then no new
    /// server starts.
    fn lock_lost(&self) -> bool {
        false
    }

    /// Every canary succeeded; go on with the `remaining` servers?
    fn canary_passed(&self, canaries: &[String], remaining: usize) -> impl Future<Output = bool>;

    /// The run was interrupted with `in_flight` servers running: keep
    /// waiting for them until the returned future resolves (a second
    /// Ctrl-C), or stop waiting at once (`None`, the default: scripts and
    /// tests).
    fn keep_waiting(&self, _in_flight: &[InFlight]) -> Option<LocalBoxFuture<'_, ()>> {
        None
    }
}

/// Never asks: continues after a passed canary wave (`-y`, tests, benches).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unattended;

impl RunGate for Unattended {
    async fn canary_passed(&self, _canaries: &[String], _remaining: usize) -> bool {
        true
    }
}

/// What the executor works with.
#[derive(Clone, Copy)]
pub struct Executor<'a> {
    pub(crate) transport: &'a dyn Transport,
    pub(crate) store: &'a dyn IntentStore,
    pub(crate) records: &'a dyn RecordStore,
    pub(crate) reporter: &'a dyn Reporter,
    pub(crate) options: &'a ExecOptions,
    /// The datacenter lock, confirmed before each change.
    pub(crate) fence: &'a dyn Fence,
    /// Asked, when a server's turn failed, whether an API stopped
    /// answering.
    pub(crate) probe: &'a dyn ApiProbe,
}

impl<'a> Executor<'a> {
    /// An executor that runs steps through `transport` and writes intent
    /// through `store`; it makes no record changes (see
    /// [`Executor::with_records`]).
    pub fn new(
        transport: &'a dyn Transport,
        store: &'a dyn IntentStore,
        reporter: &'a dyn Reporter,
        options: &'a ExecOptions,
    ) -> Executor<'a> {
        Executor {
            transport,
            store,
            records: &NoRecords,
            reporter,
            options,
            fence: &Unfenced,
            probe: &NoProbe,
        }
    }

    /// Confirm the datacenter lock through `fence` before the record
    /// changes, each server and each step; ask `probe` about the APIs
    /// when a server's turn fails.
    pub fn with_guard(mut self, fence: &'a dyn Fence, probe: &'a dyn ApiProbe) -> Executor<'a> {
        self.fence = fence;
        self.probe = probe;
        self
    }

    /// Make the plan's record changes through `records`.
    pub fn with_records(mut self, records: &'a dyn RecordStore) -> Executor<'a> {
        self.records = records;
        self
    }

    /// Carry out the plan. `cancel` resolving (Ctrl-C) stops starting
    /// servers and stops waiting for running ones. After a passed canary
    /// wave the run continues without asking.
    pub async fn execute(
        &self,
        plan: Confirmed<'_>,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecReport, ExecError> {
        self.execute_gated(plan, cancel, &Unattended).await
    }

    /// [`Executor::execute`], asking `gate` whether to go on after the
    /// canary wave and whether the datacenter lock still holds before the
    /// record changes and before each server starts.
    pub async fn execute_gated(
        &self,
        confirmed: Confirmed<'_>,
        cancel: impl Future<Output = ()>,
        gate: &impl RunGate,
    ) -> Result<ExecReport, ExecError> {
        let plan = confirmed.plan();
        let started_at = Instant::now();
        let mut report = ExecReport {
            budget: plan.rollout().budget,
            ..ExecReport::default()
        };
        if gate.lock_lost() {
            self.halt(&mut report, Halted::LockLost);
        } else if !plan.service_changes().is_empty() {
            self.hold("the service default images", &mut report).await;
        }
        for change in plan.service_changes() {
            if report.halted.is_some() {
                break;
            }
            self.store
                .set_service_image(change)
                .await
                .map_err(|err| ExecError::ServiceChange {
                    component: change.component.to_string(),
                    err,
                })?;
            report.service_changes += 1;
        }
        let concurrency = plan.rollout().concurrency.max(1);
        let lost = || gate.lock_lost() || self.fence.is_lost();
        if report.halted.is_none() {
            let (records, hold) =
                make_records(self.records, plan.records(), concurrency, &lost, self.fence).await;
            report.records = records;
            match hold {
                Hold::Held => {}
                Hold::Lost => self.halt(&mut report, Halted::LockLost),
                Hold::Unconfirmed(api) => self.outage(&mut report, api, "the record changes"),
            }
            if report.records.iter().any(|r| !r.ok())
                && report.outage.is_none()
                && let Some(api) = self.probe.down().await
            {
                self.outage(&mut report, api, "the record changes");
            }
        }

        self.reporter.event(&ExecEvent::Started {
            servers: plan.servers().len(),
            steps: plan.step_count(),
            concurrency,
        });
        // Halted already (the lock was lost): every server is "not started".
        self.run_waves(plan, &mut report, cancel, gate).await;
        // Every halt of the operator's or the run's own (a failed canary,
        // the budget, a declined canary, an interrupt or SIGTERM) leaves
        // the service defaults where they were: new servers must not get a
        // build the rollout did not finish. Not after a lost lock (another
        // run owns the datacenter now) or an API outage (the writes would
        // go to the API that is down; the rerun converges).
        if report.interrupted
            || matches!(
                report.halted,
                Some(Halted::Canary { .. } | Halted::Budget { .. } | Halted::Declined)
            )
        {
            report.service_changes_reverted = self.revert_service_changes(plan).await;
            report.intent_reverted = self.revert_failed_intent(plan, &report).await;
        }
        report.elapsed = started_at.elapsed();
        self.reporter.event(&ExecEvent::Finished(&report));
        Ok(report)
    }

    /// Confirm the lock before `what`: a lost lock or an API that does not
    /// answer halts the run (said once). Returns whether to go on.
    pub(crate) async fn hold(&self, what: &str, report: &mut ExecReport) -> bool {
        match self.fence.confirm(what).await {
            Hold::Held => true,
            Hold::Lost => {
                self.halt(report, Halted::LockLost);
                false
            }
            Hold::Unconfirmed(api) => {
                self.outage(report, api, what);
                false
            }
        }
    }

    /// Stop starting anything for `why`, saying so once.
    pub(crate) fn halt(&self, report: &mut ExecReport, why: Halted) {
        if report.halted.is_none() {
            self.reporter.event(&ExecEvent::Stopping(&why));
            report.halted = Some(why);
        }
    }

    /// `api` stopped answering (noticed at `what`): recorded once, and the
    /// run halts.
    pub(crate) fn outage(&self, report: &mut ExecReport, api: agentsadm_api::Api, what: &str) {
        if report.outage.is_none() {
            report.outage = Some(Outage {
                api,
                noticed: what.to_string(),
            });
        }
        self.halt(
            report,
            Halted::ApiLost {
                api: api.to_string(),
            },
        );
    }

    /// A halted rollout: the new build reached no other server (canary) or
    /// stopped spreading (budget), so the service defaults this run set go
    /// back to what they were (where the plan knew it). Returns how many
    /// were put back; one that cannot be is left for the next run's plan
    /// (it shows the difference).
    async fn revert_service_changes(&self, plan: &Plan) -> usize {
        let mut n = 0;
        for change in plan.service_changes() {
            let Some(from) = change.from else { continue };
            let back = ServiceChange {
                component: change.component.clone(),
                service: change.service,
                from: Some(change.to.uuid),
                from_version: Some(change.to.version.clone()),
                to: ImageRef {
                    uuid: from,
                    name: change.component.to_string(),
                    version: change.from_version.clone().unwrap_or_default(),
                    import_from: None,
                },
            };
            match self.store.set_service_image(&back).await {
                Ok(()) => n += 1,
                Err(e) => tracing::warn!(
                    component = %change.component,
                    error = %error_chain(&e),
                    "cannot put the service default image back after the halt"
                ),
            }
        }
        n
    }

    /// A halted rollout: the servers that failed (other than unhealthy
    /// ones, already reverted) keep their previous image as far as intent
    /// goes: their instance targets, written before their steps, go back.
    /// Servers that never started had nothing written.
    async fn revert_failed_intent(&self, plan: &Plan, report: &ExecReport) -> Vec<IntentRevert> {
        let mut out = Vec::new();
        for (uuid, outcome) in &report.servers {
            let failed = matches!(
                outcome.status,
                ServerStatus::Failed | ServerStatus::TimedOut
            );
            let Some(sp) = plan.servers().get(uuid).filter(|_| failed) else {
                continue;
            };
            for step in &sp.steps {
                let Action::Upgrade { from, .. } = &step.action else {
                    continue;
                };
                let done = outcome
                    .steps
                    .iter()
                    .any(|r| r.component == step.component && r.status == StepStatus::Done);
                let reverted = outcome.reverted(&step.component);
                let Some(previous) = from.image.filter(|_| !done && !reverted) else {
                    continue;
                };
                let result = self
                    .put_back_instance(*uuid, sp, &step.component, previous)
                    .await;
                if matches!(result, Ok(false)) {
                    continue;
                }
                out.push(IntentRevert {
                    server: *uuid,
                    hostname: sp.hostname.clone(),
                    component: step.component.to_string(),
                    image: previous,
                    error: result.err(),
                });
            }
        }
        // In the order servers are shown (by hostname).
        out.sort_by(|a, b| {
            (a.hostname.as_str(), a.server, a.component.as_str()).cmp(&(
                b.hostname.as_str(),
                b.server,
                b.component.as_str(),
            ))
        });
        out
    }
}
