//! The blocking half of a fetch: every byte of the image file is hashed
//! (sha1, sha256, and MD5 when IMGAPI sent `Content-MD5`) and optionally
//! saved on a thread of its own, while this one feeds the same bytes
//! through the decompressor to a consumer (the unpacker, or the mockcloud's
//! member reader); then the rest of the stream is drained so the digests
//! cover the whole file, and [`Outcome::verify`] checks size, sha1 and MD5.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine;
use md5::Md5;
use sha1::{Digest, Sha1};
use sha2::Sha256;

use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;

use super::super::unpack;

use super::super::unpack::UnpackError;

use super::super::unpack::UnpackLimits;

use super::super::unpack::UnpackOptions;

use super::super::unpack::Unpacked;
use super::Digests;
use super::FetchError;

/// What the blocking half does with the decompressed stream.
#[derive(Clone, Debug)]
pub(super) enum Consumer {
    /// Unpack into a staging directory.
    Unpack {
        staging: PathBuf,
        options: UnpackOptions,
        limits: UnpackLimits,
    },
    /// Keep only some members in memory (mockcloud).
    Members {
        expected_top: Option<String>,
        wanted: Vec<String>,
        limits: UnpackLimits,
    },
}

/// Bounds the blocking half enforces itself (the network side has its own
/// in [`super::download`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Limits {
    /// Stop reading at this instant (the fetch's deadline, and the
    /// configured duration for the message).
    pub(super) deadline: Option<(Instant, Duration)>,
}

/// What the consumer produced.
#[derive(Clone, Debug)]
pub(super) enum Consumed {
    Unpacked(Unpacked),
    Members(String, BTreeMap<String, Vec<u8>>),
}

impl Consumer {
    pub(super) fn reset(&self) -> io::Result<()> {
        match self {
            Consumer::Unpack { staging, .. } => reset_dir(staging),
            Consumer::Members { .. } => Ok(()),
        }
    }

    pub(super) fn consume<R: Read>(
        &self,
        reader: R,
        compression: Compression,
    ) -> Result<Consumed, UnpackError> {
        match self {
            Consumer::Unpack {
                staging,
                options,
                limits,
            } => unpack::unpack_limited(reader, compression, staging, options, limits)
                .map(Consumed::Unpacked),
            Consumer::Members {
                expected_top,
                wanted,
                limits,
            } => {
                let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
                unpack::read_members_limited(
                    reader,
                    compression,
                    expected_top.as_deref(),
                    &wanted,
                    MAX_MEMBER_BYTES,
                    limits,
                )
                .map(|(top, m)| Consumed::Members(top, m))
            }
        }
    }
}

/// The largest metadata member kept in memory (`package.json`).
const MAX_MEMBER_BYTES: u64 = 1 << 20;

/// Recreate `dir` empty.
fn reset_dir(dir: &Path) -> io::Result<()> {
    super::super::fsutil::remove_any(dir)?;
    fs::create_dir_all(dir)
}

/// The digests of a stream and the file it is saved to, updated chunk by
/// chunk.
struct Digesting {
    sha1: Sha1,
    sha256: Sha256,
    md5: Option<Md5>,
    tee: Option<File>,
    tee_error: Option<io::Error>,
}

impl Digesting {
    fn new(tee: Option<File>, want_md5: bool) -> Digesting {
        Digesting {
            sha1: Sha1::new(),
            sha256: Sha256::new(),
            md5: want_md5.then(Md5::new),
            tee,
            tee_error: None,
        }
    }

    /// Hash and save `data`; false once saving failed.
    fn update(&mut self, data: &[u8]) -> bool {
        self.sha1.update(data);
        self.sha256.update(data);
        if let Some(m) = &mut self.md5 {
            m.update(data);
        }
        if let Some(f) = &mut self.tee
            && let Err(e) = f.write_all(data)
        {
            self.tee_error = Some(e);
            self.tee = None;
        }
        self.tee_error.is_none()
    }

    fn finish(mut self, size: u64) -> (Digests, Option<io::Error>) {
        if let Some(f) = &mut self.tee
            && let Err(e) = f.flush()
        {
            self.tee_error = Some(e);
        }
        let digests = Digests {
            size,
            sha1: format!("{:x}", self.sha1.finalize()),
            sha256: format!("{:x}", self.sha256.finalize()),
            md5: self
                .md5
                .map(|m| base64::engine::general_purpose::STANDARD.encode(m.finalize())),
        };
        (digests, self.tee_error)
    }
}

