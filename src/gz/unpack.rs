//! The archive unpacker: a (compressed) tar stream in, a staging directory
//! out, and nothing written anywhere else.
//!
//! It is deliberately independent of the rest of the installer (bytes or a
//! reader in, a directory out) so that property tests can feed it arbitrary
//! archives. Rules, checked per entry before anything is written:
//! - Paths are relative and never contain `..`; absolute paths are refused.
//! - In package mode (the default) every entry lives under exactly one
//!   top-level directory, optionally of an expected name.
//! - Symbolic links must resolve inside the package (checked lexically from
//!   the link's own directory); hard links must name an earlier regular file
//!   of the package.
//! - No entry is ever written through a symbolic link: every parent is
//!   checked with `lstat`, and files are created with `O_EXCL`.
//! - Devices, FIFOs and sparse files are refused.
//! - Modes are preserved without setuid, setgid and sticky bits; directories
//!   stay owner-writable so the tree can always be moved and removed.
//! - Ownership is not restored (`tar -o`): the installer owns what it writes.
//!
//! A write limit stands in for a full disk in tests; a real `ENOSPC` gives the
//! same [`UnpackError::DiskFull`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component as PathComponent, Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::image::Compression;

/// Buffer for reading the compressed stream and copying file contents: large
/// enough that a 50 MB image is a few hundred system calls, small enough to
/// run thousands of installs at once in the simulator.
const IO_BUFFER: usize = 256 * 1024;

/// What to unpack and how.
#[derive(Clone, Debug)]
pub struct UnpackOptions {
    /// Require exactly one top-level directory (a package). When false (the
    /// inner tarballs of gz-tools), entries may sit at the top level and the
    /// destination directory itself is the boundary.
    pub single_top: bool,
    /// The name the top-level directory must have.
    pub expected_top: Option<String>,
    /// Fail with [`UnpackError::DiskFull`] once this many content bytes have
    /// been written (fault injection; `None` = the disk decides).
    pub write_limit: Option<u64>,
    /// `AGENTSADM_TEST_CRASH_AT`: the `mid-unpack` checkpoint fires once
    /// the first file's content is written (see [`super::test_checkpoint`]).
    pub crash_at: Option<String>,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            single_top: true,
            expected_top: None,
            write_limit: None,
            crash_at: None,
        }
    }
}

/// What was unpacked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// The top-level directory (package mode), else empty.
    pub top: String,
    pub entries: u64,
    /// Bytes of regular-file content written.
    pub bytes: u64,
}

/// Why an archive was refused or could not be unpacked. Paths are as they
/// appear in the archive.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("the archive is not a valid {compression} tar stream")]
    Corrupt {
        compression: Compression,
        #[source]
        err: io::Error,
    },
    #[error("the image is a shell archive that cannot be read")]
    Shar {
        #[source]
        err: super::shar::SharError,
    },
    #[error("the archive is empty")]
    Empty,
    #[error("archive entry {path:?} is refused: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error(
        "the archive has more than one top-level entry ({first:?} and {second:?}); a package has exactly one top-level directory"
    )]
    MultipleTopLevel { first: String, second: String },
    #[error("the archive's top-level entry {top:?} is not a directory")]
    TopNotDirectory { top: String },
    #[error("the archive's top-level directory is {found:?}, expected {expected:?}")]
    UnexpectedTop { found: String, expected: String },
    #[error("{kind} link {path:?} -> {target:?} points outside the package")]
    LinkEscapes {
        kind: &'static str,
        path: String,
        target: String,
    },
    #[error("hard link {path:?} -> {target:?} does not name an earlier regular file")]
    BadHardLink { path: String, target: String },
    #[error("archive entry {path:?} is a {kind}; packages may not contain device files or FIFOs")]
    DeviceFile { path: String, kind: &'static str },
    #[error("archive entry {path:?} has an unsupported type ({kind})")]
    UnsupportedEntry { path: String, kind: String },
    #[error("archive entry {path:?} would be written through the symbolic link {link:?}")]
    ThroughSymlink { path: String, link: String },
    #[error("archive entry {path:?} conflicts with an earlier entry: {reason}")]
    Conflict { path: String, reason: &'static str },
    #[error(
        "disk full while unpacking {path:?} into {dest}; free space on that filesystem and retry"
    )]
    DiskFull {
        path: String,
        dest: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("cannot write {path:?} into {dest}")]
    Write {
        path: String,
        dest: PathBuf,
        #[source]
        err: io::Error,
    },
}

