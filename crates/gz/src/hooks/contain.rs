//! Every process a hook starts ends with the hook: a child that calls
//! `setsid()` or `setpgid()`, or double-forks, must not write into a tree
//! that a rollback has just restored.
//!
//! - SmartOS: a process contract per hook ([`super::contract`]).
//! - Linux: a supervisor per hook that is a child subreaper, and a sweep
//!   of its descendants ([`super::supervisor`], [`super::procfs`]).
//! - Elsewhere (development hosts): the hook's process group only.
//!
//! When the hook exits (or times out), whatever it left running is
//! stopped and killed before the transaction goes on. The journal records
//! each hook as it starts ([`HookGroup`]: the supervisor's or ctrun's pid,
//! its start time, the boot, and a marker in the hook's environment), so
//! that rollback and the recovery after a kill of the installer can end
//! what is left ([`end_left`]).

#[cfg(target_os = "linux")]
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncRead;

/// The variable in every hook's environment that marks its processes
/// (`<name>=<random>`): a process that left the supervisor's tree (one
/// that killed the supervisor) is still found by it.
pub const MARKER_ENV: &str = "AGENTSADM_HOOK_RUN";

/// How long ctrun (or the hook itself) may take to exit at the end.
#[cfg(not(target_os = "linux"))]
const REAP_GRACE: Duration = Duration::from_secs(5);

/// How a hook's processes are held together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Containment {
    /// The hook's process group only (journals of earlier versions, and
    /// hosts that are neither Linux nor illumos).
    #[default]
    ProcessGroup,
    /// Linux: `pgid` is the hook's supervisor, a child subreaper.
    Subreaper,
    /// SmartOS: `pgid` is the `ctrun` holding the hook's contract.
    Contract,
}

/// A hook as the journal records it when it starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookGroup {
    /// The process the installer started (the supervisor, ctrun, or the
    /// hook itself), which leads the hook's process group.
    pub pgid: i32,
    /// The boot it ran in (a pid from an earlier boot names nothing of
    /// ours, and may name someone else's process now).
    #[serde(default)]
    pub boot: String,
    #[serde(default)]
    pub containment: Containment,
    /// The start time of `pgid` (Linux: clock ticks after boot), so a pid
    /// reused since is never taken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    /// The value of [`MARKER_ENV`] in the hook's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
}

/// What a hook runs with besides its script.
pub(super) struct HookCommand<'a> {
    pub cwd: &'a Path,
    /// Added to (or replacing in) the installer's environment.
    pub env: Vec<(String, String)>,
}

/// A pipe of the hook's output.
pub(super) type Output = Box<dyn AsyncRead + Send + Unpin>;

/// A hook that has been started.
pub(super) struct Running {
    pub group: HookGroup,
    output: (Option<Output>, Option<Output>),
    /// Linux: the supervisor, and its report of the hook's exit.
    #[cfg(target_os = "linux")]
    supervisor: libc::pid_t,
    #[cfg(target_os = "linux")]
    status: tokio::net::unix::pipe::Receiver,
    #[cfg(not(target_os = "linux"))]
    child: tokio::process::Child,
    /// Whether [`Running::end`] ran (else dropping it sweeps).
    ended: bool,
}

/// How the wait for a hook ended.
pub(super) enum Waited {
    Exited(ExitStatus),
    TimedOut,
    /// Linux: the supervisor died (or said nothing) before it could
    /// report: something the hook started killed it.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    SupervisorLost,
}

