//! agentsadm's own image, as `make release` packs it and the installer's
//! `agentsadm` kind ([`super::kinds`]) takes it: a gzip'd tarball of
//!
//! ```text
//! agentsadm/bin/agentsadm      the binary (0755)
//! agentsadm/package.json       {"name": "agentsadm", "version": VERSION}
//! agentsadm/image_uuid         the manifest's UUID
//! agentsadm/etc/buildstamp     VERSION
//! ```
//!
//! beside an IMGAPI manifest in the form Triton's agent builds write
//! (their `manifest.tmpl`): `v` 2, a fresh `uuid` (the one inside the
//! tarball), the admin `owner`, `name` `agentsadm`, `version`
//! `<semver>-<branch>-<timestamp>-g<sha>` (eng's `STAMP` after the semver),
//! `type` and `os` `other`, `files[0]` `{sha1, size, compression: gzip}`,
//! `tags` `{smartdc_service: "true", buildstamp}`. Like sdcadm's and
//! gz-tools' images it has no `requirements` (it runs in the global zone of
//! any supported platform) and no `published_at` (IMGAPI sets it when the
//! image is activated). The files are `agentsadm-<version>.tar.gz` and
//! `agentsadm-<version>.manifest`, a pair `gz install FILE` and
//! `self-update FILE` find from either name.

use std::io;
use std::path::{Path, PathBuf};

use sha1::{Digest, Sha1};

use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::{ADMIN_OWNER, Compression, ImageFile, ImageManifest, ImageState};

/// The image and component name.
pub const NAME: &str = "agentsadm";

/// What a release is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseSpec {
    /// The binary to ship (the build's `target/.../agentsadm`).
    pub binary: PathBuf,
    /// The crate's version (`Cargo.toml`), e.g. `0.1.0`.
    pub semver: String,
    /// The git branch (`master`).
    pub branch: String,
    /// The build time, `YYYYMMDDTHHMMSSZ`.
    pub timestamp: String,
    /// The commit, abbreviated (`git describe`'s `g<sha>` without the `g`).
    pub git_sha: String,
    /// The image UUID; a random one when `None` (as the builds do).
    pub uuid: Option<ImageUuid>,
}

impl ReleaseSpec {
    /// `<branch>-<timestamp>-g<sha>`: IMGAPI's `tags.buildstamp`.
    pub fn buildstamp(&self) -> String {
        format!("{}-{}-g{}", self.branch, self.timestamp, self.git_sha)
    }

    /// `<semver>-<branch>-<timestamp>-g<sha>`.
    pub fn version(&self) -> String {
        format!("{}-{}", self.semver, self.buildstamp())
    }
}

/// A release written by [`write_release`].
#[derive(Clone, Debug)]
pub struct Release {
    pub tarball: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: ImageManifest,
}

/// Why a release was not written.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("{what} {value:?} is not valid: {rule}")]
    Invalid {
        what: &'static str,
        value: String,
        rule: &'static str,
    },
    #[error("cannot read the binary {path}")]
    Binary {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

/// The files of the image, paths inside the tarball: (path, mode, bytes).
/// The simulator's image builder uses the same list, so the images it
/// publishes are what `make release` publishes.
pub fn tree_files(binary: Vec<u8>, version: &str, uuid: ImageUuid) -> Vec<(String, u32, Vec<u8>)> {
    let package = serde_json::json!({
        "name": NAME,
        "version": version,
        "description": "Install, upgrade and track Triton global-zone agents, one component at a time",
        "license": "MPL-2.0",
    });
    let mut package = serde_json::to_vec_pretty(&package).unwrap_or_default();
    package.push(b'\n');
    vec![
        (format!("{NAME}/bin/{NAME}"), 0o755, binary),
        (
            format!("{NAME}/etc/buildstamp"),
            0o644,
            format!("{version}\n").into_bytes(),
        ),
        (
            format!("{NAME}/image_uuid"),
            0o644,
            format!("{uuid}\n").into_bytes(),
        ),
        (format!("{NAME}/package.json"), 0o644, package),
    ]
}

/// A gzip'd tarball of `files` (reproducible: fixed owners and mtime), each
/// directory entered before its first file.
pub fn pack_tarball(files: &[(String, u32, Vec<u8>)], mtime: u64) -> io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut dirs = std::collections::BTreeSet::new();
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(mtime);
        h.set_size(size);
        h
    };
    for (path, mode, data) in files {
        let mut at = String::new();
        for part in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, d)| d)
        {
            at = if at.is_empty() {
                part.to_string()
            } else {
                format!("{at}/{part}")
            };
            if dirs.insert(at.clone()) {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                tar.append_data(&mut h, format!("{at}/"), io::empty())?;
            }
        }
        let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
        tar.append_data(&mut h, path, &data[..])?;
    }
    tar.into_inner()?.finish()
}

