//! The reporter beside the command line's progress display: the run's log
//! ([`LogReporter`]: bunyan records of every event).

use super::report::ExecEvent;
use super::report::FailureStage;
use super::report::InFlight;
use super::report::Reporter;
use super::report::ServerStatus;
use super::report::fmt_duration;

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
                median_ms = o.median.map(|m| m.as_millis() as u64),
                usual_ms = o.usual.map(|u| u.as_millis() as u64),
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
