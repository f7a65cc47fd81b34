//! One run as the history records it: who ran what and when, the plan's
//! changes, and per server and component the image before and after, the
//! outcome, the CNAPI tasks, the time taken and the health gate's verdict.
//!
//! Entries are read back from files and from SAPI, which anyone with SAPI
//! access can write: every field has a default, and an entry that does not
//! parse is left out, never trusted half-way.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::vocabulary::report::{ExecReport, ServerOutcome, ServerStatus, StepStatus};
use agentsadm_plan::{Action, Plan, ServerPlan};
use agentsadm_types::ids::{ImageUuid, RunId, ServerUuid, ServiceUuid, TaskId};

/// How a run stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Started and not finished: its process still runs (or holds the
    /// datacenter lock).
    #[default]
    Running,
    /// Every server succeeded, every record change was made.
    Succeeded,
    /// Finished with failed, timed-out or skipped servers (exit status 2).
    Partial,
    /// Ended in an error before or while starting (nothing, or only
    /// imports and service defaults, changed).
    Failed,
    /// Stopped before it finished: Ctrl-C, or the process died (kill -9,
    /// a crash, the headnode rebooting); the entry holds what it knows.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// A service default image the run moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRecord {
    pub component: String,
    pub service: Option<ServiceUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    pub to: Option<ImageUuid>,
    #[serde(default)]
    pub to_version: String,
    /// Put back when the rollout halted (a failed canary, the budget).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub put_back: bool,
}

/// What the plan changes, in short.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// The components in play.
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub servers: usize,
    #[serde(default)]
    pub steps: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_changes: Vec<ServiceRecord>,
    /// Record changes (CNAPI reports, SAPI services and instances, a
    /// server's CNAPI record), one line each as the plan shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<String>,
    /// When the plan expected the last server to finish (history-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_finish_s: Option<f64>,
}

/// One component on one server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub component: String,
    /// `install`, `upgrade` or `remove`.
    #[serde(default)]
    pub action: String,
    /// The image before (`None`: not installed, or not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    /// The image the step installs (`None`: a removal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<ImageUuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<String>,
    /// `done`, `failed`, `not-run`, `unknown` (an API stopped answering
    /// while it ran), `reverted` (unhealthy: the image before is back), or
    /// `installed-unchecked` (failed, but the install stood: only its
    /// health check could not run).
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub elapsed_s: f64,
    /// The health gate (`installer`, `gz health`, ...) and its verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_passed: Option<bool>,
    /// How long a `gz health` gate took (part of `elapsed_s`; it
    /// overlaps the next components' installs, so the planner counts it
    /// apart: [`agentsadm_plan::timing::Durations::with_gates`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_s: Option<f64>,
}

impl StepRecord {
    /// The step changed the server: it ran to the end and was not put
    /// back, or its install stood though its health check could not run.
    pub fn changed(&self) -> bool {
        self.status == "done" || self.status == INSTALLED_UNCHECKED
    }

    pub fn elapsed(&self) -> Duration {
        Duration::try_from_secs_f64(self.elapsed_s).unwrap_or_default()
    }
}

/// [`StepRecord::status`] of a step that failed after its install stood.
pub const INSTALLED_UNCHECKED: &str = "installed-unchecked";

/// One server's part of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub server: Option<ServerUuid>,
    #[serde(default)]
    pub hostname: String,
    /// The server's status as the report names it (`succeeded`, `failed`,
    /// `timed-out`, `interrupted`, `not-started`).
    #[serde(default)]
    pub outcome: String,
    #[serde(default)]
    pub elapsed_s: f64,
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When it started, in seconds from the run's start (the timeline of
    /// `agentsadm history RUN`); none for a server that never started, or
    /// in a journal written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_s: Option<f64>,
    /// It was in the canary wave.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canary: bool,
    /// CNAPI `rack_identifier` when the plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// It was flagged as an outlier while it ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outlier: bool,
}

