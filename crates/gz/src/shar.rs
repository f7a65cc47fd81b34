//! Reading GNU sharutils shell archives without running them: Triton's
//! dockerlogger and sdcadm images are shars (`files[0].compression: none`),
//! made by `shar` and wrapped in a header and an installer call
//! (docs/triton/agent-install.md §§5.3-5.4).
//!
//! sdcadm and today's update path run the shar as root. agentsadm only reads
//! its members out, turns them into a tar stream, and hands that stream to
//! the same unpacker every other image goes through, so a shar gets exactly
//! the path checks of a tarball (no `..`, no absolute paths, one top-level
//! directory) and the installer's own atomic swap instead of the shar's
//! `install.sh`.
//!
//! What is read, line by line (every other line is shell logic and skipped):
//! - `sed 's/^X//' << 'D' > 'PATH' &&`: a text member; one leading `X` is
//!   removed from each line up to the line `D`;
//! - `sed 's/^X//' << 'D' | uudecode &&`: a uuencoded member, named by its
//!   `begin MODE PATH` line;
//! - `mkdir 'DIR'` and `chmod MODE 'PATH'`;
//! - ``test `LC_ALL=C wc -c < 'PATH'` -ne N``: the member's size, checked;
//! - any other here-document (the md5 checks, sdcadm's md5sum helper) is
//!   skipped whole.
//!
//! Anything else that would change the members (gzip'd or base64 members,
//! an unterminated here-document, a bad uuencoded line, a size that does not
//! match) is refused with the line number.

use std::collections::BTreeMap;
use std::io::{self, BufRead};

use super::unpack::clip;

/// Why a shell archive cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct SharError {
    pub line: usize,
    pub reason: String,
}

/// Whether the first bytes of an uncompressed image file are a shell script
/// (a shar) rather than a tar stream.
pub fn is_shar(prefix: &[u8]) -> bool {
    prefix.starts_with(b"#!/bin/sh") || prefix.starts_with(b"#!/bin/bash")
}

/// One member of a shar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    Dir {
        path: String,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
}

/// Why a shar could not be read from a stream.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The stream itself failed (a broken download): not the archive's fault.
    #[error("cannot read the archive")]
    Io(#[source] io::Error),
    #[error(transparent)]
    Shar(#[from] SharError),
}

/// The members of an in-memory shar, in archive order (directories first
/// when a `mkdir` names them).
pub fn members(shar: &[u8]) -> Result<Vec<Member>, SharError> {
    read_members(shar).map_err(|e| match e {
        ReadError::Shar(e) => e,
        // A byte slice does not fail to read.
        ReadError::Io(e) => SharError {
            line: 0,
            reason: e.to_string(),
        },
    })
}

/// Lines of a stream, numbered from 1, without their newline.
struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    number: usize,
}

impl<R: BufRead> Lines<R> {
    fn next(&mut self) -> Result<Option<(usize, &[u8])>, ReadError> {
        self.buf.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(ReadError::Io)?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        Ok(Some((self.number, &self.buf)))
    }
}

/// Where a member's here-document goes.
enum Sink {
    Text { path: String, data: Vec<u8> },
    Uuencoded(UuDecoder),
}

/// One member's here-document, from the line after its `sed` command
/// (`rest`: what follows `<< `) to its delimiter: its path and contents.
fn read_member<R: BufRead>(
    lines: &mut Lines<R>,
    line_no: usize,
    rest: &str,
) -> Result<(String, Vec<u8>), ReadError> {
    let err = |reason: String| SharError {
        line: line_no,
        reason,
    };
    let (delim, after) = heredoc_delimiter(rest)
        .ok_or_else(|| err("a member's here-document has no delimiter".to_string()))?;
    let after = after.trim().trim_end_matches("&&").trim();
    let mut sink = if let Some(target) = after.strip_prefix("> ") {
        let path = shell_unquote(target.trim())
            .ok_or_else(|| err(format!("cannot read the member name {}", clip(target))))?;
        Sink::Text {
            path,
            data: Vec::new(),
        }
    } else if after == "| uudecode" {
        Sink::Uuencoded(UuDecoder::default())
    } else {
        return Err(err(format!(
            "members encoded as {:?} are not supported (only text and uuencode)",
            clip(after)
        ))
        .into());
    };
    let end_no = loop {
        let Some((no, l)) = lines.next()? else {
            return Err(err(format!(
                "the here-document ending in {:?} never ends",
                clip(&delim)
            ))
            .into());
        };
        if l == delim.as_bytes() {
            break no;
        }
        let l = strip_x(l);
        match &mut sink {
            Sink::Text { data, .. } => {
                data.extend_from_slice(l);
                data.push(b'\n');
            }
            Sink::Uuencoded(d) => d.feed(l).map_err(|reason| SharError { line: no, reason })?,
        }
    };
    let (path, data) = match sink {
        Sink::Text { path, data } => (path, data),
        Sink::Uuencoded(d) => d.finish().map_err(|reason| SharError {
            line: end_no,
            reason,
        })?,
    };
    Ok((path, data))
}

