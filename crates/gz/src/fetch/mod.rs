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
//! Before any of that, the manifest is judged: at most 1 MiB, read before it
//! is parsed ([`MAX_MANIFEST_BYTES`]); from IMGAPI, the image asked for;
//! `active` unless [`FetchOptions::allow_inactive`]; a local image file a
//! regular file of the manifest's size (read no further than one byte past
//! it); room for it on the filesystem. Then every fetch ends by a deadline,
//! a download fails below a minimum rate, and the unpacker stops an archive
//! that expands past [`FetchOptions::max_unpacked_bytes`] or
//! [`FetchOptions::max_expansion_ratio`] times the file's size.
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
//! cache). Downloads retry under [`agentsadm_api::retry`].

mod cache;
mod download;
mod pipeline;
mod source;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentsadm_api::ApiError;

use agentsadm_api::ImgapiClient;

use agentsadm_api::RetryPolicy;
use agentsadm_types::catalog::CatalogError;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;

use super::unpack::DEFAULT_FREE_SPACE_RESERVE;
use super::unpack::DEFAULT_MAX_EXPANSION_RATIO;
use super::unpack::DEFAULT_MAX_UNPACKED_BYTES;
use super::unpack::UnpackError;
use super::unpack::UnpackLimits;
use super::unpack::UnpackOptions;
use super::unpack::Unpacked;
use super::unpack::clip;
use pipeline::{Consumed, Consumer, Limits, run_blocking};
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
    #[error(
        "IMGAPI {url} answered with a manifest for image {uuid} that is not a valid image manifest ({detail}); IMGAPI is up, but this image's record is damaged: see it with 'sdc-imgadm get {uuid}'"
    )]
    BadManifest {
        uuid: ImageUuid,
        url: String,
        detail: String,
    },
    #[error("cannot get image {uuid} from IMGAPI; check that IMGAPI is up and retry")]
    Imgapi {
        uuid: ImageUuid,
        #[source]
        err: Box<ApiError>,
    },
    #[error("{arg:?} is neither an image UUID (8-4-4-4-12 hex digits) nor an existing image file")]
    NoSuchImage { arg: String },
    #[error(
        "no manifest next to image file {file} (tried {}); pass the manifest's path instead",
        display_paths(tried)
    )]
    NoManifestForFile { file: PathBuf, tried: Vec<PathBuf> },
    #[error(
        "no image file next to manifest {manifest} (tried {}); pass the image file's path instead",
        display_paths(tried)
    )]
    NoFileForManifest {
        manifest: PathBuf,
        tried: Vec<PathBuf>,
    },
    #[error(
        "image manifest {origin} is larger than {limit} bytes; a manifest is a few KiB, so this is not one"
    )]
    ManifestTooLarge { origin: String, limit: u64 },
    #[error(
        "IMGAPI {url} answered the request for image {asked} with the manifest of image {got}; check IMGAPI (a proxy or cache in front of it may be mixing up answers)"
    )]
    WrongManifestUuid {
        asked: ImageUuid,
        got: ImageUuid,
        url: String,
    },
    #[error(
        "image {uuid} ({name}) is {state}: {reason}; pass --allow-inactive to install it anyway (only if you know why)"
    )]
    Inactive {
        uuid: ImageUuid,
        name: String,
        state: &'static str,
        reason: &'static str,
    },
    #[error(
        "image file {path} is not a regular file (a device, FIFO or directory); name the image file itself"
    )]
    NotRegularFile { path: PathBuf },
    #[error(
        "image {uuid}: {path} has {free} bytes free, but fetching needs at least {needed} (the {size}-byte image file{cached}, unpacked, and a reserve of {reserve}); free space there and retry"
    )]
    NoSpace {
        uuid: ImageUuid,
        path: PathBuf,
        free: u64,
        needed: u64,
        size: u64,
        cached: &'static str,
        reserve: u64,
    },
    #[error(
        "image {uuid}: IMGAPI sent {bytes} bytes in {window:?}, below the minimum rate of {min_rate} bytes/s; check the network to IMGAPI and retry (or lower --min-download-rate)"
    )]
    TooSlow {
        uuid: ImageUuid,
        bytes: u64,
        window: Duration,
        min_rate: u64,
    },
    #[error(
        "image {uuid}: fetching did not finish within {deadline:?}; check the network to IMGAPI and retry (or raise --fetch-deadline)"
    )]
    Deadline { uuid: ImageUuid, deadline: Duration },
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
                | FetchError::TooSlow { .. }
        )
    }

    /// The step this failure belongs to, for results.
    pub fn step(&self) -> crate::step::Step {
        match self {
            FetchError::NoImgapi { .. }
            | FetchError::NotFound { .. }
            | FetchError::Imgapi { .. }
            | FetchError::NoSuchImage { .. }
            | FetchError::NoManifestForFile { .. }
            | FetchError::NoFileForManifest { .. }
            | FetchError::ManifestRead { .. }
            | FetchError::ManifestParse { .. }
            | FetchError::BadManifest { .. }
            | FetchError::ManifestTooLarge { .. }
            | FetchError::WrongManifestUuid { .. }
            | FetchError::Inactive { .. }
            | FetchError::NotRegularFile { .. }
            | FetchError::WrongType { .. }
            | FetchError::UnknownComponent { .. }
            | FetchError::NoFile { .. }
            | FetchError::UnsupportedCompression { .. } => crate::step::Step::Resolve,
            FetchError::Transfer { .. }
            | FetchError::Stalled { .. }
            | FetchError::TooSlow { .. }
            | FetchError::Deadline { .. }
            | FetchError::NoSpace { .. }
            | FetchError::FileRequest { .. } => crate::step::Step::Download,
            FetchError::SizeMismatch { .. }
            | FetchError::Truncated { .. }
            | FetchError::Sha1Mismatch { .. }
            | FetchError::Md5Mismatch { .. } => crate::step::Step::Verify,
            FetchError::Io { .. } | FetchError::Unpack { .. } => crate::step::Step::Unpack,
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
    /// The whole fetch (every attempt, and unpacking) must end within
    /// this (`--fetch-deadline`).
    pub deadline: Duration,
    /// A download averaging fewer bytes per second than this over
    /// `rate_window` fails (`--min-download-rate`); 0 disables the check.
    pub min_rate: u64,
    /// The window `min_rate` is averaged over.
    pub rate_window: Duration,
    /// Stop once the decompressed archive passes this many bytes
    /// (`--max-unpacked-bytes`).
    pub max_unpacked_bytes: u64,
    /// ... or this many times the image file's size
    /// (`--max-expansion-ratio`).
    pub max_expansion_ratio: u64,
    /// Bytes to keep free on the filesystem unpacked into.
    pub free_space_reserve: u64,
    /// Install images whose IMGAPI state is not `active` (unactivated,
    /// disabled) (`--allow-inactive`).
    pub allow_inactive: bool,
    /// Extra whole-download attempts after a broken or corrupt transfer.
    pub retries: u32,
    /// First retry delay; doubles each attempt, with jitter (see
    /// [`agentsadm_api::retry`]).
    pub backoff: Duration,
    pub unpack: UnpackOptions,
}

impl FetchOptions {
    /// How a broken or corrupt download is retried.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retries, self.backoff)
    }

    /// The unpacker's limits for an image file of `compressed` bytes.
    pub fn unpack_limits(&self, compressed: u64) -> UnpackLimits {
        UnpackLimits {
            max_unpacked_bytes: self.max_unpacked_bytes,
            max_expansion_ratio: self.max_expansion_ratio,
            compressed_size: Some(compressed),
            free_space_reserve: self.free_space_reserve,
        }
    }
}

