//! The archive unpacker: a (compressed) tar stream in, a staging directory
//! out, and nothing written anywhere else.
//!
//! It is deliberately independent of the rest of the installer (bytes or a
//! reader in, a directory out) so that property tests can feed it arbitrary
//! archives. Rules, checked per entry before anything is written:
//! - Names are UTF-8, relative, at most [`MAX_PATH_BYTES`] long, and never
//!   contain `..`; absolute paths are refused.
//! - In package mode (the default) every entry lives under exactly one
//!   top-level directory, optionally of an expected name.
//! - Hard links must name an earlier regular file of the package, reached
//!   through directories only. Symbolic links are judged twice: lexically
//!   as they arrive, and once the archive is read, resolved against the
//!   final tree, following the package's own links (see [`tree`]): any that
//!   leaves the package or loops is refused, so nothing downstream ever
//!   sees such a tree.
//! - No entry is ever written through a symbolic link: the unpacker's model
//!   of staging ([`tree::Tree`]) refuses a parent that is a link, and files
//!   are created with `O_EXCL | O_NOFOLLOW`.
//! - Only files, directories and links: devices, FIFOs, sparse and
//!   contiguous files, volume labels and pax global headers are refused.
//! - Modes are normalised: never world-writable (a 0777 hook script that
//!   root runs at the next upgrade would be anyone's), no sticky bit (a
//!   1777 directory comes out 0775), no setuid or setgid bit except on the
//!   files the catalog allows ([`UnpackOptions::keep_setid`]); directories
//!   stay owner-writable so the tree can always be moved and removed.
//! - Ownership is not restored (`tar -o`): the installer owns what it writes.
//!
//! Bounds ([`UnpackLimits`]), so a hostile image exhausts nothing: extension
//! records over 64 KiB are refused from their header ([`tarstream`]); the
//! decompressed stream stops at an absolute cap, at a ratio of the
//! compressed size, and before it would leave the destination's filesystem
//! with less than a reserve; entries and names held in memory are capped;
//! text from the archive is clipped ([`clip`]) before it goes into an error.
//!
//! Files are written by a small pool of threads while this one inflates and
//! checks ([`write`]). A write limit stands in for a full disk in tests; a
//! real `ENOSPC` gives the same [`UnpackError::DiskFull`].
//!
//! Modules: `stream` (decompression, shell archives, the bounds), `entry`
//! (one entry checked and written), [`tarstream`] (the tar reader), `tree`
//! (the model of staging and the link check), `write` (the writer pool).

mod entry;
mod stream;
pub mod tarstream;
mod tree;
mod write;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use agentsadm_types::image::Compression;

use entry::{Unpacker, check_top, finish_dirs, normalize, refuse_kind, too_many, utf8_name};
use stream::{Bounded, Counting, tar_error, tar_stream};
use tarstream::{EntryKind, TarError, TarReader};
use tree::{LinkProblem, Tree};
use write::Writers;

/// Buffer for reading the compressed stream: large enough that a 50 MB
/// image is a few hundred system calls, small enough to run thousands of
/// installs at once in the simulator.
const IO_BUFFER: usize = 256 * 1024;

/// The longest path or link target accepted (Linux's `PATH_MAX`): longer
/// ones cannot be created, and refusing them here says why.
pub const MAX_PATH_BYTES: usize = 4096;

/// Entries in one archive. A cn-agent image has about 10,000.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// Bytes of names the unpacker's model of the tree may hold (a cn-agent
/// image needs about 1 MiB).
const MAX_NAME_BYTES: u64 = 256 << 20;

/// Longest text from an archive or manifest echoed into an error.
const MAX_ECHO: usize = 200;

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
    /// Files (archive paths, `vm-agent/bin/x`) that keep a setuid or setgid
    /// bit the archive gives them: the catalog's allowance for the
    /// component. Every other file loses both.
    pub keep_setid: Vec<String>,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            single_top: true,
            expected_top: None,
            write_limit: None,
            crash_at: None,
            keep_setid: Vec::new(),
        }
    }
}

