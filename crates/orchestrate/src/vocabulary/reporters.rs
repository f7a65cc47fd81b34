//! The reporter beside the command line's progress display: the run's log
//! ([`LogReporter`]: bunyan records of every event).

use crate::vocabulary::report::ExecEvent;
use crate::vocabulary::report::FailureStage;
use crate::vocabulary::report::InFlight;
use crate::vocabulary::report::Reporter;
use crate::vocabulary::report::ServerStatus;
use crate::vocabulary::report::fmt_duration;

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

/// A passed gate in a step's line: `; health gate (gz health) passed: online in 1.2s`.
fn gate_words(g: &crate::vocabulary::report::GateResult) -> String {
    format!(
        "; health gate ({}) {}: {}{}",
        g.gate.as_str(),
        if g.passed { "passed" } else { "failed" },
        g.seen,
        g.elapsed
            .map(|d| format!(" in {}", fmt_duration(d)))
            .unwrap_or_default()
    )
}

/// The servers a run ended without finishing: one record each for those
/// still in flight when it stopped waiting (their tasks may complete) and
/// one for those never started.
fn log_left_behind(r: &crate::vocabulary::report::ExecReport) {
    let mut not_started = Vec::new();
    for (server, o) in &r.servers {
        match o.status {
            ServerStatus::Interrupted => {
                let tasks = o.waiting_tasks();
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = "executor",
                    event = "left-running",
                    server = %server,
                    server_name = o.hostname.as_str(),
                    tasks = tasks.join(", "),
                    elapsed_ms = o.elapsed.as_millis() as u64,
                    "left running when the run stopped waiting: {} ({}); it may still complete",
                    o.hostname,
                    if tasks.is_empty() { "no CNAPI task: CNAPI execute".to_string() } else { tasks.join(", ") }
                );
            }
            ServerStatus::NotStarted => not_started.push(o.hostname.as_str()),
            _ => {}
        }
    }
    if !not_started.is_empty() {
        tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "executor",
            event = "not-started",
            servers = not_started.join(","),
            halted = r.halted.as_ref().map(ToString::to_string),
            interrupted = r.interrupted,
            "{} servers not started: {}",
            not_started.len(),
            not_started.join(", ")
        );
    }
}

/// A step's or a server's end, done or failed.
fn log_finished(event: &ExecEvent<'_>) {
    const C: &str = "executor";
    match event {
        ExecEvent::StepFinished {
            server,
            hostname,
            step,
            elapsed,
            failure,
            task,
            gate,
        } => {
            let task = task.map(|t| t.to_string());
            let gate_kind = gate.map(|g| g.gate.as_str());
            let gate_passed = gate.map(|g| g.passed);
            let gate_seen = gate.map(|g| g.seen.as_str());
            let gate_ms = gate.and_then(|g| g.elapsed).map(|d| d.as_millis() as u64);
            match failure {
                None => tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    server = %server,
                    server_name = *hostname,
                    agent = step.component.as_str(),
                    action = step.action.verb(),
                    elapsed_ms = elapsed.as_millis() as u64,
                    task,
                    gate = gate_kind,
                    gate_passed,
                    gate_seen,
                    gate_elapsed_ms = gate_ms,
                    "step done in {}{}",
                    fmt_duration(*elapsed),
                    gate.map(gate_words).unwrap_or_default()
                ),
                Some(f) => tracing::error!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    server = %server,
                    server_name = *hostname,
                    agent = step.component.as_str(),
                    action = step.action.verb(),
                    elapsed_ms = elapsed.as_millis() as u64,
                    stage = %f.stage,
                    task = task.or_else(|| failure_task(&f.stage)),
                    gate = gate_kind,
                    gate_passed,
                    gate_seen,
                    error = f.message.as_str(),
                    "step failed after {}: {}: {}",
                    fmt_duration(*elapsed),
                    f.stage,
                    f.message
                ),
            }
        }
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
        _ => {}
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
            ExecEvent::StepFinished { .. } | ExecEvent::ServerFinished { .. } => {
                log_finished(event)
            }
            ExecEvent::Outlier(o) => tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                component = C,
                server = %o.server,
                server_name = o.hostname.as_str(),
                elapsed_ms = o.elapsed.as_millis() as u64,
                median_ms = o.median.as_millis() as u64,
                basis = ?o.basis,
                "outlier: {} {}",
                o.hostname,
                o.describe()
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
            ExecEvent::Stopping(h) => {
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    reason = serde_json::to_string(h).unwrap_or_default(),
                    "{h}"
                )
            }
            ExecEvent::Paused {
                api,
                noticed,
                bound,
            } => tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                component = C,
                api = %api,
                noticed = *noticed,
                bound_ms = bound.as_millis() as u64,
                "{}",
                super::report::paused_text(*api, noticed, *bound)
            ),
            ExecEvent::Resumed { api, after } => {
                tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = C,
                    api = %api,
                    after_ms = after.as_millis() as u64,
                    "{api} answers again: the rollout carries on"
                )
            }
            ExecEvent::Finished(r) => {
                log_left_behind(r);
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
