//! Work that stops cn-agent, asked for from inside cn-agent, is handed to
//! the agentsadm-install transient service.
//!
//! A command cn-agent runs (CNAPI CommandExecute in cn-agent mode) lives in
//! cn-agent's SMF contract: the old package's `svcadm disable -s cn-agent`
//! kills it mid-transaction and leaves cn-agent disabled, after which CNAPI
//! cannot reach the server. Whether we are such a child is decided from what
//! is real: the caller says so (`--inside-cn-agent`), or, on SmartOS, our
//! own contract names the service. Real cn-agent passes a script exactly the
//! request's environment, so `SMF_FMRI` proves nothing.

use std::path::Path;

use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_platform::INSTALL_SERVICE_FMRI;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;

use super::super::fsutil;
use super::super::step::Step;
use super::GzSession;
use super::refusal;

/// The flag that says the caller is cn-agent; a handed-off job runs in its
/// own contract, so its command line drops it.
const INSIDE_FLAG: &str = "--inside-cn-agent";

impl GzSession {
    /// The SMF services whose contract this run lives in, as far as known.
    async fn caller_services(&self) -> Vec<String> {
        let mut services = Vec::new();
        if self.settings.inside_cn_agent
            && let Some(c) = self.settings.catalog.get("cn-agent")
        {
            services.extend(c.smf_services.iter().cloned());
        }
        if let Some(fmri) = self.platform.caller_service().await {
            services.push(fmri);
        }
        services
    }

    /// When `components` include the service this run lives in, hand the
    /// whole job (`verb`: install, remove, rollback) to the agentsadm-install
    /// transient service, put its note (or why it could not) in `result`
    /// and return true; false to go on here.
    pub(super) async fn handoff(
        &self,
        verb: &str,
        components: &[&Component],
        result: &mut GzResult,
    ) -> bool {
        match self.try_handoff(verb, components).await {
            None => false,
            Some(outcome) => {
                match outcome {
                    Ok(note) => result.warnings.push(note),
                    Err(f) => result.error = Some(f),
                }
                true
            }
        }
    }

    /// The hand-off's note, or `None` to go on here. A layout without SMF
    /// has no contract to escape.
    async fn try_handoff(
        &self,
        verb: &str,
        components: &[&Component],
    ) -> Option<Result<String, GzFailure>> {
        if !self.layout.runs_services() {
            return None;
        }
        let callers = self.caller_services().await;
        let (own, fmri) = components.iter().find_map(|c| {
            c.smf_services
                .iter()
                .find(|s| callers.contains(s))
                .map(|s| (*c, s.clone()))
        })?;
        let Some(argv) = &self.settings.job_argv else {
            return Some(Err(refusal(
                Some(&own.name),
                Step::Handoff,
                format!(
                    "cannot {verb} {} from inside its own SMF service {fmri}",
                    own.name
                ),
            )));
        };
        let argv = match std::env::current_dir() {
            Ok(cwd) => job_argv(argv, &cwd),
            Err(e) => {
                return Some(Err(refusal(
                    Some(&own.name),
                    Step::Handoff,
                    format!("cannot read the working directory to hand the job off: {e}"),
                )));
            }
        };
        let job = self.paths().state_dir().join("job.json");
        let text =
            serde_json::to_vec_pretty(&serde_json::json!({ "argv": argv })).unwrap_or_default();
        let written = {
            let job = job.clone();
            blocking(move || fsutil::write_atomic(&job, &text)).await
        };
        let launched = match written {
            Ok(()) => self
                .platform
                .launch_transient_job(&job)
                .await
                .map_err(|e| agentsadm_types::error::error_chain(&e)),
            Err(e) => Err(e.to_string()),
        };
        Some(match launched {
            Ok(()) => Ok(format!(
                "{verb} of {} cannot run from inside its own SMF service ({fmri}); the job was handed to {INSTALL_SERVICE_FMRI}; wait for CNAPI server.agents to show the result",
                own.name
            )),
            Err(message) => Err(refusal(
                Some(&own.name),
                Step::Handoff,
                format!("cannot hand the job to {INSTALL_SERVICE_FMRI}: {message}"),
            )),
        })
    }
}

/// The command line for the handed-off job: relative paths made absolute
/// against `cwd` (the job runs from the service's directory, not ours), and
/// without [`INSIDE_FLAG`] (the job runs in its own contract).
fn job_argv(argv: &[String], cwd: &Path) -> Vec<String> {
    let absolute = |value: &str| -> String {
        let path = Path::new(value);
        if path.is_relative() && cwd.join(path).exists() {
            cwd.join(path).to_string_lossy().into_owned()
        } else {
            value.to_string()
        }
    };
    argv.iter()
        .filter(|a| a.as_str() != INSIDE_FLAG)
        .map(|a| match a.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => format!("{flag}={}", absolute(value)),
            _ if a.starts_with('-') => a.clone(),
            _ => absolute(a),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_argv_is_absolute_and_out_of_contract() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cn-agent-x.tgz"), b"x").unwrap();
        std::fs::create_dir(d.path().join("gzroot")).unwrap();
        let argv: Vec<String> = [
            "gz",
            "install",
            "cn-agent-x.tgz",
            "--root",
            "gzroot",
            "--catalog=gzroot",
            "--inside-cn-agent",
            "--json",
            "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = job_argv(&argv, d.path());
        let abs = |r: &str| d.path().join(r).to_string_lossy().into_owned();
        assert_eq!(
            got,
            vec![
                "gz".to_string(),
                "install".into(),
                abs("cn-agent-x.tgz"),
                "--root".into(),
                abs("gzroot"),
                format!("--catalog={}", abs("gzroot")),
                "--json".into(),
                "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f".into(),
            ]
        );
    }
}
