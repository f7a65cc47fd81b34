//! Resolve an image (IMGAPI or a local file plus its manifest), then download,
//! verify and unpack it in one pass.
//!
//! The image file streams from IMGAPI through one pipeline:
//! - the network side forwards chunks over a bounded channel;
//! - a blocking thread hashes every byte (sha1, which IMGAPI records; sha256
//!   for our records; MD5 when IMGAPI sent `Content-MD5`), writes it to
//!   `downloads/<uuid>.<n>.partial`, and feeds the same bytes through the
//!   decompressor into the unpacker, which writes the staging tree;
//! - at the end of the archive the rest of the stream is drained through the
//!   hashes, then size, sha1 and MD5 are checked. Only a verified file is
//!   renamed to `downloads/<uuid>.file`, and the staging tree is only used
//!   (swapped in, later) when everything matched.
//!
//! Unpacking unverified bytes is safe because the unpacker never writes
//! outside staging; it saves reading the image a second time. A verified file
//! already in `downloads/` is unpacked from disk instead (and re-verified). A
//! failed integrity check or a broken transfer is retried with backoff; an
//! archive that verifies but is refused by the unpacker is not.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use md5::Md5;
use sha1::{Digest, Sha1};
use sha2::Sha256;

use crate::api::{ApiError, ImgapiClient, RetryPolicy};
use crate::catalog::{Catalog, CatalogError, Component};
use crate::ids::ImageUuid;
use crate::image::{Compression, ImageFile, ImageManifest};

use super::unpack::{self, UnpackError, UnpackOptions, Unpacked};

/// Chunks in flight between the network and the unpacker (each up to the
/// HTTP chunk size, typically 16-64 KiB).
const CHANNEL_DEPTH: usize = 64;

/// Where an image comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// An image UUID, fetched from the datacenter IMGAPI.
    Imgapi(ImageUuid),
    /// A local image file and its IMGAPI-style manifest.
    File { file: PathBuf, manifest: PathBuf },
}

impl ImageSource {
    /// Parse a command-line argument: an image UUID, or a path to an image
    /// file or manifest (`<x>.file` / `<x>.manifest` side by side, as on the
    /// USB key; `.imgfile` / `.imgmanifest` also work).
    pub fn from_arg(arg: &str) -> Result<ImageSource, FetchError> {
        if let Ok(uuid) = arg.parse::<ImageUuid>()
            && !Path::new(arg).exists()
        {
            return Ok(ImageSource::Imgapi(uuid));
        }
        let path = PathBuf::from(arg);
        if !path.exists() {
            // Neither a UUID nor a file: say both, rather than asking for a
            // manifest next to a file that is not there.
            return Err(FetchError::NoSuchImage {
                arg: arg.to_string(),
            });
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (file, manifest) = if ext == "manifest" || ext == "imgmanifest" {
            let candidates = [path.with_extension("file"), path.with_extension("imgfile")];
            let file = candidates
                .iter()
                .find(|p| p.exists())
                .cloned()
                .ok_or_else(|| FetchError::NoFileForManifest {
                    manifest: path.clone(),
                })?;
            (file, path)
        } else {
            let mut candidates = vec![
                path.with_extension("manifest"),
                path.with_extension("imgmanifest"),
            ];
            candidates.push(PathBuf::from(format!("{arg}.manifest")));
            let manifest = candidates
                .iter()
                .find(|p| p.exists())
                .cloned()
                .ok_or_else(|| FetchError::NoManifestForFile { file: path.clone() })?;
            (path, manifest)
        };
        if !file.exists() {
            return Err(FetchError::NoManifestForFile { file });
        }
        Ok(ImageSource::File { file, manifest })
    }
}

impl std::fmt::Display for ImageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageSource::Imgapi(u) => write!(f, "{u}"),
            ImageSource::File { file, .. } => write!(f, "{}", file.display()),
        }
    }
}

/// Hashes and size of an image file as received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    pub size: u64,
    pub sha1: String,
    pub sha256: String,
    /// base64 MD5, only when the server sent `Content-MD5`.
    pub md5: Option<String>,
}