/// A fresh marker value.
fn new_marker() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// This boot's identity where the OS offers one (Linux's boot_id), else
/// empty.
pub(super) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Start `script`, contained. Retries briefly while the kernel says the
/// script is busy (`ETXTBSY`): the unpacker has just written it, and if
/// another thread of this process forks in that moment (concurrent
/// installs, the simulator), the child holds a copy of the write
/// descriptor until its own exec.
pub(super) async fn spawn(script: &Path, command: &HookCommand<'_>) -> io::Result<Running> {
    let marker = new_marker();
    let mut delay = Duration::from_millis(5);
    let mut retries = 0;
    loop {
        match spawn_once(script, &marker, command) {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && retries < 8 => {
                retries += 1;
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
}

/// The installer's environment with `extra` added (later entries win)
/// and the marker.
#[cfg(target_os = "linux")]
fn environment(extra: &[(String, String)], marker: &str) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in extra {
        env.insert(k.into(), v.into());
    }
    env.insert(MARKER_ENV.into(), marker.into());
    env.into_iter().collect()
}

#[cfg(target_os = "linux")]
fn spawn_once(script: &Path, marker: &str, command: &HookCommand<'_>) -> io::Result<Running> {
    use super::supervisor;
    use tokio::net::unix::pipe::Receiver;
    let args: [&std::ffi::OsStr; 5] = [
        supervisor::SHELL.as_ref(),
        "-c".as_ref(),
        supervisor::SCRIPT.as_ref(),
        supervisor::NAME.as_ref(),
        script.as_os_str(),
    ];
    let spawned = super::spawn::spawn(
        Path::new(supervisor::SHELL),
        &args,
        &environment(&command.env, marker),
        command.cwd,
    )?;
    let pid = spawned.pid;
    let pipes = (|| {
        Ok::<_, io::Error>((
            Receiver::from_owned_fd(spawned.stdout)?,
            Receiver::from_owned_fd(spawned.stderr)?,
            Receiver::from_owned_fd(spawned.status)?,
        ))
    })();
    let (stdout, stderr, status) = match pipes {
        Ok(p) => p,
        Err(e) => {
            super::spawn::kill_and_reap(pid);
            return Err(e);
        }
    };
    Ok(Running {
        group: HookGroup {
            pgid: pid,
            boot: boot_id(),
            containment: Containment::Subreaper,
            start: super::procfs::start_of(pid),
            marker: Some(marker.to_string()),
        },
        output: (Some(Box::new(stdout)), Some(Box::new(stderr))),
        supervisor: pid,
        status,
        ended: false,
    })
}

#[cfg(not(target_os = "linux"))]
fn spawn_once(script: &Path, marker: &str, command: &HookCommand<'_>) -> io::Result<Running> {
    use std::process::Stdio;
    #[cfg(target_os = "illumos")]
    let (mut cmd, containment) = {
        let mut c = tokio::process::Command::new(super::contract::CTRUN);
        c.args(super::contract::CTRUN_ARGS).arg(script);
        (c, Containment::Contract)
    };
    #[cfg(not(target_os = "illumos"))]
    let (mut cmd, containment) = (
        tokio::process::Command::new(script),
        Containment::ProcessGroup,
    );
    cmd.current_dir(command.cwd)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .env(MARKER_ENV, marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().map(|o| Box::new(o) as Output);
    let stderr = child.stderr.take().map(|o| Box::new(o) as Output);
    Ok(Running {
        group: HookGroup {
            pgid: child.id().map(|p| p as i32).unwrap_or(0),
            boot: boot_id(),
            containment,
            start: None,
            marker: Some(marker.to_string()),
        },
        output: (stdout, stderr),
        child,
        ended: false,
    })
}

impl Running {
    /// The hook's stdout and stderr pipes.
    pub(super) fn take_output(&mut self) -> (Option<Output>, Option<Output>) {
        (self.output.0.take(), self.output.1.take())
    }

    /// Wait for the hook to exit, at most `timeout`.
    pub(super) async fn wait(&mut self, timeout: Duration) -> io::Result<Waited> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::ExitStatusExt;
            use tokio::io::AsyncReadExt;
            // A few bytes of text, then end of file (the supervisor
            // closes the pipe): bounded.
            let mut text = Vec::new();
            let mut report = (&mut self.status).take(64);
            match tokio::time::timeout(timeout, report.read_to_end(&mut text)).await {
                Err(_) => Ok(Waited::TimedOut),
                Ok(Ok(_)) => Ok(
                    match super::supervisor::parse_status(&String::from_utf8_lossy(&text)) {
                        Some(code) => Waited::Exited(ExitStatus::from_raw(code << 8)),
                        None => Waited::SupervisorLost,
                    },
                ),
                Ok(Err(e)) => Err(e),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            match tokio::time::timeout(timeout, self.child.wait()).await {
                Err(_) => Ok(Waited::TimedOut),
                Ok(status) => status.map(Waited::Exited),
            }
        }
    }

    /// End everything the hook left running and reap what the installer
    /// started. Returns how many processes were killed (the hook itself
    /// among them after a timeout).
    pub(super) async fn end(mut self, waited: Option<&Waited>) -> usize {
        self.ended = true;
        let group = self.group.clone();
        let lost = matches!(waited, Some(Waited::SupervisorLost));
        #[cfg(target_os = "linux")]
        {
            // The supervisor holds the tree until it is swept, then goes.
            let pid = self.supervisor;
            agentsadm_platform::blocking(move || {
                let killed = sweep(&group, false, lost);
                super::spawn::kill_and_reap(pid);
                killed
            })
            .await
        }
        #[cfg(not(target_os = "linux"))]
        {
            if matches!(waited, Some(Waited::TimedOut)) {
                // The hook itself (or ctrun, whose exit ends the contract).
                let _ = self.child.start_kill();
            }
            let killed = agentsadm_platform::blocking(move || sweep(&group, false, lost)).await;
            if tokio::time::timeout(REAP_GRACE, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
            }
            killed
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            // Dropped mid-wait (the run was cancelled): nothing the hook
            // started may outlive it.
            sweep(&self.group, true, true);
            #[cfg(target_os = "linux")]
            super::spawn::kill_and_reap(self.supervisor);
        }
    }
}

/// Kill what is left of a hook the installer started in this process:
/// its processes (and, with `root`, the supervisor or ctrun too); with
/// `by_marker`, also any process that carries its marker. Blocking.
fn sweep(group: &HookGroup, root: bool, by_marker: bool) -> usize {
    match group.containment {
        #[cfg(target_os = "linux")]
        Containment::Subreaper => {
            let marker = group
                .marker
                .as_ref()
                .filter(|_| by_marker)
                .map(|m| format!("{MARKER_ENV}={m}"));
            let (pid, start) = (group.pgid, group.start);
            // The common case, a hook that left nothing: a supervisor
            // without children has no descendants (whatever the hook
            // started is in its tree), no table to read.
            if marker.is_none() && !root && super::procfs::has_children(pid) == Some(false) {
                return 0;
            }
            super::procfs::stop_and_kill(|table| {
                let mut out = std::collections::BTreeSet::new();
                let alive = table
                    .iter()
                    .any(|p| p.pid == pid && Some(p.start) == start && !p.zombie);
                if alive {
                    out.extend(super::procfs::descendants(table, pid));
                    if root {
                        out.insert(pid);
                    }
                }
                if let Some(m) = &marker {
                    out.extend(super::procfs::with_environ(table, m));
                }
                out
            })
        }
        #[cfg(target_os = "illumos")]
        Containment::Contract => {
            // The contract ends with its holder; after a normal exit the
            // holder is already gone.
            usize::from(root && super::contract::end_left(group.pgid))
        }
        _ => {
            let _ = by_marker;
            usize::from(kill_process_group(group.pgid))
        }
    }
}

/// `killpg(pgid, SIGKILL)`, never of this process's own group.
fn kill_process_group(pgid: i32) -> bool {
    // SAFETY: getpgrp has no preconditions.
    if pgid <= 1 || unsafe { libc::getpgrp() } == pgid {
        return false;
    }
    // SAFETY: killpg only sends a signal, to the group the journal
    // recorded (a group a hook of this installer led, in this boot).
    unsafe { libc::killpg(pgid, libc::SIGKILL) == 0 }
}

/// End whatever is left of a hook a journal recorded (an installer killed
/// mid-hook leaves the hook and what it started running, orphaned; they
/// would go on writing into the tree a rollback restores). Returns how
/// many processes were killed. Blocking.
pub fn end_left(group: &HookGroup) -> usize {
    if group.pgid <= 1 || group.boot != boot_id() {
        return 0;
    }
    sweep(group, true, true)
}