/// Chunks queued for the digest thread: with chunks under
/// [`DIGEST_CHUNK`] plus one read of at most 256 KiB, at most 6 MiB in
/// flight.
const DIGEST_QUEUE: usize = 16;

/// Bytes gathered before they go to the digest thread. Reads from the
/// network are a few KiB each; one hand-off (a copy and a wake-up) per read
/// cost the inflating thread a context switch each time.
const DIGEST_CHUNK: usize = 128 * 1024;

/// Where the digests are computed: on a thread of their own (three hashes
/// cost about half as much as inflating, and need not wait for it), or
/// inline when no thread can be started.
enum DigestSink {
    Thread {
        tx: SyncSender<Vec<u8>>,
        handle: JoinHandle<Digesting>,
        tee_failed: Arc<AtomicBool>,
        /// Bytes not yet sent (less than [`DIGEST_CHUNK`]).
        pending: Vec<u8>,
    },
    Inline(Box<Digesting>),
}

impl DigestSink {
    fn start(tee: Option<File>, want_md5: bool) -> DigestSink {
        let (tx, rx) = sync_channel::<Vec<u8>>(DIGEST_QUEUE);
        let tee_failed = Arc::new(AtomicBool::new(false));
        let failed = tee_failed.clone();
        let spawned = std::thread::Builder::new()
            .name("fetch-digest".into())
            .spawn(move || {
                let mut d = Digesting::new(tee, want_md5);
                for chunk in rx.iter() {
                    if !d.update(&chunk) {
                        failed.store(true, Ordering::Release);
                    }
                }
                d
            });
        match spawned {
            Ok(handle) => DigestSink::Thread {
                tx,
                handle,
                tee_failed,
                pending: Vec::new(),
            },
            // The closure (and the tee) went with the failed spawn: digests
            // without saving, and the download is not kept.
            Err(e) => {
                tracing::debug!(error = %e, "cannot start the digest thread");
                let mut d = Digesting::new(None, want_md5);
                d.tee_error = Some(io::Error::other("cannot start the digest thread"));
                DigestSink::Inline(Box::new(d))
            }
        }
    }

    /// Queue or hash `data`; false once saving it failed.
    fn update(&mut self, data: &[u8]) -> bool {
        match self {
            DigestSink::Thread {
                tx,
                tee_failed,
                pending,
                ..
            } => {
                pending.extend_from_slice(data);
                // A send fails only if the thread died; finish() says so.
                let sent = pending.len() < DIGEST_CHUNK
                    || tx
                        .send(std::mem::replace(
                            pending,
                            Vec::with_capacity(DIGEST_CHUNK * 2),
                        ))
                        .is_ok();
                sent && !tee_failed.load(Ordering::Acquire)
            }
            DigestSink::Inline(d) => d.update(data),
        }
    }

    fn finish(self, size: u64) -> (Digests, Option<io::Error>) {
        match self {
            DigestSink::Thread {
                tx,
                handle,
                pending,
                ..
            } => {
                if !pending.is_empty() {
                    let _ = tx.send(pending);
                }
                drop(tx);
                match handle.join() {
                    Ok(d) => d.finish(size),
                    Err(_) => (
                        Digests {
                            size,
                            ..Default::default()
                        },
                        Some(io::Error::other("the digest thread failed")),
                    ),
                }
            }
            DigestSink::Inline(d) => (*d).finish(size),
        }
    }
}

/// Counts, bounds and digests (and optionally saves) every byte read
/// through it.
struct HashingReader<R> {
    inner: R,
    digests: DigestSink,
    size: u64,
    /// Stop after this many bytes: more than the manifest says is an error,
    /// and an endless stream must not fill the disk.
    limit: u64,
    oversize: bool,
    /// Saving the download failed.
    tee_failed: bool,
    deadline: Option<(Instant, Duration)>,
    /// The deadline passed while reading.
    late: bool,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.oversize {
            return Err(io::Error::other("more bytes than the manifest says"));
        }
        if self.tee_failed {
            return Err(io::Error::other("cannot save the download"));
        }
        if let Some((at, _)) = self.deadline
            && Instant::now() >= at
        {
            self.late = true;
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the fetch deadline passed",
            ));
        }
        let n = self.inner.read(buf)?;
        if !self.digests.update(&buf[..n]) {
            self.tee_failed = true;
            return Err(io::Error::other("cannot save the download"));
        }
        self.size += n as u64;
        if self.size > self.limit {
            self.oversize = true;
            return Err(io::Error::other("more bytes than the manifest says"));
        }
        Ok(n)
    }
}