/// Why an image could not be resolved, fetched or unpacked. Every variant
/// names the image; the caller adds the server and the step.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "image {uuid} must come from IMGAPI, but no IMGAPI URL is known: pass --imgapi-url or set IMGAPI_URL"
    )]
    NoImgapi { uuid: ImageUuid },
    #[error(
        "image {uuid} does not exist in IMGAPI {url}; check the UUID (agentsadm avail lists images)"
    )]
    NotFound { uuid: ImageUuid, url: String },
    #[error("cannot get image {uuid} from IMGAPI; check that IMGAPI is up and retry")]
    Imgapi {
        uuid: ImageUuid,
        #[source]
        err: Box<ApiError>,
    },
    #[error("{arg:?} is neither an image UUID (8-4-4-4-12 hex digits) nor an existing image file")]
    NoSuchImage { arg: String },
    #[error("no manifest next to image file {file} (expected {file}.manifest or <name>.manifest)")]
    NoManifestForFile { file: PathBuf },
    #[error("no image file next to manifest {manifest} (expected <name>.file)")]
    NoFileForManifest { manifest: PathBuf },
    #[error("cannot read image manifest {path}")]
    ManifestRead {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("image manifest {path} is not a valid IMGAPI manifest")]
    ManifestParse {
        path: PathBuf,
        #[source]
        err: serde_json::Error,
    },
    #[error("image {uuid} ({name}) has type {found:?}; component images have type \"other\"")]
    WrongType {
        uuid: ImageUuid,
        name: String,
        found: String,
    },
    #[error("image {uuid} is named {name:?}, which is not a component agentsadm manages")]
    UnknownComponent {
        uuid: ImageUuid,
        name: String,
        #[source]
        err: CatalogError,
    },
    #[error("image {uuid} ({name}) has no file in its manifest")]
    NoFile { uuid: ImageUuid, name: String },
    #[error(
        "image {uuid} ({name}) uses {compression} compression, which agentsadm does not unpack (gzip, bzip2 and none are supported)"
    )]
    UnsupportedCompression {
        uuid: ImageUuid,
        name: String,
        compression: Compression,
    },
    #[error("image {uuid}: {origin} has {actual} bytes but the manifest says {expected}")]
    SizeMismatch {
        uuid: ImageUuid,
        origin: String,
        expected: u64,
        actual: u64,
    },
    #[error("image {uuid}: download truncated at {actual} of {expected} bytes")]
    Truncated {
        uuid: ImageUuid,
        expected: u64,
        actual: u64,
    },
    #[error("image {uuid}: sha1 of {origin} is {actual}, but the manifest says {expected}")]
    Sha1Mismatch {
        uuid: ImageUuid,
        origin: String,
        expected: String,
        actual: String,
    },
    #[error(
        "image {uuid}: MD5 of the download is {actual}, but IMGAPI's Content-MD5 says {expected}"
    )]
    Md5Mismatch {
        uuid: ImageUuid,
        expected: String,
        actual: String,
    },
    #[error("cannot download image {uuid} from IMGAPI; check that IMGAPI is up and retry")]
    FileRequest {
        uuid: ImageUuid,
        #[source]
        err: Box<ApiError>,
    },
    #[error("image {uuid}: the download from IMGAPI failed")]
    Transfer {
        uuid: ImageUuid,
        #[source]
        err: io::Error,
    },
    #[error("image {uuid}: IMGAPI sent no data for {timeout:?}")]
    Stalled { uuid: ImageUuid, timeout: Duration },
    #[error("image {uuid}: {what} {path}")]
    Io {
        uuid: ImageUuid,
        what: &'static str,
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("image {uuid} cannot be unpacked")]
    Unpack {
        uuid: ImageUuid,
        #[source]
        err: UnpackError,
    },
}

impl FetchError {
    /// A broken transfer or a mismatch that a new download may fix.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            FetchError::Truncated { .. }
                | FetchError::Sha1Mismatch { .. }
                | FetchError::Md5Mismatch { .. }
                | FetchError::Transfer { .. }
                | FetchError::Stalled { .. }
        )
    }

    /// The step this failure belongs to, for results.
    pub fn step(&self) -> &'static str {
        match self {
            FetchError::NoImgapi { .. }
            | FetchError::NotFound { .. }
            | FetchError::Imgapi { .. }
            | FetchError::NoSuchImage { .. }
            | FetchError::NoManifestForFile { .. }
            | FetchError::NoFileForManifest { .. }
            | FetchError::ManifestRead { .. }
            | FetchError::ManifestParse { .. }
            | FetchError::WrongType { .. }
            | FetchError::UnknownComponent { .. }
            | FetchError::NoFile { .. }
            | FetchError::UnsupportedCompression { .. } => "resolve",
            FetchError::Transfer { .. }
            | FetchError::Stalled { .. }
            | FetchError::FileRequest { .. } => "download",
            FetchError::SizeMismatch { .. }
            | FetchError::Truncated { .. }
            | FetchError::Sha1Mismatch { .. }
            | FetchError::Md5Mismatch { .. } => "verify",
            FetchError::Io { .. } | FetchError::Unpack { .. } => "unpack",
        }
    }
}

