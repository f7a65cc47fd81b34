//! The IMGAPI side of a fetch: start the file download, forward the body
//! over a bounded channel to the blocking [`pipeline`](super::pipeline), and
//! turn what went wrong (a stall, a broken transfer, a full disk, a
//! mismatch) into a [`FetchError`] that says whether a new download may fix
//! it. The caller retries whole downloads.

use std::fs;
use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Duration;

use crate::api::ImgapiClient;
use crate::error::error_chain;

use super::super::unpack;
use super::pipeline::{Consumed, Consumer, pipeline};
use super::source::ResolvedImage;
use super::{Digests, FetchError, FetchOptions, cache};

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
) -> Result<(Consumed, Digests, Option<PathBuf>), FetchError> {
    let uuid = image.uuid();
    let expected = image.file().clone();
    consumer.reset().map_err(|err| FetchError::Io {
        uuid,
        what: "cannot create staging directory",
        path: PathBuf::new(),
        err,
    })?;
    let download = client.get_image_file(uuid).await.map_err(|err| {
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
        && len != expected.size
    {
        return Err(FetchError::SizeMismatch {
            uuid,
            origin: format!("IMGAPI's file ({})", client.base_url()),
            expected: expected.size,
            actual: len,
        });
    }
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
    };
    let blocking = {
        let expected = expected.clone();
        let consumer = consumer.clone();
        let want_md5 = content_md5.is_some();
        tokio::task::spawn_blocking(move || pipeline(reader, tee, &expected, want_md5, &consumer))
    };
    let pumped = pump(download.response, tx, options.read_timeout).await;
    let outcome = blocking.await.map_err(|e| FetchError::Io {
        uuid,
        what: "unpack thread failed for",
        path: PathBuf::new(),
        err: io::Error::other(e.to_string()),
    })?;
    let checked = (|| {
        match pumped {
            Err(PumpError::Stalled) => {
                return Err(FetchError::Stalled {
                    uuid,
                    timeout: options.read_timeout,
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
                path: partial.clone().unwrap_or_default(),
                err: io::Error::new(err.kind(), err.to_string()),
            });
        }
        outcome.verify(
            uuid,
            &expected,
            "the downloaded file",
            content_md5.as_deref(),
        )
    })();
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

enum PumpError {
    Stalled,
    Transfer(io::Error),
}

/// Forward the response body to the unpacker.
async fn pump(
    mut response: reqwest::Response,
    tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>,
    read_timeout: Duration,
) -> Result<(), PumpError> {
    loop {
        match tokio::time::timeout(read_timeout, response.chunk()).await {
            Err(_) => {
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "IMGAPI stopped sending",
                    )))
                    .await;
                return Err(PumpError::Stalled);
            }
            Ok(Err(e)) => {
                // Flattened: the error travels to the blocking half too,
                // and io::Error cannot share a reqwest::Error.
                let msg = error_chain(&e);
                let _ = tx.send(Err(io::Error::other(msg.clone()))).await;
                return Err(PumpError::Transfer(io::Error::other(msg)));
            }
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(chunk))) => {
                if tx.send(Ok(chunk)).await.is_err() {
                    // The unpacker stopped reading (too many bytes).
                    return Ok(());
                }
            }
        }
    }
}

/// A blocking `Read` over the chunks `pump` sends.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}
