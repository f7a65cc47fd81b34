//! What execution reports: events for progress displays ([`Reporter`]), and
//! the final [`ExecReport`] with per-server outcomes, the per-component
//! summary (done / failed / skipped, p50 / p90 / max install time), outliers
//! and the exit status.
//!
//! The library never draws anything: the command line turns events into
//! bars or plain lines (`cli::progress`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::outlier::Outlier;

use super::outlier::duration_secs;

use super::outlier::percentile_sorted;
use super::transport::StepFailure;
use super::transport::TaskRef;
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

/// Records one line per event; for tests.
#[derive(Debug, Default)]
pub struct RecordingReporter {
    pub lines: Mutex<Vec<String>>,
}

impl RecordingReporter {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Reporter for RecordingReporter {
    fn event(&self, event: &ExecEvent<'_>) {
        let line = match event {
            ExecEvent::Started { servers, .. } => format!("start {servers}"),
            ExecEvent::ServerStarted { hostname, .. } => format!("server-start {hostname}"),
            ExecEvent::StepStarted { hostname, step, .. } => {
                format!("step-start {hostname} {}", step.component)
            }
            ExecEvent::StepFinished {
                hostname,
                step,
                failure,
                ..
            } => format!(
                "step-done {hostname} {} {}",
                step.component,
                if failure.is_some() { "failed" } else { "ok" }
            ),
            ExecEvent::ServerFinished { outcome, .. } => {
                format!(
                    "server-done {} {}",
                    outcome.hostname,
                    outcome.status.as_str()
                )
            }
            ExecEvent::Outlier(o) => format!("outlier {}", o.hostname),
            ExecEvent::StragglersAbandoned { servers } => format!("stragglers {}", servers.len()),
            ExecEvent::Interrupted { in_flight, waiting } => format!(
                "interrupted {} in flight{}",
                in_flight.len(),
                if *waiting { ", waiting" } else { "" }
            ),
            ExecEvent::StoppedWaiting { in_flight } => {
                format!("stopped waiting {}", in_flight.len())
            }
            ExecEvent::Finished(_) => "finished".to_string(),
        };
        if let Ok(mut l) = self.lines.lock() {
            l.push(line);
        }
    }
}

/// Writes every event to the run's log (`tracing`, bunyan records in the
/// log file) with component `executor` (a server's hostname is
/// `server_name`: bunyan's `hostname` is this machine's): each server's and step's start and
/// end with durations, every failure with its stage (task id included) and
/// remote text, outliers, stragglers, interruption and the totals.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogReporter;

fn failure_task(stage: &FailureStage) -> Option<String> {
    match stage {
        FailureStage::Task { id: Some(id), .. } => Some(id.to_string()),
        _ => None,
    }
}

impl Reporter for LogReporter {
    fn event(&self, event: &ExecEvent<'_>) {
        const C: &str = "executor";
        match event {
            ExecEvent::Started {
                servers,
                steps,
                concurrency,
            } => tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                component = C,
                servers,
                steps,
                concurrency,
                "execution started"
            ),
            ExecEvent::ServerStarted { server, hostname } => {
                tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    server = %server,
                    server_name = *hostname,
                    "server started"
                )
            }
            ExecEvent::StepStarted {
                server,
                hostname,
                step,
            } => tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                component = C,
                server = %server,
                server_name = *hostname,
                agent = step.component.as_str(),
                action = step.action.verb(),
                transport = step.transport.as_str(),
                "step started"
            ),
            ExecEvent::StepFinished {
                server,
                hostname,
                step,
                elapsed,
                failure,
            } => match failure {
                None => tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    server = %server,
                    server_name = *hostname,
                    agent = step.component.as_str(),
                    action = step.action.verb(),
                    elapsed_ms = elapsed.as_millis() as u64,
                    "step done in {}",
                    fmt_duration(*elapsed)
                ),
                Some(f) => tracing::error!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    server = %server,
                    server_name = *hostname,
                    agent = step.component.as_str(),
                    action = step.action.verb(),
                    elapsed_ms = elapsed.as_millis() as u64,
                    stage = %f.stage,
                    task = failure_task(&f.stage),
                    error = f.message.as_str(),
                    "step failed after {}: {}: {}",
                    fmt_duration(*elapsed),
                    f.stage,
                    f.message
                ),
            },
            ExecEvent::ServerFinished { server, outcome } => {
                let f = outcome.failure.as_ref();
                if outcome.status == ServerStatus::Succeeded {
                    tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                        component = C,
                        server = %server,
                        server_name = outcome.hostname.as_str(),
                        status = outcome.status.as_str(),
                        elapsed_ms = outcome.elapsed.as_millis() as u64,
                        "server succeeded in {}",
                        fmt_duration(outcome.elapsed)
                    );
                } else {
                    tracing::error!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                        component = C,
                        server = %server,
                        server_name = outcome.hostname.as_str(),
                        status = outcome.status.as_str(),
                        elapsed_ms = outcome.elapsed.as_millis() as u64,
                        stage = f.map(|f| f.stage.to_string()),
                        task = f.and_then(|f| failure_task(&f.stage)),
                        error = f.map(|f| f.message.as_str()),
                        "server {}: {}",
                        outcome.status.as_str(),
                        f.map(ToString::to_string).unwrap_or_default()
                    );
                }
            }
            ExecEvent::Outlier(o) => tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                component = C,
                server = %o.server,
                server_name = o.hostname.as_str(),
                elapsed_ms = o.elapsed.as_millis() as u64,
                median_ms = o.median.as_millis() as u64,
                "outlier: {} running for {}, the median server took {}",
                o.hostname,
                fmt_duration(o.elapsed),
                fmt_duration(o.median)
            ),
            ExecEvent::StragglersAbandoned { servers } => {
                let names: Vec<&str> = servers.iter().map(|(_, h)| h.as_str()).collect();
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    servers = names.join(","),
                    "stopped waiting for stragglers"
                );
            }
            ExecEvent::Interrupted { in_flight, waiting } => {
                let servers: Vec<String> = in_flight.iter().map(InFlight::describe).collect();
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    in_flight = servers.join("; "),
                    waiting,
                    "interrupted by the operator: no new server starts; {} in flight",
                    in_flight.len()
                )
            }
            ExecEvent::StoppedWaiting { in_flight } => {
                let servers: Vec<String> = in_flight.iter().map(InFlight::describe).collect();
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    in_flight = servers.join("; "),
                    "stopped waiting for the servers in flight (they may still complete)"
                )
            }
            ExecEvent::Finished(r) => {
                let c = r.counts();
                tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    succeeded = c.succeeded,
                    failed = c.failed,
                    timed_out = c.timed_out,
                    interrupted = c.interrupted,
                    not_started = c.not_started,
                    outliers = r.outliers.len(),
                    elapsed_ms = r.elapsed.as_millis() as u64,
                    "execution finished"
                );
            }
        }
    }
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
}

