//! SmartOS (illumos): each hook runs under `ctrun -l child -o noorphan`,
//! in a process contract of its own, as cn-agent runs its tasks
//! (docs/triton/agent-install.md). Every process the hook starts is in
//! that contract whatever it does to its session or process group; when
//! the hook exits, `ctrun` exits and abandons the contract, and
//! `noorphan` makes the kernel kill everything still in it. A timeout, a
//! rollback or recovery kills `ctrun` (the contract's holder), which ends
//! the contract the same way.
//!
//! The parts that only read text are compiled everywhere and tested on
//! Linux; the ones that run `ps` or send signals only on illumos.

/// ctrun's path on SmartOS.
#[cfg_attr(not(target_os = "illumos"), allow(dead_code))]
pub(super) const CTRUN: &str = "/usr/bin/ctrun";

/// ctrun's arguments before the hook's script: the contract lives as long
/// as the hook (`-l child`), and its processes die with it (`noorphan`).
#[cfg_attr(not(target_os = "illumos"), allow(dead_code))]
pub(super) const CTRUN_ARGS: [&str; 5] = ["-l", "child", "-o", "noorphan", "--"];

/// Whether `ps -o comm= -p <pid>` printed ctrun (a recorded pid that now
/// names another program is not ours to kill).
#[cfg_attr(not(target_os = "illumos"), allow(dead_code))]
pub(super) fn is_ctrun(ps_comm: &str) -> bool {
    let comm = ps_comm.trim();
    comm == "ctrun" || comm.ends_with("/ctrun")
}

/// Kill the `ctrun` a journal recorded, if it still runs: its contract is
/// abandoned and the kernel kills every process left in it. Returns
/// whether it was there. Blocking (runs `ps`).
#[cfg(target_os = "illumos")]
pub(super) fn end_left(pid: i32) -> bool {
    let out = std::process::Command::new("/usr/bin/ps")
        .args(["-o", "comm=", "-p", &pid.to_string()])
        .output();
    let ours = out
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| is_ctrun(&String::from_utf8_lossy(&o.stdout)));
    if ours {
        // SAFETY: kill only sends a signal, to the ctrun the journal
        // recorded (checked by name just now).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    ours
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_output_names_ctrun() {
        assert!(is_ctrun("ctrun\n"));
        assert!(is_ctrun("  /usr/bin/ctrun"));
        assert!(!is_ctrun("bash"));
        assert!(!is_ctrun("/opt/evil/notctrun2"));
        assert!(!is_ctrun(""));
        assert_eq!(CTRUN_ARGS.last(), Some(&"--"));
    }
}