/// One run of a changing command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub id: Option<RunId>,
    /// What the run did, as the datacenter lock names it
    /// (`update vm-agent`).
    #[serde(default)]
    pub operation: String,
    /// The command line.
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub host: String,
    /// `user@host:pid`, as the lock record names its owner.
    #[serde(default)]
    pub owner: String,
    /// RFC 3339.
    #[serde(default)]
    pub started: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(default)]
    pub status: RunStatus,
    /// The run this one reverts (`agentsadm revert RUN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverts: Option<RunId>,
    #[serde(default)]
    pub plan: PlanRecord,
    /// In the order they finished.
    #[serde(default)]
    pub servers: Vec<ServerRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<u8>,
    /// Why the run stopped starting servers, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// The halt's kind, as the report's JSON names it (`declined`,
    /// `budget`, `canary`, `lock-lost`, `api-lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_reason: Option<String>,
    /// The run whose declined canary this run carries on (read from the
    /// history when listed, not recorded: [`link_continuations`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<RunId>,
    /// The run that carried on after this run's declined canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_by: Option<RunId>,
    /// The error that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// SAPI and CNAPI record changes made by this run (not those found
    /// made already), and those that failed or were not made.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_made: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_failed: usize,
    /// Servers whose records this run changed with no step on them
    /// (`server delete`, `factory-reset`, `adopt`, `check --fix`): they
    /// count as changed as much as a server an install changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub record_servers: Vec<ServerUuid>,
    /// Instances whose params this run wrote with no step (`adopt`, `check
    /// --fix`'s adoptions, completions and restores): `check`'s history
    /// rule counts them as the steps' installs, so a bare re-adoption of
    /// one is drift as it is for an instance a step wrote. Absent from
    /// entries of earlier versions. By server, its components: a map
    /// rather than pairs, because SAPI's copy of the history is bounded
    /// in bytes (an `adopt` of a whole datacenter names every server).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params_written: BTreeMap<ServerUuid, Vec<String>>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl HistoryEntry {
    /// Servers changed and servers that failed (or timed out). Servers
    /// left running at an interrupt are not failures
    /// ([`HistoryEntry::interrupted`]).
    pub fn counts(&self) -> (usize, usize) {
        // A server counts once, whether a step or a record change (or
        // both) changed it.
        let stepped = self
            .servers
            .iter()
            .filter(|s| s.steps.iter().any(StepRecord::changed));
        let mut by_uuid: std::collections::BTreeSet<ServerUuid> =
            self.record_servers.iter().copied().collect();
        let mut unnamed = 0;
        for s in stepped {
            match s.server {
                Some(u) => {
                    by_uuid.insert(u);
                }
                None => unnamed += 1,
            }
        }
        let changed = by_uuid.len() + unnamed;
        let failed = self
            .servers
            .iter()
            .filter(|s| matches!(s.outcome.as_str(), "failed" | "timed-out"))
            .count();
        (changed, failed)
    }

    /// Servers still in progress when the run stopped waiting (their
    /// tasks may have finished since).
    pub fn interrupted(&self) -> usize {
        self.servers
            .iter()
            .filter(|s| s.outcome == "interrupted")
            .count()
    }

    /// When it started.
    pub fn started_at(&self) -> Option<std::time::SystemTime> {
        humantime::parse_rfc3339_weak(&self.started).ok()
    }

    /// How long it took, once it ended.
    pub fn took(&self) -> Option<Duration> {
        if let Some(s) = self.elapsed_s {
            return Duration::try_from_secs_f64(s).ok();
        }
        let end = humantime::parse_rfc3339_weak(self.ended.as_deref()?).ok()?;
        end.duration_since(self.started_at()?).ok()
    }

    /// Put in a server's record (a later one replaces an earlier one).
    pub fn record_server(&mut self, record: ServerRecord) {
        match self
            .servers
            .iter_mut()
            .find(|s| s.server.is_some() && s.server == record.server)
        {
            Some(s) => *s = record,
            None => self.servers.push(record),
        }
    }

    /// The short form of the id operators type (`1f0c2a9e`).
    pub fn short_id(&self) -> String {
        self.id
            .map(|i| i.to_string()[..8].to_string())
            .unwrap_or_else(|| "?".into())
    }
}

/// The plan as the history keeps it.
pub fn plan_record(plan: &Plan) -> PlanRecord {
    PlanRecord {
        components: plan.components().iter().map(ToString::to_string).collect(),
        servers: plan.servers().len(),
        steps: plan.step_count(),
        service_changes: plan
            .service_changes()
            .iter()
            .map(|c| ServiceRecord {
                component: c.component.to_string(),
                service: Some(c.service),
                from: c.from,
                from_version: c.from_version.clone(),
                to: Some(c.to.uuid),
                to_version: c.to.version.to_string(),
                put_back: false,
            })
            .collect(),
        records: plan
            .records()
            .iter()
            .map(agentsadm_plan::display::record_line)
            .collect(),
        expected_finish_s: plan
            .rollout()
            .expected_finish
            .map(|d| round3(d.as_secs_f64())),
    }
}

