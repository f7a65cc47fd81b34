//! apm-compatible lifecycle hooks (docs/triton/agent-install.md §2.1).
//!
//! Like apm, a hook's script is exec'd as it is (it needs its exec bit and
//! a `#!` line; no shell interprets it), with the installer's environment
//! plus apm's variables:
//! `npm_config_prefix`, `npm_config_smfdir`, `npm_config_etc`,
//! `npm_config_dbdir`, `npm_package_name`, `npm_package_version` (and
//! agentsadm's marker, [`contain::MARKER_ENV`]).
//! In a rooted directory the prefix points into the root, so a hook never
//! touches the real machine. Unlike apm:
//! - every process a hook starts ends with it: when the hook exits or
//!   times out, what it left running is killed ([`contain`]: a process
//!   contract on SmartOS, a subreaper supervisor on Linux);
//! - a hook has a timeout;
//! - a hook killed by a signal is a failure (apm counts it as success);
//! - the tails of its stdout and stderr go into the error.
//!
//! Modules: [`contain`] (the containment, per OS), `supervisor`, `spawn`
//! and `procfs` (Linux), `contract` (SmartOS).

pub mod contain;
mod contract;
#[cfg(target_os = "linux")]
mod procfs;
#[cfg(target_os = "linux")]
mod spawn;
#[cfg(target_os = "linux")]
mod supervisor;

pub use contain::{HookGroup, end_left};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
            ("npm_package_name".into(), package.name.to_string()),
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

/// Whether `script` can be exec'd: a regular file with an exec bit that
/// starts with `#!` or is an ELF binary. Opened as a regular file only
/// ([`agentsadm_types::bounded`]): a package's hook that is a link (out
/// of the tree, to a device) or a FIFO is refused, naming it, before
/// anything reads or runs it.
async fn blocking_runnable(script: PathBuf) -> std::io::Result<()> {
    agentsadm_platform::blocking(move || {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let file = agentsadm_types::bounded::open_regular(&script)
            .map_err(agentsadm_types::bounded::FileError::into_io)?
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        if file.metadata()?.permissions().mode() & 0o111 == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EACCES));
        }
        let mut head = Vec::with_capacity(4);
        file.take(4).read_to_end(&mut head)?;
        if head.starts_with(b"#!") || head == *b"\x7fELF" {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(libc::ENOEXEC))
        }
    })
    .await
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

/// [`run_hook`], sending the hook's [`HookGroup`] to `spawned` as soon as
/// it runs (the transaction journals it, so that recovery after a kill of
/// the installer can end whatever the hook left running).
pub async fn run_hook_recorded(
    hook: Hook,
    package: &PackageJson,
    cwd: &Path,
    env: &HookEnv,
    spawned: Option<tokio::sync::oneshot::Sender<HookGroup>>,
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
    let spawn_err = |err| HookError::Spawn {
        hook: hook.as_str(),
        script: PathBuf::from(script),
        err,
    };
    // What exec would refuse, refused here (the supervisor's shell would
    // run a script without a `#!` line itself, where apm's exec fails).
    let runnable = blocking_runnable(script_path.clone()).await;
    runnable.map_err(spawn_err)?;
    let command = contain::HookCommand {
        cwd,
        env: env
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(env.apm_vars(package))
            .collect(),
    };
    let mut running = contain::spawn(&script_path, &command)
        .await
        .map_err(spawn_err)?;
    if let Some(tx) = spawned {
        let _ = tx.send(running.group.clone());
    }
    let (out_pipe, err_pipe) = running.take_output();
    let stdout = tokio::spawn(tail(out_pipe));
    let stderr = tokio::spawn(tail(err_pipe));
    let waited = running.wait(env.timeout).await;
    let killed = running.end(waited.as_ref().ok()).await;
    if killed > 0 {
        tracing::warn!(package = %package.name, hook = hook.as_str(), killed, "killed the processes the hook left running");
    }
    let out = collect(stdout).await;
    let err = collect(stderr).await;
    let failed = |status: String, stdout: String, stderr: String| HookError::Failed {
        hook: hook.as_str(),
        script: PathBuf::from(script),
        status,
        stdout,
        stderr,
    };
    match waited.map_err(spawn_err)? {
        contain::Waited::TimedOut => Err(HookError::TimedOut {
            hook: hook.as_str(),
            script: PathBuf::from(script),
            timeout: env.timeout,
            stdout: out,
            stderr: err,
        }),
        contain::Waited::Exited(s) if s.success() => Ok(Some(HookOutput {
            stdout: out,
            stderr: err,
        })),
        contain::Waited::Exited(s) => Err(failed(s.to_string(), out, err)),
        contain::Waited::SupervisorLost => Err(failed(
            "unknown: a process it started killed the supervisor agentsadm runs it under".into(),
            out,
            err,
        )),
    }
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
            name: "vm-agent".parse().unwrap(),
            version: "1.2.3-x".into(),
            scripts: Default::default(),
            bin: Default::default(),
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
        // Not runnable: no exec bit, no `#!` line.
        std::fs::write(d.path().join("plain.sh"), "true\n").unwrap();
        std::fs::set_permissions(
            d.path().join("plain.sh"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let e = run_hook(
            Hook::Postinstall,
            &package("plain.sh"),
            d.path(),
            &env(d.path(), Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HookError::Spawn { .. }), "{e}");
        std::fs::set_permissions(
            d.path().join("plain.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let e = run_hook(
            Hook::Postinstall,
            &package("plain.sh"),
            d.path(),
            &env(d.path(), Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HookError::Spawn { .. }), "{e}");
    }

    /// Whether `pid` is gone (or dead, waiting to be reaped).
    #[cfg(target_os = "linux")]
    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(t) => t
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn nothing_a_hook_starts_outlives_it() {
        let d = tempfile::tempdir().unwrap();
        // A setsid child, a child in its own process group (job control),
        // and a daemon (setsid, then fork, the middle one exits); each
        // writes its pid and sleeps. The hook then fails, or kills the
        // supervisor it runs under first.
        let starts = "setsid bash -c 'echo $$ > pid.setsid; exec sleep 30' &\n\
                      set -m; (echo $BASHPID > pid.pgid; exec sleep 30) & set +m\n\
                      setsid bash -c '(echo $BASHPID > pid.daemon; exec sleep 30) &'\n\
                      while [ ! -s pid.setsid ] || [ ! -s pid.pgid ] || [ ! -s pid.daemon ]; do sleep 0.05; done";
        for (case, end) in [
            ("fails", "exit 3"),
            ("succeeds", "exit 0"),
            ("kills its supervisor", "kill -9 $PPID; sleep 0.5; exit 0"),
        ] {
            for f in ["pid.setsid", "pid.pgid", "pid.daemon"] {
                let _ = std::fs::remove_file(d.path().join(f));
            }
            write_script(d.path(), "h.sh", &format!("{starts}\n{end}"));
            let r = run_hook(
                Hook::Postinstall,
                &package("h.sh"),
                d.path(),
                &env(d.path(), Duration::from_secs(20)),
            )
            .await;
            assert_eq!(r.is_ok(), case == "succeeds", "{case}: {r:?}");
            for f in ["pid.setsid", "pid.pgid", "pid.daemon"] {
                let pid: i32 = std::fs::read_to_string(d.path().join(f))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                assert!(gone(pid), "{case}: the {f} process {pid} outlived the hook");
            }
        }
    }
}