/// A manifest plus where its file is.
#[derive(Clone, Debug)]
pub struct ResolvedImage {
    pub manifest: ImageManifest,
    pub source: ImageSource,
}

impl ResolvedImage {
    pub fn uuid(&self) -> ImageUuid {
        self.manifest.uuid
    }

    /// files[0]; [`resolve`] made sure it exists.
    pub fn file(&self) -> &ImageFile {
        // Invariant: check_manifest refused manifests without a file.
        self.manifest.file().expect("resolved images have a file")
    }
}

/// Get the manifest of `source`.
pub async fn resolve(
    source: &ImageSource,
    imgapi: Option<&ImgapiClient>,
) -> Result<ResolvedImage, FetchError> {
    let manifest = match source {
        ImageSource::Imgapi(uuid) => {
            let client = imgapi.ok_or(FetchError::NoImgapi { uuid: *uuid })?;
            client.get_image(*uuid).await.map_err(|err| {
                if err.is_not_found() {
                    FetchError::NotFound {
                        uuid: *uuid,
                        url: client.base_url().to_string(),
                    }
                } else {
                    FetchError::Imgapi {
                        uuid: *uuid,
                        err: Box::new(err),
                    }
                }
            })?
        }
        ImageSource::File { manifest, .. } => {
            let text = fs::read(manifest).map_err(|err| FetchError::ManifestRead {
                path: manifest.clone(),
                err,
            })?;
            serde_json::from_slice(&text).map_err(|err| FetchError::ManifestParse {
                path: manifest.clone(),
                err,
            })?
        }
    };
    Ok(ResolvedImage {
        manifest,
        source: source.clone(),
    })
}

/// Check a manifest is a component image we can install, and return the
/// component.
pub fn check_manifest<'c>(
    manifest: &ImageManifest,
    catalog: &'c Catalog,
) -> Result<&'c Component, FetchError> {
    let uuid = manifest.uuid;
    if manifest.image_type != "other" {
        return Err(FetchError::WrongType {
            uuid,
            name: manifest.name.clone(),
            found: manifest.image_type.clone(),
        });
    }
    let component =
        catalog
            .require(&manifest.name)
            .map_err(|err| FetchError::UnknownComponent {
                uuid,
                name: manifest.name.clone(),
                err,
            })?;
    let file = manifest.file().ok_or_else(|| FetchError::NoFile {
        uuid,
        name: manifest.name.clone(),
    })?;
    if file.compression == Compression::Xz {
        return Err(FetchError::UnsupportedCompression {
            uuid,
            name: manifest.name.clone(),
            compression: file.compression,
        });
    }
    Ok(component)
}

/// How to fetch.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// The verified-download cache (`None`: stream only, keep nothing).
    pub downloads: Option<PathBuf>,
    /// No byte for this long fails the transfer.
    pub read_timeout: Duration,
    /// Extra whole-download attempts after a broken or corrupt transfer.
    pub retries: u32,
    /// First retry delay; doubles each attempt, with jitter (see
    /// [`crate::api::retry`]).
    pub backoff: Duration,
    pub unpack: UnpackOptions,
}

impl FetchOptions {
    /// How a broken or corrupt download is retried.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retries, self.backoff)
    }
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            downloads: None,
            read_timeout: Duration::from_secs(30),
            retries: 2,
            backoff: Duration::from_millis(200),
            unpack: UnpackOptions::default(),
        }
    }
}

/// The outcome of [`fetch_and_unpack`].
#[derive(Clone, Debug)]
pub struct Fetched {
    pub unpacked: Unpacked,
    pub digests: Digests,
    pub from_cache: bool,
    /// The verified file in the download cache, if kept.
    pub cached_file: Option<PathBuf>,
}

