//! A streaming tar reader that holds at most one bounded header at a time.
//!
//! The `tar` crate reads a GNU long-name record or a pax extended header
//! into memory whole, whatever size its header claims, before it hands out
//! the entry it describes: a 1.5 KB image can make it allocate 256 MiB and
//! echo it into an error. This reader instead:
//! - reads 512-byte headers and checks their checksums (octal or GNU
//!   base-256 numbers, ustar `prefix` fields, v7 headers);
//! - refuses an extension record (GNU `L`/`K`, pax `x`, Solaris `X`) larger
//!   than [`MAX_EXTENSION_BYTES`] from its header alone, before reading it;
//! - applies pax `path`, `linkpath`, `size` and `mtime` and GNU long names
//!   and links to the entry that follows, ignoring other pax keys (owners,
//!   times, extended attributes: the unpacker does not restore them);
//! - reports every other entry type as it is (the unpacker decides what to
//!   refuse), except pax global headers and GNU sparse files (either form),
//!   which change how later bytes are read and are refused here;
//! - never interprets names: they stay bytes, for the unpacker to check.

use std::io::{self, Read};

/// The largest extension record (a GNU long name or link, a pax extended
/// header) read into memory. Real names are a few hundred bytes; Linux
/// refuses paths over 4 KiB anyway. 64 KiB leaves room for pax headers that
/// also carry extended attributes, and bounds what a hostile header can
/// make us allocate.
pub const MAX_EXTENSION_BYTES: u64 = 64 * 1024;

const BLOCK: usize = 512;

/// What a header says an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Regular,
    Directory,
    Symlink,
    HardLink,
    CharDevice,
    BlockDevice,
    Fifo,
    /// Any other type flag (`7` contiguous, `V` volume label, `M`
    /// multi-volume continuation, `D` dump directory, `N` old long names,
    /// vendor letters): the unpacker refuses it, naming the flag.
    Other(u8),
}

impl EntryKind {
    fn from_flag(flag: u8, name: &[u8]) -> EntryKind {
        match flag {
            // v7 archives mark directories only by a trailing slash.
            b'0' | 0 if name.ends_with(b"/") => EntryKind::Directory,
            b'0' | 0 => EntryKind::Regular,
            b'1' => EntryKind::HardLink,
            b'2' => EntryKind::Symlink,
            b'3' => EntryKind::CharDevice,
            b'4' => EntryKind::BlockDevice,
            b'5' => EntryKind::Directory,
            b'6' => EntryKind::Fifo,
            other => EntryKind::Other(other),
        }
    }
}

/// The name of a type flag that is neither a file, a directory, a link nor
/// a device, for messages.
pub fn describe_flag(flag: u8) -> String {
    let what = match flag {
        b'7' => "contiguous file",
        b'g' => "pax global header",
        b'S' => "GNU sparse file",
        b'V' => "GNU volume label",
        b'M' => "GNU multi-volume continuation",
        b'N' => "GNU old long-name record",
        b'D' => "GNU dump directory",
        b'I' => "Solaris inode metadata",
        b'A' => "Solaris access control list",
        b'E' => "Solaris extended attributes",
        _ => "unknown entry type",
    };
    if flag.is_ascii_graphic() {
        format!("{what}, type '{}'", flag as char)
    } else {
        format!("{what}, type byte {flag:#04x}")
    }
}

/// One entry's header, extensions applied.
#[derive(Clone, Debug)]
pub struct Header {
    pub kind: EntryKind,
    /// The full name (pax `path`, GNU long name, or ustar prefix + name).
    pub path: Vec<u8>,
    /// The link target (pax `linkpath`, GNU long link, or the header field).
    pub link: Vec<u8>,
    pub mode: u32,
    pub mtime: Option<u64>,
    /// Content bytes that follow.
    pub size: u64,
}

/// Why the stream is not a tar archive we read.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The underlying stream failed (a broken download, a corrupt
    /// compressed stream, a limit the reader enforces).
    #[error("cannot read the archive")]
    Io(#[source] io::Error),
    #[error("the header at byte {offset} of the archive is invalid: {reason}")]
    BadHeader { offset: u64, reason: &'static str },
    #[error("the archive ends inside the entry whose header is at byte {offset}")]
    Truncated { offset: u64 },
    #[error(
        "the archive's {what} at byte {offset} is {size} bytes, over the {limit}-byte limit; the image is malformed or hostile"
    )]
    ExtensionTooLarge {
        what: &'static str,
        offset: u64,
        size: u64,
        limit: u64,
    },
    #[error("the archive's {what} at byte {offset} is malformed: {reason}")]
    BadExtension {
        what: &'static str,
        offset: u64,
        reason: &'static str,
    },
    /// Refused while reading headers: a pax global header or a sparse file.
    #[error("archive entry at byte {offset} is a {kind}")]
    Unsupported {
        offset: u64,
        path: Vec<u8>,
        kind: String,
    },
}

