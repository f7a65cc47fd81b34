//! What is installed on the server (the layout reads it), and reporting it
//! to CNAPI as `server.agents` after a run.

use agentsadm_api::ApiError;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::ReportError;
use agentsadm_platform::blocking;
use agentsadm_types::component::ComponentName;

use super::super::paths::GzPaths;
use super::super::txn;
use super::BrokenMarker;

use super::GzSession;

impl GzSession {
    /// What is installed on this server.
    ///
    /// A component with a transaction journal (an install under way in
    /// another run, or one a killed run left for the next locked run to
    /// finish or undo) or with an incomplete rollback recorded is reported
    /// as an error, never as installed: what is on disk may be half done.
    pub async fn report(&self) -> AgentsReport {
        let mut report = self.files_report().await;
        if self.layout.runs_services() {
            report.services_off = self.services_off(&report).await;
        }
        report
    }

    /// The installed components whose SMF instances are all disabled.
    async fn services_off(&self, report: &AgentsReport) -> Vec<ComponentName> {
        let mut off = Vec::new();
        for a in &report.agents {
            let Some(c) = self.settings.catalog.get(&a.name).cloned() else {
                continue;
            };
            let Ok(Some(fp)) = self.current(&c).await else {
                continue;
            };
            let files: Vec<std::path::PathBuf> = fp
                .smf_manifests
                .iter()
                .map(|r| self.paths().at(r))
                .collect();
            let Ok(fmris) = blocking(move || super::super::keep_off::instances(&files, &[])).await
            else {
                continue;
            };
            let mut all_off = !fmris.is_empty();
            for fmri in &fmris {
                let state = self.platform.smf_state(fmri).await.ok().flatten();
                all_off &= state.is_none_or(|s| s == agentsadm_platform::ServiceState::Disabled);
            }
            if all_off {
                off.push(c.name.clone());
            }
        }
        off
    }

    /// What the files say (the layout's report, journals, broken markers),
    /// without asking SMF which services are off.
    pub async fn files_report(&self) -> AgentsReport {
        let layout = self.layout.clone();
        let catalog = self.settings.catalog.clone();
        let server = self.server;
        blocking(move || {
            let mut report = layout.report(&catalog, server);
            let paths = layout.paths();
            for c in catalog.iter() {
                let journal = paths.journal_file(&c.name);
                let broken = paths.broken_file(&c.name);
                let message = if let Ok(bytes) = crate::fsutil::read_small(&broken) {
                    Some(
                        serde_json::from_slice::<BrokenMarker>(&bytes)
                            .map(|m| format!("broken: {}", m.message))
                            .unwrap_or_else(|_| {
                                format!(
                                    "broken: a rollback did not complete (see {}); reinstall it with `agentsadm gz install <image> --force`",
                                    broken.display()
                                )
                            }),
                    )
                } else if journal.exists() {
                    Some(format!(
                        "a transaction is under way or was interrupted (journal {}); the next locked agentsadm gz run finishes or undoes it",
                        journal.display()
                    ))
                } else {
                    None
                };
                if let Some(message) = message {
                    report.agents.retain(|a| a.name != c.name);
                    report.errors.retain(|e| e.name != c.name);
                    report.errors.push(ReportError {
                        name: c.name.to_string(),
                        message,
                    });
                } else if let Some(note) = not_kept(paths, &c.name)
                    && report.agents.iter().any(|a| a.name == c.name)
                {
                    // Installed, but without the copy `gz rollback` needs.
                    report.errors.push(ReportError {
                        name: c.name.to_string(),
                        message: note,
                    });
                }
            }
            report
        })
        .await
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

    /// After a locked run that may have changed what is installed: the
    /// registrations cn-agent reads ([`super::super::registration`]) first,
    /// then the report to CNAPI.
    pub(super) async fn post_report(&self, result: &mut GzResult) {
        let layout = self.layout.clone();
        let catalog = self.settings.catalog.clone();
        result
            .warnings
            .extend(blocking(move || layout.register(&catalog)).await);
        if self.settings.no_cnapi {
            return;
        }
        let report = self.report().await;
        if let Err(e) = self.post(&report).await {
            result.warnings.push(format!(
                "the installed set was not reported to CNAPI ({}); run `agentsadm gz report --post` later",
                agentsadm_types::error::error_chain(&e)
            ));
        }
    }
}

/// What `gz report` says of a component whose last upgrade could not keep
/// the version it replaced (the commit's note), if that is so. Blocking.
fn not_kept(paths: &GzPaths, component: &ComponentName) -> Option<String> {
    let file = txn::not_kept_file(paths, component);
    let bytes = crate::fsutil::read_small(&file).ok()?;
    let note = serde_json::from_slice::<txn::NotKept>(&bytes)
        .map(|n| n.message)
        .unwrap_or_else(|_| {
            format!(
                "{component}: the version its last upgrade replaced was not kept (see {}); `agentsadm gz rollback {component}` is not possible",
                file.display()
            )
        });
    let note = note
        .strip_prefix(&format!("{component}: "))
        .map(str::to_string)
        .unwrap_or(note);
    Some(format!("no previous version kept: {note}"))
}