impl ServerStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerStatus::Succeeded => "succeeded",
            ServerStatus::Failed => "failed",
            ServerStatus::TimedOut => "timed-out",
            ServerStatus::Interrupted => "interrupted",
            ServerStatus::NotStarted => "not-started",
        }
    }
}

/// How one step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    Done,
    Failed,
    /// Not attempted because an earlier step on the server failed.
    NotRun,
}

/// One step's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepResult {
    pub component: String,
    pub action: &'static str,
    pub status: StepStatus,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
}

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
    GzStep { step: String },
    /// The health gate failed (the installer's, or `gz health` after
    /// cn-agent's task): `unhealthy`.
    Unhealthy,
    /// The server's installed image is not the one the plan saw (`gz
    /// install --expect-current` refused): `changed since the plan`.
    Changed,
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
            FailureStage::Task { task, id: Some(id) } => {
                return Cow::Owned(format!("{task} task {id}"));
            }
            FailureStage::Task { task, id: None } => return Cow::Owned(format!("{task} task")),
            FailureStage::GzStep { step } => return Cow::Owned(format!("gz {step}")),
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
    /// What was put back after an unhealthy step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<Revert>,
}

/// One step's health gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateResult {
    pub component: String,
    pub gate: agentsadm_plan::Gate,
    pub passed: bool,
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
    /// Service default images put back after a failed canary (the rollout
    /// touched no other server, so nothing may claim the new build).
    #[serde(skip_serializing_if = "is_zero")]
    pub service_changes_reverted: usize,
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
    /// Another process broke the datacenter lock.
    LockLost,
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
                "the datacenter lock was broken by another process: no new server was started; check who holds it, then run the same command again"
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
            }
        }
        c
    }

    /// Whether every planned server succeeded.
    pub fn all_succeeded(&self) -> bool {
        !self.interrupted
            && self
                .servers
                .values()
                .all(|o| o.status == ServerStatus::Succeeded)
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

    /// The per-component summary table's rows, in the plan's component order.
    pub fn summary(&self, plan: &Plan) -> Vec<ComponentSummary> {
        let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        let mut rows: BTreeMap<&str, ComponentSummary> = BTreeMap::new();
        let mut order: Vec<&str> = plan.components.iter().map(String::as_str).collect();
        for s in &plan.skips {
            if let Some(c) = s.component.as_deref()
                && !order.contains(&c)
            {
                order.push(c);
            }
        }
        for c in &order {
            rows.insert(
                c,
                ComponentSummary {
                    component: c.to_string(),
                    done: 0,
                    failed: 0,
                    skipped: 0,
                    p50: None,
                    p90: None,
                    max: None,
                    note: None,
                },
            );
        }
        for o in self.servers.values() {
            for st in &o.steps {
                let Some(row) = rows.get_mut(st.component.as_str()) else {
                    continue;
                };
                match st.status {
                    StepStatus::Done => {
                        row.done += 1;
                        times
                            .entry(row_key(&order, &st.component))
                            .or_default()
                            .push(st.elapsed);
                    }
                    StepStatus::Failed => row.failed += 1,
                    StepStatus::NotRun => row.skipped += 1,
                }
            }
        }
        for s in &plan.skips {
            match (&s.server, &s.component) {
                (Some(_), Some(c)) => {
                    if let Some(row) = rows.get_mut(c.as_str()) {
                        row.skipped += 1;
                    }
                }
                (None, Some(c)) => {
                    if let Some(row) = rows.get_mut(c.as_str()) {
                        row.note = Some(s.reason.describe());
                    }
                }
                // A whole server left out: every component it would have
                // had counts it only when it blocks convergence.
                (Some(_), None) if s.blocking => {
                    for row in rows.values_mut().filter(|r| r.note.is_none()) {
                        row.skipped += 1;
                    }
                }
                _ => {}
            }
        }
        for (c, mut t) in times {
            t.sort();
            if let Some(row) = rows.get_mut(c) {
                row.p50 = Some(percentile_sorted(&t, 50.0));
                row.p90 = Some(percentile_sorted(&t, 90.0));
                row.max = t.last().copied();
            }
        }
        order.iter().filter_map(|c| rows.remove(c)).collect()
    }

    /// The final text: summary table, failures, timeouts, outliers, and a
    /// one-line verdict.
    pub fn render(&self, plan: &Plan) -> String {
        let mut out = String::new();
        // Components nothing happened to stay out of the table (they are in
        // the JSON summary); a note (marlin-agent skipped in bulk) keeps a row.
        let rows: Vec<Vec<String>> = self
            .summary(plan)
            .into_iter()
            .filter(|r| r.done + r.failed + r.skipped > 0 || r.note.is_some())
            .map(|r| {
                vec![
                    r.component,
                    r.done.to_string(),
                    r.failed.to_string(),
                    r.skipped.to_string(),
                    r.p50.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.p90.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.max.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.note.unwrap_or_default(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push_str(&agentsadm_types::output::table(
                &[
                    "COMPONENT",
                    "DONE",
                    "FAILED",
                    "SKIPPED",
                    "P50",
                    "P90",
                    "MAX",
                    "NOTE",
                ],
                &rows,
            ));
        }
        let failed: Vec<(&ServerUuid, &ServerOutcome)> = self
            .servers
            .iter()
            .filter(|(_, o)| matches!(o.status, ServerStatus::Failed | ServerStatus::TimedOut))
            .collect();
        if !failed.is_empty() {
            out.push_str("\nFailed:\n");
            for (uuid, o) in failed {
                let why = o
                    .failure
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| o.status.as_str().to_string());
                let _ = writeln!(out, "  {} ({uuid}): {why}", o.hostname);
            }
        }
        if !self.outliers.is_empty() {
            out.push_str("\nOutliers (slow servers):\n");
            for o in &self.outliers {
                let _ = writeln!(
                    out,
                    "  {} ({}): {} elapsed when flagged, median {}",
                    o.hostname,
                    o.server,
                    fmt_duration(o.elapsed),
                    fmt_duration(o.median)
                );
            }
        }
        let left: Vec<(&ServerUuid, &ServerOutcome)> = self
            .servers
            .iter()
            .filter(|(_, o)| o.status == ServerStatus::Interrupted)
            .collect();
        if !left.is_empty() {
            out.push_str(
                "\nLeft running when the run stopped waiting (they may still complete; follow a task with 'sdc-cnapi /tasks/<id>', or run the same command again):\n",
            );
            for (uuid, o) in left {
                let tasks: Vec<String> = o
                    .tasks
                    .iter()
                    .filter(|t| t.waiting)
                    .map(|t| format!("{} task {}", t.component, t.task))
                    .collect();
                let what = if tasks.is_empty() {
                    "no CNAPI task (CNAPI execute)".to_string()
                } else {
                    tasks.join(", ")
                };
                let _ = writeln!(out, "  {} ({uuid}): {what}", o.hostname);
            }
        }
        if self.interrupted {
            let c = self.counts();
            if c.not_started > 0 {
                let _ = writeln!(
                    out,
                    "\nInterrupted: {} servers were not started; run the same command again to finish.",
                    c.not_started
                );
            }
        }
        // The safety settings as they ended: an operator reading the
        // summary sees how close the run came to its budget.
        let c = self.counts();
        let mut safety = Vec::new();
        if let Some(canary) = &self.canary {
            safety.push(format!(
                "canary {} {}",
                canary.servers.join(", "),
                if canary.passed { "passed" } else { "failed" }
            ));
        }
        if let Some(budget) = self.budget {
            let failures = c.failed + c.timed_out;
            safety.push(format!(
                "{} of a failure budget of {budget}",
                if failures == 1 {
                    "1 failure".to_string()
                } else {
                    format!("{failures} failures")
                }
            ));
        }
        if !safety.is_empty() {
            let mut line = safety.join("; ");
            line[..1].make_ascii_uppercase();
            let _ = writeln!(out, "\n{line}.");
        }
        if let Some(h) = &self.halted {
            let _ = writeln!(out, "\n{h}");
        }
        let skipped = plan.skips.iter().filter(|s| s.blocking).count();
        let _ = write!(
            out,
            "\n{} {} of {} servers",
            match plan.operation {
                agentsadm_plan::Operation::Update => "Updated",
                agentsadm_plan::Operation::Install => "Installed on",
                agentsadm_plan::Operation::Remove => "Removed from",
            },
            c.succeeded,
            self.servers.len()
        );
        let mut extra = Vec::new();
        if c.failed > 0 {
            extra.push(format!("{} failed", c.failed));
        }
        if c.timed_out > 0 {
            extra.push(format!("{} timed out", c.timed_out));
        }
        if c.interrupted > 0 {
            extra.push(format!("{} left running", c.interrupted));
        }
        if c.not_started > 0 {
            extra.push(format!("{} not started", c.not_started));
        }
        if skipped > 0 {
            extra.push(format!("{skipped} skipped"));
        }
        if !extra.is_empty() {
            let _ = write!(out, " ({})", extra.join(", "));
        }
        let _ = writeln!(out, " in {}.", fmt_duration(self.elapsed));
        out
    }
}

fn row_key<'a>(order: &[&'a str], component: &str) -> &'a str {
    order
        .iter()
        .copied()
        .find(|c| *c == component)
        .unwrap_or("")
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
