//! What execution reports: events for progress displays ([`Reporter`]), and
//! the final [`ExecReport`] with per-server outcomes, the per-component
//! summary (done / failed / skipped, p50 / p90 / max install time), outliers
//! and the exit status.
//!
//! The library never draws anything: the command line turns events into
//! bars or plain lines (`cli::progress`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::vocabulary::outlier::Outlier;

use crate::vocabulary::outlier::duration_secs;

pub use crate::vocabulary::outcomes::FailureStage;
use crate::vocabulary::outcomes::RecordOutcome;
use crate::vocabulary::outcomes::StepFailure;
use crate::vocabulary::outcomes::TaskRef;
use agentsadm_plan::Plan;
use agentsadm_plan::Step;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

/// Something that happened during execution.
#[derive(Debug)]
pub enum ExecEvent<'a> {
    Started {
        servers: usize,
        steps: usize,
        concurrency: usize,
    },
    ServerStarted {
        server: ServerUuid,
        hostname: &'a str,
    },
    StepStarted {
        server: ServerUuid,
        hostname: &'a str,
        step: &'a Step,
    },
    StepFinished {
        server: ServerUuid,
        hostname: &'a str,
        step: &'a Step,
        elapsed: Duration,
        failure: Option<&'a StepFailure>,
        /// The CNAPI task the step ran as (none through CNAPI execute).
        task: Option<TaskId>,
        /// The health gate, when the step has one and got that far.
        gate: Option<&'a GateResult>,
    },
    ServerFinished {
        server: ServerUuid,
        outcome: &'a ServerOutcome,
    },
    Outlier(&'a Outlier),
    /// Stopped waiting for these servers (`--straggler-timeout`).
    StragglersAbandoned {
        servers: &'a [(ServerUuid, String)],
    },
    /// The operator interrupted the run: no new server starts. `waiting`:
    /// the run keeps waiting for the servers in flight (until a second
    /// interrupt); otherwise it stops waiting at once.
    Interrupted {
        in_flight: &'a [InFlight],
        waiting: bool,
    },
    /// A second interrupt: stopped waiting for these servers.
    StoppedWaiting {
        in_flight: &'a [InFlight],
    },
    /// The run stops starting servers because it lost the datacenter lock
    /// or an API stopped answering (said once, when noticed).
    Stopping(&'a Halted),
    /// An API stopped answering: no server starts until it answers again
    /// (waiting up to `bound`); the servers in flight are waited for, and
    /// none is counted as failed or slow for it. Said once per outage.
    Paused {
        api: agentsadm_api::Api,
        noticed: &'a str,
        bound: Duration,
    },
    /// The API answers again after `after`: the rollout carries on.
    Resumed {
        api: agentsadm_api::Api,
        after: Duration,
    },
    Finished(&'a ExecReport),
}

/// A server in flight when the run was interrupted: what an operator needs
/// to follow it up (its CNAPI tasks still running).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InFlight {
    pub server: ServerUuid,
    pub hostname: String,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    /// The tasks still waited for (none for steps through CNAPI execute,
    /// which has no task).
    pub tasks: Vec<TaskRef>,
}

impl InFlight {
    /// `cn7 (vm-agent task 5e1c...)`, or `cn7` without tasks.
    pub fn describe(&self) -> String {
        if self.tasks.is_empty() {
            return self.hostname.clone();
        }
        let tasks: Vec<String> = self
            .tasks
            .iter()
            .map(|t| format!("{} task {}", t.component, t.task))
            .collect();
        format!("{} ({})", self.hostname, tasks.join(", "))
    }
}

/// Receives execution events. Called from the executor's task; must not block.
pub trait Reporter: Send + Sync {
    fn event(&self, event: &ExecEvent<'_>);
}

/// Ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullReporter;

impl Reporter for NullReporter {
    fn event(&self, _event: &ExecEvent<'_>) {}
}

/// How one server ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerStatus {
    Succeeded,
    Failed,
    /// A step exceeded the task timeout, or the server was abandoned as a
    /// straggler.
    TimedOut,
    /// Still running when the run stopped waiting after an interrupt: its
    /// work may still complete on the server (its tasks are in the
    /// outcome).
    Interrupted,
    /// Never started (interrupted before its turn).
    NotStarted,
    /// Started, then stopped before its remaining steps: the run lost the
    /// datacenter lock, or an API stopped answering, before them. What
    /// ran is in its steps; nothing else was started on it.
    Stopped,
    /// How it ended is not known: an API stopped answering while it ran
    /// (its tasks may still complete; they are in the outcome). Not a
    /// failure of the server.
    Unknown,
}

impl ServerStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerStatus::Succeeded => "succeeded",
            ServerStatus::Failed => "failed",
            ServerStatus::TimedOut => "timed-out",
            ServerStatus::Interrupted => "interrupted",
            ServerStatus::NotStarted => "not-started",
            ServerStatus::Stopped => "stopped",
            ServerStatus::Unknown => "unknown",
        }
    }
}