/// How far an archive may expand. The fetcher builds these from
/// [`FetchOptions`](super::fetch::FetchOptions); [`unpack`] uses the
/// defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Stop once the decompressed archive (contents, headers and padding)
    /// passes this many bytes.
    pub max_unpacked_bytes: u64,
    /// ... or this many times the compressed size.
    pub max_expansion_ratio: u64,
    /// The compressed size when known (the manifest's); otherwise the
    /// compressed bytes read so far are the base of the ratio.
    pub compressed_size: Option<u64>,
    /// Keep this many bytes free on the destination's filesystem.
    pub free_space_reserve: u64,
}

/// The default absolute cap: 4 GiB, 50 times the largest agent image
/// unpacked (cn-agent with its node is about 80 MB).
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 4 << 30;

/// The default ratio: agent images (JavaScript, a node binary) expand 3 to
/// 5 times under gzip; 100 times leaves room for anything real and stops a
/// 10 KB image at 1 MB.
pub const DEFAULT_MAX_EXPANSION_RATIO: u64 = 100;

/// The default free-space reserve: what the global zone needs to keep
/// working (logs, SMF) after an install.
pub const DEFAULT_FREE_SPACE_RESERVE: u64 = 64 << 20;

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_unpacked_bytes: DEFAULT_MAX_UNPACKED_BYTES,
            max_expansion_ratio: DEFAULT_MAX_EXPANSION_RATIO,
            compressed_size: None,
            free_space_reserve: DEFAULT_FREE_SPACE_RESERVE,
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
/// appear in the archive, clipped to a few hundred bytes.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("the archive is not a valid {compression} tar stream")]
    Corrupt {
        compression: Compression,
        #[source]
        err: io::Error,
    },
    #[error("the archive is not a tar archive agentsadm accepts")]
    Malformed {
        #[source]
        err: TarError,
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
        "archive entry \"{path}\" has a name that is not UTF-8 (bytes shown escaped); package files are named in UTF-8"
    )]
    NotUtf8 { path: String },
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
    #[error(
        "symbolic link {path:?} -> {target:?} does not resolve: it is part of a loop or a chain of more than {max} links"
    )]
    LinkLoop {
        path: String,
        target: String,
        max: u32,
    },
    #[error(
        "the archive's symbolic links take too long to resolve (from {path:?} on); a package has few links and short chains"
    )]
    LinksTooComplex { path: String },
    #[error("hard link {path:?} -> {target:?} does not name an earlier regular file")]
    BadHardLink { path: String, target: String },
    #[error("archive entry {path:?} is a {kind}; packages may not contain device files or FIFOs")]
    DeviceFile { path: String, kind: &'static str },
    #[error(
        "archive entry {path:?} is a {kind}, which agentsadm does not unpack; packages hold only files, directories and links"
    )]
    UnsupportedEntry { path: String, kind: String },
    #[error("archive entry {path:?} would be written through the symbolic link {link:?}")]
    ThroughSymlink { path: String, link: String },
    #[error("archive entry {path:?} conflicts with an earlier entry: {reason}")]
    Conflict { path: String, reason: &'static str },
    #[error(
        "the archive has more than {max} entries (or {max_name_bytes} bytes of names); the image is malformed or hostile"
    )]
    TooManyEntries { max: u64, max_name_bytes: u64 },
    #[error(
        "the archive expands past the cap of {limit} unpacked bytes; if the image is genuine, raise the cap (--max-unpacked-bytes)"
    )]
    ExceedsUnpackedCap { limit: u64 },
    #[error(
        "the archive expands past {ratio} times its {compressed} compressed bytes; if the image is genuine, raise the ratio (--max-expansion-ratio)"
    )]
    ExceedsExpansionRatio { ratio: u64, compressed: u64 },
    #[error(
        "unpacking into {dest} would leave less than {reserve} bytes free on its filesystem ({free} bytes were free); free space there and retry"
    )]
    ExceedsFreeSpace {
        dest: PathBuf,
        free: u64,
        reserve: u64,
    },
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
            UnpackError::DiskFull { .. }
                | UnpackError::Write { .. }
                | UnpackError::ExceedsFreeSpace { .. }
        )
    }
}