impl UnpackError {
    /// Whether the archive itself is at fault (as opposed to the disk).
    pub fn is_bad_archive(&self) -> bool {
        !matches!(
            self,
            UnpackError::DiskFull { .. } | UnpackError::Write { .. }
        )
    }
}

/// Wrap `reader` in the decompressor for `compression`.
pub fn decompressor<'a, R: Read + 'a>(
    reader: R,
    compression: Compression,
) -> Result<Box<dyn Read + 'a>, UnpackError> {
    let buffered = BufReader::with_capacity(IO_BUFFER, reader);
    match compression {
        Compression::Gzip => Ok(Box::new(flate2::bufread::MultiGzDecoder::new(buffered))),
        Compression::Bzip2 => Ok(Box::new(bzip2::bufread::MultiBzDecoder::new(buffered))),
        Compression::None => Ok(Box::new(buffered)),
        Compression::Xz => Err(UnpackError::Corrupt {
            compression,
            err: io::Error::new(
                io::ErrorKind::Unsupported,
                "xz-compressed images are not supported",
            ),
        }),
    }
}

/// The tar stream of an image file. An uncompressed file may instead be a
/// shell archive (dockerlogger and sdcadm images, see [`super::shar`]): it
/// is read whole and repacked as tar, its loose members placed under `top`.
fn tar_stream<'a, R: Read + 'a>(
    reader: R,
    compression: Compression,
    top: Option<&str>,
) -> Result<Box<dyn Read + 'a>, UnpackError> {
    if compression != Compression::None {
        return decompressor(reader, compression);
    }
    let mut buffered = BufReader::with_capacity(IO_BUFFER, reader);
    let corrupt = |err| UnpackError::Corrupt { compression, err };
    let head = buffered.fill_buf().map_err(corrupt)?;
    if !super::shar::is_shar(head) {
        return Ok(Box::new(buffered));
    }
    let members = super::shar::read_members(buffered).map_err(|e| match e {
        super::shar::ReadError::Io(err) => UnpackError::Corrupt { compression, err },
        super::shar::ReadError::Shar(err) => UnpackError::Shar { err },
    })?;
    let tar = super::shar::into_tar(members, top).map_err(|err| UnpackError::Shar { err })?;
    Ok(Box::new(io::Cursor::new(tar)))
}

/// Unpack a `compression`-compressed tar stream into `dest`, which must be
/// an existing, empty directory. On error, `dest` may hold a partial tree
/// (never anything outside it); the caller removes it.
pub fn unpack<R: Read>(
    reader: R,
    compression: Compression,
    dest: &Path,
    options: &UnpackOptions,
) -> Result<Unpacked, UnpackError> {
    let top = options
        .single_top
        .then_some(options.expected_top.as_deref())
        .flatten();
    let decoder = tar_stream(reader, compression, top)?;
    let mut archive = tar::Archive::new(decoder);
    let mut state = Unpacker {
        dest,
        options,
        compression,
        top: None,
        written: 0,
        entries: 0,
        dir_modes: BTreeMap::new(),
        buf: vec![0u8; IO_BUFFER],
    };
    let entries = archive
        .entries()
        .map_err(|err| UnpackError::Corrupt { compression, err })?;
    let mut mid_unpack = options.crash_at.is_some();
    for entry in entries {
        let mut entry = entry.map_err(|err| UnpackError::Corrupt { compression, err })?;
        state.entry(&mut entry)?;
        if mid_unpack && state.written > 0 {
            mid_unpack = false;
            super::test_checkpoint(options.crash_at.as_deref(), "mid-unpack");
        }
    }
    if state.entries == 0 {
        return Err(UnpackError::Empty);
    }
    state.finish_dirs()?;
    Ok(Unpacked {
        top: state.top.unwrap_or_default(),
        entries: state.entries,
        bytes: state.written,
    })
}