/// How one step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    Done,
    Failed,
    /// Not attempted because an earlier step on the server failed (or
    /// the run lost its lock or an API first).
    NotRun,
    /// Started, but how it ended is not known: an API stopped answering.
    Unknown,
}

/// One step's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepResult {
    pub component: String,
    pub action: &'static str,
    pub status: StepStatus,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    /// The CNAPI task the step ran as (none through CNAPI execute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    /// The step's health gate, when it has one and got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateResult>,
    /// Failed, but the install itself stood (only its health check could
    /// not run): the server runs the step's target, and a revert of the
    /// run puts it back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub installed: bool,
}

/// Why a server failed: the component (if any), the stage and the remote
/// error text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    pub stage: FailureStage,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.component {
            Some(c) => write!(f, "{c}: {}: {}", self.stage, self.message),
            None => write!(f, "{}: {}", self.stage, self.message),
        }
    }
}

/// One server's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerOutcome {
    pub hostname: String,
    pub status: ServerStatus,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    pub steps: Vec<StepResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The CNAPI tasks the server's steps started (`sdc-cnapi /tasks/<id>`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskRef>,
    /// The health gate of each step that ran with one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateResult>,
    /// What was put back after an unhealthy step (the first, when gates
    /// that overlapped failed together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<Revert>,
    /// What was put back after the other unhealthy steps, if more than
    /// one failed its gate (each reverts only its own component).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_reverted: Vec<Revert>,
    /// Instances an install replaced, deleted once the server reported the
    /// new one (`check --fix`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<agentsadm_types::ids::InstanceUuid>,
}

impl ServerOutcome {
    /// Its CNAPI tasks still waited for when the run stopped, as
    /// `COMPONENT task ID` (the log's and the summary's words).
    pub fn waiting_tasks(&self) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|t| t.waiting)
            .map(|t| format!("{} task {}", t.component, t.task))
            .collect()
    }

    /// A server that succeeded (so far), with nothing recorded yet.
    pub fn new(hostname: &str) -> ServerOutcome {
        ServerOutcome {
            hostname: hostname.to_string(),
            status: ServerStatus::Succeeded,
            elapsed: Duration::ZERO,
            steps: Vec::new(),
            failure: None,
            tasks: Vec::new(),
            gates: Vec::new(),
            revert: None,
            also_reverted: Vec::new(),
            replaced: Vec::new(),
        }
    }

    /// Whether `component` was reverted after its gate failed.
    pub fn reverted(&self, component: &str) -> bool {
        self.revert
            .iter()
            .chain(&self.also_reverted)
            .any(|r| r.component == component)
    }

    /// The server ended with `status` because of `failure`.
    pub fn fail(&mut self, status: ServerStatus, failure: Failure) {
        self.status = status;
        self.failure = Some(failure);
    }
}

/// A failed server's instance target put back after the rollout halted:
/// intent names the image the server still runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IntentRevert {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
    /// The image `params.image_uuid` names again.
    pub image: agentsadm_types::ids::ImageUuid,
    /// Why it could not be put back, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One step's health gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateResult {
    pub component: String,
    pub gate: agentsadm_plan::Gate,
    pub passed: bool,
    /// What the gate saw: `online` (every service of the component stayed
    /// online), or the service and the state it was in instead.
    pub seen: String,
    /// How long the gate took, when it ran as a check of its own (`gz
    /// health` after an install-agent task); the installer's own gate is
    /// inside the step's time.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub elapsed: Option<Duration>,
}

/// The revert of an unhealthy step: the previous image installed again
/// (by the installer's rollback or a reinstall) and the SAPI instance's
/// `params.image_uuid` put back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Revert {
    pub component: String,
    /// The image the server runs again (`None`: the component was a fresh
    /// install, and is gone again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<agentsadm_types::ids::ImageUuid>,
    /// Whether the SAPI instance names that image again.
    pub sapi: bool,
    /// What could not be put back, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything execution did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExecReport {
    pub servers: BTreeMap<ServerUuid, ServerOutcome>,
    pub outliers: Vec<Outlier>,
    pub service_changes: usize,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    pub interrupted: bool,
    /// The canary wave, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryResult>,
    /// Failed servers tolerated before no new server starts (`--max-failures`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<usize>,
    /// Why the run stopped starting servers, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub halted: Option<Halted>,
    /// Service default images put back after a failed canary or a
    /// failure-budget halt (so that new servers do not get the build that
    /// was halted).
    #[serde(skip_serializing_if = "is_zero")]
    pub service_changes_reverted: usize,
    /// Instance targets of failed servers put back after such a halt.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intent_reverted: Vec<IntentRevert>,
    /// The record changes (CNAPI reports, SAPI services and instances, a
    /// server's CNAPI record), in the order they were made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<RecordOutcome>,
    /// The run's id in the history (`agentsadm history RUN`, `agentsadm
    /// revert RUN`), when it was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<agentsadm_types::ids::RunId>,
    /// The datacenter lock, if this run lost it at any point (noticed
    /// while running, or when confirmed once more before the summary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_lost: Option<crate::vocabulary::outcomes::LockLoss>,
    /// The API that stopped answering and halted the run, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outage: Option<Outage>,
    /// The outages the run paused for and waited out (an outage that
    /// outlasted the wait is [`ExecReport::outage`] as well).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pauses: Vec<Pause>,
    /// Why the lock could not be released, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_release: Option<String>,
}

