//! Writing shell archives in GNU sharutils' layout, for the image builder's
//! dockerlogger and sdcadm images. The product only ever reads shars
//! (`agentsadm_gz::shar`); writing one is test and simulator business.

/// Write `data` uuencoded (for the image builder's shars), 45 bytes a line
/// as uuencode does.
pub fn uuencode(path: &str, data: &[u8]) -> String {
    let enc = |v: u8| if v == 0 { '`' } else { (v + b' ') as char };
    let mut out = format!("begin 600 {path}\n");
    for chunk in data.chunks(45) {
        out.push(enc(chunk.len() as u8));
        for group in chunk.chunks(3) {
            let b = [
                group[0],
                *group.get(1).unwrap_or(&0),
                *group.get(2).unwrap_or(&0),
            ];
            out.push(enc(b[0] >> 2));
            out.push(enc(((b[0] << 4) | (b[1] >> 4)) & 0x3f));
            out.push(enc(((b[1] << 2) | (b[2] >> 6)) & 0x3f));
            out.push(enc(b[2] & 0x3f));
        }
        out.push('\n');
    }
    out.push_str("`\nend\n");
    out
}

/// The directories above a relative path, outermost first (`a/b/c`: `a`,
/// `a/b`).
pub fn parent_dirs(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').collect();
    (1..parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// A shar in GNU sharutils' layout for `files` (path, mode, content): text
/// members as `sed` here-documents, anything else uuencoded, then `chmod`
/// and the size check. Enough of sharutils' output for [`members`] and for
/// `sh` to unpack it; the image builder wraps it the way Triton's `mk-shar`
/// scripts do.
pub fn write(files: &[(&str, u32, &[u8])]) -> String {
    let quote = |p: &str| format!("'{}'", p.replace('\'', "'\\''"));
    let mut out = String::new();
    let mut made: Vec<String> = Vec::new();
    for (path, mode, data) in files {
        out.push_str(&format!("# ============= {path} ==============\n"));
        for dir in parent_dirs(path) {
            if !made.contains(&dir) {
                out.push_str(&format!(
                    "if test ! -d {q}; then\n  mkdir {q}\nfi\n",
                    q = quote(&dir)
                ));
                made.push(dir);
            }
        }
        let text = std::str::from_utf8(data)
            .ok()
            .filter(|t| t.ends_with('\n') && !t.contains('\0'));
        match text {
            Some(t) => {
                out.push_str(&format!(
                    "  sed 's/^X//' << 'SHAR_EOF' > {} &&\n",
                    quote(path)
                ));
                for line in t.lines() {
                    // A leading X, or a line that reads as the delimiter,
                    // is protected by an X that sed removes.
                    if line.starts_with('X') || line == "SHAR_EOF" {
                        out.push('X');
                    }
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str("  sed 's/^X//' << 'SHAR_EOF' | uudecode &&\n");
                out.push_str(&uuencode(path, data));
            }
        }
        out.push_str("SHAR_EOF\n");
        out.push_str(&format!("  chmod {mode:04o} {}\n", quote(path)));
        out.push_str(&format!(
            "test `LC_ALL=C wc -c < {q}` -ne {n} && \\\n  echo \"restoration warning:  size of {q} is not {n}\"\n",
            q = quote(path),
            n = data.len()
        ));
    }
    out
}