/// Extension values waiting for the entry they describe.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_link: Option<Vec<u8>>,
    pax_size: Option<u64>,
    pax_mtime: Option<u64>,
    sparse: bool,
}

/// A tar stream read entry by entry.
pub struct TarReader<R> {
    inner: R,
    /// Content bytes of the current entry not yet read.
    remaining: u64,
    /// Padding after the current entry's content.
    padding: u64,
    /// Offset of the next unread byte of the (decompressed) stream.
    offset: u64,
    /// Offset of the current entry's header, for messages.
    header_offset: u64,
    done: bool,
}

impl<R: Read> TarReader<R> {
    pub fn new(inner: R) -> TarReader<R> {
        TarReader {
            inner,
            remaining: 0,
            padding: 0,
            offset: 0,
            header_offset: 0,
            done: false,
        }
    }

    /// Offset of the current entry's header in the stream.
    pub fn header_offset(&self) -> u64 {
        self.header_offset
    }

    /// The next entry's header, skipping whatever of the previous entry's
    /// content was not read; `None` at the end-of-archive block (or at the
    /// end of the stream on a block boundary, as GNU tar accepts).
    pub fn next_header(&mut self) -> Result<Option<Header>, TarError> {
        if self.done {
            return Ok(None);
        }
        self.skip(self.remaining + self.padding)?;
        self.remaining = 0;
        self.padding = 0;
        let mut pending = Pending::default();
        let mut block = [0u8; BLOCK];
        loop {
            let offset = self.offset;
            self.header_offset = offset;
            if !self.read_block(&mut block)? {
                if pending_is_empty(&pending) {
                    self.done = true;
                    return Ok(None);
                }
                return Err(TarError::Truncated { offset });
            }
            if block.iter().all(|&b| b == 0) {
                self.done = true;
                return Ok(None);
            }
            check_checksum(&block, offset)?;
            let flag = block[156];
            let size = number(&block[124..136]).ok_or(TarError::BadHeader {
                offset,
                reason: "its size field is not a number",
            })?;
            let bad_ext = |what, reason| TarError::BadExtension {
                what,
                offset,
                reason,
            };
            match flag {
                b'L' | b'K' => {
                    let what = if flag == b'L' {
                        "GNU long name"
                    } else {
                        "GNU long link name"
                    };
                    let mut data = self.read_extension(what, size, offset)?;
                    while data.last() == Some(&0) {
                        data.pop();
                    }
                    let slot = if flag == b'L' {
                        &mut pending.long_name
                    } else {
                        &mut pending.long_link
                    };
                    if slot.replace(data).is_some() {
                        return Err(bad_ext(what, "two in a row for one entry"));
                    }
                }
                b'x' | b'X' => {
                    let what = "pax extended header";
                    let data = self.read_extension(what, size, offset)?;
                    apply_pax(&data, &mut pending).map_err(|reason| bad_ext(what, reason))?;
                }
                b'g' => {
                    return Err(TarError::Unsupported {
                        offset,
                        path: field(&block[0..100]).to_vec(),
                        kind: describe_flag(flag),
                    });
                }
                _ => {
                    return self.entry(&block, flag, size, pending, offset).map(Some);
                }
            }
        }
    }