/// The default overall deadline: an 80 MB image at 25 KiB/s. A datacenter
/// network moves it in seconds; an hour means the transfer is broken.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(3600);

/// The default minimum rate, 10 KiB/s averaged over [`DEFAULT_RATE_WINDOW`]:
/// far below any working network, far above a connection that trickles a
/// byte at a time to hold the server's lock.
pub const DEFAULT_MIN_RATE: u64 = 10 * 1024;

/// The default window of the minimum rate: long enough to ride out a
/// pause (IMGAPI fetching from Manta, a TCP retransmit backoff).
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(60);

/// The largest manifest read (IMGAPI's answer or a `.manifest` file).
/// Real ones are 1-3 KiB.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            downloads: None,
            read_timeout: Duration::from_secs(30),
            retries: 2,
            backoff: Duration::from_millis(200),
            deadline: DEFAULT_DEADLINE,
            min_rate: DEFAULT_MIN_RATE,
            rate_window: DEFAULT_RATE_WINDOW,
            max_unpacked_bytes: DEFAULT_MAX_UNPACKED_BYTES,
            max_expansion_ratio: DEFAULT_MAX_EXPANSION_RATIO,
            free_space_reserve: DEFAULT_FREE_SPACE_RESERVE,
            allow_inactive: false,
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
    let deadline = Instant::now() + options.deadline;
    ensure_active(&image.manifest, options.allow_inactive)?;
    if let ImageSource::File { file, .. } = &image.source {
        // A device or a file of the wrong size is refused before anything
        // else is judged (its claimed size included).
        open_local(image.uuid(), file, image.file().size)?;
    }
    ensure_space(image, staging, options)?;
    let consumer = Consumer::Unpack {
        staging: staging.to_path_buf(),
        options: options.unpack.clone(),
        limits: options.unpack_limits(image.file().size),
    };
    if let Some(downloads) = &options.downloads
        && let Some((consumed, digests, cached)) =
            cache::unpack_cached(downloads, image, &consumer, staging, options, deadline).await?
    {
        return Ok(Fetched {
            unpacked: unpacked_of(consumed),
            digests,
            from_cache: true,
            cached_file: Some(cached),
        });
    }
    let (consumed, digests, cached_file) =
        fetch(image, imgapi, &consumer, options, deadline).await?;
    Ok(Fetched {
        unpacked: unpacked_of(consumed),
        digests,
        from_cache: false,
        cached_file,
    })
}

