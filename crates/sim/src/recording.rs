//! A reporter for tests: one line per execution event, kept in memory.

use std::sync::Mutex;

use agentsadm_orchestrate::report::{ExecEvent, Reporter};

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
            ExecEvent::Stopping(h) => format!("stopping {h}"),
            ExecEvent::Paused { api, .. } => format!("paused {api}"),
            ExecEvent::Resumed { api, .. } => format!("resumed {api}"),
            ExecEvent::Finished(_) => "finished".to_string(),
        };
        if let Ok(mut l) = self.lines.lock() {
            l.push(line);
        }
    }
}
