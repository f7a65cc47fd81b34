//! Output for humans and machines: every command prints either text or one
//! JSON document (`--json`), through this module.

use std::io::Write;

use serde::Serialize;

/// Where command output goes and in which form.
#[derive(Clone, Copy, Debug, Default)]
pub struct Output {
    pub json: bool,
    pub quiet: bool,
}

impl Output {
    /// Print a JSON document (pretty, one per command).
    pub fn json<T: Serialize>(&self, value: &T) {
        let text = serde_json::to_string_pretty(value)
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
    }

    /// Print a line of human output (suppressed with `--json` and `-q`).
    pub fn line(&self, text: impl AsRef<str>) {
        if self.json || self.quiet {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", text.as_ref());
    }

    /// Print a warning on stderr (kept with `-q`, dropped with `--json`
    /// where it belongs in the document instead).
    pub fn warn(&self, text: impl AsRef<str>) {
        if self.json {
            return;
        }
        eprintln!("warning: {}", text.as_ref());
    }

    /// Whether progress bars may be drawn.
    pub fn interactive(&self) -> bool {
        use std::io::IsTerminal;
        !self.json && !self.quiet && std::io::stderr().is_terminal()
    }
}

/// Render rows as an aligned text table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let fmt_row = |cells: Vec<&str>, out: &mut String| {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{:<w$}  ", cell, w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    };
    fmt_row(header.to_vec(), &mut out);
    for row in rows {
        fmt_row(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_aligns() {
        let t = super::table(
            &["NAME", "V"],
            &[
                vec!["cn-agent".into(), "1".into()],
                vec!["a".into(), "22".into()],
            ],
        );
        assert_eq!(t, "NAME      V\ncn-agent  1\na         22\n");
    }
}
