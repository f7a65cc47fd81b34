//! One archive entry, checked and written: names (UTF-8, relative, no
//! `..`), the single top-level directory, refused kinds, parents that are
//! real directories, links judged lexically as they arrive, and modes.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::rc::Rc;

use agentsadm_types::image::Compression;

use super::MAX_ENTRIES;
use super::MAX_NAME_BYTES;
use super::MAX_PATH_BYTES;
use super::UnpackError;
use super::UnpackOptions;
use super::clip;
use super::clip_bytes;
use super::stream::{Exceeded, tar_error};
use super::tarstream::{EntryKind, Header, TarError, TarReader, describe_flag};
use super::tree::{Node, Tree};
use super::write;
use super::write::{CHUNK, Job, Writers};

pub(super) fn too_many() -> UnpackError {
    UnpackError::TooManyEntries {
        max: MAX_ENTRIES,
        max_name_bytes: MAX_NAME_BYTES,
    }
}
/// A name as UTF-8, or the refusal naming its bytes.
pub(super) fn utf8_name(bytes: &[u8]) -> Result<String, UnpackError> {
    if bytes.len() > MAX_PATH_BYTES {
        return Err(UnpackError::BadPath {
            path: clip_bytes(bytes),
            reason: "it is longer than 4096 bytes",
        });
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(_) => Err(UnpackError::NotUtf8 {
            path: clip_bytes(bytes),
        }),
    }
}

/// Refuse what is neither a file, a directory nor a link.
pub(super) fn refuse_kind(raw: &str, kind: EntryKind) -> Result<(), UnpackError> {
    let device = |what| UnpackError::DeviceFile {
        path: clip(raw),
        kind: what,
    };
    match kind {
        EntryKind::CharDevice => Err(device("character device")),
        EntryKind::BlockDevice => Err(device("block device")),
        EntryKind::Fifo => Err(device("FIFO")),
        EntryKind::Other(flag) => Err(UnpackError::UnsupportedEntry {
            path: clip(raw),
            kind: describe_flag(flag),
        }),
        EntryKind::Regular | EntryKind::Directory | EntryKind::Symlink | EntryKind::HardLink => {
            Ok(())
        }
    }
}

/// Split an archive path into normal components, refusing absolute paths,
/// `..` and NUL bytes. `./` prefixes and repeated slashes are fine.
pub(super) fn normalize(raw: &str) -> Result<Vec<&str>, UnpackError> {
    let bad = |reason| UnpackError::BadPath {
        path: clip(raw),
        reason,
    };
    if raw.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    if raw.starts_with('/') {
        return Err(bad("it is an absolute path"));
    }
    let mut parts = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(bad("it contains '..'")),
            name => parts.push(name),
        }
    }
    Ok(parts)
}

/// Enforce the single top-level directory rule for one entry.
pub(super) fn check_top(
    top: &mut Option<String>,
    parts: &[&str],
    raw: &str,
    kind: EntryKind,
    expected: Option<&str>,
    single_top: bool,
) -> Result<(), UnpackError> {
    if !single_top {
        return Ok(());
    }
    let first = parts[0];
    let is_dir = kind == EntryKind::Directory;
    match top {
        None => {
            if let Some(exp) = expected
                && first != exp
            {
                return Err(UnpackError::UnexpectedTop {
                    found: clip(first),
                    expected: exp.to_string(),
                });
            }
            if parts.len() == 1 && !is_dir {
                return Err(UnpackError::TopNotDirectory { top: clip(raw) });
            }
            *top = Some(first.to_string());
        }
        Some(t) => {
            if t != first {
                return Err(UnpackError::MultipleTopLevel {
                    first: clip(t),
                    second: clip(first),
                });
            }
            if parts.len() == 1 && !is_dir {
                return Err(UnpackError::TopNotDirectory { top: clip(raw) });
            }
        }
    }
    Ok(())
}

