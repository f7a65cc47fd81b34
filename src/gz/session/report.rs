//! What is installed on the server (the layout reads it), and reporting it
//! to CNAPI as `server.agents` after a run.

use crate::api::ApiError;
use crate::platform::blocking;
use crate::remote::{AgentsReport, GzResult};

use super::GzSession;

impl GzSession {
    /// What is installed on this server.
    pub async fn report(&self) -> AgentsReport {
        let layout = self.layout.clone();
        let catalog = self.settings.catalog.clone();
        let server = self.server;
        blocking(move || layout.report(&catalog, server)).await
    }

    /// POST the report to CNAPI (`server.agents`).
    pub async fn post(&self, report: &AgentsReport) -> Result<(), ApiError> {
        match &self.cnapi {
            Some(c) => c.update_server_agents(self.server, &report.agents).await,
            None => Ok(()),
        }
    }

    /// Whether a CNAPI client is configured.
    pub fn has_cnapi(&self) -> bool {
        self.cnapi.is_some()
    }

    pub(super) async fn post_report(&self, result: &mut GzResult) {
        if self.settings.no_cnapi {
            return;
        }
        let report = self.report().await;
        if let Err(e) = self.post(&report).await {
            result.warnings.push(format!(
                "the installed set was not reported to CNAPI ({}); run `agentsadm gz report --post` later",
                crate::error::error_chain(&e)
            ));
        }
    }
}
