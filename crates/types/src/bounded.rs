//! Reading a file someone else may have put there (a hook, an operator, a
//! damaged disk): opened as a regular file only and read up to a bound.
//!
//! Every file agentsadm reads on a server or the headnode goes through
//! here, because a FIFO blocks `open(2)` for ever (holding the server
//! lock), a link to `/dev/zero` or a huge file exhausts memory, and a
//! link may lead out of the tree agentsadm is allowed to read. So:
//! - the path is checked with `lstat` first (a link, FIFO, device or
//!   socket is refused before anything opens it, so opening a device has
//!   no side effect);
//! - it is opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO swapped in after
//!   the check opens without waiting for a writer, a link swapped in is
//!   refused) and checked again with `fstat` on the open descriptor;
//! - it is read through a [`Read::take`] of one byte over the bound, so a
//!   file that grows while read is still caught.
//!
//! A bad file is [`FileError`] with its path: damaged data to report, never
//! a hang.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The bound for the small files agentsadm keeps or reads (records,
/// `package.json`, `image_uuid`, `etc/<name>`, journals, markers): far
/// over any real one (a journal of a thousand files is ~200 KiB).
pub const SMALL: u64 = 4 << 20;

/// The bound for an SMF manifest (real ones are under 10 KiB).
pub const MANIFEST: u64 = 1 << 20;

/// Why a file could not be read as the small regular file expected.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(
        "{path} is a {kind}, not a regular file: agentsadm reads only regular files there; remove it (the next run writes or reports what belongs there)"
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is over {limit} bytes, far larger than such a file ever is: damaged; remove or repair it"
    )]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

impl FileError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileError::NotRegular { path, .. }
            | FileError::TooLarge { path, .. }
            | FileError::Io { path, .. } => path,
        }
    }

    /// As an `io::Error` (kind `InvalidData` for damaged data) for callers
    /// whose errors carry one; the message keeps the path.
    pub fn into_io(self) -> io::Error {
        match self {
            FileError::Io { err, .. } => err,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

fn kind_of(ft: std::fs::FileType) -> Option<&'static str> {
    if ft.is_file() {
        None
    } else if ft.is_symlink() {
        Some("symbolic link")
    } else if ft.is_dir() {
        Some("directory")
    } else if ft.is_fifo() {
        Some("FIFO")
    } else if ft.is_char_device() || ft.is_block_device() {
        Some("device")
    } else if ft.is_socket() {
        Some("socket")
    } else {
        Some("special file")
    }
}

/// Open `path` for reading if it is a regular file (not through a link);
/// `None` when nothing is there.
pub fn open_regular(path: &Path) -> Result<Option<File>, FileError> {
    Ok(open_regular_sized(path)?.map(|(file, _)| file))
}

/// [`open_regular`], with the file's size as its open descriptor saw it.
fn open_regular_sized(path: &Path) -> Result<Option<(File, u64)>, FileError> {
    let io_err = |err| FileError::Io {
        path: path.to_path_buf(),
        err,
    };
    let not_regular = |kind| FileError::NotRegular {
        path: path.to_path_buf(),
        kind,
    };
    match std::fs::symlink_metadata(path) {
        Ok(md) => {
            if let Some(kind) = kind_of(md.file_type()) {
                return Err(not_regular(kind));
            }
        }
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(io_err(e)),
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return Ok(None),
        // O_NOFOLLOW on a link: ELOOP (Linux, illumos) or EMLINK (BSDs).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::EMLINK)) => {
            return Err(not_regular("symbolic link"));
        }
        Err(e) => return Err(io_err(e)),
    };
    let md = file.metadata().map_err(io_err)?;
    if let Some(kind) = kind_of(md.file_type()) {
        return Err(not_regular(kind));
    }
    Ok(Some((file, md.len())))
}

/// Absent: nothing there, or a path through something that is not a
/// directory (a file where a directory was expected is absent too).
fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// Read the whole regular file at `path`, at most `limit` bytes; `None`
/// when nothing is there.
pub fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, FileError> {
    let Some((file, len)) = open_regular_sized(path)? else {
        return Ok(None);
    };
    // Sized from the open file: one read and the one that finds the end,
    // where growing from nothing took several (the installer and the
    // report read many small files per step). The bound still holds if the
    // file grows meanwhile.
    let mut out = Vec::with_capacity(usize::try_from(len.min(limit)).unwrap_or(0) + 1);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|err| FileError::Io {
            path: path.to_path_buf(),
            err,
        })?;
    if out.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(Some(out))
}

