//! Linux: start a hook's supervisor the way `posix_spawn` starts a
//! program: a child that shares the installer's memory until it execs, on
//! a stack of its own (`CLONE_VM | CLONE_VFORK`), so that starting a hook
//! costs the same in a small installer as in a simulator holding
//! gigabytes (a `fork` copies the page tables of the whole process, about
//! 90 ms per gigabyte), while the child can still set the subreaper flag,
//! which `posix_spawn` cannot, before its exec.
//!
//! Everything the child needs (paths, arguments, environment, descriptors)
//! is prepared before the clone; the child only makes system calls:
//! signal dispositions back to their defaults (a handler of the
//! installer's runtime must never run in it), its process group, the
//! subreaper flag, its descriptors, its directory, and the exec. An exec
//! that fails reports its `errno` on a close-on-exec pipe.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The child's stack (the supervisor's shell is exec'd right away).
const STACK_BYTES: usize = 256 * 1024;

/// What `spawn` started: the supervisor's pid and the read ends of its
/// stdout, stderr and status pipes.
pub(super) struct Spawned {
    pub pid: libc::pid_t,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub status: OwnedFd,
}

/// What the child reads (built before the clone; nothing is allocated in
/// the child).
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// stdin (`/dev/null`), stdout, stderr, status: become 0, 1, 2, 3.
    fds: [RawFd; 4],
    /// Close-on-exec: the exec's `errno` if it fails.
    error: RawFd,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// A close-on-exec pipe, both ends above descriptor 3 (the child moves
/// them onto 0 to 3).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_3(r)?, above_3(w)?))
}

fn above_3(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 3 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates an open descriptor we own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 4) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// Start `program` with `args` (`args[0]` is its name), the environment
/// `env` and the working directory `cwd`, as the subreaper of its
/// descendants, in a process group of its own.
pub(super) fn spawn(
    program: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> io::Result<Spawned> {
    let path = cstring(program.as_os_str().as_bytes())?;
    let argv_c: Vec<CString> = args
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    let envp_c: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&kv)
        })
        .collect::<io::Result<_>>()?;
    let cwd_c = cstring(cwd.as_os_str().as_bytes())?;
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = envp_c.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    let null = above_3(std::fs::File::open("/dev/null")?.into())?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let (error_r, error_w) = pipe()?;
    let args = ChildArgs {
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd_c.as_ptr(),
        fds: [
            null.as_raw_fd(),
            out_w.as_raw_fd(),
            err_w.as_raw_fd(),
            status_w.as_raw_fd(),
        ],
        error: error_w.as_raw_fd(),
    };
    let mut stack = vec![0u8; STACK_BYTES];
    // The stack grows down: its top, 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + STACK_BYTES) & !15;
    let pid = {
        // No signal may be handled in the child before it has put the
        // dispositions back: blocked across the clone.
        let _blocked = BlockedSignals::all()?;
        // SAFETY: `child` runs on its own stack, reads only `args` (alive
        // until the clone returns: CLONE_VFORK suspends this thread until
        // the child execs or exits) and makes only system calls.
        unsafe {
            libc::clone(
                child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &args as *const ChildArgs as *mut libc::c_void,
            )
        }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop((null, out_w, err_w, status_w, error_w));
    drop(stack);
    // The child has exec'd or exited: an errno, or end of file.
    let mut errno = [0u8; 4];
    let n = loop {
        // SAFETY: reads at most 4 bytes into a valid buffer.
        let n = unsafe { libc::read(error_r.as_raw_fd(), errno.as_mut_ptr().cast(), 4) };
        if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break n;
        }
    };
    if n == 4 {
        // SAFETY: waitpid on the child just started, which has exited.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(Spawned {
        pid,
        stdout: out_r,
        stderr: err_r,
        status: status_r,
    })
}

/// The child: defaults for caught signals, a process group of its own,
/// the subreaper flag, descriptors 0-3, the directory, the exec.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive until we exec or
    // exit; every call below is a system call wrapper, and nothing is
    // allocated.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            // Handlers, and the installer's ignored SIGPIPE, back to the
            // default (an ignored signal stays ignored across exec).
            if old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let ok = libc::setpgid(0, 0) == 0
            && libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) == 0
            && a.fds
                .iter()
                .enumerate()
                .all(|(to, from)| libc::dup2(*from, to as RawFd) >= 0)
            && libc::chdir(a.cwd) == 0;
        if ok {
            libc::execve(a.path, a.argv, a.envp);
        }
        let errno = *libc::__errno_location();
        let bytes = errno.to_ne_bytes();
        libc::write(a.error, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// Every signal blocked in this thread until dropped.
struct BlockedSignals {
    old: libc::sigset_t,
}

impl BlockedSignals {
    fn all() -> io::Result<BlockedSignals> {
        // SAFETY: sigset_t is plain data; the calls fill and read it.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(BlockedSignals { old })
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `all`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// Kill and reap a supervisor `spawn` started. Blocking (briefly: a
/// killed process exits at once).
pub(super) fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: kill and waitpid on our own child, which nothing else reaps
    // (the runtime waits only on the children it started).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn spawns_with_args_env_cwd_and_reports_exec_failures() {
        let d = tempfile::tempdir().unwrap();
        let env = vec![(OsString::from("GREETING"), OsString::from("hi there"))];
        let s = spawn(
            Path::new("/bin/sh"),
            &[
                "sh".as_ref(),
                "-c".as_ref(),
                "echo \"$GREETING $1 $(pwd)\"; echo done >&3".as_ref(),
                "zero".as_ref(),
                "one".as_ref(),
            ],
            &env,
            d.path(),
        )
        .unwrap();
        let mut out = String::new();
        std::fs::File::from(s.stdout)
            .read_to_string(&mut out)
            .unwrap();
        let mut status = String::new();
        std::fs::File::from(s.status)
            .read_to_string(&mut status)
            .unwrap();
        kill_and_reap(s.pid);
        let cwd = d.path().canonicalize().unwrap();
        assert_eq!(out, format!("hi there one {}\n", cwd.display()));
        assert_eq!(status, "done\n");
        let e = spawn(Path::new("/nonexistent"), &["x".as_ref()], &env, d.path()).err();
        assert_eq!(e.and_then(|e| e.raw_os_error()), Some(libc::ENOENT));
    }
}