/// The manifest of an image file.
pub fn manifest_for(
    uuid: ImageUuid,
    version: &str,
    buildstamp: &str,
    file: &[u8],
) -> ImageManifest {
    let mut tags = std::collections::BTreeMap::new();
    tags.insert("smartdc_service".to_string(), serde_json::json!("true"));
    tags.insert("buildstamp".to_string(), serde_json::json!(buildstamp));
    ImageManifest {
        v: 2,
        uuid,
        owner: ADMIN_OWNER.to_string(),
        name: NAME.to_string(),
        version: version.to_string(),
        state: ImageState::Active,
        disabled: false,
        public: false,
        published_at: None,
        image_type: "other".to_string(),
        os: "other".to_string(),
        files: vec![ImageFile {
            sha1: format!("{:x}", Sha1::digest(file)),
            size: file.len() as u64,
            compression: Compression::Gzip,
            stor: None,
        }],
        description: Some(
            "agentsadm: installs, upgrades and tracks Triton global-zone agents".to_string(),
        ),
        tags: Some(tags),
        channels: None,
        extra: Default::default(),
    }
}

fn check(spec: &ReleaseSpec) -> Result<(), ReleaseError> {
    let invalid = |what, value: &str, rule| ReleaseError::Invalid {
        what,
        value: value.to_string(),
        rule,
    };
    if semver::Version::parse(&spec.semver).is_err() || spec.semver.contains(['-', '+']) {
        return Err(invalid("the version", &spec.semver, "MAJOR.MINOR.PATCH"));
    }
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    if !word(&spec.branch) {
        return Err(invalid(
            "the branch",
            &spec.branch,
            "letters, digits, '.', '_' and '-' (for a branch with '/', pass BRANCH=<name without it>)",
        ));
    }
    let ts = spec.timestamp.as_bytes();
    let ts_ok = ts.len() == 16
        && ts[8] == b'T'
        && ts[15] == b'Z'
        && ts[..8].iter().chain(&ts[9..15]).all(u8::is_ascii_digit);
    if !ts_ok {
        return Err(invalid(
            "the timestamp",
            &spec.timestamp,
            "YYYYMMDDTHHMMSSZ (UTC)",
        ));
    }
    if spec.git_sha.len() < 7 || !spec.git_sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid("the commit", &spec.git_sha, "7 or more hex digits"));
    }
    Ok(())
}

/// Pack `spec.binary` into `out_dir/agentsadm-<version>.{tar.gz,manifest}`.
/// The files appear whole or not at all (written aside, then renamed).
pub fn write_release(spec: &ReleaseSpec, out_dir: &Path) -> Result<Release, ReleaseError> {
    check(spec)?;
    let binary = std::fs::read(&spec.binary).map_err(|err| ReleaseError::Binary {
        path: spec.binary.clone(),
        err,
    })?;
    let uuid = spec.uuid.unwrap_or_else(ImageUuid::new_v4);
    let version = spec.version();
    // The mtime of every entry: the build's time, so two builds of one
    // commit at one timestamp give the same bytes.
    let mtime = timestamp_secs(&spec.timestamp);
    let tarball_path = out_dir.join(format!("{NAME}-{version}.tar.gz"));
    let manifest_path = out_dir.join(format!("{NAME}-{version}.manifest"));
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| ReleaseError::Write { path, err }
    };
    let file = pack_tarball(&tree_files(binary, &version, uuid), mtime)
        .map_err(write_err(&tarball_path))?;
    let manifest = manifest_for(uuid, &version, &spec.buildstamp(), &file);
    let mut text = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    text.push(b'\n');
    std::fs::create_dir_all(out_dir).map_err(write_err(out_dir))?;
    crate::fsutil::write_atomic(&tarball_path, &file).map_err(write_err(&tarball_path))?;
    crate::fsutil::write_atomic(&manifest_path, &text).map_err(write_err(&manifest_path))?;
    Ok(Release {
        tarball: tarball_path,
        manifest_path,
        manifest,
    })
}

