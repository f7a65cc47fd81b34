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
//!
//! Modules: `source` (where an image comes from, its manifest),
//! `download` (the IMGAPI transfer), `pipeline` (the blocking half: hash,
//! save, decompress, consume, verify) and `cache` (the verified-download
//! cache). Downloads retry under [`crate::api::retry`].

mod cache;
mod download;
mod pipeline;
mod source;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::{ApiError, ImgapiClient, RetryPolicy};
use crate::catalog::CatalogError;
use crate::ids::ImageUuid;
use crate::image::Compression;

use super::unpack::{UnpackError, UnpackOptions, Unpacked};
use pipeline::{Consumed, Consumer, run_blocking};
pub use source::{ImageSource, ResolvedImage, check_manifest, resolve};

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

/// Fetch `image` and unpack it into `staging` (created empty; on error it
/// is left for the caller to remove).
pub async fn fetch_and_unpack(
    image: &ResolvedImage,
    imgapi: Option<&ImgapiClient>,
    staging: &Path,
    options: &FetchOptions,
) -> Result<Fetched, FetchError> {
    let consumer = Consumer::Unpack {
        staging: staging.to_path_buf(),
        options: options.unpack.clone(),
    };
    if let Some(downloads) = &options.downloads
        && let Some((consumed, digests, cached)) =
            cache::unpack_cached(downloads, image, &consumer, staging).await?
    {
        return Ok(Fetched {
            unpacked: unpacked_of(consumed),
            digests,
            from_cache: true,
            cached_file: Some(cached),
        });
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
                    || download::download_once(client, image, consumer, options),
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
