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
    /// Print a JSON document (pretty, one per command). A document that
    /// is an object also says where the command's log is (`"log"`), when
    /// it has one.
    pub fn json<T: Serialize>(&self, value: &T) {
        let text = match serde_json::to_value(value) {
            Ok(mut doc) => {
                if let (Some(obj), Some(log)) = (doc.as_object_mut(), crate::log::run_log()) {
                    obj.entry("log")
                        .or_insert_with(|| log.display().to_string().into());
                }
                serde_json::to_string_pretty(&doc)
            }
            Err(e) => Err(e),
        }
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

/// Whether stderr may carry colour: it is a terminal, and `NO_COLOR` is
/// unset or empty (<https://no-color.org>). Output redirected to a file or
/// a pipe never gets an escape sequence, whatever writes it (the progress
/// display, the log lines).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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

/// How a table is shown, as `sdcadm insts` takes it: `-H` (no header),
/// `-o COLUMNS` (which columns, in which order), `-s SORT` (sort by these
/// columns, each ascending; `-NAME` descending).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    pub no_header: bool,
    pub columns: Vec<String>,
    pub sort: Vec<String>,
}

fn column_index(header: &[&str], name: &str) -> Result<usize, String> {
    header
        .iter()
        .position(|h| h.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| {
            let names: Vec<String> = header.iter().map(|h| h.to_ascii_lowercase()).collect();
            format!(
                "unknown column {name:?}; the columns are {}",
                names.join(", ")
            )
        })
}

/// Compare cells as numbers when both are, else as text.
fn cmp_cells(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        _ => a.cmp(b),
    }
}

/// Render rows as [`table`] does, after sorting and choosing columns as
/// `options` say. An unknown column name is an error naming the columns.
pub fn table_with(
    header: &[&str],
    rows: &[Vec<String>],
    options: &TableOptions,
) -> Result<String, String> {
    let mut sort = Vec::new();
    for key in &options.sort {
        let (desc, name) = match key.trim().strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, key.trim()),
        };
        sort.push((column_index(header, name)?, desc));
    }
    let mut rows: Vec<&Vec<String>> = rows.iter().collect();
    rows.sort_by(|a, b| {
        for (i, desc) in &sort {
            let o = cmp_cells(
                a.get(*i).map(String::as_str).unwrap_or(""),
                b.get(*i).map(String::as_str).unwrap_or(""),
            );
            let o = if *desc { o.reverse() } else { o };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
    let columns: Vec<usize> = if options.columns.is_empty() {
        (0..header.len()).collect()
    } else {
        options
            .columns
            .iter()
            .map(|c| column_index(header, c))
            .collect::<Result<_, _>>()?
    };
    let head: Vec<&str> = columns.iter().map(|i| header[*i]).collect();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            columns
                .iter()
                .map(|i| r.get(*i).cloned().unwrap_or_default())
                .collect()
        })
        .collect();
    let text = table(&head, &body);
    if options.no_header {
        Ok(text
            .split_once('\n')
            .map(|(_, rest)| rest)
            .unwrap_or("")
            .to_string())
    } else {
        Ok(text)
    }
}

/// A value read from an API or a server (a hostname, an agent name, a
/// lock owner), as it may be echoed in a message or a table: control
/// characters escaped (no terminal escape sequences get through), and at
/// most `max` characters, with `...` and its full length when cut.
pub fn clip(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (shown, ch) in text.chars().enumerate() {
        if shown >= max {
            return format!("{out}... ({} bytes)", text.len());
        }
        if ch.is_control() {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out
}

/// A UUID as plans, findings and tables show it: its first 8 characters
/// (what `COMPONENT@PREFIX` and `--image PREFIX` accept back).
pub fn short(u: &impl ToString) -> String {
    short_uuid(u, 8)
}

/// A count and its noun: `1 server`, `2 servers`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The first `n` characters of a UUID, as tables show them.
pub fn short_uuid(u: &impl ToString, n: usize) -> String {
    u.to_string().chars().take(n).collect()
}

/// An RFC 3339 time to the second: `2026-02-01T00:00:00.000Z` ->
/// `2026-02-01T00:00:00Z`.
pub fn to_the_second(t: &str) -> String {
    match (t.get(..19), t.ends_with('Z')) {
        (Some(head), true) if t.len() > 20 => format!("{head}Z"),
        _ => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clip_bounds_and_escapes() {
        assert_eq!(super::clip("cn1", 10), "cn1");
        assert_eq!(super::clip("a\u{1b}[2Jb", 10), "a\\u{1b}[2Jb");
        let long = "x".repeat(10_000_000);
        let c = super::clip(&long, 64);
        assert!(c.len() < 100 && c.ends_with("(10000000 bytes)"), "{c}");
    }

    #[test]
    fn tables_choose_sort_and_drop_the_header() {
        let rows = vec![
            vec!["cn2".into(), "b".into(), "10".into()],
            vec!["cn1".into(), "z".into(), "9".into()],
            vec!["cn1".into(), "a".into(), "100".into()],
        ];
        let h = ["HOSTNAME", "COMPONENT", "N"];
        let o = |cols: &[&str], sort: &[&str], no_header| super::TableOptions {
            no_header,
            columns: cols.iter().map(|s| s.to_string()).collect(),
            sort: sort.iter().map(|s| s.to_string()).collect(),
        };
        let t = super::table_with(&h, &rows, &o(&[], &["hostname", "component"], false)).unwrap();
        assert_eq!(
            t,
            "HOSTNAME  COMPONENT  N\ncn1       a          100\ncn1       z          9\ncn2       b          10\n"
        );
        let t = super::table_with(&h, &rows, &o(&["n", "hostname"], &["-n"], true)).unwrap();
        assert_eq!(t, "100  cn1\n10   cn2\n9    cn1\n");
        let e = super::table_with(&h, &rows, &o(&["nope"], &[], false)).unwrap_err();
        assert!(e.contains("hostname, component, n"), "{e}");
        assert_eq!(
            super::to_the_second("2026-02-01T00:00:00.000Z"),
            "2026-02-01T00:00:00Z"
        );
        assert_eq!(
            super::to_the_second("2026-02-01T00:00:00Z"),
            "2026-02-01T00:00:00Z"
        );
    }

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