pub(super) struct Unpacker<'a> {
    pub(super) dest: &'a Path,
    pub(super) options: &'a UnpackOptions,
    pub(super) compression: Compression,
    pub(super) exceeded: Rc<Cell<Option<Exceeded>>>,
    /// Free bytes on the destination's filesystem when unpacking began.
    pub(super) free: Option<u64>,
    pub(super) reserve: u64,
    pub(super) top: Option<String>,
    pub(super) written: u64,
    pub(super) entries: u64,
    pub(super) tree: Tree,
    /// The last parent directory checked (entries come grouped by
    /// directory, and a checked directory stays one).
    pub(super) last_parent: Option<String>,
    /// Directory modes the umask kept `mkdir` from giving, applied after
    /// all entries. Most directories are created with their final mode and
    /// need no `chmod`.
    pub(super) dir_modes: BTreeMap<String, u32>,
    pub(super) writers: Writers,
}

impl Unpacker<'_> {
    pub(super) fn tar_error(&self, err: TarError) -> UnpackError {
        tar_error(
            err,
            self.compression,
            &self.exceeded,
            self.free,
            self.reserve,
            self.dest,
        )
    }

    pub(super) fn entry<R: Read>(
        &mut self,
        header: Header,
        tar: &mut TarReader<R>,
    ) -> Result<(), UnpackError> {
        let raw = utf8_name(&header.path)?;
        let parts = normalize(&raw)?;
        if parts.is_empty() {
            // `./` itself: nothing to create.
            if header.kind == EntryKind::Directory {
                return Ok(());
            }
            return Err(UnpackError::BadPath {
                path: clip(&raw),
                reason: "it has an empty name",
            });
        }
        check_top(
            &mut self.top,
            &parts,
            &raw,
            header.kind,
            self.options.expected_top.as_deref(),
            self.options.single_top,
        )?;
        refuse_kind(&raw, header.kind)?;
        self.entries += 1;
        if self.entries > MAX_ENTRIES || self.tree.bytes() > MAX_NAME_BYTES {
            return Err(too_many());
        }
        let mode = header.mode & 0o777;
        self.ensure_parents(&parts, &raw)?;
        let rel = parts.join("/");
        match header.kind {
            EntryKind::Directory => self.directory(rel, &raw, mode),
            EntryKind::Regular => self.regular(tar, rel, &raw, &header),
            EntryKind::Symlink => {
                let link = self.link_target(&header, &raw, "symbolic")?;
                self.symlink(&parts, rel, &raw, link)
            }
            EntryKind::HardLink => {
                let link = self.link_target(&header, &raw, "hard")?;
                self.hard_link(rel, &raw, &link)
            }
            // Refused by `refuse_kind` above.
            _ => Err(UnpackError::UnsupportedEntry {
                path: clip(&raw),
                kind: "special file".into(),
            }),
        }
    }

    fn link_target(
        &self,
        header: &Header,
        raw: &str,
        kind: &'static str,
    ) -> Result<String, UnpackError> {
        if header.link.is_empty() {
            return Err(UnpackError::BadPath {
                path: clip(raw),
                reason: if kind == "hard" {
                    "it is a hard link without a target"
                } else {
                    "it is a symbolic link without a target"
                },
            });
        }
        if header.link.len() >= MAX_PATH_BYTES {
            return Err(UnpackError::BadPath {
                path: clip(raw),
                reason: "its link target is longer than 4095 bytes",
            });
        }
        std::str::from_utf8(&header.link)
            .map(str::to_string)
            .map_err(|_| UnpackError::NotUtf8 {
                path: clip_bytes(&header.link),
            })
    }

    /// Create missing parent directories of an entry, refusing to go
    /// through anything that is not a real directory.
    fn ensure_parents(&mut self, parts: &[&str], raw: &str) -> Result<(), UnpackError> {
        let parent_len = parts.len() - 1;
        if parent_len == 0 {
            return Ok(());
        }
        let parent = parts[..parent_len].join("/");
        if self.last_parent.as_deref() == Some(parent.as_str()) {
            return Ok(());
        }
        let mut dir = String::with_capacity(parent.len());
        for part in &parts[..parent_len] {
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(part);
            match self.tree.get(&dir) {
                Some(Node::Dir) => {}
                Some(Node::Symlink(_)) => {
                    return Err(UnpackError::ThroughSymlink {
                        path: clip(raw),
                        link: clip(&dir),
                    });
                }
                Some(Node::File) => {
                    return Err(UnpackError::Conflict {
                        path: clip(raw),
                        reason: "a parent is a file",
                    });
                }
                None => {
                    self.create_dir(&dir, 0o755)?;
                    self.tree.insert(dir.clone(), Node::Dir);
                }
            }
        }
        self.last_parent = Some(parent);
        Ok(())
    }

    fn directory(&mut self, rel: String, raw: &str, mode: u32) -> Result<(), UnpackError> {
        match self.tree.get(&rel) {
            Some(Node::Dir) => {}
            Some(_) => {
                return Err(UnpackError::Conflict {
                    path: clip(raw),
                    reason: "a directory entry replaces a file or link",
                });
            }
            None => {
                self.create_dir(&rel, mode)?;
                self.tree.insert(rel, Node::Dir);
                return Ok(());
            }
        }
        // Made earlier as a parent (0755), or named twice: the last mode
        // wins.
        self.dir_modes.insert(rel, mode);
        Ok(())
    }

    /// `mkdir` with the directory's final mode (owner-writable, so the
    /// tree can always be filled, moved and removed); when the umask would
    /// clear some of its bits, it is set at the end instead.
    fn create_dir(&mut self, rel: &str, mode: u32) -> Result<(), UnpackError> {
        let mode = final_dir_mode(mode);
        fs::DirBuilder::new()
            .mode(mode)
            .create(self.dest.join(rel))
            .map_err(|err| write::write_error(self.dest, rel, err))?;
        if !write::mode_survives_umask(mode) {
            self.dir_modes.insert(rel.to_string(), mode);
        }
        Ok(())
    }

    /// Make way for a non-directory at `rel`: an earlier file or link there
    /// is replaced (tar semantics: the later entry wins), a directory is
    /// not.
    fn clear_for_file(&mut self, rel: &str, raw: &str) -> Result<(), UnpackError> {
        match self.tree.get(rel) {
            None => Ok(()),
            Some(Node::Dir) => Err(UnpackError::Conflict {
                path: clip(raw),
                reason: "a file entry replaces a directory",
            }),
            Some(_) => {
                // The earlier entry may still be queued for a writer.
                self.writers.barrier()?;
                fs::remove_file(self.dest.join(rel))
                    .map_err(|err| write::write_error(self.dest, rel, err))
            }
        }
    }

    fn regular<R: Read>(
        &mut self,
        tar: &mut TarReader<R>,
        rel: String,
        raw: &str,
        header: &Header,
    ) -> Result<(), UnpackError> {
        self.clear_for_file(&rel, raw)?;
        self.tree.insert(rel.clone(), Node::File);
        let size = header.size;
        let mode = file_mode(header.mode, self.options.keep_setid.contains(&rel));
        let mtime = header.mtime;
        if let Some(limit) = self.options.write_limit
            && self.written + size > limit
        {
            // Write up to the limit, as a filling disk would.
            return Err(UnpackError::DiskFull {
                path: clip(raw),
                dest: self.dest.to_path_buf(),
                err: io::Error::new(
                    io::ErrorKind::StorageFull,
                    "No space left on device (injected write limit)",
                ),
            });
        }
        if size <= CHUNK as u64 {
            // Bounded by CHUNK.
            let mut data = vec![0u8; size as usize];
            tar.read_content_exact(&mut data)
                .map_err(|e| self.tar_error(e))?;
            self.written += size;
            return self.writers.send(Job::File {
                rel,
                mode,
                mtime,
                data,
            });
        }
        self.writers.send(Job::Open { rel, mode, mtime })?;
        let mut left = size;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            let mut data = self.writers.chunk_buffer(n);
            tar.read_content_exact(&mut data)
                .map_err(|e| self.tar_error(e))?;
            self.written += n as u64;
            left -= n as u64;
            self.writers.send(Job::Chunk(data))?;
        }
        self.writers.send(Job::Close)
    }

    fn symlink(
        &mut self,
        parts: &[&str],
        rel: String,
        raw: &str,
        link: String,
    ) -> Result<(), UnpackError> {
        let escapes = || UnpackError::LinkEscapes {
            kind: "symbolic",
            path: clip(raw),
            target: clip(&link),
        };
        if link.contains('\0') || link.starts_with('/') {
            return Err(escapes());
        }
        // A first, lexical check from the link's own directory (the chain
        // check at the end resolves it against the final tree).
        let base = if self.options.single_top { 1 } else { 0 };
        let mut depth = parts.len() as i64 - 1 - base;
        for c in link.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(escapes());
                    }
                }
                _ => depth += 1,
            }
        }
        self.clear_for_file(&rel, raw)?;
        self.tree.insert(rel.clone(), Node::Symlink(link.clone()));
        self.writers.send(Job::Symlink { rel, target: link })
    }

    fn hard_link(&mut self, rel: String, raw: &str, link: &str) -> Result<(), UnpackError> {
        let escapes = || UnpackError::LinkEscapes {
            kind: "hard",
            path: clip(raw),
            target: clip(link),
        };
        let parts = normalize(link).map_err(|_| escapes())?;
        if parts.is_empty() {
            return Err(escapes());
        }
        if self.options.single_top && Some(parts[0]) != self.top.as_deref() {
            return Err(escapes());
        }
        // The source must be a regular file reached through directories
        // only (never through a link).
        let bad = || UnpackError::BadHardLink {
            path: clip(raw),
            target: clip(link),
        };
        let mut src = String::with_capacity(link.len());
        for (i, part) in parts.iter().enumerate() {
            if !src.is_empty() {
                src.push('/');
            }
            src.push_str(part);
            let last = i + 1 == parts.len();
            match (self.tree.get(&src), last) {
                (Some(Node::File), true) | (Some(Node::Dir), false) => {}
                _ => return Err(bad()),
            }
        }
        if src == rel {
            return Ok(());
        }
        self.clear_for_file(&rel, raw)?;
        // The source may still be queued for a writer.
        self.writers.barrier()?;
        fs::hard_link(self.dest.join(&src), self.dest.join(&rel))
            .map_err(|err| write::write_error(self.dest, &rel, err))?;
        self.tree.insert(rel, Node::File);
        Ok(())
    }
}

/// A file's mode: the archive's permission bits, never world-writable, no
/// sticky bit, and setuid/setgid only where the catalog allows them.
pub(super) fn file_mode(archive: u32, keep_setid: bool) -> u32 {
    let bits = if keep_setid { 0o6777 } else { 0o777 };
    archive & bits & !0o002
}

/// A directory's mode in staging: the archive's permission bits, never
/// world-writable (so a sticky bit has nothing left to guard and goes
/// too), and always owner-writable.
pub(super) fn final_dir_mode(mode: u32) -> u32 {
    (mode & 0o775) | 0o700
}

/// Apply the directory modes `mkdir` could not give, deepest first.
pub(super) fn finish_dirs(
    dest: &Path,
    dir_modes: &BTreeMap<String, u32>,
) -> Result<(), UnpackError> {
    for (dir, mode) in dir_modes.iter().rev() {
        let mode = final_dir_mode(*mode);
        fs::set_permissions(dest.join(dir), fs::Permissions::from_mode(mode))
            .map_err(|err| write::write_error(dest, dir, err))?;
    }
    Ok(())
}