/// Read only the named members (paths relative to the top-level directory,
/// e.g. `image_uuid`) of a package archive into memory, with the same path
/// and top-level checks as [`unpack`]. Nothing is written to disk: this is
/// the mockcloud install, which keeps only `image_uuid` and `package.json`.
/// Stops reading at the end of the archive.
pub fn read_members<R: Read>(
    reader: R,
    compression: Compression,
    expected_top: Option<&str>,
    wanted: &[&str],
    max_member_bytes: u64,
) -> Result<(String, BTreeMap<String, Vec<u8>>), UnpackError> {
    let decoder = tar_stream(reader, compression, expected_top)?;
    let mut archive = tar::Archive::new(decoder);
    let mut top: Option<String> = None;
    let mut out = BTreeMap::new();
    let entries = archive
        .entries()
        .map_err(|err| UnpackError::Corrupt { compression, err })?;
    let mut count = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|err| UnpackError::Corrupt { compression, err })?;
        let raw = entry_path_string(&entry);
        let kind = entry.header().entry_type();
        if is_metadata_entry(kind) {
            continue;
        }
        let parts = normalize(&raw)?;
        if parts.is_empty() {
            continue;
        }
        count += 1;
        check_top(&mut top, &parts, &raw, kind, expected_top, true)?;
        if let Some(reason) = refused_kind(kind) {
            return Err(refusal(&raw, kind, reason));
        }
        let rel = parts[1..].join("/");
        if kind.is_file() && wanted.contains(&rel.as_str()) {
            let mut data = Vec::new();
            (&mut entry)
                .take(max_member_bytes)
                .read_to_end(&mut data)
                .map_err(|err| UnpackError::Corrupt { compression, err })?;
            out.insert(rel, data);
        }
    }
    if count == 0 {
        return Err(UnpackError::Empty);
    }
    Ok((top.unwrap_or_default(), out))
}

struct Unpacker<'a> {
    dest: &'a Path,
    options: &'a UnpackOptions,
    compression: Compression,
    top: Option<String>,
    written: u64,
    entries: u64,
    /// Directory modes, applied after all entries so that a read-only
    /// directory in the archive does not block writing its children.
    dir_modes: BTreeMap<PathBuf, u32>,
    buf: Vec<u8>,
}

fn entry_path_string<R: Read>(entry: &tar::Entry<'_, R>) -> String {
    // `path_bytes` applies GNU long names and pax `path` records.
    String::from_utf8_lossy(&entry.path_bytes()).into_owned()
}

fn is_metadata_entry(kind: tar::EntryType) -> bool {
    kind.is_pax_global_extensions()
        || kind.is_pax_local_extensions()
        || kind.is_gnu_longname()
        || kind.is_gnu_longlink()
}

/// Entry types refused outright, with the word used in the message.
fn refused_kind(kind: tar::EntryType) -> Option<&'static str> {
    match kind {
        tar::EntryType::Char => Some("character device"),
        tar::EntryType::Block => Some("block device"),
        tar::EntryType::Fifo => Some("FIFO"),
        _ => None,
    }
}

fn refusal(path: &str, kind: tar::EntryType, what: &'static str) -> UnpackError {
    match kind {
        tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
            UnpackError::DeviceFile {
                path: path.to_string(),
                kind: what,
            }
        }
        _ => UnpackError::UnsupportedEntry {
            path: path.to_string(),
            kind: what.to_string(),
        },
    }
}

