//! CommandExecute of the bootstrap script (`agentsadm_api::bootstrap`) on
//! a mock server.
//!
//! - Rooted servers run it for real: the script as sent, by `bash`, with
//!   exactly the request's environment (plus the server's API URLs where
//!   the request does not name them, as for every command here) and
//!   `AGENTSADM_ROOT` set to the server's directory, so that it downloads
//!   from the simulated IMGAPI on 127.0.0.1 (any other IMGAPI host is
//!   refused before anything runs), checks and renames into that
//!   directory. A `timeout` (cn-agent's path) kills it with SIGKILL, as
//!   forkexec does.
//! - Mockcloud-layout servers have no files the script could rename into
//!   (their agents are three files each), so what it does is modelled: the
//!   installer puts the image there (`gz install IMAGE`), and the script's
//!   exit status (0, else 1 with the reason) is answered.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use agentsadm_api::bootstrap::BootstrapImage;
use agentsadm_api::cnapi::ExecuteRequest;

use super::execute::CommandOutcome;
use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::gz::GzLayout;

/// What the script's name is when CNAPI runs it (`$0`).
const SCRIPT_NAME: &str = "bootstrap-agentsadm.sh";

/// Run the bootstrap on `server` (module docs). `timeout_ms`: cn-agent's
/// `timeout`, if the request went that way.
pub(super) async fn run(
    core: &Arc<DcCore>,
    server: &Arc<MockServer>,
    request: &ExecuteRequest,
    image: BootstrapImage,
    timeout_ms: Option<u64>,
) -> CommandOutcome {
    if let Err(e) = core.ensure_prepared(server) {
        return CommandOutcome::exited(
            1,
            String::new(),
            format!(
                "{SCRIPT_NAME}: (simulator) {}\n",
                agentsadm_types::error::error_chain(&e)
            ),
        );
    }
    let env = core.env();
    let mut vars = request.env.clone();
    for (k, v) in env.command_env() {
        vars.entry(k).or_insert(v);
    }
    let imgapi = vars.get("IMGAPI_URL").cloned().unwrap_or_default();
    if !loopback(&imgapi) {
        return CommandOutcome::exited(
            1,
            String::new(),
            format!(
                "{SCRIPT_NAME}: (simulator) simulated servers reach only 127.0.0.1, not IMGAPI_URL={imgapi:?}; nothing was run\n"
            ),
        );
    }
    let outcome = match core.config.gz_layout {
        GzLayout::Rooted => {
            vars.insert("AGENTSADM_ROOT".into(), server.root.display().to_string());
            run_bash(core, request, vars, timeout_ms).await
        }
        GzLayout::Mockcloud => {
            let argv = agentsadm_api::compat::record_args(image.image);
            let target = server.target(&core.config.datacenter);
            let r = core.gz.run(env, target, argv, vars).await;
            match r.exit_status {
                0 => CommandOutcome::exited(
                    0,
                    format!(
                        "{SCRIPT_NAME}: agentsadm image {} is in place\n",
                        image.image
                    ),
                    String::new(),
                ),
                _ => CommandOutcome::exited(
                    1,
                    String::new(),
                    format!(
                        "{SCRIPT_NAME}: error: cannot put agentsadm image {} in place: {}\n",
                        image.image,
                        r.stderr.trim()
                    ),
                ),
            }
        }
    };
    core.touch();
    outcome
}

/// Whether `url` is `http://127.0.0.1[:port]...`.
fn loopback(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    host == "127.0.0.1"
}

/// The request's environment variable that names the checkpoint a test
/// wants the script killed at (SIGKILL, as a server losing power would).
const CRASH_AT_VAR: &str = "AGENTSADM_TEST_CRASH_AT";

/// The script as this server runs it: where the request names a
/// checkpoint in [`CRASH_AT_VAR`], preceded by the `checkpoint` function
/// that kills it there (the script ships without one).
fn with_crash_hook(script: &str, vars: &std::collections::BTreeMap<String, String>) -> String {
    match vars.get(CRASH_AT_VAR) {
        Some(_) => format!(
            "checkpoint() {{ if [[ ${{{CRASH_AT_VAR}:-}} == \"$1\" ]]; then kill -9 $$; fi; }}\n{script}"
        ),
        None => script.to_string(),
    }
}

/// The script by `bash`, with exactly `vars` as its environment.
async fn run_bash(
    core: &DcCore,
    request: &ExecuteRequest,
    vars: std::collections::BTreeMap<String, String>,
    timeout_ms: Option<u64>,
) -> CommandOutcome {
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(with_crash_hook(&request.script, &vars))
        .arg(SCRIPT_NAME)
        .args(&request.args)
        .env_clear()
        .envs(&vars)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return CommandOutcome::exited(
                127,
                String::new(),
                format!("(simulator) cannot run bash for the bootstrap: {e}\n"),
            );
        }
    };
    let limit = timeout_ms.map_or(Duration::MAX, Duration::from_millis);
    let output = tokio::select! {
        r = tokio::time::timeout(limit, child.wait_with_output()) => match r {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                return CommandOutcome::exited(
                    1,
                    String::new(),
                    format!("(simulator) the bootstrap's bash failed: {e}\n"),
                );
            }
            // Dropped: killed (SIGKILL).
            Err(_) => return super::execute::killed(),
        },
        () = core.shutdown.cancelled() => return super::execute::killed(),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    match output.status.code() {
        Some(code) => CommandOutcome::exited(code, stdout, stderr),
        None => CommandOutcome::signalled(stdout, stderr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_imgapi() {
        assert!(loopback("http://127.0.0.1:4000"));
        assert!(loopback("http://127.0.0.1/"));
        assert!(!loopback("http://10.99.99.7:80"));
        assert!(!loopback("http://127.0.0.1.example.com"));
        assert!(!loopback(""));
    }
}
