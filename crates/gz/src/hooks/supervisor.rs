//! Linux: each hook runs under a supervisor of its own, the closest real
//! stand-in for a SmartOS process contract.
//!
//! The installer forks the supervisor (the process the runtime spawns and
//! waits on); between that fork and the exec, the supervisor marks itself
//! a child subreaper (`PR_SET_CHILD_SUBREAPER`), forks once more, and the
//! second child execs the hook. From then on every process the hook starts
//! stays in the supervisor's tree, whatever it does to its session or
//! process group: when a process dies, its children are re-parented to
//! the nearest subreaper above them, which is the supervisor. So "the
//! hook's processes" is exactly "the supervisor's descendants", which
//! [`super::procfs`] walks to stop and kill them.
//!
//! The supervisor itself only reaps: it reports the hook's wait status on
//! a pipe as soon as the hook exits, then keeps reaping whatever is re-
//! parented to it until nothing is left, and exits. It ignores `SIGPIPE`
//! and is not in the installer's process group, so a kill of the installer
//! leaves it (and the hook's tree under it) for recovery to find by its pid
//! and start time.
//!
//! Why not a cgroup: creating one needs a writable, delegated cgroup v2
//! hierarchy, which neither the test machines nor many hosts give an
//! unprivileged (or containerised) process; the subreaper works for any
//! process on any Linux since 3.4, so the tests exercise the same code on
//! every machine. Its limit (a process that kills the supervisor escapes
//! the tree) is covered by the environment marker [`super::contain`]
//! sweeps for.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The pipe a supervisor reports the hook's wait status on (4 bytes, the
/// raw `waitpid` status, then end of file).
pub(super) struct StatusPipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

/// A close-on-exec pipe whose write end is above the standard descriptors
/// (the child's stdio is set up before the supervisor runs, and would
/// replace a descriptor 0, 1 or 2).
pub(super) fn status_pipe() -> io::Result<StatusPipe> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if write.as_raw_fd() > 2 {
        return Ok(StatusPipe { read, write });
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates an open descriptor we own.
    let dup = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl returned a fresh descriptor we now own.
    let write = unsafe { OwnedFd::from_raw_fd(dup) };
    Ok(StatusPipe { read, write })
}

/// The `pre_exec` of a hook's command: turns the forked child into the
/// hook's supervisor and returns only in the hook's own process, which
/// then execs the script.
///
/// # Safety
///
/// Runs between `fork` and `exec` in a child of a multi-threaded process:
/// it calls only async-signal-safe functions (prctl, fork, signal,
/// close, waitpid, write, _exit) and allocates nothing.
pub(super) unsafe fn become_supervisor(status_fd: RawFd) -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: this process has one thread (a child after fork); the
    // second child returns to the standard library, which execs at once.
    let hook = unsafe { libc::fork() };
    if hook < 0 {
        return Err(io::Error::last_os_error());
    }
    if hook == 0 {
        return Ok(());
    }
    // SAFETY: the caller's contract (async-signal-safe code only) holds
    // for `supervise`, which never returns.
    unsafe { supervise(hook, status_fd) }
}

/// Reap until nothing is left, reporting the hook's status on the way.
///
/// # Safety
///
/// As [`become_supervisor`].
unsafe fn supervise(hook: libc::pid_t, status_fd: RawFd) -> ! {
    // The installer's signal handlers (its runtime's) mean nothing here;
    // a write to a pipe whose reader died (a killed installer) must not
    // end the supervisor and free the hook's tree.
    for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: resetting a disposition is async-signal-safe.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    // SAFETY: as above.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // SAFETY: closing descriptors this process inherited is safe; the
    // supervisor needs none but the status pipe (holding the hook's
    // stdout or the standard library's exec pipe would keep the installer
    // waiting on them).
    unsafe { close_all_but(status_fd) };
    let mut report = status_fd;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == hook && report >= 0 {
            let bytes = status.to_ne_bytes();
            // SAFETY: writes 4 bytes from a valid buffer (a pipe write of
            // that size is atomic), then closes the descriptor.
            unsafe {
                libc::write(report, bytes.as_ptr().cast(), bytes.len());
                libc::close(report);
            }
            report = -1;
        } else if pid < 0 {
            // SAFETY: reading errno right after the failed call.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            // ECHILD: nothing left to reap.
            break;
        }
    }
    // SAFETY: _exit ends the process without running the parent's
    // atexit handlers or flushing its buffers.
    unsafe { libc::_exit(0) }
}

/// Close every descriptor but `keep`.
///
/// # Safety
///
/// As [`become_supervisor`].
unsafe fn close_all_but(keep: RawFd) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range only closes descriptors of this process.
    let below = if keep > 0 {
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                0 as libc::c_uint,
                keep - 1,
                0 as libc::c_uint,
            )
        }
    } else {
        0
    };
    // SAFETY: as above.
    let above = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            keep + 1,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        )
    };
    if below != 0 || above != 0 {
        // A kernel before 5.9: one at a time.
        for fd in 0..4096 {
            if fd != keep as RawFd {
                // SAFETY: closing a descriptor number, open or not.
                unsafe { libc::close(fd) };
            }
        }
    }
}
