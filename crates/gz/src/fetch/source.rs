//! Where an image comes from (an IMGAPI UUID, or a local file beside its
//! manifest) and its manifest: [`resolve`], then [`check_manifest`] that it
//! is a component image agentsadm installs.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use agentsadm_api::ImgapiClient;
use agentsadm_api::imgapi::ManifestError;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageManifest;

use super::super::unpack::clip;
use super::FetchError;
use super::MAX_MANIFEST_BYTES;

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
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (file, manifest) = if let Some(stem) = strip_any(&name, MANIFEST_SUFFIXES) {
            let tried = sibling_names(&path, stem, IMAGE_FILE_SUFFIXES);
            let file = tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
                FetchError::NoFileForManifest {
                    manifest: path.clone(),
                    tried: tried.clone(),
                }
            })?;
            (file, path)
        } else {
            // `vm-agent-STAMP.tgz` and `config-agent-pkg-STAMP.tar.gz` sit
            // beside `<same stem>.manifest` (each Makefile's names); the
            // USB key's `<uuid>.file` beside `<uuid>.manifest`.
            let mut tried = match strip_any(&name, IMAGE_FILE_SUFFIXES) {
                Some(stem) => sibling_names(&path, stem, MANIFEST_SUFFIXES),
                None => match path.file_stem() {
                    Some(stem) => sibling_names(&path, &stem.to_string_lossy(), MANIFEST_SUFFIXES),
                    None => Vec::new(),
                },
            };
            tried.extend(sibling_names(&path, &name, MANIFEST_SUFFIXES));
            let manifest = tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
                FetchError::NoManifestForFile {
                    file: path.clone(),
                    tried: tried.clone(),
                }
            })?;
            (path, manifest)
        };
        Ok(ImageSource::File { file, manifest })
    }
}

/// How manifests are named beside their image file.
const MANIFEST_SUFFIXES: &[&str] = &[".manifest", ".imgmanifest"];

/// How image files are named beside their manifest: the USB key's and
/// IMGAPI's names, then the release tarballs' (longest suffix first, so
/// `x.tar.gz` is stem `x`, not `x.tar`).
const IMAGE_FILE_SUFFIXES: &[&str] = &[".file", ".imgfile", ".tar.gz", ".tar.bz2", ".tgz", ".sh"];

/// `name` without the first of `suffixes` it ends with (never empty).
fn strip_any<'a>(name: &'a str, suffixes: &[&str]) -> Option<&'a str> {
    suffixes
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .filter(|stem| !stem.is_empty())
}

/// `stem` plus each suffix, in `path`'s directory.
fn sibling_names(path: &Path, stem: &str, suffixes: &[&str]) -> Vec<PathBuf> {
    suffixes
        .iter()
        .map(|s| path.with_file_name(format!("{stem}{s}")))
        .collect()
}

impl std::fmt::Display for ImageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageSource::Imgapi(u) => write!(f, "{u}"),
            ImageSource::File { file, .. } => write!(f, "{}", file.display()),
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
            let manifest = client
                .get_image_limited(*uuid, MAX_MANIFEST_BYTES)
                .await
                .map_err(|err| match err {
                    e if e.is_not_found() => FetchError::NotFound {
                        uuid: *uuid,
                        url: client.base_url().to_string(),
                    },
                    ManifestError::TooLarge { limit, .. } => FetchError::ManifestTooLarge {
                        origin: format!("of image {uuid} from IMGAPI {}", client.base_url()),
                        limit,
                    },
                    ManifestError::Api(err) => manifest_api_error(*uuid, client.base_url(), err),
                })?;
            // The answer must be the image asked for: everything after
            // this (the file, its checks, the record) trusts the manifest.
            if manifest.uuid != *uuid {
                return Err(FetchError::WrongManifestUuid {
                    asked: *uuid,
                    got: manifest.uuid,
                    url: client.base_url().to_string(),
                });
            }
            manifest
        }
        ImageSource::File { manifest, .. } => {
            let text = read_manifest_file(manifest)?;
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

/// A local manifest's bytes, refused unread beyond [`MAX_MANIFEST_BYTES`].
fn read_manifest_file(path: &Path) -> Result<Vec<u8>, FetchError> {
    let read_err = |err| FetchError::ManifestRead {
        path: path.to_path_buf(),
        err,
    };
    let file = fs::File::open(path).map_err(read_err)?;
    let mut text = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(FetchError::ManifestTooLarge {
            origin: path.display().to_string(),
            limit: MAX_MANIFEST_BYTES,
        });
    }
    Ok(text)
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
            name: clip(&manifest.name),
            found: clip(&manifest.image_type),
        });
    }
    let component =
        catalog
            .require(&manifest.name)
            .map_err(|err| FetchError::UnknownComponent {
                uuid,
                name: clip(&manifest.name),
                err,
            })?;
    let file = manifest.file().ok_or_else(|| FetchError::NoFile {
        uuid,
        name: clip(&manifest.name),
    })?;
    if file.compression == Compression::Xz {
        return Err(FetchError::UnsupportedCompression {
            uuid,
            name: clip(&manifest.name),
            compression: file.compression,
        });
    }
    Ok(component)
}

/// A failed GetImage: an answer that is not a manifest says which field
/// is wrong (IMGAPI is up); anything else is IMGAPI's to fix or retry.
fn manifest_api_error(uuid: ImageUuid, url: &str, err: agentsadm_api::ApiError) -> FetchError {
    match err.decode_detail() {
        Some(detail) => FetchError::BadManifest {
            uuid,
            url: url.to_string(),
            detail,
        },
        None => FetchError::Imgapi {
            uuid,
            err: Box::new(err),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