    /// Build the entry a non-extension header describes.
    fn entry(
        &mut self,
        block: &[u8; BLOCK],
        flag: u8,
        header_size: u64,
        pending: Pending,
        offset: u64,
    ) -> Result<Header, TarError> {
        let path = match (pending.pax_path, pending.long_name) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => header_name(block),
        };
        if flag == b'S' || pending.sparse {
            return Err(TarError::Unsupported {
                offset,
                path,
                kind: describe_flag(b'S'),
            });
        }
        let link = match (pending.pax_link, pending.long_link) {
            (Some(l), _) | (None, Some(l)) => l,
            (None, None) => field(&block[157..257]).to_vec(),
        };
        let bad = |reason| TarError::BadHeader { offset, reason };
        let mode = number(&block[100..108]).ok_or(bad("its mode field is not a number"))?;
        let mtime = pending.pax_mtime.or_else(|| number(&block[136..148]));
        let size = pending.pax_size.unwrap_or(header_size);
        let kind = EntryKind::from_flag(flag, &path);
        self.remaining = size;
        self.padding = padding(size);
        Ok(Header {
            kind,
            path,
            link,
            mode: (mode & 0o7777) as u32,
            mtime,
            size,
        })
    }

    /// Read the content of an extension record, refusing it from its size
    /// alone when it is too large.
    fn read_extension(
        &mut self,
        what: &'static str,
        size: u64,
        offset: u64,
    ) -> Result<Vec<u8>, TarError> {
        if size > MAX_EXTENSION_BYTES {
            return Err(TarError::ExtensionTooLarge {
                what,
                offset,
                size,
                limit: MAX_EXTENSION_BYTES,
            });
        }
        // Bounded by the check above.
        let mut data = vec![0u8; size as usize];
        self.read_exact_or_truncated(&mut data, offset)?;
        self.skip(padding(size))?;
        Ok(data)
    }

    /// Read from the current entry's content.
    pub fn read_content(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = loop {
            match self.inner.read(&mut buf[..want]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        };
        if n == 0 {
            return Err(TarError::Truncated {
                offset: self.header_offset,
            });
        }
        self.remaining -= n as u64;
        self.offset += n as u64;
        Ok(n)
    }

    /// Fill `buf` exactly from the current entry's content.
    pub fn read_content_exact(&mut self, buf: &mut [u8]) -> Result<(), TarError> {
        let mut filled = 0;
        while filled < buf.len() {
            let n = self.read_content(&mut buf[filled..])?;
            if n == 0 {
                return Err(TarError::Truncated {
                    offset: self.header_offset,
                });
            }
            filled += n;
        }
        Ok(())
    }

    /// One header block; false at a clean end of the stream.
    fn read_block(&mut self, block: &mut [u8; BLOCK]) -> Result<bool, TarError> {
        let mut filled = 0;
        while filled < BLOCK {
            match self.inner.read(&mut block[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => {
                    return Err(TarError::Truncated {
                        offset: self.offset,
                    });
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        }
        self.offset += BLOCK as u64;
        Ok(true)
    }

    fn read_exact_or_truncated(&mut self, buf: &mut [u8], offset: u64) -> Result<(), TarError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => return Err(TarError::Truncated { offset }),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        }
        self.offset += buf.len() as u64;
        Ok(())
    }

    /// Read and discard `n` bytes.
    fn skip(&mut self, mut n: u64) -> Result<(), TarError> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let want = scratch.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            match self.inner.read(&mut scratch[..want]) {
                Ok(0) => {
                    return Err(TarError::Truncated {
                        offset: self.header_offset,
                    });
                }
                Ok(k) => {
                    n -= k as u64;
                    self.offset += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TarError::Io(e)),
            }
        }
        Ok(())
    }
}

fn pending_is_empty(p: &Pending) -> bool {
    p.long_name.is_none()
        && p.long_link.is_none()
        && p.pax_path.is_none()
        && p.pax_link.is_none()
        && p.pax_size.is_none()
        && p.pax_mtime.is_none()
        && !p.sparse
}

fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// A NUL-terminated header field.
fn field(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// The name in a header: ustar's `prefix/name` when the header is POSIX
/// ustar (GNU headers use the prefix bytes for other fields).
fn header_name(block: &[u8; BLOCK]) -> Vec<u8> {
    let name = field(&block[0..100]);
    let ustar = &block[257..263] == b"ustar\0";
    let prefix = if ustar { field(&block[345..500]) } else { &[] };
    if prefix.is_empty() {
        return name.to_vec();
    }
    let mut full = Vec::with_capacity(prefix.len() + 1 + name.len());
    full.extend_from_slice(prefix);
    full.push(b'/');
    full.extend_from_slice(name);
    full
}

/// A numeric header field: octal text (leading spaces, ended by a space or
/// NUL) or GNU base-256 (high bit set). `None` when it is neither or does
/// not fit in 64 bits; an empty field is 0.
fn number(bytes: &[u8]) -> Option<u64> {
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        if bytes[0] & 0x40 != 0 {
            return None; // negative
        }
        let mut v = u64::from(bytes[0] & 0x3f);
        for &b in &bytes[1..] {
            if v > u64::MAX >> 8 {
                return None;
            }
            v = (v << 8) | u64::from(b);
        }
        return Some(v);
    }
    let mut v: u64 = 0;
    let mut digits = bytes.iter().skip_while(|&&b| b == b' ').peekable();
    while let Some(&b) = digits.next() {
        match b {
            b'0'..=b'7' => {
                v = v.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
            }
            b' ' | 0 => {
                // The rest must be terminators too.
                return digits.all(|&b| b == b' ' || b == 0).then_some(v);
            }
            _ => return None,
        }
    }
    Some(v)
}

/// The header checksum: the unsigned (or, from old tars, signed) byte sum
/// with the checksum field read as spaces.
fn check_checksum(block: &[u8; BLOCK], offset: u64) -> Result<(), TarError> {
    let bad = |reason| TarError::BadHeader { offset, reason };
    let want = number(&block[148..156]).ok_or(bad("its checksum field is not a number"))?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if want == unsigned || i64::try_from(want).ok() == Some(signed) {
        Ok(())
    } else {
        Err(bad(
            "its checksum does not match (not a tar archive, or corrupt)",
        ))
    }
}

