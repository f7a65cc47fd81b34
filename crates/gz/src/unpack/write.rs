//! Writing files and symbolic links into staging, inline or from a small
//! pool of threads.
//!
//! One thread (the caller's) inflates, parses and checks every entry and
//! creates directories; creating, filling and closing thousands of small
//! files is then most of what is left, and the kernel does that in
//! parallel. So once an archive has more than [`POOL_AFTER`] files, the
//! checked jobs go round-robin to [`WORKERS`] threads over bounded
//! channels. Small files and links travel in batches of consecutive
//! entries (up to [`BATCH_JOBS`] or [`CHUNK`] bytes): one job per file
//! meant a futex wake-up and usually a context switch per file, which cost
//! the inflating thread more than the writing saved; a batch also keeps
//! the files of one directory on one writer, where two writers creating in
//! the same directory would queue on its lock. A large file is an open,
//! chunks and a close on one worker. Nothing the pool writes is outside
//! staging or unchecked: paths and targets were judged before the job was
//! queued.
//!
//! Ordering: a directory exists before any job inside it is queued (the
//! caller makes it); replacing a path, and hard links, first send the
//! pending batch and wait for every worker to go idle ([`Writers::barrier`]). The first error stops the
//! pool; [`Writers::finish`] (or dropping the writers) joins every thread,
//! so nothing is written after the unpacker returns.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use super::UnpackError;

use super::is_disk_full;

/// Files written inline before the pool starts: a small package (most test
/// images, gz-tools' inner tarballs) costs no threads.
const POOL_AFTER: u64 = 64;

/// Writer threads at most. Inflating is one thread's work and the writers
/// are waiting on the kernel most of the time; beyond 4 they only contend
/// on the same directories.
const WORKERS: usize = 4;

/// Jobs queued per worker. With [`CHUNK`]-sized jobs this bounds the
/// memory in flight to `WORKERS x QUEUE x CHUNK` (16 MiB), plus `QUEUE`
/// written chunks kept for reuse (4 MiB).
const QUEUE: usize = 16;

/// Largest file sent as one job; larger ones go in chunks of this size.
/// Also the most content bytes in one batch, so a queued job never holds
/// much more than this.
pub const CHUNK: usize = 256 * 1024;

/// Most files and links in one batch: enough that hand-offs are rare next
/// to the files written, few enough that both writers get work from a
/// directory of a few dozen files.
const BATCH_JOBS: usize = 32;

/// One piece of work for a writer. Paths are relative to the destination.
pub enum Job {
    /// A whole file.
    File {
        rel: String,
        mode: u32,
        mtime: Option<u64>,
        data: Vec<u8>,
    },
    /// The start of a large file; its chunks and close follow on the same
    /// worker.
    Open {
        rel: String,
        mode: u32,
        mtime: Option<u64>,
    },
    Chunk(Vec<u8>),
    Close,
    Symlink {
        rel: String,
        target: String,
    },
    /// Files and links (never `Open`, `Chunk` or a barrier), in order.
    Batch(Vec<Job>),
    /// Reply once everything queued before it is done.
    Barrier(SyncSender<()>),
}

/// What a writer thread (or the inline writer) keeps between jobs.
struct Worker {
    dest: PathBuf,
    /// The large file being written, with its path, mode and mtime.
    open: Option<(File, String, u32, Option<u64>)>,
    /// Where written chunks go back for reuse (pool workers only): a fresh
    /// 256 KiB buffer per chunk cost the inflating thread a page fault and
    /// a zeroed page every 4 KiB of a large file.
    spare: Option<SyncSender<Vec<u8>>>,
}

impl Worker {
    fn run(&mut self, job: Job) -> Result<(), UnpackError> {
        match job {
            Job::File {
                rel,
                mode,
                mtime,
                data,
            } => {
                let mut file = self.create(&rel, mode)?;
                file.write_all(&data)
                    .map_err(|err| write_error(&self.dest, &rel, err))?;
                self.close(file, &rel, mode, mtime)
            }
            Job::Open { rel, mode, mtime } => {
                let file = self.create(&rel, mode)?;
                self.open = Some((file, rel, mode, mtime));
                Ok(())
            }
            Job::Chunk(data) => {
                let Some((file, rel, _, _)) = &mut self.open else {
                    return Ok(());
                };
                file.write_all(&data)
                    .map_err(|err| write_error(&self.dest, rel, err))?;
                if let Some(spare) = &self.spare {
                    let _ = spare.try_send(data);
                }
                Ok(())
            }
            Job::Close => match self.open.take() {
                Some((file, rel, mode, mtime)) => self.close(file, &rel, mode, mtime),
                None => Ok(()),
            },
            Job::Symlink { rel, target } => {
                std::os::unix::fs::symlink(&target, self.dest.join(&rel))
                    .map_err(|err| write_error(&self.dest, &rel, err))
            }
            Job::Batch(jobs) => {
                for job in jobs {
                    self.run(job)?;
                }
                Ok(())
            }
            Job::Barrier(ack) => {
                let _ = ack.send(());
                Ok(())
            }
        }
    }