/// What the blocking half does with the decompressed stream.
#[derive(Clone, Debug)]
enum Consumer {
    /// Unpack into a staging directory.
    Unpack {
        staging: PathBuf,
        options: UnpackOptions,
    },
    /// Keep only some members in memory (mockcloud).
    Members {
        expected_top: Option<String>,
        wanted: Vec<String>,
    },
}

/// What the consumer produced.
#[derive(Clone, Debug)]
enum Consumed {
    Unpacked(Unpacked),
    Members(String, BTreeMap<String, Vec<u8>>),
}

impl Consumer {
    fn reset(&self) -> io::Result<()> {
        match self {
            Consumer::Unpack { staging, .. } => reset_dir(staging),
            Consumer::Members { .. } => Ok(()),
        }
    }

    fn consume<R: Read>(
        &self,
        reader: R,
        compression: Compression,
    ) -> Result<Consumed, UnpackError> {
        match self {
            Consumer::Unpack { staging, options } => {
                unpack::unpack(reader, compression, staging, options).map(Consumed::Unpacked)
            }
            Consumer::Members {
                expected_top,
                wanted,
            } => {
                let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
                unpack::read_members(
                    reader,
                    compression,
                    expected_top.as_deref(),
                    &wanted,
                    MAX_MEMBER_BYTES,
                )
                .map(|(top, m)| Consumed::Members(top, m))
            }
        }
    }
}

/// The largest metadata member kept in memory (`package.json`).
const MAX_MEMBER_BYTES: u64 = 1 << 20;

/// Fetch `image` and unpack it into `staging` (created empty; on error it
/// is left for the caller to remove).
pub async fn fetch_and_unpack(
    image: &ResolvedImage,
    imgapi: Option<&ImgapiClient>,
    staging: &Path,
    options: &FetchOptions,
) -> Result<Fetched, FetchError> {
    let uuid = image.uuid();
    let expected = image.file().clone();
    let consumer = Consumer::Unpack {
        staging: staging.to_path_buf(),
        options: options.unpack.clone(),
    };
    let io_err = |what, path: &Path| {
        let path = path.to_path_buf();
        move |err| FetchError::Io {
            uuid,
            what,
            path,
            err,
        }
    };
    // A verified copy in the cache, re-verified while unpacking.
    if let Some(downloads) = &options.downloads {
        let cached = downloads.join(format!("{uuid}.file"));
        if cached.is_file() {
            consumer
                .reset()
                .map_err(io_err("cannot create staging directory", staging))?;
            let file = File::open(&cached).map_err(io_err("cannot open cached image", &cached))?;
            let origin = cached.display().to_string();
            let outcome = run_blocking(uuid, file, &expected, &consumer).await?;
            match outcome.verify(uuid, &expected, &origin, None) {
                Ok(()) => {
                    let (consumed, digests) = outcome.into_result(uuid)?;
                    return Ok(Fetched {
                        unpacked: unpacked_of(consumed),
                        digests,
                        from_cache: true,
                        cached_file: Some(cached),
                    });
                }
                Err(e) => {
                    tracing::warn!(image = %uuid, error = %e, "cached image file is corrupt; downloading again");
                    let _ = fs::remove_file(&cached);
                }
            }
        }
    }
    let (consumed, digests, cached_file) = fetch(image, imgapi, &consumer, options).await?;
    Ok(Fetched {
        unpacked: unpacked_of(consumed),
        digests,
        from_cache: false,
        cached_file,
    })
}

fn unpacked_of(c: Consumed) -> Unpacked {
    match c {
        Consumed::Unpacked(u) => u,
        Consumed::Members(top, _) => Unpacked {
            top,
            ..Default::default()
        },
    }
}

/// Fetch `image` and keep only the `wanted` members of its package (paths
/// relative to the top-level directory) in memory, verifying size and sha1.
/// Nothing is written to disk: the mockcloud install.
pub async fn fetch_members(
    image: &ResolvedImage,
    imgapi: Option<&ImgapiClient>,
    expected_top: &str,
    wanted: &[&str],
    options: &FetchOptions,
) -> Result<(BTreeMap<String, Vec<u8>>, Digests), FetchError> {
    let consumer = Consumer::Members {
        expected_top: Some(expected_top.to_string()),
        wanted: wanted.iter().map(|s| s.to_string()).collect(),
    };
    let mut options = options.clone();
    options.downloads = None;
    let (consumed, digests, _) = fetch(image, imgapi, &consumer, &options).await?;
    match consumed {
        Consumed::Members(_, m) => Ok((m, digests)),
        Consumed::Unpacked(_) => Ok((BTreeMap::new(), digests)),
    }
}

