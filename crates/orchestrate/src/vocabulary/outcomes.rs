//! What the executor's parts report back, in the words of the report: a
//! step's failure and its stage and the CNAPI tasks it started (from the transport), a
//! record change's outcome (from the record store), how the run lost the
//! datacenter lock (from its fence). They live here, below the parts that
//! make them, so that the report describes them without importing them.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;

use agentsadm_api::ApiError;
use agentsadm_api::remote::FailureStep;
use agentsadm_plan::RecordChange;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::{JobUuid, ServerUuid, TaskId};

/// Which part of a server's turn failed. Text and `--json` (field
/// `stage`) show it as [`FailureStage::as_str`], a name operators and
/// scripts match on, so the names never change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureStage {
    /// A SAPI instance write before or after the steps: `sapi`.
    Sapi,
    /// Abandoned by `--straggler-timeout`: `straggler`.
    Straggler,
    /// In progress when the run was interrupted: `interrupted`.
    Interrupted,
    /// A step ran into `--task-timeout`: `timeout`.
    Timeout,
    /// CNAPI refused `POST /servers/:uuid/install-agent`: `install-agent`.
    InstallAgent,
    /// CNAPI refused `POST /servers/:uuid/uninstall-agents`:
    /// `uninstall-agents`.
    UninstallAgents,
    /// `GET /tasks/:id/wait` failed: `task wait`.
    TaskWait,
    /// A cn-agent task ended in failure: `agent_install task <id>` (the
    /// in-memory transport of the tests has no task id).
    Task { task: String, id: Option<TaskId> },
    /// Reading the instance a fresh install reports: `read server.agents`.
    ReadServerAgents,
    /// Waiting for a component that replaces itself (cn-agent) to report
    /// its new image: `confirm through server.agents`.
    ConfirmServerAgents,
    /// CNAPI execute failed, or `agentsadm gz` printed no result: `execute`.
    Execute,
    /// `agentsadm gz` exited non-zero without naming a step: `gz`.
    Gz,
    /// `agentsadm gz` failed at one of its steps: `gz <step>` (`gz
    /// hook:postinstall`, `gz download`, ...).
    GzStep { step: FailureStep },
    /// The health gate failed (the installer's, or `gz health` after
    /// cn-agent's task): `unhealthy`.
    Unhealthy,
    /// The server's installed image is not the one the plan saw (`gz
    /// install --expect-current` refused, or CNAPI's `server.agents`
    /// before an install-agent task): `changed since the plan`.
    Changed,
    /// Putting agentsadm on the server without it (its manifest, the
    /// bootstrap script): `bootstrap`.
    Bootstrap,
    /// The step was not started: the run no longer holds the datacenter
    /// lock: `lock lost`.
    LockLost,
    /// An API stopped answering (the step was not started, or how it
    /// ended is not known): `<API> not answering`.
    ApiLost { api: agentsadm_api::Api },
}

impl FailureStage {
    /// The stage as shown; fixed names are borrowed, task and `gz` step
    /// names are formatted.
    pub fn as_str(&self) -> Cow<'_, str> {
        Cow::Borrowed(match self {
            FailureStage::Sapi => "sapi",
            FailureStage::Straggler => "straggler",
            FailureStage::Interrupted => "interrupted",
            FailureStage::Timeout => "timeout",
            FailureStage::InstallAgent => "install-agent",
            FailureStage::UninstallAgents => "uninstall-agents",
            FailureStage::TaskWait => "task wait",
            FailureStage::ReadServerAgents => "read server.agents",
            FailureStage::ConfirmServerAgents => "confirm through server.agents",
            FailureStage::Execute => "execute",
            FailureStage::Gz => "gz",
            FailureStage::Unhealthy => "unhealthy",
            FailureStage::Changed => "changed since the plan",
            FailureStage::Bootstrap => "bootstrap",
            FailureStage::LockLost => "lock lost",
            FailureStage::ApiLost { api } => return Cow::Owned(format!("{api} not answering")),
            FailureStage::Task { task, id: Some(id) } => {
                return Cow::Owned(format!("{task} task {id}"));
            }
            FailureStage::Task { task, id: None } => return Cow::Owned(format!("{task} task")),
            FailureStage::GzStep { step } => return Cow::Owned(format!("gz {}", step.as_str())),
        })
    }
}

impl fmt::Display for FailureStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl Serialize for FailureStage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

/// Compares with the stage as shown (`stage == "sapi"`).
impl PartialEq<&str> for FailureStage {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A step that failed on the server or on the way there: which part of the
/// step (`install-agent`, `agent_install task`, `gz hook:postinstall`,
/// `confirm through server.agents`, ...) and the remote error text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{stage}: {message}")]
pub struct StepFailure {
    pub stage: FailureStage,
    /// The remote error text (for API errors, the whole chain on one line:
    /// it is shown as data in reports, not printed as a cause chain).
    pub message: String,
    /// For an unhealthy step: why the previous image could not be put
    /// back on the server (the reinstall after cn-agent's task failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_error: Option<String>,
    /// The component's install finished on the server (cn-agent's task
    /// completed) and only what follows it failed (its health check could
    /// not run): the SAPI writes an install through cn-agent needs after
    /// it are still made.
    #[serde(skip)]
    pub installed: bool,
    /// The call that failed met an outage of this API (refused, reset,
    /// cut short, timed out, a gateway's 502-504), whether or not it
    /// answers again by the time anyone asks.
    #[serde(skip)]
    pub outage: Option<agentsadm_api::Api>,
}

impl StepFailure {
    pub fn new(stage: FailureStage, message: impl Into<String>) -> StepFailure {
        StepFailure {
            stage,
            message: message.into(),
            revert_error: None,
            installed: false,
            outage: None,
        }
    }

    /// Whether the step failed its health gate.
    pub fn is_unhealthy(&self) -> bool {
        self.stage == FailureStage::Unhealthy
    }

    pub(crate) fn api(stage: FailureStage, err: &ApiError) -> StepFailure {
        let mut failure = StepFailure::new(stage, error_chain(err));
        failure.outage = err.is_outage().then(|| err.api());
        failure
    }
}

/// A CNAPI task a step started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskRef {
    pub component: String,
    pub task: TaskId,
    /// Still waited for (the step has not ended). Not in `--json`: a
    /// report is written after waiting stopped.
    #[serde(skip)]
    pub waiting: bool,
}

/// How a run lost the datacenter lock, for its report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockLoss {
    /// What the run was about to do when it noticed.
    pub noticed: String,
    /// Who holds it now, as far as its record says.
    pub holder: String,
    /// The servers this run started (it may have changed them), which
    /// the new holder may since have changed as well: filled in with the
    /// run's report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub may_have_changed: Vec<ServerUuid>,
}

/// How one record change ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum RecordStatus {
    Done,
    /// Already made (a re-run): a deleted instance SAPI no longer has, a
    /// server CNAPI no longer has.
    AlreadyDone,
    /// The factory reset started.
    ResetStarted {
        job_uuid: JobUuid,
        agents_cleared: bool,
    },
    Failed {
        message: String,
    },
    /// Not made: the lock was lost, or (a server's CNAPI call) some other
    /// record change failed.
    NotRun {
        reason: String,
    },
}

/// One record change and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordOutcome {
    pub change: RecordChange,
    #[serde(flatten)]
    pub status: RecordStatus,
    /// Something that did not fail the change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl RecordOutcome {
    /// Made (now or before).
    pub fn ok(&self) -> bool {
        matches!(
            self.status,
            RecordStatus::Done | RecordStatus::AlreadyDone | RecordStatus::ResetStarted { .. }
        )
    }
}
