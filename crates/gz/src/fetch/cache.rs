//! The verified-download cache ([`FetchOptions::downloads`](super::FetchOptions)):
//! `<uuid>.file` is only ever a file that passed verification. A download
//! in progress is written to `<uuid>.<pid>-<random>.partial` beside it
//! (unique, so concurrent runs never share one) and renamed over it only
//! once verified. A cached file is verified again each time it is used.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use agentsadm_types::ids::ImageUuid;

use super::pipeline::Consumed;

use super::pipeline::Consumer;

use super::pipeline::Limits;

use super::Digests;
use super::FetchError;
use super::FetchOptions;
use super::pipeline::run_blocking;
use super::source::ResolvedImage;

/// Unpack the cached copy of `image`, if there is one, re-verifying it as
/// it is read. A copy that no longer verifies is removed and `None`
/// returned: download it again.
pub(super) async fn unpack_cached(
    downloads: &Path,
    image: &ResolvedImage,
    consumer: &Consumer,
    staging: &Path,
    options: &FetchOptions,
    deadline: Instant,
) -> Result<Option<(Consumed, Digests, PathBuf)>, FetchError> {
    let uuid = image.uuid();
    let expected = image.file().clone();
    let cached = downloads.join(format!("{uuid}.file"));
    if !cached.is_file() {
        return Ok(None);
    }
    let io_err = |what, path: &Path| {
        let path = path.to_path_buf();
        move |err| FetchError::Io {
            uuid,
            what,
            path,
            err,
        }
    };
    consumer
        .reset()
        .map_err(io_err("cannot create staging directory", staging))?;
    let file = File::open(&cached).map_err(io_err("cannot open cached image", &cached))?;
    let origin = cached.display().to_string();
    // No further than one byte past the manifest's size (a cached file
    // that grew is caught by the size check).
    let file = file.take(expected.size.saturating_add(1));
    let limits = Limits {
        deadline: Some((deadline, options.deadline)),
    };
    let outcome = run_blocking(uuid, file, &expected, consumer, limits).await?;
    match outcome.verify(uuid, &expected, &origin, None) {
        Ok(()) => {
            let (consumed, digests) = outcome.into_result(uuid)?;
            Ok(Some((consumed, digests, cached)))
        }
        Err(e) => {
            tracing::warn!(image = %uuid, error = %e, "cached image file is corrupt; downloading again");
            let _ = fs::remove_file(&cached);
            Ok(None)
        }
    }
}

/// Create the partial file a download of `uuid` is saved to.
pub(super) fn create_partial(
    downloads: &Path,
    uuid: ImageUuid,
) -> Result<(PathBuf, File), FetchError> {
    fs::create_dir_all(downloads).map_err(|err| FetchError::Io {
        uuid,
        what: "cannot create download directory",
        path: downloads.to_path_buf(),
        err,
    })?;
    let p = downloads.join(format!(
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
    Ok((p, f))
}

/// Keep a verified partial file as the cached copy of `uuid`, even if the
/// archive turns out to be unacceptable (the caller drops it then). Failing
/// to keep it is not an error: the next install downloads again.
pub(super) fn keep(partial: &Path, downloads: &Path, uuid: ImageUuid) -> Option<PathBuf> {
    let dest = downloads.join(format!("{uuid}.file"));
    match fs::rename(partial, &dest) {
        Ok(()) => Some(dest),
        Err(e) => {
            tracing::warn!(image = %uuid, error = %e, "cannot keep the verified download");
            let _ = fs::remove_file(partial);
            None
        }
    }
}
