//! The IMGAPI side of a fetch: start the file download, forward the body
//! over a bounded channel to the blocking [`pipeline`](super::pipeline), and
//! turn what went wrong (a stall, a broken transfer, a full disk, a
//! mismatch) into a [`FetchError`] that says whether a new download may fix
//! it. The caller retries whole downloads.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentsadm_api::ImgapiClient;
use agentsadm_api::imgapi::ImageFileDownload;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageFile;

use super::super::unpack;
use super::Digests;
use super::FetchError;
use super::FetchOptions;
use super::cache;
use super::pipeline::Consumed;
use super::pipeline::Consumer;
use super::pipeline::Limits;
use super::pipeline::Outcome;
use super::pipeline::pipeline;
use super::source::ResolvedImage;

/// Chunks in flight between the network and the unpacker (each up to the
/// HTTP chunk size, typically 16-64 KiB).
const CHANNEL_DEPTH: usize = 64;

/// One whole download from IMGAPI through the pipeline, verified; a
/// verified file is kept in the cache when there is one.
pub(super) async fn download_once(
    client: &ImgapiClient,
    image: &ResolvedImage,
    consumer: &Consumer,
    options: &FetchOptions,
    deadline: Instant,
) -> Result<(Consumed, Digests, Option<PathBuf>), FetchError> {
    let uuid = image.uuid();
    if Instant::now() >= deadline {
        return Err(FetchError::Deadline {
            uuid,
            deadline: options.deadline,
        });
    }
    let expected = image.file().clone();
    consumer.reset().map_err(|err| FetchError::Io {
        uuid,
        what: "cannot create staging directory",
        path: PathBuf::new(),
        err,
    })?;
    let download = start_download(client, uuid, expected.size, options, deadline).await?;
    let content_md5 = download.content_md5.clone();
    let (partial, tee) = match &options.downloads {
        Some(dir) => {
            let (p, f) = cache::create_partial(dir, uuid)?;
            (Some(p), Some(f))
        }
        None => (None, None),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<bytes::Bytes>>(CHANNEL_DEPTH);
    let reader = ChannelReader {
        rx,
        current: bytes::Bytes::new(),
        error: None,
    };
    let blocking = {
        let expected = expected.clone();
        let consumer = consumer.clone();
        let want_md5 = content_md5.is_some();
        // The network side keeps the deadline (it can stop waiting; a
        // blocked read cannot).
        let limits = Limits::default();
        tokio::task::spawn_blocking(move || {
            pipeline(reader, tee, &expected, want_md5, &consumer, limits)
        })
    };
    let pace = Pace {
        read_timeout: options.read_timeout,
        deadline: deadline.into(),
        min_rate: options.min_rate,
        window: options.rate_window,
    };
    let pumped = pump(download.response, tx, pace).await;
    let outcome = blocking.await.map_err(|e| FetchError::Io {
        uuid,
        what: "unpack thread failed for",
        path: PathBuf::new(),
        err: io::Error::other(e.to_string()),
    })?;
    let checked = check_download(
        uuid,
        options,
        &expected,
        pumped,
        &outcome,
        partial.as_deref(),
        content_md5.as_deref(),
    );
    if let Err(e) = checked {
        if let Some(p) = &partial {
            let _ = fs::remove_file(p);
        }
        return Err(e);
    }
    // Verified: keep the file for the next install, even if the archive turns
    // out to be unacceptable (the caller drops it then).
    let cached_file = match (&partial, &options.downloads) {
        (Some(p), Some(dir)) => cache::keep(p, dir, uuid),
        _ => None,
    };
    let (consumed, digests) = outcome.into_result(uuid)?;
    Ok((consumed, digests, cached_file))
}

/// Ask IMGAPI for the image's file, within the deadline; its announced
/// length must be the manifest's.
async fn start_download(
    client: &ImgapiClient,
    uuid: ImageUuid,
    size: u64,
    options: &FetchOptions,
    deadline: Instant,
) -> Result<ImageFileDownload, FetchError> {
    let started = tokio::time::timeout_at(deadline.into(), client.get_image_file(uuid)).await;
    let download = started
        .map_err(|_| FetchError::Deadline {
            uuid,
            deadline: options.deadline,
        })?
        .map_err(|err| {
            if err.is_not_found() {
                FetchError::NotFound {
                    uuid,
                    url: client.base_url().to_string(),
                }
            } else {
                FetchError::FileRequest {
                    uuid,
                    err: Box::new(err),
                }
            }
        })?;
    if let Some(len) = download.content_length
        && len != size
    {
        return Err(FetchError::SizeMismatch {
            uuid,
            origin: format!("IMGAPI's file ({})", client.base_url()),
            expected: size,
            actual: len,
        });
    }
    Ok(download)
}

/// What a finished transfer amounts to: the pump's and the pipeline's
/// failures in the order that explains them best, then the digests.
fn check_download(
    uuid: ImageUuid,
    options: &FetchOptions,
    expected: &ImageFile,
    pumped: Result<(), PumpError>,
    outcome: &Outcome,
    partial: Option<&Path>,
    content_md5: Option<&str>,
) -> Result<(), FetchError> {
    match pumped {
        Err(PumpError::Stalled) => {
            return Err(FetchError::Stalled {
                uuid,
                timeout: options.read_timeout,
            });
        }
        Err(PumpError::TooSlow { bytes, window }) => {
            return Err(FetchError::TooSlow {
                uuid,
                bytes,
                window,
                min_rate: options.min_rate,
            });
        }
        Err(PumpError::Deadline) => {
            return Err(FetchError::Deadline {
                uuid,
                deadline: options.deadline,
            });
        }
        Err(PumpError::Transfer(err)) if outcome.digests.size < expected.size => {
            return Err(FetchError::Transfer { uuid, err });
        }
        _ => {}
    }
    if let Some(err) = &outcome.tee_error {
        return Err(FetchError::Io {
            uuid,
            what: if unpack::is_disk_full(err) {
                "disk full writing the download"
            } else {
                "cannot write the download"
            },
            path: partial.map(Path::to_path_buf).unwrap_or_default(),
            err: io::Error::new(err.kind(), err.to_string()),
        });
    }
    outcome.verify(uuid, expected, "the downloaded file", content_md5)
}

enum PumpError {
    Stalled,
    /// Fewer than the minimum rate's bytes arrived in a window.
    TooSlow {
        bytes: u64,
        window: Duration,
    },
    Deadline,
    Transfer(io::Error),
}

/// How fast the body must come.
struct Pace {
    /// No byte for this long is a stall.
    read_timeout: Duration,
    /// The whole fetch ends here.
    deadline: tokio::time::Instant,
    /// Bytes per second, averaged over `window` (0: no minimum).
    min_rate: u64,
    window: Duration,
}

/// Forward the response body to the unpacker, within `pace`.
async fn pump(
    mut response: reqwest::Response,
    tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>,
    pace: Pace,
) -> Result<(), PumpError> {
    use tokio::time::Instant;
    let mut last_byte = Instant::now();
    let mut window_start = last_byte;
    let mut window_bytes = 0u64;
    // What the receiving half reads when the transfer is cut off here.
    let stop = |tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>, why: &'static str| async move {
        let _ = tx
            .send(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
            .await;
    };
    loop {
        let stall_at = last_byte + pace.read_timeout;
        let window_end = window_start + pace.window;
        let mut wake = stall_at.min(pace.deadline);
        if pace.min_rate > 0 {
            wake = wake.min(window_end);
        }
        let next = tokio::time::timeout_at(wake, response.chunk()).await;
        match next {
            Ok(Err(e)) => {
                // Flattened: the error travels to the blocking half too,
                // and io::Error cannot share a reqwest::Error.
                let msg = error_chain(&e);
                let _ = tx.send(Err(io::Error::other(msg.clone()))).await;
                return Err(PumpError::Transfer(io::Error::other(msg)));
            }
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(chunk))) => {
                last_byte = Instant::now();
                window_bytes += chunk.len() as u64;
                if tx.send(Ok(chunk)).await.is_err() {
                    // The unpacker stopped reading (too many bytes).
                    return Ok(());
                }
            }
            Err(_) => {}
        }
        let now = Instant::now();
        if now >= pace.deadline {
            stop(tx, "the fetch deadline passed").await;
            return Err(PumpError::Deadline);
        }
        if now >= last_byte + pace.read_timeout {
            stop(tx, "IMGAPI stopped sending").await;
            return Err(PumpError::Stalled);
        }
        if pace.min_rate > 0 && now >= window_start + pace.window {
            let elapsed = now - window_start;
            let wanted = (pace.min_rate as f64 * elapsed.as_secs_f64()) as u64;
            if window_bytes < wanted {
                stop(tx, "IMGAPI is sending too slowly").await;
                return Err(PumpError::TooSlow {
                    bytes: window_bytes,
                    window: pace.window,
                });
            }
            window_start = now;
            window_bytes = 0;
        }
    }
}