/// What the blocking pipeline saw.
pub(super) struct Outcome {
    consumed: Result<Consumed, UnpackError>,
    pub(super) digests: Digests,
    oversize: bool,
    pub(super) tee_error: Option<io::Error>,
    /// The deadline passed (its configured duration).
    late: Option<Duration>,
}

impl Outcome {
    /// Size, sha1 and MD5 against the manifest (and header).
    pub(super) fn verify(
        &self,
        uuid: ImageUuid,
        expected: &ImageFile,
        origin: &str,
        content_md5: Option<&str>,
    ) -> Result<(), FetchError> {
        let d = &self.digests;
        if let Some(deadline) = self.late {
            return Err(FetchError::Deadline { uuid, deadline });
        }
        if self.oversize || d.size > expected.size {
            return Err(FetchError::SizeMismatch {
                uuid,
                origin: origin.to_string(),
                expected: expected.size,
                actual: d.size,
            });
        }
        if d.size < expected.size {
            return Err(FetchError::Truncated {
                uuid,
                expected: expected.size,
                actual: d.size,
            });
        }
        if !d.sha1.eq_ignore_ascii_case(&expected.sha1) {
            return Err(FetchError::Sha1Mismatch {
                uuid,
                origin: origin.to_string(),
                expected: expected.sha1.clone(),
                actual: d.sha1.clone(),
            });
        }
        if let (Some(want), Some(got)) = (content_md5, &d.md5)
            && want.trim() != got
        {
            return Err(FetchError::Md5Mismatch {
                uuid,
                expected: want.trim().to_string(),
                actual: got.clone(),
            });
        }
        Ok(())
    }

    /// What was consumed and the digests, or the unpacker's refusal.
    pub(super) fn into_result(self, uuid: ImageUuid) -> Result<(Consumed, Digests), FetchError> {
        match self.consumed {
            Ok(c) => Ok((c, self.digests)),
            Err(err) => Err(FetchError::Unpack { uuid, err }),
        }
    }
}

pub(super) async fn run_blocking<R: Read + Send + 'static>(
    uuid: ImageUuid,
    reader: R,
    expected: &ImageFile,
    consumer: &Consumer,
    limits: Limits,
) -> Result<Outcome, FetchError> {
    let expected = expected.clone();
    let consumer = consumer.clone();
    tokio::task::spawn_blocking(move || pipeline(reader, None, &expected, false, &consumer, limits))
        .await
        .map_err(|e| FetchError::Io {
            uuid,
            what: "unpack thread failed for",
            path: PathBuf::new(),
            err: io::Error::other(e.to_string()),
        })
}

/// The blocking half: hash, save, decompress and consume, then drain.
pub(super) fn pipeline<R: Read>(
    reader: R,
    tee: Option<File>,
    expected: &ImageFile,
    want_md5: bool,
    consumer: &Consumer,
    limits: Limits,
) -> Outcome {
    let mut hashing = HashingReader {
        inner: reader,
        digests: DigestSink::start(tee, want_md5),
        size: 0,
        limit: expected.size,
        oversize: false,
        tee_failed: false,
        deadline: limits.deadline,
        late: false,
    };
    let consumed = consumer.consume(&mut hashing, expected.compression);
    // Drain whatever the archive did not need (gzip trailer, padding, or the
    // rest after a refusal) so the digests cover the whole file.
    if !hashing.oversize && !hashing.tee_failed && !hashing.late {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match hashing.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    let HashingReader {
        digests: sink,
        size,
        oversize,
        late,
        ..
    } = hashing;
    let (digests, tee_error) = sink.finish(size);
    Outcome {
        consumed,
        digests,
        oversize,
        tee_error,
        late: late.then(|| limits.deadline.map(|(_, d)| d)).flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes gathered for the digest thread in any pieces give the digests
    /// of the whole, and the saved copy is the whole.
    #[test]
    fn digests_of_gathered_pieces_are_those_of_the_whole() {
        let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("copy");
        let mut sink = DigestSink::start(Some(File::create(&saved).unwrap()), true);
        for piece in data.chunks(4093) {
            assert!(sink.update(piece));
        }
        let (d, err) = sink.finish(data.len() as u64);
        assert!(err.is_none());
        let mut whole = Digesting::new(None, true);
        whole.update(&data);
        let (want, _) = whole.finish(data.len() as u64);
        assert_eq!(d, want);
        assert_eq!(fs::read(&saved).unwrap(), data);
    }
}