/// Refuse an image IMGAPI does not consider installable (unactivated,
/// disabled, still being created, failed) unless told otherwise.
fn ensure_active(manifest: &ImageManifest, allow_inactive: bool) -> Result<(), FetchError> {
    let (state, reason) = match (manifest.state, manifest.disabled) {
        (ImageState::Active, false) => return Ok(()),
        (ImageState::Active | ImageState::Disabled, _) => (
            "disabled",
            "an operator disabled it in IMGAPI, usually because it is known to be bad",
        ),
        (ImageState::Unactivated, _) => (
            "unactivated",
            "its upload was never activated in IMGAPI, so its file may be incomplete",
        ),
        (ImageState::Creating, _) => ("still being created", "its file is not complete yet"),
        (ImageState::Failed, _) => ("failed", "IMGAPI could not finish creating it"),
    };
    if allow_inactive {
        tracing::warn!(image = %manifest.uuid, state, "installing an inactive image (--allow-inactive)");
        return Ok(());
    }
    Err(FetchError::Inactive {
        uuid: manifest.uuid,
        name: clip(&manifest.name),
        state,
        reason,
    })
}

/// Refuse before writing anything when the filesystem `staging` is on
/// cannot take the image file (twice, with the download cache) plus the
/// reserve. Unknown free space (statvfs failing) lets the disk decide.
fn ensure_space(
    image: &ResolvedImage,
    staging: &Path,
    options: &FetchOptions,
) -> Result<(), FetchError> {
    let Some(existing) = staging.ancestors().find(|p| p.exists()) else {
        return Ok(());
    };
    let Ok(free) = super::unpack::free_bytes(existing) else {
        return Ok(());
    };
    let size = image.file().size;
    // Only a download is kept in the cache.
    let cached = options.downloads.is_some() && matches!(image.source, ImageSource::Imgapi(_));
    let copies = if cached { 2 } else { 1 };
    let needed = size
        .saturating_mul(copies)
        .saturating_add(options.free_space_reserve);
    if free < needed {
        return Err(FetchError::NoSpace {
            uuid: image.uuid(),
            path: existing.to_path_buf(),
            free,
            needed,
            size,
            cached: if copies == 2 {
                " in the download cache"
            } else {
                ""
            },
            reserve: options.free_space_reserve,
        });
    }
    Ok(())
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
    let deadline = Instant::now() + options.deadline;
    ensure_active(&image.manifest, options.allow_inactive)?;
    let consumer = Consumer::Members {
        expected_top: Some(expected_top.to_string()),
        wanted: wanted.iter().map(|s| s.to_string()).collect(),
        limits: options.unpack_limits(image.file().size),
    };
    let mut options = options.clone();
    options.downloads = None;
    let (consumed, digests, _) = fetch(image, imgapi, &consumer, &options, deadline).await?;
    match consumed {
        Consumed::Members(_, m) => Ok((m, digests)),
        Consumed::Unpacked(_) => Ok((BTreeMap::new(), digests)),
    }
}

/// From a local file or IMGAPI (with retries of the whole transfer), all
/// before `deadline`.
async fn fetch(
    image: &ResolvedImage,
    imgapi: Option<&ImgapiClient>,
    consumer: &Consumer,
    options: &FetchOptions,
    deadline: Instant,
) -> Result<(Consumed, Digests, Option<PathBuf>), FetchError> {
    let uuid = image.uuid();
    let expected = image.file().clone();
    match &image.source {
        ImageSource::File { file, .. } => {
            let f = open_local(uuid, file, expected.size)?;
            consumer.reset().map_err(|err| FetchError::Io {
                uuid,
                what: "cannot create staging directory for",
                path: file.clone(),
                err,
            })?;
            let origin = file.display().to_string();
            let limits = Limits {
                deadline: Some((deadline, options.deadline)),
            };
            let outcome = run_blocking(uuid, f, &expected, consumer, limits).await?;
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
                    || download::download_once(client, image, consumer, options, deadline),
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

/// Open a local image file: a regular file of the manifest's size, read no
/// further than one byte past it (a device or a growing file must not be
/// read for ever).
fn open_local(uuid: ImageUuid, file: &Path, size: u64) -> Result<io::Take<File>, FetchError> {
    let f = File::open(file).map_err(|err| FetchError::Io {
        uuid,
        what: "cannot open image file",
        path: file.to_path_buf(),
        err,
    })?;
    let md = f.metadata().map_err(|err| FetchError::Io {
        uuid,
        what: "cannot read image file",
        path: file.to_path_buf(),
        err,
    })?;
    if !md.is_file() {
        return Err(FetchError::NotRegularFile {
            path: file.to_path_buf(),
        });
    }
    if md.len() != size {
        return Err(FetchError::SizeMismatch {
            uuid,
            origin: file.display().to_string(),
            expected: size,
            actual: md.len(),
        });
    }
    Ok(f.take(size.saturating_add(1)))
}

/// Paths for an error message, comma-separated.
fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
