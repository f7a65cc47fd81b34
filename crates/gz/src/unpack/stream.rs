//! The byte stream an archive is read from: the decompressor, a shell
//! archive repacked as tar, and the bounds (absolute cap, expansion ratio,
//! free space) that stop a hostile stream before it exhausts anything.

use std::cell::Cell;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use agentsadm_types::image::Compression;

use super::IO_BUFFER;
use super::UnpackError;
use super::clip_bytes;
use super::tarstream::TarError;

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
/// shell archive (dockerlogger and sdcadm images, see [`super::super::shar`]): it
/// is read whole and repacked as tar, its loose members placed under `top`.
pub(super) fn tar_stream<'a, R: Read + 'a>(
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
    if !super::super::shar::is_shar(head) {
        return Ok(Box::new(buffered));
    }
    let members = super::super::shar::read_members(buffered).map_err(|e| match e {
        super::super::shar::ReadError::Io(err) => UnpackError::Corrupt { compression, err },
        super::super::shar::ReadError::Shar(err) => UnpackError::Shar { err },
    })?;
    let tar =
        super::super::shar::into_tar(members, top).map_err(|err| UnpackError::Shar { err })?;
    Ok(Box::new(io::Cursor::new(tar)))
}

/// Counts the compressed bytes read, for the expansion ratio.
pub(super) struct Counting<R> {
    pub(super) inner: R,
    pub(super) count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Which bound the decompressed stream hit.
#[derive(Clone, Copy, Debug)]
pub(super) enum Exceeded {
    Cap(u64),
    Ratio { ratio: u64, compressed: u64 },
    FreeSpace { free: u64 },
}

/// Stops the decompressed stream at the limits (the error says which, in
/// `exceeded`, for the unpacker to report).
pub(super) struct Bounded<R> {
    pub(super) inner: R,
    pub(super) read: u64,
    pub(super) cap: u64,
    pub(super) ratio: u64,
    pub(super) known_compressed: Option<u64>,
    pub(super) compressed: Rc<Cell<u64>>,
    /// Bytes that may be written before the reserve is reached.
    pub(super) free_budget: Option<(u64, u64)>,
    pub(super) exceeded: Rc<Cell<Option<Exceeded>>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.exceeded.get().is_some() {
            return Err(io::Error::other("unpack limit reached"));
        }
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        let compressed = self
            .known_compressed
            .unwrap_or(0)
            .max(self.compressed.get());
        let hit = if self.read > self.cap {
            Some(Exceeded::Cap(self.cap))
        } else if self.read > compressed.saturating_mul(self.ratio) {
            Some(Exceeded::Ratio {
                ratio: self.ratio,
                compressed,
            })
        } else {
            match self.free_budget {
                Some((budget, free)) if self.read > budget => Some(Exceeded::FreeSpace { free }),
                _ => None,
            }
        };
        if let Some(e) = hit {
            self.exceeded.set(Some(e));
            return Err(io::Error::other("unpack limit reached"));
        }
        Ok(n)
    }
}

/// The error for a failure of the tar reader: a limit the bounded stream
/// hit, a broken compressed stream, or a malformed archive.
pub(super) fn tar_error(
    err: TarError,
    compression: Compression,
    exceeded: &Cell<Option<Exceeded>>,
    free: Option<u64>,
    reserve: u64,
    dest: &Path,
) -> UnpackError {
    if let Some(hit) = exceeded.get() {
        return match hit {
            Exceeded::Cap(limit) => UnpackError::ExceedsUnpackedCap { limit },
            Exceeded::Ratio { ratio, compressed } => {
                UnpackError::ExceedsExpansionRatio { ratio, compressed }
            }
            Exceeded::FreeSpace { free: f } => UnpackError::ExceedsFreeSpace {
                dest: dest.to_path_buf(),
                free: free.unwrap_or(f),
                reserve,
            },
        };
    }
    match err {
        TarError::Io(err) => UnpackError::Corrupt { compression, err },
        TarError::Unsupported { path, kind, .. } => UnpackError::UnsupportedEntry {
            path: clip_bytes(&path),
            kind,
        },
        other => UnpackError::Malformed { err: other },
    }
}