/// Split an archive path into normal components, refusing absolute paths,
/// `..` and empty names. `./` prefixes and repeated slashes are fine.
fn normalize(raw: &str) -> Result<Vec<String>, UnpackError> {
    let bad = |reason| UnpackError::BadPath {
        path: raw.to_string(),
        reason,
    };
    if raw.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    let mut parts = Vec::new();
    for c in Path::new(raw).components() {
        match c {
            PathComponent::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            PathComponent::CurDir => {}
            PathComponent::ParentDir => return Err(bad("it contains '..'")),
            PathComponent::RootDir | PathComponent::Prefix(_) => {
                return Err(bad("it is an absolute path"));
            }
        }
    }
    Ok(parts)
}

/// Enforce the single top-level directory rule for one entry.
fn check_top(
    top: &mut Option<String>,
    parts: &[String],
    raw: &str,
    kind: tar::EntryType,
    expected: Option<&str>,
    single_top: bool,
) -> Result<(), UnpackError> {
    if !single_top {
        return Ok(());
    }
    let first = &parts[0];
    match top {
        None => {
            if let Some(exp) = expected
                && first != exp
            {
                return Err(UnpackError::UnexpectedTop {
                    found: first.clone(),
                    expected: exp.to_string(),
                });
            }
            if parts.len() == 1 && !kind.is_dir() {
                return Err(UnpackError::TopNotDirectory {
                    top: raw.to_string(),
                });
            }
            *top = Some(first.clone());
        }
        Some(t) => {
            if t != first {
                return Err(UnpackError::MultipleTopLevel {
                    first: t.clone(),
                    second: first.clone(),
                });
            }
            if parts.len() == 1 && !kind.is_dir() {
                return Err(UnpackError::TopNotDirectory {
                    top: raw.to_string(),
                });
            }
        }
    }
    Ok(())
}

