//! apm-compatible lifecycle hooks (docs/triton/agent-install.md §2.1).
//!
//! Like apm, a hook is spawned directly (it needs its exec bit and a `#!`
//! line; there is no shell in between), with the installer's environment
//! plus exactly apm's variables:
//! `npm_config_prefix`, `npm_config_smfdir`, `npm_config_etc`,
//! `npm_config_dbdir`, `npm_package_name`, `npm_package_version`.
//! In a rooted directory the prefix points into the root, so a hook never
//! touches the real machine. Unlike apm:
//! - a hook has a timeout; on expiry its whole process group is killed;
//! - a hook killed by a signal is a failure (apm counts it as success);
//! - the tails of its stdout and stderr go into the error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::package::Hook;

use super::package::PackageJson;

/// How much of a hook's stdout and stderr is kept for the error message.
const TAIL_BYTES: usize = 2048;

/// How long to wait for a hook's output pipes to close after it exited (a
/// background child it started may keep them open forever).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Where and how hooks run on this server.
#[derive(Clone, Debug)]
pub struct HookEnv {
    /// The apm prefix (`<root>/opt/smartdc/agents`).
    pub prefix: PathBuf,
    /// Added to the inherited environment (API URLs from the caller).
    pub extra: BTreeMap<String, String>,
    pub timeout: Duration,
    /// Why hooks do not run on this server at all (they would act on the
    /// host, not the root), if they do not.
    pub skip: Option<String>,
}

impl HookEnv {
    /// The variables apm sets for one package.
    pub fn apm_vars(&self, package: &PackageJson) -> Vec<(String, String)> {
        let p = |s: &str| self.prefix.join(s).to_string_lossy().into_owned();
        vec![
            (
                "npm_config_prefix".into(),
                self.prefix.to_string_lossy().into_owned(),
            ),
            ("npm_config_smfdir".into(), p("smf")),
            ("npm_config_etc".into(), p("etc")),
            ("npm_config_dbdir".into(), p("db")),
            ("npm_package_name".into(), package.name.clone()),
            ("npm_package_version".into(), package.version.clone()),
        ]
    }
}