/// `text` as it may go into an error: at most a few hundred bytes, and when
/// cut, with `...` and its full length.
pub fn clip(text: &str) -> String {
    if text.len() <= MAX_ECHO {
        return text.to_string();
    }
    let mut end = MAX_ECHO;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// Raw bytes of a name as they may go into an error: UTF-8 as is, anything
/// else escaped (`\xe9`), then clipped.
fn clip_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => clip(s),
        Err(_) => clip(&bytes.escape_ascii().to_string()),
    }
}

/// Bytes available to unprivileged writers on the filesystem of `dir`
/// (`statvfs`'s `f_bavail`).
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` is a valid
    // out-pointer for the call's duration.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[expect(
        clippy::unnecessary_cast,
        reason = "the field types differ between platforms"
    )]
    let (blocks, size) = (st.f_bavail as u64, st.f_frsize as u64);
    Ok(blocks.saturating_mul(size))
}

/// Unpack a `compression`-compressed tar stream into `dest`, which must be
/// an existing, empty directory, with the default [`UnpackLimits`]. On
/// error, `dest` may hold a partial tree (never anything outside it); the
/// caller removes it.
pub fn unpack<R: Read>(
    reader: R,
    compression: Compression,
    dest: &Path,
    options: &UnpackOptions,
) -> Result<Unpacked, UnpackError> {
    unpack_limited(reader, compression, dest, options, &UnpackLimits::default())
}

/// [`unpack`] within `limits`.
pub fn unpack_limited<R: Read>(
    reader: R,
    compression: Compression,
    dest: &Path,
    options: &UnpackOptions,
    limits: &UnpackLimits,
) -> Result<Unpacked, UnpackError> {
    let top = options
        .single_top
        .then_some(options.expected_top.as_deref())
        .flatten();
    // What the filesystem can take, less the reserve; unknown (statvfs
    // failing) means the disk decides.
    let free_budget = free_bytes(dest)
        .ok()
        .map(|free| (free.saturating_sub(limits.free_space_reserve), free));
    let compressed = Rc::new(Cell::new(0));
    let exceeded = Rc::new(Cell::new(None));
    let counting = Counting {
        inner: reader,
        count: compressed.clone(),
    };
    let stream = tar_stream(counting, compression, top)?;
    let bounded = Bounded {
        inner: stream,
        read: 0,
        cap: limits.max_unpacked_bytes,
        ratio: limits.max_expansion_ratio,
        known_compressed: limits.compressed_size,
        compressed,
        free_budget,
        exceeded: exceeded.clone(),
    };
    let mut tar = TarReader::new(bounded);
    let mut state = Unpacker {
        dest,
        options,
        compression,
        exceeded,
        free: free_budget.map(|(_, free)| free),
        reserve: limits.free_space_reserve,
        top: None,
        written: 0,
        entries: 0,
        tree: Tree::default(),
        last_parent: None,
        dir_modes: BTreeMap::new(),
        writers: Writers::new(dest),
    };
    let mut mid_unpack = options.crash_at.is_some();
    while let Some(header) = tar.next_header().map_err(|e| state.tar_error(e))? {
        state.entry(header, &mut tar)?;
        if mid_unpack && state.written > 0 {
            mid_unpack = false;
            state.writers.barrier()?;
            super::test_checkpoint(options.crash_at.as_deref(), "mid-unpack");
        }
    }
    if state.entries == 0 {
        return Err(UnpackError::Empty);
    }
    let Unpacker {
        writers,
        tree,
        top,
        written,
        entries,
        dir_modes,
        ..
    } = state;
    writers.finish()?;
    let boundary = usize::from(options.single_top);
    tree.check_links(boundary)
        .map_err(|(path, target, problem)| match problem {
            LinkProblem::Escapes => UnpackError::LinkEscapes {
                kind: "symbolic",
                path: clip(&path),
                target: clip(&target),
            },
            LinkProblem::Loop => UnpackError::LinkLoop {
                path: clip(&path),
                target: clip(&target),
                max: tree::MAX_LINK_HOPS,
            },
            LinkProblem::TooComplex => UnpackError::LinksTooComplex { path: clip(&path) },
        })?;
    finish_dirs(dest, &dir_modes)?;
    Ok(Unpacked {
        top: top.unwrap_or_default(),
        entries,
        bytes: written,
    })
}

/// Read only the named members (paths relative to the top-level directory,
/// e.g. `image_uuid`) of a package archive into memory, with the same name,
/// type and top-level checks as [`unpack`] (links are not followed: nothing
/// is written). Nothing is written to disk: this is the mockcloud install,
/// which keeps only `image_uuid` and `package.json`. Stops reading at the
/// end of the archive.
pub fn read_members<R: Read>(
    reader: R,
    compression: Compression,
    expected_top: Option<&str>,
    wanted: &[&str],
    max_member_bytes: u64,
) -> Result<(String, BTreeMap<String, Vec<u8>>), UnpackError> {
    read_members_limited(
        reader,
        compression,
        expected_top,
        wanted,
        max_member_bytes,
        &UnpackLimits::default(),
    )
}

/// [`read_members`] within `limits` (the free-space reserve does not
/// apply: nothing is written).
pub fn read_members_limited<R: Read>(
    reader: R,
    compression: Compression,
    expected_top: Option<&str>,
    wanted: &[&str],
    max_member_bytes: u64,
    limits: &UnpackLimits,
) -> Result<(String, BTreeMap<String, Vec<u8>>), UnpackError> {
    let compressed = Rc::new(Cell::new(0));
    let exceeded = Rc::new(Cell::new(None));
    let counting = Counting {
        inner: reader,
        count: compressed.clone(),
    };
    let stream = tar_stream(counting, compression, expected_top)?;
    let mut tar = TarReader::new(Bounded {
        inner: stream,
        read: 0,
        cap: limits.max_unpacked_bytes,
        ratio: limits.max_expansion_ratio,
        known_compressed: limits.compressed_size,
        compressed,
        free_budget: None,
        exceeded: exceeded.clone(),
    });
    let map_tar = |e: TarError| tar_error(e, compression, &exceeded, None, 0, Path::new(""));
    let mut top: Option<String> = None;
    let mut out = BTreeMap::new();
    let mut count = 0u64;
    while let Some(h) = tar.next_header().map_err(map_tar)? {
        let raw = utf8_name(&h.path)?;
        let parts = normalize(&raw)?;
        if parts.is_empty() {
            continue;
        }
        count += 1;
        if count > MAX_ENTRIES {
            return Err(too_many());
        }
        check_top(&mut top, &parts, &raw, h.kind, expected_top, true)?;
        refuse_kind(&raw, h.kind)?;
        let rel = parts[1..].join("/");
        if h.kind == EntryKind::Regular && wanted.contains(&rel.as_str()) {
            let keep = h.size.min(max_member_bytes);
            // Bounded by `max_member_bytes` (1 MiB for package.json).
            let mut data = vec![0u8; keep as usize];
            tar.read_content_exact(&mut data).map_err(map_tar)?;
            out.insert(rel, data);
        }
    }
    if count == 0 {
        return Err(UnpackError::Empty);
    }
    Ok((top.unwrap_or_default(), out))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(300);
        let c = clip(&long);
        assert!(c.ends_with("... (600 bytes)"), "{c}");
        assert!(c.len() < 220);
    }
}
