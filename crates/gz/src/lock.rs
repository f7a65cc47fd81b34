//! The per-server lock: one `agentsadm gz` run at a time per server, for the
//! whole run. A second process (or a second in-process run on the same root,
//! as in the simulator) waits up to a bound and then fails naming the holder.
//!
//! The lock is an exclusive `flock` on a file whose content is the holder's
//! pid; the kernel releases it when the holder dies, so a killed run never
//! leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentsadm_platform::blocking;

/// How often a waiting run retries the lock.
const POLL: Duration = Duration::from_millis(50);

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another agentsadm run ({holder}) holds the server lock {path} and did not finish within {waited:?}; wait for it to finish or pass a longer --lock-wait"
    )]
    Busy {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
    #[error("cannot open the server lock {path}")]
    Open {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

/// A held server lock; released on drop.
#[derive(Debug)]
pub struct ServerLock {
    file: File,
    path: PathBuf,
}

impl ServerLock {
    /// Take the lock at `path`, waiting up to `wait`. Opening the file and
    /// writing the pid run on the blocking pool; the wait is a timer.
    pub async fn acquire(path: &Path, wait: Duration) -> Result<ServerLock, LockError> {
        let opened = {
            let path = path.to_path_buf();
            blocking(move || open(&path)).await
        };
        let mut file = opened.map_err(|err| LockError::Open {
            path: path.to_path_buf(),
            err,
        })?;
        let start = Instant::now();
        loop {
            // Non-blocking: flock with LOCK_NB.
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if start.elapsed() >= wait {
                        let holder = blocking(move || holder_description(&mut file)).await;
                        return Err(LockError::Busy {
                            path: path.to_path_buf(),
                            holder,
                            waited: wait,
                        });
                    }
                    tokio::time::sleep(POLL.min(wait.saturating_sub(start.elapsed()))).await;
                }
                Err(std::fs::TryLockError::Error(err)) => {
                    return Err(LockError::Open {
                        path: path.to_path_buf(),
                        err,
                    });
                }
            }
        }
        let file = blocking(move || {
            record_pid(&mut file);
            file
        })
        .await;
        Ok(ServerLock {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ServerLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Open (creating) the lock file and its directory.
fn open(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Record our pid for whoever waits next. Failing to write it only makes
/// their message less precise.
fn record_pid(file: &mut File) {
    let _ = file.set_len(0);
    let _ = file.seek(SeekFrom::Start(0));
    let _ = writeln!(file, "{}", std::process::id());
    let _ = file.flush();
}

fn holder_description(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.read_to_string(&mut s);
    match s.trim().parse::<u32>() {
        Ok(pid) if pid == std::process::id() => format!("another run in this process, pid {pid}"),
        Ok(pid) => format!("pid {pid}"),
        Err(_) => "unknown pid".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_holder_waits_then_fails_naming_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x/lock");
        let first = ServerLock::acquire(&p, Duration::from_secs(1))
            .await
            .unwrap();
        let err = ServerLock::acquire(&p, Duration::from_millis(200))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(first);
        ServerLock::acquire(&p, Duration::from_millis(200))
            .await
            .unwrap();
    }
}