/// Apply the records of a pax extended header (`<len> <key>=<value>\n`).
fn apply_pax(data: &[u8], pending: &mut Pending) -> Result<(), &'static str> {
    let mut rest = data;
    while !rest.is_empty() {
        // A block's trailing NULs end the records.
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or("a record has no length")?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("a record's length is not a number")?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err("a record's length does not match its contents");
        }
        let record = &rest[space + 1..len - 1];
        rest = &rest[len..];
        let eq = record
            .iter()
            .position(|&b| b == b'=')
            .ok_or("a record has no '='")?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        // An empty value cancels the key (the header's own field applies).
        let value = (!value.is_empty()).then(|| value.to_vec());
        match key {
            b"path" => pending.pax_path = value,
            b"linkpath" => pending.pax_link = value,
            b"size" => {
                pending.pax_size = match value {
                    Some(v) => Some(decimal(&v).ok_or("its size is not a number")?),
                    None => None,
                }
            }
            b"mtime" => {
                // Seconds, maybe with a fraction; a negative or odd time is
                // ignored as tar ignores a bad mtime.
                pending.pax_mtime = value.as_deref().and_then(|v| {
                    let whole = v.split(|&b| b == b'.').next().unwrap_or(v);
                    decimal(whole)
                });
            }
            k if k.starts_with(b"GNU.sparse.") => pending.sparse = true,
            // Owners, times, charsets, comments and extended attributes are
            // not restored.
            _ => {}
        }
    }
    Ok(())
}

fn decimal(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry as the tests see it: kind, path, content.
    type Entry = (EntryKind, Vec<u8>, Vec<u8>);

    fn entries(data: &[u8]) -> Result<Vec<Entry>, TarError> {
        let mut r = TarReader::new(data);
        let mut out = Vec::new();
        while let Some(h) = r.next_header()? {
            let mut content = vec![0u8; h.size as usize];
            r.read_content_exact(&mut content)?;
            out.push((h.kind, h.path, content));
        }
        Ok(out)
    }

    #[test]
    fn reads_what_the_tar_crate_writes() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        b.append_data(&mut h, "pkg/", io::empty()).unwrap();
        let long = format!("pkg/{}", "x".repeat(300));
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        b.append_data(&mut h, &long, &b"hello"[..]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(2);
        h.set_mode(0o600);
        let deep = format!("pkg/{}/{}", "d".repeat(120), "f");
        b.append_data(&mut h, &deep, &b"hi"[..]).unwrap();
        let data = b.into_inner().unwrap();
        let got = entries(&data).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, EntryKind::Directory);
        assert_eq!(got[1].1, long.as_bytes());
        assert_eq!(got[1].2, b"hello");
        assert_eq!(got[2].1, deep.as_bytes());
        assert_eq!(got[2].2, b"hi");
    }

    #[test]
    fn numbers_in_octal_and_base_256() {
        assert_eq!(number(b"0000644\0"), Some(0o644));
        assert_eq!(number(b"   644 \0"), Some(0o644));
        assert_eq!(number(b"\0\0\0\0"), Some(0));
        assert_eq!(number(b"12x4"), None);
        assert_eq!(number(&[0x80, 0, 0, 1, 0]), Some(256));
        assert_eq!(number(&[0xff, 0xff]), None);
        assert_eq!(
            number(&[0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            None
        );
    }

    #[test]
    fn an_oversized_long_name_is_refused_from_its_header() {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(256 << 20);
        h.set_cksum();
        // No content follows: the header alone is enough to refuse it.
        let mut data = h.as_bytes().to_vec();
        data.extend_from_slice(&[b'a'; 1024]);
        match entries(&data) {
            Err(TarError::ExtensionTooLarge { size, .. }) => assert_eq!(size, 256 << 20),
            other => panic!("{other:?}"),
        }
    }

    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while len.to_string().len() + body.len() != len {
                len += 1;
            }
            out.extend(format!("{len}{body}").into_bytes());
        }
        out
    }

    fn with_pax(records: &[(&str, &str)], name: &str, data: &[u8]) -> Vec<u8> {
        let recs = pax(records);
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(recs.len() as u64);
        b.append_data(&mut h, "PaxHeaders/x", &recs[..]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn pax_records_apply_and_sparse_is_refused() {
        let data = with_pax(&[("path", "pkg/long"), ("mtime", "12.5")], "short", b"abc");
        let got = entries(&data).unwrap();
        assert_eq!(got[0].1, b"pkg/long");
        assert_eq!(got[0].2, b"abc");
        let data = with_pax(&[("GNU.sparse.major", "1")], "sparse", b"");
        assert!(matches!(entries(&data), Err(TarError::Unsupported { .. })));
    }
}
