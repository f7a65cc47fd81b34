//! Small filesystem helpers the transaction relies on: atomic writes with
//! fsync, directory fsync, tree removal and copy that never follow links.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentsadm_types::bounded;

/// Write `bytes` to `path` atomically: a temporary file in the same
/// directory, fsync, rename, fsync of the directory. Creates the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", rand::random::<u32>()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// fsync a directory so that renames and creations in it are durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether something (file, directory or link, even dangling) is at `path`.
pub fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Remove whatever is at `path` (a tree, a file or a link); absent is fine.
pub fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => match fs::remove_dir_all(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                // A tree a hook made read-only: make it writable and retry.
                make_writable(path);
                fs::remove_dir_all(path)
            }
            Err(e) => Err(e),
        },
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn make_writable(path: &Path) {
    if let Ok(md) = fs::symlink_metadata(path)
        && md.is_dir()
    {
        let mode = md.permissions().mode() | 0o700;
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
        if let Ok(rd) = fs::read_dir(path) {
            for e in rd.flatten() {
                make_writable(&e.path());
            }
        }
    }
}

/// Rename, creating the destination's parent first. Across filesystems
/// (on SmartOS `/var` and `/opt` are separate datasets) the source is copied
/// to a temporary name next to the destination, renamed over it (still
/// atomic for readers of the destination), then removed.
pub fn rename_into(from: &Path, to: &Path) -> io::Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let dir = to.parent().unwrap_or(Path::new("."));
            let name = to
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = dir.join(format!(
                ".{name}.{:08x}.agentsadm-tmp",
                rand::random::<u32>()
            ));
            let copied = copy_tree(from, &tmp).and_then(|()| fs::rename(&tmp, to));
            if let Err(e) = copied {
                let _ = remove_any(&tmp);
                return Err(e);
            }
            remove_any(from)
        }
        other => other,
    }
}

/// Copy a tree preserving symlinks (as links), modes and file contents.
/// Hard links become separate copies.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let md = fs::symlink_metadata(from)?;
    if md.file_type().is_symlink() {
        let target = fs::read_link(from)?;
        std::os::unix::fs::symlink(target, to)
    } else if md.is_dir() {
        fs::create_dir(to)?;
        for e in fs::read_dir(from)? {
            let e = e?;
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        }
        fs::set_permissions(to, md.permissions())
    } else {
        fs::copy(from, to)?;
        fs::set_permissions(to, md.permissions())
    }
}

/// Read a small text file, trimmed; `None` when absent. A FIFO, device,
/// link or oversized file there is an `InvalidData` error naming the path
/// ([`agentsadm_types::bounded`]), never a hang.
pub fn read_trimmed(path: &Path) -> io::Result<Option<String>> {
    bounded::read_trimmed(path).map_err(bounded::FileError::into_io)
}

/// Read a small regular file whole ([`agentsadm_types::bounded::read_small_io`]):
/// `NotFound` when absent, `InvalidData` (with the path) when it is not a
/// regular file or is too large.
pub fn read_small(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    bounded::read_small_io(path.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_across_filesystems_copies() {
        use std::os::unix::fs::MetadataExt;
        let a = tempfile::tempdir().unwrap();
        let Ok(b) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        if fs::metadata(a.path()).unwrap().dev() == fs::metadata(b.path()).unwrap().dev() {
            return;
        }
        let src = a.path().join("t");
        fs::create_dir_all(src.join("d")).unwrap();
        fs::write(src.join("d/f"), b"x").unwrap();
        std::os::unix::fs::symlink("d/f", src.join("l")).unwrap();
        let dst = b.path().join("x/t");
        rename_into(&src, &dst).unwrap();
        assert!(!exists(&src));
        assert_eq!(fs::read(dst.join("l")).unwrap(), b"x");
    }

    #[test]
    fn atomic_write_and_copy_tree() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a/b/c.json");
        write_atomic(&f, b"{}").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"{}");
        std::os::unix::fs::symlink("c.json", d.path().join("a/b/l")).unwrap();
        copy_tree(&d.path().join("a"), &d.path().join("copy")).unwrap();
        assert_eq!(
            fs::read_link(d.path().join("copy/b/l")).unwrap(),
            Path::new("c.json")
        );
        remove_any(&d.path().join("copy")).unwrap();
        assert!(!exists(&d.path().join("copy")));
        assert_eq!(read_trimmed(&d.path().join("nope")).unwrap(), None);
    }
}