/// Read past a here-document that is not a member, up to its delimiter.
fn skip_heredoc<R: BufRead>(
    lines: &mut Lines<R>,
    delim: &str,
    line_no: usize,
) -> Result<(), ReadError> {
    loop {
        let Some((_, l)) = lines.next()? else {
            return Err(SharError {
                line: line_no,
                reason: format!("the here-document ending in {:?} never ends", clip(delim)),
            }
            .into());
        };
        if l == delim.as_bytes() {
            return Ok(());
        }
    }
}

/// sharutils' size check of a member (`'PATH'` -ne N && ...`, after the
/// `test ... wc -c < `): the member must exist and have N bytes.
fn check_size(files: &BTreeMap<String, (u32, Vec<u8>)>, rest: &str) -> Result<(), String> {
    // 'PATH'` -ne N && \
    if let Some((target, tail)) = rest.split_once('`') {
        let path = shell_unquote(target.trim());
        let size = tail
            .trim()
            .strip_prefix("-ne ")
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse::<usize>().ok());
        if let (Some(path), Some(size)) = (path, size) {
            match files.get(&path) {
                Some((_, data)) if data.len() != size => {
                    return Err(format!(
                        "{:?} decodes to {} bytes, the archive says {size}",
                        clip(&path),
                        data.len()
                    ));
                }
                Some(_) => {}
                None => {
                    return Err(format!(
                        "size check of {:?}, which is no member",
                        clip(&path)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The members of a shar read line by line from `reader`: nothing but the
/// members' contents is kept, so a large image is not held twice.
pub fn read_members<R: BufRead>(reader: R) -> Result<Vec<Member>, ReadError> {
    let mut lines = Lines {
        reader,
        buf: Vec::new(),
        number: 0,
    };
    let mut dirs: Vec<String> = Vec::new();
    let mut files: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    while let Some((line_no, raw)) = lines.next()? {
        let err = |reason: String| SharError {
            line: line_no,
            reason,
        };
        let text = String::from_utf8_lossy(raw).into_owned();
        let trimmed = text.trim_start();
        if let Some(rest) = trimmed.strip_prefix("sed 's/^X//' << ") {
            let (path, data) = read_member(&mut lines, line_no, rest)?;
            add_member(&mut files, &mut order, path, data).map_err(err)?;
            continue;
        }
        // sharutils quotes every name it writes; the wrapper's own shell
        // (`mkdir -p $TMP`, `chmod +x .../md5sum`) names other things.
        if let Some(rest) = trimmed.strip_prefix("mkdir ") {
            if let Some(path) = quoted(rest.trim())
                && !dirs.contains(&path)
            {
                dirs.push(path);
            }
        } else if let Some(rest) = trimmed.strip_prefix("chmod ") {
            if let Some((mode, target)) = rest.split_once(' ')
                && let (Some(path), Ok(mode)) =
                    (quoted(target.trim()), u32::from_str_radix(mode, 8))
                && let Some(f) = files.get_mut(&path)
            {
                f.0 = mode & 0o7777;
            }
        } else if let Some(rest) = trimmed.strip_prefix("test `LC_ALL=C wc -c < ") {
            check_size(&files, rest).map_err(err)?;
        } else if let Some((_, rest)) = split_heredoc(trimmed)
            && let Some((delim, _)) = heredoc_delimiter(rest)
        {
            // Another here-document (md5 checks, a helper script): its body
            // is data for a command agentsadm does not run.
            skip_heredoc(&mut lines, &delim, line_no)?;
        }
    }
    if files.is_empty() {
        return Err(SharError {
            line: lines.number,
            reason: "it holds no files".to_string(),
        }
        .into());
    }
    let mut out: Vec<Member> = dirs.into_iter().map(|path| Member::Dir { path }).collect();
    for path in order {
        let (mode, data) = files.remove(&path).expect("every ordered path is a member");
        out.push(Member::File { path, mode, data });
    }
    Ok(out)
}

/// Record a member; a name twice is refused (`sh` would keep the first and
/// skip the second, a tarball's unpacker refuses the conflict: neither is
/// what a well-formed shar needs).
fn add_member(
    files: &mut BTreeMap<String, (u32, Vec<u8>)>,
    order: &mut Vec<String>,
    path: String,
    data: Vec<u8>,
) -> Result<(), String> {
    if files.contains_key(&path) {
        return Err(format!("{:?} is in the archive twice", clip(&path)));
    }
    order.push(path.clone());
    files.insert(path, (0o644, data));
    Ok(())
}

/// The members of a shar as an uncompressed tar stream. With `top`, a shar
/// of loose files only (sdcadm's `contents.tgz` and `install-sdcadm.sh`) is
/// placed under that directory, so it unpacks like a package.
pub fn to_tar(shar: &[u8], top: Option<&str>) -> Result<Vec<u8>, SharError> {
    into_tar(members(shar)?, top)
}

/// [`to_tar`] for members already read: each member's data is released as
/// it goes into the tar stream, so a large image is held about twice, not
/// three times.
pub fn into_tar(members: Vec<Member>, top: Option<&str>) -> Result<Vec<u8>, SharError> {
    // Only a shar of loose files is wrapped; anything with a directory
    // goes to the unpacker as it is, to be judged like a tarball.
    let loose = members.iter().all(|m| match m {
        Member::File { path, .. } => !path.trim_start_matches("./").contains('/'),
        Member::Dir { .. } => false,
    });
    let prefix = match top {
        Some(top) if loose => format!("{top}/"),
        _ => String::new(),
    };
    let mut builder = tar::Builder::new(Vec::new());
    let append = |builder: &mut tar::Builder<Vec<u8>>,
                  path: &str,
                  kind: tar::EntryType,
                  mode: u32,
                  data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        // The path goes in unchecked: the unpacker refuses what must be
        // refused, with the same errors a tarball gets.
        builder
            .append_data(&mut h, format!("{prefix}{path}"), data)
            .or_else(|_| {
                // append_data refuses `..` itself; keep the raw name so the
                // unpacker reports it.
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(kind);
                h.set_mode(mode);
                h.set_size(data.len() as u64);
                let name = format!("{prefix}{path}");
                let bytes = name.as_bytes();
                let field = &mut h.as_old_mut().name;
                if bytes.len() > field.len() {
                    return Err(std::io::Error::other("member name too long"));
                }
                field[..bytes.len()].copy_from_slice(bytes);
                h.set_cksum();
                builder.append(&h, data)
            })
    };
    if !prefix.is_empty() {
        append(&mut builder, "", tar::EntryType::Directory, 0o755, &[]).map_err(tar_err)?;
    }
    for m in members {
        match m {
            Member::Dir { path } => append(
                &mut builder,
                &format!("{}/", path.trim_end_matches('/')),
                tar::EntryType::Directory,
                0o755,
                &[],
            ),
            Member::File { path, mode, data } => {
                append(&mut builder, &path, tar::EntryType::Regular, mode, &data)
            }
        }
        .map_err(tar_err)?;
    }
    builder.into_inner().map_err(tar_err)
}

fn tar_err(e: std::io::Error) -> SharError {
    SharError {
        line: 0,
        reason: format!("cannot repack a member: {e}"),
    }
}

/// `cmd << 'D' ...` / `<< \D` / `<<D`: the text after `<<`.
fn split_heredoc(line: &str) -> Option<(&str, &str)> {
    let at = line.find("<<")?;
    // `<<<` is a here-string, not a here-document.
    if line[at + 2..].starts_with('<') {
        return None;
    }
    Some((
        &line[..at],
        line[at + 2..].trim_start_matches('-').trim_start(),
    ))
}

/// The delimiter of a here-document (`'D'`, `\D`, `"D"` or `D`) and what
/// follows it on the line.
fn heredoc_delimiter(rest: &str) -> Option<(String, &str)> {
    let rest = rest.trim_start();
    let (delim, after) = if let Some(r) = rest.strip_prefix('\'') {
        let end = r.find('\'')?;
        (&r[..end], &r[end + 1..])
    } else if let Some(r) = rest.strip_prefix('"') {
        let end = r.find('"')?;
        (&r[..end], &r[end + 1..])
    } else {
        let r = rest.strip_prefix('\\').unwrap_or(rest);
        let end = r
            .find(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&' || c == ')')
            .unwrap_or(r.len());
        (&r[..end], &r[end..])
    };
    (!delim.is_empty()).then(|| (delim.to_string(), after))
}

fn strip_x(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"X").unwrap_or(line)
}

/// A shell word made of single-quoted parts and `\'` (how shar quotes
/// names): `'it'\''s'` is `it's`. Bare words are taken as they are.
fn shell_unquote(word: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = word;
    if !rest.starts_with('\'') && !rest.starts_with('\\') {
        return (!rest.is_empty() && !rest.contains(char::is_whitespace)).then(|| rest.to_string());
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('\'') {
            let end = r.find('\'')?;
            out.push_str(&r[..end]);
            rest = &r[end + 1..];
        } else if let Some(r) = rest.strip_prefix("\\'") {
            out.push('\'');
            rest = r;
        } else {
            return None;
        }
    }
    Some(out)
}

/// A name as sharutils writes it: single-quoted (see [`shell_unquote`]).
fn quoted(word: &str) -> Option<String> {
    word.starts_with('\'')
        .then(|| shell_unquote(word))
        .flatten()
}

/// A uuencoded member, decoded a line at a time: `begin MODE PATH`, the
/// encoded lines, `end`.
#[derive(Default)]
struct UuDecoder {
    path: Option<String>,
    data: Vec<u8>,
    ended: bool,
}

impl UuDecoder {
    fn feed(&mut self, line: &[u8]) -> Result<(), String> {
        if self.ended {
            return Ok(());
        }
        if self.path.is_none() {
            let header = String::from_utf8_lossy(line);
            if header.starts_with("begin-base64") {
                return Err("base64 members are not supported (only uuencode)".to_string());
            }
            let mut parts = header.splitn(3, ' ');
            let (Some("begin"), Some(_mode), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!(
                    "expected `begin MODE NAME`, found {:?}",
                    clip(&header)
                ));
            };
            self.path = Some(path.to_string());
            return Ok(());
        }
        if line == b"end" {
            self.ended = true;
            return Ok(());
        }
        let Some(&len_char) = line.first() else {
            return Err("an empty uuencoded line".to_string());
        };
        let len = usize::from(len_char.wrapping_sub(b' ') & 0x3f);
        if len == 0 {
            return Ok(());
        }
        let chars = &line[1..];
        let needed = len.div_ceil(3) * 4;
        if chars.len() < needed {
            return Err(format!(
                "a uuencoded line is short: {len} bytes need {needed} characters"
            ));
        }
        let start = self.data.len();
        for group in chars[..needed].chunks(4) {
            let mut v = [0u8; 4];
            for (slot, c) in v.iter_mut().zip(group) {
                if !(b' '..=b'`').contains(c) {
                    return Err(format!("{:?} is not a uuencode character", *c as char));
                }
                *slot = c.wrapping_sub(b' ') & 0x3f;
            }
            self.data.extend_from_slice(&[
                (v[0] << 2) | (v[1] >> 4),
                (v[1] << 4) | (v[2] >> 2),
                (v[2] << 6) | v[3],
            ]);
        }
        // The last group may carry padding past the line's length.
        self.data.truncate(start + len);
        Ok(())
    }

    fn finish(self) -> Result<(String, Vec<u8>), String> {
        match (self.path, self.ended) {
            (Some(path), true) => Ok((path, self.data)),
            (None, _) => Err("an empty uuencoded member".to_string()),
            (Some(_), false) => Err("the uuencoded member has no `end` line".to_string()),
        }
    }
}