/// [`read`] with [`SMALL`] as the bound.
pub fn read_small(path: &Path) -> Result<Option<Vec<u8>>, FileError> {
    read(path, SMALL)
}

/// [`read_small`] as an `io::Result` whose `NotFound` means absent, for
/// callers written against `std::fs::read`.
pub fn read_small_io(path: &Path) -> io::Result<Vec<u8>> {
    match read_small(path) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is absent", path.display()),
        )),
        Err(e) => Err(e.into_io()),
    }
}

/// A small text file, trimmed (bad UTF-8 replaced); `None` when absent.
pub fn read_trimmed(path: &Path) -> Result<Option<String>, FileError> {
    Ok(read_small(path)?.map(|b| String::from_utf8_lossy(&b).trim().to_string()))
}

/// Lines of a regular file, each at most `line_limit` bytes (longer ones
/// are cut there and the rest of the line skipped), read as a stream: a
/// file of any size costs one line of memory. Bad UTF-8 is replaced per
/// line, so one bad byte spoils one line, not the file.
pub struct Lines {
    reader: BufReader<io::Take<File>>,
    line_limit: usize,
}

impl Lines {
    /// Open `path` (a regular file) to read its first `limit` bytes line
    /// by line; `None` when absent.
    pub fn open(path: &Path, limit: u64, line_limit: usize) -> Result<Option<Lines>, FileError> {
        Ok(open_regular(path)?.map(|f| Lines {
            reader: BufReader::with_capacity(64 * 1024, f.take(limit)),
            line_limit,
        }))
    }
}

impl Iterator for Lines {
    type Item = io::Result<String>;

    fn next(&mut self) -> Option<io::Result<String>> {
        let mut line: Vec<u8> = Vec::new();
        let mut over = false;
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            };
            if buf.is_empty() {
                if line.is_empty() && !over {
                    return None;
                }
                break;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            let room = self.line_limit.saturating_sub(line.len());
            if chunk.len() > room {
                over = true;
            }
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = done.unwrap_or(buf.len());
            self.reader.consume(used);
            if done.is_some() {
                break;
            }
        }
        Some(Ok(String::from_utf8_lossy(&line).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn regular_files_are_read_and_everything_else_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"  x \n").unwrap();
        assert_eq!(read_trimmed(&f).unwrap().as_deref(), Some("x"));
        assert!(read_small(&d.path().join("none")).unwrap().is_none());
        assert!(read_small(&f.join("under-a-file")).unwrap().is_none());

        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let t = Instant::now();
        let e = read_small(&fifo).unwrap_err();
        // Opening it would block for ever (no writer): any bound shows
        // that it was not opened, and a loaded machine needs a wide one.
        assert!(t.elapsed() < Duration::from_secs(30));
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        assert!(e.to_string().contains(&*fifo.to_string_lossy()), "{e}");

        let zero = d.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_small(&zero).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = read_small(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("device"), "{e}");
        let e = read_small(d.path()).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");

        let big = d.path().join("big");
        std::fs::write(&big, vec![b'a'; 11]).unwrap();
        assert_eq!(read(&big, 11).unwrap().unwrap().len(), 11);
        let e = read(&big, 10).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { limit: 10, .. }), "{e}");
        assert_eq!(
            read_small_io(&big).unwrap().len(),
            11,
            "the io form reads too"
        );
        assert_eq!(
            read_small_io(&zero).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn lines_stream_with_a_cap_per_line_and_bad_bytes_kept_to_their_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("j");
        let mut text = b"one\n".to_vec();
        text.extend(vec![b'x'; 100]);
        text.extend(b"\nbad \xff byte\nlast");
        std::fs::write(&f, &text).unwrap();
        let lines: Vec<String> = Lines::open(&f, 1 << 20, 10)
            .unwrap()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            lines,
            vec!["one", "xxxxxxxxxx", "bad \u{fffd} byte", "last"],
            "a long line is cut, a bad byte replaced"
        );
        // The file bound stops the stream.
        let lines: Vec<String> = Lines::open(&f, 6, 10)
            .unwrap()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(lines, vec!["one", "xx"]);
    }
}