/// From a local file or IMGAPI (with retries of the whole transfer).
async fn fetch(
    image: &ResolvedImage,
    imgapi: Option<&ImgapiClient>,
    consumer: &Consumer,
    options: &FetchOptions,
) -> Result<(Consumed, Digests, Option<PathBuf>), FetchError> {
    let uuid = image.uuid();
    let expected = image.file().clone();
    match &image.source {
        ImageSource::File { file, .. } => {
            consumer.reset().map_err(|err| FetchError::Io {
                uuid,
                what: "cannot create staging directory for",
                path: file.clone(),
                err,
            })?;
            let f = File::open(file).map_err(|err| FetchError::Io {
                uuid,
                what: "cannot open image file",
                path: file.clone(),
                err,
            })?;
            let origin = file.display().to_string();
            let outcome = run_blocking(uuid, f, &expected, consumer).await?;
            outcome.verify(uuid, &expected, &origin, None)?;
            let (consumed, digests) = outcome.into_result(uuid)?;
            Ok((consumed, digests, None))
        }
        ImageSource::Imgapi(_) => {
            let client = imgapi.ok_or(FetchError::NoImgapi { uuid })?;
            let mut attempt = 0;
            options
                .retry_policy()
                .run(
                    || download_once(client, image, consumer, options),
                    FetchError::is_retryable,
                    |e, delay| {
                        attempt += 1;
                        tracing::warn!(image = %uuid, attempt, error = %e, "image download failed; retrying in {delay:?}");
                    },
                )
                .await
        }
    }
}

/// Recreate `dir` empty.
fn reset_dir(dir: &Path) -> io::Result<()> {
    super::fsutil::remove_any(dir)?;
    fs::create_dir_all(dir)
}

