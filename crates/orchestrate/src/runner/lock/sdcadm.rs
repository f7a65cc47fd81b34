//! sdcadm's own lock, held on a headnode for the whole of every changing
//! run, so that `sdcadm update`, `rollback` and `self-update` never run in
//! the middle of an agentsadm rollout, nor agentsadm in the middle of
//! theirs.
//!
//! sdcadm takes `/var/run/sdcadm.lock` through qlocker: it opens the file
//! (`w+`, mode 0644) and takes a POSIX record lock over the whole file
//! (`fcntl(F_SETLKW)`, `F_WRLCK`), which the kernel drops when the process
//! ends. This takes the same kind of lock on the same file, so each side
//! sees the other: a POSIX record lock never conflicts with `flock(2)` on
//! Linux, only with another record lock. The lock is per process, so the
//! file is opened once and kept open until the lock is released (closing
//! any descriptor of it would drop the lock).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where sdcadm keeps its lock (`lib/sdcadm.js`, `_lockPath`).
pub const SDCADM_LOCK: &str = "/var/run/sdcadm.lock";

/// How often a waiting run looks at the lock again (qlocker retries every
/// 250 ms).
const POLL: Duration = Duration::from_millis(250);

/// Holding sdcadm's lock as well: where, and how long to wait for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdcadmLockOptions {
    pub path: PathBuf,
    pub wait: Duration,
}

impl SdcadmLockOptions {
    /// sdcadm's lock, waited for up to `wait`.
    pub fn headnode(wait: Duration) -> SdcadmLockOptions {
        SdcadmLockOptions {
            path: PathBuf::from(SDCADM_LOCK),
            wait,
        }
    }
}

/// sdcadm's lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SdcadmLockError {
    #[error(
        "sdcadm holds its lock {path} ({holder}) and did not release it within {waited:?}; nothing was changed: wait for that sdcadm command to finish, then run this again"
    )]
    Held {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
    #[error("cannot take sdcadm's lock {path}; nothing was changed")]
    Io {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

/// sdcadm's lock, held until dropped.
#[derive(Debug)]
pub struct SdcadmLock {
    file: File,
    path: PathBuf,
}

impl SdcadmLock {
    /// Take the lock, waiting up to `options.wait` while another process
    /// (sdcadm) holds it. Opening and locking never block (`F_SETLK`); the
    /// wait is a timer.
    pub async fn acquire(options: &SdcadmLockOptions) -> Result<SdcadmLock, SdcadmLockError> {
        let path = options.path.clone();
        let io_err = |err| SdcadmLockError::Io {
            path: path.clone(),
            err,
        };
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || open(&path))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e)))
        };
        let file = opened.map_err(io_err)?;
        let start = Instant::now();
        loop {
            match set_lock(&file, libc::F_WRLCK as libc::c_short) {
                Ok(true) => return Ok(SdcadmLock { file, path }),
                Ok(false) => {}
                Err(e) => return Err(io_err(e)),
            }
            if start.elapsed() >= options.wait {
                return Err(SdcadmLockError::Held {
                    holder: holder(&file),
                    path,
                    waited: options.wait,
                });
            }
            tokio::time::sleep(POLL.min(options.wait.saturating_sub(start.elapsed()))).await;
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SdcadmLock {
    fn drop(&mut self) {
        // Closing the file (after this) would drop it too; unlocking first
        // says so explicitly.
        let _ = set_lock(&self.file, libc::F_UNLCK as libc::c_short);
    }
}

/// Open as qlocker does (`w+` without truncating what a reader may show,
/// 0644), creating the file.
fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
}

/// `kind` is `F_WRLCK` or `F_UNLCK` as `l_type` holds it (a short: the
/// constants are ints on Linux, shorts on illumos).
fn whole_file(kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0;
    fl
}

/// `F_SETLK` of `kind` over the whole file: `Ok(false)` when another
/// process holds a conflicting lock.
fn set_lock(file: &File, kind: libc::c_short) -> io::Result<bool> {
    let fl = whole_file(kind);
    // SAFETY: a valid descriptor and a valid flock for the call's duration.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        Some(libc::EINTR) => set_lock(file, kind),
        _ => Err(err),
    }
}

/// Who holds the lock: the pid `F_GETLK` names and, where `/proc` shows
/// it, its command line.
fn holder(file: &File) -> String {
    let mut fl = whole_file(libc::F_WRLCK as libc::c_short);
    // SAFETY: a valid descriptor and a valid, writable flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
    if rc != 0 || fl.l_type == libc::F_UNLCK as libc::c_short || fl.l_pid <= 0 {
        return "holder unknown".to_string();
    }
    let pid = fl.l_pid;
    match command_line(pid) {
        Some(cmd) => format!("pid {pid}: {cmd}"),
        None => format!("pid {pid}"),
    }
}

/// A process's command line from `/proc/<pid>/cmdline` (a small file; at
/// most 4 KiB are read), shown clipped.
fn command_line(pid: libc::pid_t) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    File::open(format!("/proc/{pid}/cmdline"))
        .ok()?
        .take(4096)
        .read_to_end(&mut buf)
        .ok()?;
    let words: Vec<String> = buf
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!words.is_empty()).then(|| agentsadm_types::output::clip(&words.join(" "), 120))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn taken_released_and_taken_again_in_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let options = SdcadmLockOptions {
            path: dir.path().join("sdcadm.lock"),
            wait: Duration::from_millis(10),
        };
        let first = SdcadmLock::acquire(&options).await.unwrap();
        assert_eq!(first.path(), options.path);
        drop(first);
        SdcadmLock::acquire(&options).await.unwrap();
    }

    #[tokio::test]
    async fn an_unopenable_path_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let options = SdcadmLockOptions {
            path: dir.path().join("missing-dir").join("sdcadm.lock"),
            wait: Duration::from_millis(10),
        };
        let err = SdcadmLock::acquire(&options).await.unwrap_err();
        assert!(err.to_string().contains("missing-dir"), "{err}");
    }
}