/// A hook that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{hook} script {script} does not exist in the package")]
    Missing { hook: &'static str, script: PathBuf },
    #[error("cannot run {hook} script {script} (it needs its exec bit and a #! line)")]
    Spawn {
        hook: &'static str,
        script: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{hook} script {script} failed ({status}){}", tails(stdout, stderr))]
    Failed {
        hook: &'static str,
        script: PathBuf,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error(
        "{hook} script {script} did not finish within {timeout:?} and was killed{}",
        tails(stdout, stderr)
    )]
    TimedOut {
        hook: &'static str,
        script: PathBuf,
        timeout: Duration,
        stdout: String,
        stderr: String,
    },
}

fn tails(stdout: &str, stderr: &str) -> String {
    let mut s = String::new();
    if !stderr.trim().is_empty() {
        s.push_str(&format!("; stderr: {}", stderr.trim()));
    }
    if !stdout.trim().is_empty() {
        s.push_str(&format!("; stdout: {}", stdout.trim()));
    }
    s
}

/// Spawn `cmd`, retrying briefly while the kernel says the script is busy
/// (`ETXTBSY`). The unpacker has just written the script; if another
/// thread of this process forks in that moment (concurrent installs, the
/// simulator), the child holds a copy of the write descriptor until its own
/// exec, and exec of the script fails although nothing is wrong with it.
async fn spawn_retrying_busy(
    cmd: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let mut delay = Duration::from_millis(5);
    for _ in 0..8 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
    cmd.spawn()
}

/// What a successful hook printed (kept for the log).
#[derive(Clone, Debug, Default)]
pub struct HookOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Run `hook` of `package` with the working directory `cwd` (the staging
/// copy for `preinstall`, the installed directory otherwise, as apm does).
/// `Ok(None)` when the package has no such hook.
pub async fn run_hook(
    hook: Hook,
    package: &PackageJson,
    cwd: &Path,
    env: &HookEnv,
) -> Result<Option<HookOutput>, HookError> {
    run_hook_recorded(hook, package, cwd, env, None).await
}

/// [`run_hook`], sending the hook's process group id to `spawned` as soon
/// as it runs (the transaction journals it, so that recovery after a kill
/// of the installer can end whatever the hook left running).
pub async fn run_hook_recorded(
    hook: Hook,
    package: &PackageJson,
    cwd: &Path,
    env: &HookEnv,
    spawned: Option<tokio::sync::oneshot::Sender<u32>>,
) -> Result<Option<HookOutput>, HookError> {
    let Some(script) = package.script(hook) else {
        return Ok(None);
    };
    if env.skip.is_some() {
        return Ok(None);
    }
    let script_path = cwd.join(super::package::clean_relative(script));
    if tokio::fs::symlink_metadata(&script_path).await.is_err() {
        return Err(HookError::Missing {
            hook: hook.as_str(),
            script: PathBuf::from(script),
        });
    }
    let mut cmd = tokio::process::Command::new(&script_path);
    cmd.current_dir(cwd)
        .envs(&env.extra)
        .envs(env.apm_vars(package))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Its own process group, so a timeout kills everything it started.
        .process_group(0);
    let mut child = spawn_retrying_busy(&mut cmd)
        .await
        .map_err(|err| HookError::Spawn {
            hook: hook.as_str(),
            script: PathBuf::from(script),
            err,
        })?;
    let pid = child.id();
    if let (Some(tx), Some(pid)) = (spawned, pid) {
        // process_group(0): the group id is the child's pid.
        let _ = tx.send(pid);
    }
    let stdout = tokio::spawn(tail(child.stdout.take()));
    let stderr = tokio::spawn(tail(child.stderr.take()));
    let waited = tokio::time::timeout(env.timeout, child.wait()).await;
    let status = match waited {
        Ok(Ok(status)) => Some(status),
        Ok(Err(err)) => {
            return Err(HookError::Spawn {
                hook: hook.as_str(),
                script: PathBuf::from(script),
                err,
            });
        }
        Err(_) => {
            if let Some(pid) = pid {
                // SAFETY: killpg only sends a signal; pid is our child's
                // process group (process_group(0) above).
                unsafe {
                    libc::killpg(pid as libc::pid_t, libc::SIGKILL);
                }
            }
            let _ = child.wait().await;
            None
        }
    };
    let out = collect(stdout).await;
    let err = collect(stderr).await;
    match status {
        None => Err(HookError::TimedOut {
            hook: hook.as_str(),
            script: PathBuf::from(script),
            timeout: env.timeout,
            stdout: out,
            stderr: err,
        }),
        Some(s) if s.success() => Ok(Some(HookOutput {
            stdout: out,
            stderr: err,
        })),
        Some(s) => Err(HookError::Failed {
            hook: hook.as_str(),
            script: PathBuf::from(script),
            status: s.to_string(),
            stdout: out,
            stderr: err,
        }),
    }
}

/// A hook's process group as the journal records it: the group id and
/// the boot it ran in (a group id from an earlier boot names nothing of
/// ours, and may name someone else's group now).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HookGroup {
    pub pgid: i32,
    #[serde(default)]
    pub boot: String,
}

impl HookGroup {
    pub fn new(pgid: u32) -> HookGroup {
        HookGroup {
            pgid: pgid as i32,
            boot: boot_id(),
        }
    }
}

/// This boot's identity where the OS offers one (Linux's boot_id), else
/// empty. On SmartOS the group id alone is used; running each hook in its
/// own contract (`ctrun -l child`) and killing by contract id would be
/// stronger, since contract ids are not reused the way pids are.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Kill whatever is left of a hook's process group (an installer killed
/// mid-hook leaves the hook running, orphaned, and it would go on writing
/// into the tree a rollback restores). Returns whether a group was there.
/// Blocking-free: one signal per group.
pub fn kill_group(group: &HookGroup) -> bool {
    if group.pgid <= 1 || group.boot != boot_id() {
        return false;
    }
    // A pgid this process itself is in is never ours to kill.
    // SAFETY: getpgrp has no preconditions.
    if unsafe { libc::getpgrp() } == group.pgid {
        return false;
    }
    // SAFETY: killpg only sends a signal to the group the journal recorded
    // (a group a hook of this installer led, in this boot).
    unsafe { libc::killpg(group.pgid, libc::SIGKILL) == 0 }
}

async fn collect(handle: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(PIPE_GRACE, handle).await {
        Ok(Ok(s)) => s,
        _ => String::new(),
    }
}

/// Read a pipe to its end, keeping the last [`TAIL_BYTES`].
async fn tail<R: AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut keep: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                keep.extend_from_slice(&buf[..n]);
                if keep.len() > 2 * TAIL_BYTES {
                    keep.drain(..keep.len() - TAIL_BYTES);
                }
            }
        }
    }
    if keep.len() > TAIL_BYTES {
        keep.drain(..keep.len() - TAIL_BYTES);
    }
    String::from_utf8_lossy(&keep).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn package(script: &str) -> PackageJson {
        let mut p = PackageJson {
            name: "vm-agent".into(),
            version: "1.2.3-x".into(),
            ..Default::default()
        };
        p.scripts.insert("postinstall".into(), script.into());
        p
    }

    fn write_script(dir: &Path, name: &str, body: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn env(prefix: &Path, timeout: Duration) -> HookEnv {
        HookEnv {
            prefix: prefix.to_path_buf(),
            extra: BTreeMap::from([("EXTRA".to_string(), "yes".to_string())]),
            timeout,
            skip: None,
        }
    }

    #[tokio::test]
    async fn runs_with_apm_env_and_cwd() {
        let d = tempfile::tempdir().unwrap();
        write_script(
            d.path(),
            "h.sh",
            "echo \"$npm_config_prefix $npm_config_smfdir $npm_package_name $npm_package_version $EXTRA $(pwd)\"",
        );
        let prefix = d.path().join("opt/smartdc/agents");
        let out = run_hook(
            Hook::Postinstall,
            &package("h.sh"),
            d.path(),
            &env(&prefix, Duration::from_secs(10)),
        )
        .await
        .unwrap()
        .unwrap();
        let expect = format!(
            "{p} {p}/smf vm-agent 1.2.3-x yes {cwd}",
            p = prefix.display(),
            cwd = d.path().canonicalize().unwrap().display()
        );
        assert_eq!(out.stdout.trim(), expect);
        assert!(
            run_hook(
                Hook::Preinstall,
                &package("h.sh"),
                d.path(),
                &env(&prefix, Duration::from_secs(1))
            )
            .await
            .unwrap()
            .is_none()
        );
    }

    #[tokio::test]
    async fn failure_and_timeout_carry_output() {
        let d = tempfile::tempdir().unwrap();
        write_script(d.path(), "fail.sh", "echo out; echo boom >&2; exit 3");
        let e = run_hook(
            Hook::Postinstall,
            &package("fail.sh"),
            d.path(),
            &env(d.path(), Duration::from_secs(10)),
        )
        .await
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("exit status: 3") && msg.contains("stderr: boom"),
            "{msg}"
        );
        write_script(d.path(), "hang.sh", "echo started; sleep 600 & sleep 600");
        let t0 = std::time::Instant::now();
        let e = run_hook(
            Hook::Postinstall,
            &package("hang.sh"),
            d.path(),
            &env(d.path(), Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HookError::TimedOut { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(30));
        assert!(e.to_string().contains("stdout: started"));
        let e = run_hook(
            Hook::Postinstall,
            &package("nope.sh"),
            d.path(),
            &env(d.path(), Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HookError::Missing { .. }));
    }
}