/// A blocking `Read` over the chunks `pump` sends. A read takes every
/// chunk already queued that fits, so the reader above sees a few large
/// reads rather than one per network chunk.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
    /// An error that arrived behind data already returned: the next read's.
    error: Option<io::Error>,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if let Some(e) = self.error.take() {
                return Err(e);
            }
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let mut n = 0;
        loop {
            let take = (buf.len() - n).min(self.current.len());
            buf[n..n + take].copy_from_slice(&self.current[..take]);
            bytes::Buf::advance(&mut self.current, take);
            n += take;
            if n == buf.len() || !self.current.is_empty() {
                return Ok(n);
            }
            match self.rx.try_recv() {
                Ok(Ok(b)) => self.current = b,
                Ok(Err(e)) => {
                    self.error = Some(e);
                    return Ok(n);
                }
                // Nothing queued yet, or the end: both are the next read's.
                Err(_) => return Ok(n),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queued chunks are joined into one read, in order; an error queued
    /// behind data comes after that data, on the next read.
    #[test]
    fn reads_join_queued_chunks_and_keep_a_late_error_for_later() {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        for part in [&b"abc"[..], b"defg", b"h"] {
            tx.try_send(Ok(bytes::Bytes::copy_from_slice(part)))
                .unwrap();
        }
        tx.try_send(Err(io::Error::other("cut off"))).unwrap();
        drop(tx);
        let mut r = ChannelReader {
            rx,
            current: bytes::Bytes::new(),
            error: None,
        };
        let mut buf = [0u8; 6];
        assert_eq!(r.read(&mut buf).unwrap(), 6);
        assert_eq!(&buf, b"abcdef");
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"gh");
        assert_eq!(r.read(&mut buf).unwrap_err().to_string(), "cut off");
        assert_eq!(r.read(&mut buf).unwrap(), 0);
    }
}