    /// Create a new file: `O_EXCL` and `O_NOFOLLOW`, so nothing planted at
    /// the path (a link) is ever written through. It gets its final `mode`
    /// at once when the umask keeps it (no `fchmod` later), else 0600.
    fn create(&self, rel: &str, mode: u32) -> Result<File, UnpackError> {
        let initial = if mode_survives_umask(mode) {
            mode
        } else {
            0o600
        };
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(initial)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.dest.join(rel))
            .map_err(|err| write_error(&self.dest, rel, err))
    }

    fn close(
        &self,
        file: File,
        rel: &str,
        mode: u32,
        mtime: Option<u64>,
    ) -> Result<(), UnpackError> {
        if !mode_survives_umask(mode) {
            file.set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|err| write_error(&self.dest, rel, err))?;
        }
        if let Some(secs) = mtime {
            // Best effort, like tar: a bad mtime is not worth failing for.
            let _ = file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        }
        Ok(())
    }
}

/// Whether a file created with `mode` gets exactly `mode`: the process's
/// umask (read once from `/proc/self/status`; unknown elsewhere, e.g. on
/// illumos) clears none of its bits.
pub fn mode_survives_umask(mode: u32) -> bool {
    static UMASK: OnceLock<Option<u32>> = OnceLock::new();
    let umask = UMASK.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("Umask:"))?;
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
    });
    // A setuid or setgid bit is set by `fchmod` once the content is
    // written (a write by anyone but root clears it).
    mode & 0o7000 == 0 && matches!(umask, Some(u) if mode & u == 0)
}

/// The error of a failed write: a full disk, or anything else.
pub fn write_error(dest: &Path, rel: &str, err: io::Error) -> UnpackError {
    if is_disk_full(&err) {
        UnpackError::DiskFull {
            path: super::clip(rel),
            dest: dest.to_path_buf(),
            err,
        }
    } else {
        UnpackError::Write {
            path: super::clip(rel),
            dest: dest.to_path_buf(),
            err,
        }
    }
}

/// The first error any worker hit, and whether there is one.
#[derive(Default)]
struct Failure {
    failed: AtomicBool,
    error: Mutex<Option<UnpackError>>,
}