/// Seconds since the epoch of a checked `YYYYMMDDTHHMMSSZ`.
fn timestamp_secs(ts: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| ts[r].parse::<i64>().unwrap_or(0);
    let (y, m, d) = (n(0..4), n(4..6), n(6..8));
    // Days from 1970-01-01 to y-m-d (proleptic Gregorian).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(9..11) * 3600 + n(11..13) * 60 + n(13..15);
    u64::try_from(secs).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(bin: &Path) -> ReleaseSpec {
        ReleaseSpec {
            binary: bin.to_path_buf(),
            semver: "1.4.0".into(),
            branch: "master".into(),
            timestamp: "20260512T101500Z".into(),
            git_sha: "1a2b3c4".into(),
            uuid: Some(ImageUuid::from_u128(7)),
        }
    }

    #[test]
    fn the_installed_binary_is_what_the_orchestrator_runs() {
        assert_eq!(
            agentsadm_api::remote::GZ_BINARY,
            format!("/{}", crate::kinds::AGENTSADM_BIN)
        );
        let files = tree_files(Vec::new(), "1.0.0", ImageUuid::from_u128(1));
        let bin = format!("{NAME}/{}", "bin/agentsadm");
        assert!(files.iter().any(|(p, mode, _)| *p == bin && *mode == 0o755));
    }

    #[test]
    fn the_version_stamp_and_its_parts() {
        let s = spec(Path::new("/x"));
        assert_eq!(s.buildstamp(), "master-20260512T101500Z-g1a2b3c4");
        assert_eq!(s.version(), "1.4.0-master-20260512T101500Z-g1a2b3c4");
        assert_eq!(timestamp_secs("19700101T000000Z"), 0);
        assert_eq!(timestamp_secs("20260512T101500Z"), 1_778_580_900);
    }

    #[test]
    fn bad_parts_are_refused_before_anything_is_written() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("agentsadm");
        std::fs::write(&bin, b"\x7fELF").unwrap();
        let out = d.path().join("out");
        for (field, value) in [
            ("semver", "1.4"),
            ("semver", "1.4.0-rc1"),
            ("branch", "feature/x"),
            ("branch", ""),
            ("timestamp", "2026-05-12"),
            ("git_sha", "xyz"),
        ] {
            let mut s = spec(&bin);
            match field {
                "semver" => s.semver = value.into(),
                "branch" => s.branch = value.into(),
                "timestamp" => s.timestamp = value.into(),
                _ => s.git_sha = value.into(),
            }
            let err = write_release(&s, &out).unwrap_err();
            assert!(
                matches!(err, ReleaseError::Invalid { .. }),
                "{field}: {err}"
            );
        }
        assert!(!out.exists());
        let err = write_release(&spec(&d.path().join("missing")), &out).unwrap_err();
        assert!(matches!(err, ReleaseError::Binary { .. }), "{err}");
        assert!(!out.exists());
    }

    #[test]
    fn two_builds_of_one_commit_are_the_same_bytes() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("agentsadm");
        std::fs::write(&bin, b"#!/bin/sh\necho agentsadm\n").unwrap();
        let a = write_release(&spec(&bin), &d.path().join("a")).unwrap();
        let b = write_release(&spec(&bin), &d.path().join("b")).unwrap();
        assert_eq!(
            std::fs::read(&a.tarball).unwrap(),
            std::fs::read(&b.tarball).unwrap()
        );
        assert_eq!(a.manifest, b.manifest);
        assert_eq!(
            a.tarball.file_name().unwrap(),
            "agentsadm-1.4.0-master-20260512T101500Z-g1a2b3c4.tar.gz"
        );
    }
}
