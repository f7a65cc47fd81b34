//! Linux: each hook runs under a supervisor of its own, the closest real
//! stand-in for a SmartOS process contract.
//!
//! The supervisor is a small shell the installer starts with the child
//! subreaper flag set (`PR_SET_CHILD_SUBREAPER`, set before its exec and
//! kept across it; [`super::spawn`]). The shell starts the hook and waits
//! for it. From
//! then on every process the hook starts stays in the supervisor's tree,
//! whatever it does to its session or process group: when a process dies,
//! its children are re-parented to the nearest subreaper above them, which
//! is the supervisor. So "the hook's processes" is exactly "the
//! supervisor's descendants", which [`super::procfs`] walks to stop and
//! kill them.
//!
//! The supervisor reports the hook's exit status on a pipe (descriptor 3)
//! as soon as the hook exits, then only holds the tree (`exec sleep`)
//! until the installer has swept it and kills it. It ignores `SIGPIPE` and
//! is not in the installer's process group, so a kill of the installer
//! leaves it (and the hook's tree under it) for recovery to find by its
//! pid and start time.
//!
//! The supervisor is never a fork of the installer: forking a large,
//! busy process (the simulator runs thousands of installs in one) costs
//! its page tables at every hook, and a long-lived copy would make it copy
//! every page it writes.
//!
//! Why not a cgroup: creating one needs a writable, delegated cgroup v2
//! hierarchy, which neither the test machines nor many hosts give an
//! unprivileged (or containerised) process; the subreaper works for any
//! process on any Linux since 3.4, so the tests exercise the same code on
//! every machine. Its limit (a process that kills the supervisor escapes
//! the tree) is covered by the environment marker [`super::contain`]
//! sweeps for.

/// The shell the supervisor runs in.
pub(super) const SHELL: &str = "/bin/sh";

/// The supervisor: `$1` is the hook's script. Its exit status (a signal
/// `n` shows as `128 + n`, as shells report it) goes to descriptor 3,
/// which the hook does not get.
pub(super) const SCRIPT: &str = r#"trap '' PIPE
"$1" 3>&- &
wait "$!"
echo "$?" >&3
exec 3>&-
exec sleep 2147483647"#;

/// `$0` of the supervisor's shell, as `ps` shows it.
pub(super) const NAME: &str = "agentsadm-hook-supervisor";

/// The exit status the supervisor reported (`None`: nothing, or not a
/// number).
pub(super) fn parse_status(text: &str) -> Option<i32> {
    text.trim().parse().ok().filter(|c| (0..=255).contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_statuses_parse() {
        assert_eq!(parse_status("0\n"), Some(0));
        assert_eq!(parse_status("137\n"), Some(137));
        assert_eq!(parse_status(""), None);
        assert_eq!(parse_status("x"), None);
        assert_eq!(parse_status("300"), None);
    }
}