impl Failure {
    fn record(&self, e: UnpackError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    fn take(&self) -> Option<UnpackError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

struct Pool {
    senders: Vec<SyncSender<Job>>,
    handles: Vec<JoinHandle<()>>,
    /// The worker the next job goes to.
    next: usize,
    /// The worker a large file's chunks go to.
    streaming: Option<usize>,
    /// Chunks written, for reuse.
    spare: Receiver<Vec<u8>>,
    failure: Arc<Failure>,
}

/// Inline until [`POOL_AFTER`] files, then a pool.
pub struct Writers {
    inline: Worker,
    pool: Option<Pool>,
    /// Files and links not yet sent to the pool, and their content bytes.
    batch: Vec<Job>,
    batch_bytes: usize,
    files: u64,
    /// Start a pool at all (false: always inline).
    parallel: bool,
}

impl Writers {
    pub fn new(dest: &Path) -> Writers {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Writers {
            inline: Worker {
                dest: dest.to_path_buf(),
                open: None,
                spare: None,
            },
            pool: None,
            batch: Vec::new(),
            batch_bytes: 0,
            files: 0,
            parallel: cores > 1,
        }
    }

    /// Queue (or do) a job. A worker's earlier failure is returned here,
    /// so the caller stops reading the archive.
    pub fn send(&mut self, job: Job) -> Result<(), UnpackError> {
        if matches!(job, Job::File { .. } | Job::Open { .. }) {
            self.files += 1;
            if self.pool.is_none() && self.parallel && self.files > POOL_AFTER {
                self.pool = Some(self.start_pool());
            }
        }
        let Some(pool) = &mut self.pool else {
            return self.inline.run(job);
        };
        if let Some(e) = pool.failure.take() {
            return Err(e);
        }
        if let Job::File { data, .. } = &job {
            self.batch_bytes += data.len();
        }
        if matches!(job, Job::File { .. } | Job::Symlink { .. }) {
            self.batch.push(job);
            if self.batch.len() >= BATCH_JOBS || self.batch_bytes >= CHUNK {
                return self.flush();
            }
            return Ok(());
        }
        self.dispatch(job)
    }

    /// Send the pending batch, if any.
    fn flush(&mut self) -> Result<(), UnpackError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let jobs = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        self.dispatch(Job::Batch(jobs))
    }

    /// Hand one job to a worker (round-robin; a large file's chunks and
    /// close to the worker that opened it).
    fn dispatch(&mut self, job: Job) -> Result<(), UnpackError> {
        let Some(pool) = &mut self.pool else {
            return self.inline.run(job);
        };
        let worker = match &job {
            Job::Chunk(_) | Job::Close => pool.streaming.unwrap_or(0),
            _ => {
                let w = pool.next;
                pool.next = (pool.next + 1) % pool.senders.len();
                w
            }
        };
        match &job {
            Job::Open { .. } => pool.streaming = Some(worker),
            Job::Close => pool.streaming = None,
            _ => {}
        }
        if pool.senders[worker].send(job).is_err() {
            // The worker is gone: it failed, and said why.
            return Err(pool.failure.take().unwrap_or_else(worker_lost));
        }
        Ok(())
    }

    /// Wait until every job sent so far is done; a worker's failure is
    /// returned.
    pub fn barrier(&mut self) -> Result<(), UnpackError> {
        self.flush()?;
        let Some(pool) = &mut self.pool else {
            return Ok(());
        };
        let (ack, done) = sync_channel(pool.senders.len());
        let mut sent = 0;
        for s in &pool.senders {
            if s.send(Job::Barrier(ack.clone())).is_ok() {
                sent += 1;
            }
        }
        drop(ack);
        for _ in 0..sent {
            if done.recv().is_err() {
                break;
            }
        }
        match pool.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Finish every job and stop the pool; the first failure is returned.
    pub fn finish(mut self) -> Result<(), UnpackError> {
        self.flush()?;
        match self.pool.take() {
            Some(pool) => {
                let failure = pool.failure.clone();
                if !stop(pool) {
                    failure.record(worker_lost());
                }
                match failure.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
            None => Ok(()),
        }
    }

    fn start_pool(&self) -> Pool {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = cores.clamp(2, WORKERS);
        let failure = Arc::new(Failure::default());
        let mut senders = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let (spare_tx, spare) = sync_channel::<Vec<u8>>(QUEUE);
        for i in 0..n {
            let (tx, rx) = sync_channel::<Job>(QUEUE);
            let mut worker = Worker {
                dest: self.inline.dest.clone(),
                open: None,
                spare: Some(spare_tx.clone()),
            };
            let failure = failure.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("unpack-writer-{i}"))
                .spawn(move || work(&mut worker, &rx, &failure));
            match spawned {
                Ok(h) => {
                    senders.push(tx);
                    handles.push(h);
                }
                // No thread (a process limit): fewer writers; with none
                // at all, every job fails over to `worker_lost`.
                Err(e) => tracing::debug!(error = %e, "cannot start an unpack writer"),
            }
        }
        if senders.is_empty() {
            failure.record(worker_lost());
        }
        Pool {
            senders,
            handles,
            next: 0,
            streaming: None,
            spare,
            failure,
        }
    }

    /// A zeroed buffer of `len` bytes (at most [`CHUNK`]) for a large
    /// file's next chunk: one a writer is done with when there is one.
    pub fn chunk_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut data = self
            .pool
            .as_ref()
            .and_then(|p| p.spare.try_recv().ok())
            .unwrap_or_default();
        data.clear();
        data.resize(len, 0);
        data
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        // On an error path: still wait for the workers, so that nothing is
        // written into staging once the unpacker has returned.
        if let Some(pool) = self.pool.take() {
            pool.failure.failed.store(true, Ordering::Release);
            let _ = stop(pool);
        }
    }
}

/// Close the queues and join the workers; false if one panicked.
fn stop(pool: Pool) -> bool {
    drop(pool.senders);
    let mut clean = true;
    for h in pool.handles {
        clean &= h.join().is_ok();
    }
    clean
}

fn work(worker: &mut Worker, rx: &Receiver<Job>, failure: &Failure) {
    for job in rx.iter() {
        if failure.failed.load(Ordering::Acquire) {
            // Keep answering barriers; drop everything else.
            if let Job::Barrier(ack) = job {
                let _ = ack.send(());
            }
            continue;
        }
        if let Err(e) = worker.run(job) {
            failure.record(e);
        }
    }
}

fn worker_lost() -> UnpackError {
    UnpackError::Write {
        path: String::new(),
        dest: PathBuf::new(),
        err: io::Error::other("an unpack writer thread stopped"),
    }
}