/// One server's record from its plan and outcome.
pub fn server_record(uuid: ServerUuid, sp: &ServerPlan, outcome: &ServerOutcome) -> ServerRecord {
    let steps = sp
        .steps
        .iter()
        .map(|step| {
            let result = outcome.steps.iter().find(|r| r.component == step.component);
            let gate = outcome.gates.iter().find(|g| g.component == step.component);
            let reverted = outcome.reverted(&step.component);
            let status = match (reverted, result.map(|r| r.status)) {
                (true, _) => "reverted",
                (false, Some(StepStatus::Done)) => "done",
                (false, Some(StepStatus::Failed)) if result.is_some_and(|r| r.installed) => {
                    INSTALLED_UNCHECKED
                }
                (false, Some(StepStatus::Failed)) => "failed",
                (false, Some(StepStatus::NotRun) | None) => "not-run",
                (false, Some(StepStatus::Unknown)) => "unknown",
            };
            let (from, from_version) = match &step.action {
                Action::Upgrade { from, .. } | Action::Remove { installed: from } => {
                    (from.image, Some(from.version.to_string()))
                }
                // A disable or enable moves no image: nothing for a revert
                // to put back.
                Action::Install { .. } | Action::Disable { .. } | Action::Enable => (None, None),
            };
            StepRecord {
                component: step.component.to_string(),
                action: step.action.verb().to_string(),
                from,
                from_version,
                to: step.action.target().map(|t| t.uuid),
                to_version: step.action.target().map(|t| t.version.clone()),
                status: status.to_string(),
                elapsed_s: round3(result.map(|r| r.elapsed.as_secs_f64()).unwrap_or(0.0)),
                gate: gate.map(|g| g.gate.as_str().to_string()),
                gate_passed: gate.map(|g| g.passed),
                gate_s: gate
                    .and_then(|g| g.elapsed)
                    .map(|d| round3(d.as_secs_f64())),
            }
        })
        .collect();
    ServerRecord {
        server: Some(uuid),
        hostname: sp.hostname.clone(),
        outcome: outcome.status.as_str().to_string(),
        elapsed_s: round3(outcome.elapsed.as_secs_f64()),
        steps,
        tasks: outcome.tasks.iter().map(|t| t.task).collect(),
        failure: outcome.failure.as_ref().map(ToString::to_string),
        rack: sp.rack.clone(),
        ..ServerRecord::default()
    }
}

/// The end of a run from its report: status, every server (those that
/// never started too), what a halt put back.
pub fn finish_from_report(entry: &mut HistoryEntry, plan: &Plan, report: &ExecReport) {
    for (uuid, outcome) in &report.servers {
        if let Some(sp) = plan.servers().get(uuid) {
            entry.record_server(server_record(*uuid, sp, outcome));
        }
    }
    if report.service_changes_reverted > 0 {
        for c in &mut entry.plan.service_changes {
            c.put_back = c.from.is_some();
        }
    }
    let interrupted = report.interrupted
        || report
            .servers
            .values()
            .any(|o| o.status == ServerStatus::Interrupted);
    entry.status = if report.all_succeeded() {
        RunStatus::Succeeded
    } else if interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Partial
    };
    let made = |r: &&crate::vocabulary::outcomes::RecordOutcome| {
        matches!(
            r.status,
            crate::vocabulary::outcomes::RecordStatus::Done
                | crate::vocabulary::outcomes::RecordStatus::ResetStarted { .. }
        )
    };
    entry.records_made = report.records.iter().filter(made).count();
    entry.records_failed = report.records.iter().filter(|r| !r.ok()).count();
    let record_servers: std::collections::BTreeSet<ServerUuid> = report
        .records
        .iter()
        .filter(made)
        .filter_map(|r| r.change.server())
        .collect();
    entry.record_servers = record_servers.into_iter().collect();
    let mut written: BTreeMap<ServerUuid, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (server, component) in report
        .records
        .iter()
        .filter(made)
        .filter_map(|r| r.change.writes_params())
    {
        written
            .entry(server)
            .or_default()
            .insert(component.to_string());
    }
    entry.params_written = written
        .into_iter()
        .map(|(server, components)| (server, components.into_iter().collect()))
        .collect();
    entry.exit_status = Some(report.exit_status(plan));
    entry.halted = report.halted.as_ref().map(ToString::to_string);
    entry.halt_reason = report.halted.as_ref().and_then(|h| {
        serde_json::to_value(h).ok()?["reason"]
            .as_str()
            .map(str::to_string)
    });
    entry.elapsed_s = Some(round3(report.elapsed.as_secs_f64()));
}

pub(crate) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Link each run that stopped at a declined canary with the next run of
/// the same operation, which carries on the rollout it split
/// (`entries` oldest first): both say so ([`HistoryEntry::continues`],
/// [`HistoryEntry::continued_by`]).
pub fn link_continuations(entries: &mut [HistoryEntry]) {
    for i in 0..entries.len() {
        let (earlier, rest) = entries.split_at_mut(i + 1);
        let a = &mut earlier[i];
        if a.halt_reason.as_deref() != Some("declined") {
            continue;
        }
        let Some(b) = rest.iter_mut().find(|b| b.operation == a.operation) else {
            continue;
        };
        a.continued_by = b.id;
        b.continues = a.id;
    }
}

/// Now, as entries write times.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(outcome: &str, step: &str) -> ServerRecord {
        ServerRecord {
            server: Some(ServerUuid::from_u128(outcome.len() as u128)),
            outcome: outcome.into(),
            steps: vec![StepRecord {
                component: "vm-agent".into(),
                status: step.into(),
                ..StepRecord::default()
            }],
            ..ServerRecord::default()
        }
    }

    #[test]
    fn servers_left_running_at_an_interrupt_are_not_failures() {
        let e = HistoryEntry {
            servers: vec![
                server("succeeded", "done"),
                server("failed", "failed"),
                server("interrupted", "not-run"),
            ],
            ..HistoryEntry::default()
        };
        assert_eq!(e.counts(), (1, 1));
        assert_eq!(e.interrupted(), 1);
    }
}