fn api_name<S: serde::Serializer>(api: &agentsadm_api::Api, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(api)
}

/// An API that stopped answering during the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outage {
    /// `SAPI`, `CNAPI` or `IMGAPI`.
    #[serde(serialize_with = "api_name")]
    pub api: agentsadm_api::Api,
    /// What the run was doing when it noticed.
    pub noticed: String,
}

/// An outage the run paused for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pause {
    #[serde(serialize_with = "api_name")]
    pub api: agentsadm_api::Api,
    /// What the run was doing when it noticed.
    pub noticed: String,
    /// How long the run waited for the API (until it answered again, or
    /// gave up).
    #[serde(with = "duration_secs")]
    pub waited: Duration,
    /// It answered again (otherwise the run stopped waiting).
    pub answered: bool,
    /// The servers whose turn the outage interrupted, started again
    /// once the API answered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restarted: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The first wave's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CanaryResult {
    /// Hostnames, in run order.
    pub servers: Vec<String>,
    pub passed: bool,
}

/// Why a run stopped starting servers (servers in flight finished).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Halted {
    /// More servers failed than `--max-failures` allows.
    Budget { failures: usize, budget: usize },
    /// A canary failed: no other server was touched.
    Canary { failed: Vec<String> },
    /// The operator did not continue after the canary wave.
    Declined,
    /// The datacenter lock was lost (taken over, or its record removed).
    LockLost,
    /// An API stopped answering.
    ApiLost { api: String },
}

impl fmt::Display for Halted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Halted::Budget { failures, budget } => write!(
                f,
                "halted after {failures} failures (budget {budget}): no new server was started; fix the cause and run the same command again (completed servers are no-ops)"
            ),
            Halted::Canary { failed } => write!(
                f,
                "canary failed on {}: halted before any other server was touched; fix the cause and run the same command again",
                failed.join(", ")
            ),
            Halted::Declined => write!(
                f,
                "stopped after the canary wave (not confirmed); run the same command again to continue"
            ),
            Halted::LockLost => write!(
                f,
                "the datacenter lock was lost: nothing more was started; check who holds it, then run the same command again"
            ),
            Halted::ApiLost { api } => write!(
                f,
                "{api} stopped answering: nothing more was started and no server was counted as failed; once {api} answers, run the same command again"
            ),
        }
    }
}

/// Per-component line of the summary table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ComponentSummary {
    pub component: String,
    pub done: usize,
    pub failed: usize,
    pub skipped: usize,
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub p50: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub p90: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub max: Option<Duration>,
    /// A component-wide skip reason (unmanaged, not bulk-updatable, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

mod opt_duration_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration_secs::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

/// Server counts by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    pub succeeded: usize,
    pub failed: usize,
    pub timed_out: usize,
    pub interrupted: usize,
    pub not_started: usize,
    pub stopped: usize,
    pub unknown: usize,
}

impl ExecReport {
    pub fn counts(&self) -> StatusCounts {
        let mut c = StatusCounts::default();
        for o in self.servers.values() {
            match o.status {
                ServerStatus::Succeeded => c.succeeded += 1,
                ServerStatus::Failed => c.failed += 1,
                ServerStatus::TimedOut => c.timed_out += 1,
                ServerStatus::Interrupted => c.interrupted += 1,
                ServerStatus::NotStarted => c.not_started += 1,
                ServerStatus::Stopped => c.stopped += 1,
                ServerStatus::Unknown => c.unknown += 1,
            }
        }
        c
    }

    /// Whether every planned server succeeded and every record change was
    /// made.
    pub fn all_succeeded(&self) -> bool {
        !self.interrupted
            && self.lock_lost.is_none()
            && self.outage.is_none()
            && self
                .servers
                .values()
                .all(|o| o.status == ServerStatus::Succeeded)
            && self.records.iter().all(RecordOutcome::ok)
    }

    /// 0 when the plan was carried out completely with nothing blocking
    /// skipped, 2 otherwise (design.md exit statuses).
    pub fn exit_status(&self, plan: &Plan) -> u8 {
        if self.all_succeeded() && !plan.has_blocking_skips() {
            0
        } else {
            2
        }
    }
}

/// The one line an outage pause prints.
pub fn paused_text(api: agentsadm_api::Api, noticed: &str, bound: Duration) -> String {
    format!(
        "{api} stopped answering ({noticed}): paused; no server starts until it answers again (waiting up to {}), and no server is counted as failed for it",
        fmt_duration(bound)
    )
}

/// Short human durations: `850ms`, `4.2s`, `3m05s`, `1h02m`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short() {
        assert_eq!(fmt_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(fmt_duration(Duration::from_millis(4200)), "4.2s");
        assert_eq!(fmt_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(fmt_duration(Duration::from_secs(3720)), "1h02m");
    }
}