async fn download_once(
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
    // The partial file, unique so concurrent runs never share one.
    let (partial, tee) = match &options.downloads {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|err| FetchError::Io {
                uuid,
                what: "cannot create download directory",
                path: dir.clone(),
                err,
            })?;
            let p = dir.join(format!(
                "{uuid}.{}-{:08x}.partial",
                std::process::id(),
                rand::random::<u32>()
            ));
            let f = File::create(&p).map_err(|err| FetchError::Io {
                uuid,
                what: "cannot create download file",
                path: p.clone(),
                err,
            })?;
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
    let mut cached_file = None;
    if let (Some(p), Some(dir)) = (&partial, &options.downloads) {
        let dest = dir.join(format!("{uuid}.file"));
        match fs::rename(p, &dest) {
            Ok(()) => cached_file = Some(dest),
            Err(e) => {
                tracing::warn!(image = %uuid, error = %e, "cannot keep the verified download");
                let _ = fs::remove_file(p);
            }
        }
    }
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
                let msg = match std::error::Error::source(&e) {
                    Some(s) => format!("{e}: {s}"),
                    None => e.to_string(),
                };
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

/// Hashes (and optionally saves) every byte read through it.
struct HashingReader<R> {
    inner: R,
    sha1: Sha1,
    sha256: Sha256,
    md5: Option<Md5>,
    size: u64,
    /// Stop after this many bytes: more than the manifest says is an error,
    /// and an endless stream must not fill the disk.
    limit: u64,
    oversize: bool,
    tee: Option<File>,
    tee_error: Option<io::Error>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.oversize {
            return Err(io::Error::other("more bytes than the manifest says"));
        }
        let n = self.inner.read(buf)?;
        let data = &buf[..n];
        self.sha1.update(data);
        self.sha256.update(data);
        if let Some(m) = &mut self.md5 {
            m.update(data);
        }
        if let Some(f) = &mut self.tee
            && let Err(e) = f.write_all(data)
        {
            let kind = e.kind();
            self.tee_error = Some(e);
            self.tee = None;
            return Err(io::Error::new(kind, "cannot save the download"));
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
struct Outcome {
    consumed: Result<Consumed, UnpackError>,
    digests: Digests,
    oversize: bool,
    tee_error: Option<io::Error>,
}

impl Outcome {
    /// Size, sha1 and MD5 against the manifest (and header).
    fn verify(
        &self,
        uuid: ImageUuid,
        expected: &ImageFile,
        origin: &str,
        content_md5: Option<&str>,
    ) -> Result<(), FetchError> {
        let d = &self.digests;
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
    fn into_result(self, uuid: ImageUuid) -> Result<(Consumed, Digests), FetchError> {
        match self.consumed {
            Ok(c) => Ok((c, self.digests)),
            Err(err) => Err(FetchError::Unpack { uuid, err }),
        }
    }
}

async fn run_blocking(
    uuid: ImageUuid,
    reader: File,
    expected: &ImageFile,
    consumer: &Consumer,
) -> Result<Outcome, FetchError> {
    let expected = expected.clone();
    let consumer = consumer.clone();
    tokio::task::spawn_blocking(move || pipeline(reader, None, &expected, false, &consumer))
        .await
        .map_err(|e| FetchError::Io {
            uuid,
            what: "unpack thread failed for",
            path: PathBuf::new(),
            err: io::Error::other(e.to_string()),
        })
}

/// The blocking half: hash, save, decompress and consume, then drain.
fn pipeline<R: Read>(
    reader: R,
    tee: Option<File>,
    expected: &ImageFile,
    want_md5: bool,
    consumer: &Consumer,
) -> Outcome {
    let mut hashing = HashingReader {
        inner: reader,
        sha1: Sha1::new(),
        sha256: Sha256::new(),
        md5: want_md5.then(Md5::new),
        size: 0,
        limit: expected.size,
        oversize: false,
        tee,
        tee_error: None,
    };
    let consumed = consumer.consume(&mut hashing, expected.compression);
    // Drain whatever the archive did not need (gzip trailer, padding, or the
    // rest after a refusal) so the digests cover the whole file.
    if !hashing.oversize && hashing.tee_error.is_none() {
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
    if let Some(f) = &mut hashing.tee
        && let Err(e) = f.flush()
    {
        hashing.tee_error = Some(e);
    }
    let digests = Digests {
        size: hashing.size,
        sha1: format!("{:x}", hashing.sha1.finalize_reset()),
        sha256: format!("{:x}", hashing.sha256.finalize_reset()),
        md5: hashing
            .md5
            .take()
            .map(|m| base64::engine::general_purpose::STANDARD.encode(m.finalize())),
    };
    Outcome {
        consumed,
        digests,
        oversize: hashing.oversize,
        tee_error: hashing.tee_error.take(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imagebuild::{ImageSpec, build};

    #[test]
    fn from_arg_finds_manifest_pairs() {
        let d = tempfile::tempdir().unwrap();
        let u = ImageUuid::from_u128(5);
        let f = d.path().join(format!("{u}.file"));
        let m = d.path().join(format!("{u}.manifest"));
        fs::write(&f, b"x").unwrap();
        fs::write(&m, b"{}").unwrap();
        let want = ImageSource::File {
            file: f.clone(),
            manifest: m.clone(),
        };
        assert_eq!(ImageSource::from_arg(f.to_str().unwrap()).unwrap(), want);
        assert_eq!(ImageSource::from_arg(m.to_str().unwrap()).unwrap(), want);
        assert_eq!(
            ImageSource::from_arg(&u.to_string()).unwrap(),
            ImageSource::Imgapi(u)
        );
        assert!(ImageSource::from_arg("/nope/x.tgz").is_err());
    }

    #[tokio::test]
    async fn local_file_verifies_and_unpacks() {
        let cat = Catalog::builtin();
        let img = build(&ImageSpec::for_component(
            cat.get("vm-agent").unwrap(),
            "1.0.0",
        ));
        let d = tempfile::tempdir().unwrap();
        let (m, f) = crate::imagebuild::write_to_dir(&img, d.path()).unwrap();
        let src = ImageSource::File {
            file: f.clone(),
            manifest: m,
        };
        let resolved = resolve(&src, None).await.unwrap();
        check_manifest(&resolved.manifest, &cat).unwrap();
        let staging = d.path().join("stage");
        let got = fetch_and_unpack(&resolved, None, &staging, &FetchOptions::default())
            .await
            .unwrap();
        assert_eq!(got.unpacked.top, "vm-agent");
        assert_eq!(got.digests.sha1, img.manifest.files[0].sha1);
        // A corrupted copy fails the sha1 check.
        let mut bytes = img.file.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&f, &bytes).unwrap();
        let err = fetch_and_unpack(&resolved, None, &staging, &FetchOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::Sha1Mismatch { .. }), "{err}");
    }
}