impl Unpacker<'_> {
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), UnpackError> {
        let kind = entry.header().entry_type();
        if is_metadata_entry(kind) {
            return Ok(());
        }
        let raw = entry_path_string(entry);
        let parts = normalize(&raw)?;
        if parts.is_empty() {
            // `./` itself: nothing to create.
            if kind.is_dir() {
                return Ok(());
            }
            return Err(UnpackError::BadPath {
                path: raw,
                reason: "it has an empty name",
            });
        }
        check_top(
            &mut self.top,
            &parts,
            &raw,
            kind,
            self.options.expected_top.as_deref(),
            self.options.single_top,
        )?;
        if let Some(what) = refused_kind(kind) {
            return Err(refusal(&raw, kind, what));
        }
        self.entries += 1;
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        self.ensure_parents(&parts, &raw)?;
        let target = self.dest.join(parts.join("/"));
        match kind {
            tar::EntryType::Directory => self.directory(&target, &raw, mode),
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mtime = entry.header().mtime().ok();
                self.regular(entry, &target, &raw, mode, mtime)
            }
            tar::EntryType::Symlink => {
                let link = link_name_string(entry).ok_or_else(|| UnpackError::BadPath {
                    path: raw.clone(),
                    reason: "it is a symbolic link without a target",
                })?;
                self.symlink(&parts, &target, &raw, &link)
            }
            tar::EntryType::Link => {
                let link = link_name_string(entry).ok_or_else(|| UnpackError::BadPath {
                    path: raw.clone(),
                    reason: "it is a hard link without a target",
                })?;
                self.hard_link(&target, &raw, &link)
            }
            other => Err(UnpackError::UnsupportedEntry {
                path: raw,
                kind: format!("{other:?}"),
            }),
        }
    }

    /// Create missing parent directories of an entry, refusing to go
    /// through anything that is not a real directory.
    fn ensure_parents(&mut self, parts: &[String], raw: &str) -> Result<(), UnpackError> {
        let mut dir = self.dest.to_path_buf();
        for part in &parts[..parts.len() - 1] {
            dir.push(part);
            match fs::symlink_metadata(&dir) {
                Ok(md) if md.file_type().is_symlink() => {
                    return Err(UnpackError::ThroughSymlink {
                        path: raw.to_string(),
                        link: self.rel(&dir),
                    });
                }
                Ok(md) if md.is_dir() => {}
                Ok(_) => {
                    return Err(UnpackError::Conflict {
                        path: raw.to_string(),
                        reason: "a parent is a file",
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&dir).map_err(|err| self.write_error(raw, err))?;
                    self.dir_modes.entry(dir.clone()).or_insert(0o755);
                }
                Err(err) => return Err(self.write_error(raw, err)),
            }
        }
        Ok(())
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(self.dest)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    }

    fn write_error(&self, raw: &str, err: io::Error) -> UnpackError {
        if is_disk_full(&err) {
            UnpackError::DiskFull {
                path: raw.to_string(),
                dest: self.dest.to_path_buf(),
                err,
            }
        } else {
            UnpackError::Write {
                path: raw.to_string(),
                dest: self.dest.to_path_buf(),
                err,
            }
        }
    }

    fn directory(&mut self, target: &Path, raw: &str, mode: u32) -> Result<(), UnpackError> {
        match fs::symlink_metadata(target) {
            Ok(md) if md.is_dir() && !md.file_type().is_symlink() => {}
            Ok(_) => {
                return Err(UnpackError::Conflict {
                    path: raw.to_string(),
                    reason: "a directory entry replaces a file or link",
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(target).map_err(|err| self.write_error(raw, err))?;
            }
            Err(err) => return Err(self.write_error(raw, err)),
        }
        self.dir_modes.insert(target.to_path_buf(), mode);
        Ok(())
    }

    /// Remove a non-directory that an archive entry replaces (tar semantics:
    /// the later entry wins), refusing to replace a directory.
    fn clear_for_file(&self, target: &Path, raw: &str) -> Result<(), UnpackError> {
        match fs::symlink_metadata(target) {
            Ok(md) if md.is_dir() => Err(UnpackError::Conflict {
                path: raw.to_string(),
                reason: "a file entry replaces a directory",
            }),
            Ok(_) => fs::remove_file(target).map_err(|err| self.write_error(raw, err)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(self.write_error(raw, err)),
        }
    }

    fn regular<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        target: &Path,
        raw: &str,
        mode: u32,
        mtime: Option<u64>,
    ) -> Result<(), UnpackError> {
        self.clear_for_file(target, raw)?;
        // O_EXCL + O_NOFOLLOW: never write through a link planted earlier.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(target)
            .map_err(|err| self.write_error(raw, err))?;
        loop {
            let n = match entry.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    return Err(UnpackError::Corrupt {
                        compression: self.compression,
                        err,
                    });
                }
            };
            if let Some(limit) = self.options.write_limit
                && self.written + n as u64 > limit
            {
                return Err(UnpackError::DiskFull {
                    path: raw.to_string(),
                    dest: self.dest.to_path_buf(),
                    err: io::Error::new(
                        io::ErrorKind::StorageFull,
                        "No space left on device (injected write limit)",
                    ),
                });
            }
            file.write_all(&self.buf[..n])
                .map_err(|err| self.write_error(raw, err))?;
            self.written += n as u64;
        }
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|err| self.write_error(raw, err))?;
        if let Some(secs) = mtime {
            // Best effort, like tar: a bad mtime is not worth failing for.
            let _ = file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        }
        Ok(())
    }

    fn symlink(
        &mut self,
        parts: &[String],
        target: &Path,
        raw: &str,
        link: &str,
    ) -> Result<(), UnpackError> {
        let escapes = || UnpackError::LinkEscapes {
            kind: "symbolic",
            path: raw.to_string(),
            target: link.to_string(),
        };
        if link.is_empty() || link.contains('\0') || Path::new(link).is_absolute() {
            return Err(escapes());
        }
        // Depth of the link's directory inside the boundary (the package
        // directory in package mode, the destination otherwise).
        let base = if self.options.single_top { 1 } else { 0 };
        let mut depth = parts.len() as i64 - 1 - base;
        for c in Path::new(link).components() {
            match c {
                PathComponent::Normal(_) => depth += 1,
                PathComponent::CurDir => {}
                PathComponent::ParentDir => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(escapes());
                    }
                }
                PathComponent::RootDir | PathComponent::Prefix(_) => return Err(escapes()),
            }
        }
        self.clear_for_file(target, raw)?;
        std::os::unix::fs::symlink(link, target).map_err(|err| self.write_error(raw, err))
    }

    fn hard_link(&mut self, target: &Path, raw: &str, link: &str) -> Result<(), UnpackError> {
        let escapes = || UnpackError::LinkEscapes {
            kind: "hard",
            path: raw.to_string(),
            target: link.to_string(),
        };
        let parts = normalize(link).map_err(|_| escapes())?;
        if parts.is_empty() {
            return Err(escapes());
        }
        if self.options.single_top && Some(&parts[0]) != self.top.as_ref() {
            return Err(escapes());
        }
        // The source must be a regular file reached without links.
        let mut src = self.dest.to_path_buf();
        for (i, part) in parts.iter().enumerate() {
            src.push(part);
            let md = fs::symlink_metadata(&src).map_err(|_| UnpackError::BadHardLink {
                path: raw.to_string(),
                target: link.to_string(),
            })?;
            let last = i + 1 == parts.len();
            let ok = if last {
                md.file_type().is_file()
            } else {
                md.is_dir() && !md.file_type().is_symlink()
            };
            if !ok {
                return Err(UnpackError::BadHardLink {
                    path: raw.to_string(),
                    target: link.to_string(),
                });
            }
        }
        if src == target {
            return Ok(());
        }
        self.clear_for_file(target, raw)?;
        fs::hard_link(&src, target).map_err(|err| self.write_error(raw, err))
    }

    fn finish_dirs(&mut self) -> Result<(), UnpackError> {
        // Deepest first, so a parent's mode never blocks a child's chmod.
        for (dir, mode) in self.dir_modes.iter().rev() {
            let mode = (mode & 0o777) | 0o700;
            fs::set_permissions(dir, fs::Permissions::from_mode(mode)).map_err(|err| {
                UnpackError::Write {
                    path: dir.to_string_lossy().into_owned(),
                    dest: self.dest.to_path_buf(),
                    err,
                }
            })?;
        }
        Ok(())
    }
}

fn link_name_string<R: Read>(entry: &tar::Entry<'_, R>) -> Option<String> {
    entry
        .link_name_bytes()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Whether an I/O error means the filesystem is full (or over quota).
pub fn is_disk_full(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::StorageFull
        || err.kind() == io::ErrorKind::QuotaExceeded
        || err.raw_os_error() == Some(libc::ENOSPC)
        || err.raw_os_error() == Some(libc::EDQUOT)
}

/// Every path (relative, `/`-separated) under `dir`, for overlay installs and
/// tests. Directories are listed too, marked with a trailing `/`.
pub fn list_tree(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(dir.join(&rel))? {
            let e = e?;
            let child = rel.join(e.file_name());
            let ft = e.file_type()?;
            let name = child.to_string_lossy().into_owned();
            if ft.is_dir() {
                out.insert(format!("{name}/"));
                stack.push(child);
            } else {
                out.insert(name);
            }
        }
    }
    Ok(out)
}

/// Open an image file for [`unpack`].
pub fn open_file(path: &Path) -> io::Result<File> {
    File::open(path)
}
