//! The picture of one run in `agentsadm history RUN`: its servers in start
//! order on one time axis (waves, the canary, stragglers, failures and
//! outliers visible, the planned finish beside the real one), and the
//! spread of its install times (P50/P90, a strip of counts). Plain ASCII,
//! at most [`PICTURE_WIDTH`] columns, so that it reads the same in an
//! 80-column terminal, a file and a ticket (pure: no I/O).

use std::time::Duration;

use agentsadm_orchestrate::history::{HistoryEntry, ServerRecord};
use agentsadm_orchestrate::report::fmt_duration;

/// The widest line of the picture: an 80-column terminal shows it whole.
// Only the tests read it; the pictures are drawn to fit it.
#[cfg_attr(not(test), allow(dead_code))]
pub const PICTURE_WIDTH: usize = 80;

/// Columns of the time axis.
const AXIS: usize = 60;

/// Rows of the timeline at most: beyond, consecutive servers share a row.
const MAX_ROWS: usize = 24;

/// The width of a row's label.
const LABEL: usize = 14;

/// One row of the timeline: one server, or several that started one after
/// the other.
struct Row<'a> {
    servers: Vec<&'a ServerRecord>,
}

impl Row<'_> {
    fn label(&self) -> String {
        let first = self.servers[0].hostname.as_str();
        let mut label = if self.servers.len() == 1 {
            first.to_string()
        } else {
            format!("{first} +{}", self.servers.len() - 1)
        };
        if label.chars().count() > LABEL {
            label = label.chars().take(LABEL - 1).collect::<String>() + "~";
        }
        label
    }
}

/// When a server ran, in seconds from the run's start.
fn span(s: &ServerRecord) -> Option<(f64, f64)> {
    let start = s.started_s?;
    Some((start, start + s.elapsed_s.max(0.0)))
}

/// The mark at the end of a server's bar.
fn end_mark(s: &ServerRecord) -> Option<char> {
    match s.outcome.as_str() {
        "failed" | "timed-out" => Some('x'),
        "interrupted" | "unknown" => Some('?'),
        _ if s.outlier => Some('!'),
        _ => None,
    }
}

/// What both pictures of a run draw on: its started servers in start
/// order and the time axis (the real finish, the planned one, the longer).
struct RunAxis<'e> {
    started: Vec<&'e ServerRecord>,
    real_end: f64,
    planned: Option<f64>,
    total: f64,
}

impl<'e> RunAxis<'e> {
    /// `None` when no server's start was recorded.
    fn of(e: &'e HistoryEntry) -> Option<RunAxis<'e>> {
        let mut started: Vec<&ServerRecord> =
            e.servers.iter().filter(|s| s.started_s.is_some()).collect();
        if started.is_empty() {
            return None;
        }
        started.sort_by(|a, b| {
            a.started_s
                .partial_cmp(&b.started_s)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.hostname.cmp(&b.hostname))
        });
        let real_end = started
            .iter()
            .filter_map(|s| span(s).map(|(_, end)| end))
            .fold(0.0_f64, f64::max);
        let planned = e.plan.expected_finish_s.filter(|p| *p > 0.0);
        let total = real_end.max(planned.unwrap_or(0.0)).max(0.001);
        Some(RunAxis {
            started,
            real_end,
            planned,
            total,
        })
    }
}

/// The timeline of `e`, or `None` when no server's start was recorded (a
/// run with no server step, or one recorded before starts were).
pub fn timeline(e: &HistoryEntry) -> Option<String> {
    let RunAxis {
        started,
        real_end,
        planned,
        total,
    } = RunAxis::of(e)?;
    let per_column = total / AXIS as f64;
    let column = |t: f64| ((t / per_column) as usize).min(AXIS - 1);

    let per_row = started.len().div_ceil(MAX_ROWS);
    let rows: Vec<Row<'_>> = started
        .chunks(per_row)
        .map(|c| Row {
            servers: c.to_vec(),
        })
        .collect();

    let mut out = String::new();
    out.push_str(&format!(
        "Timeline: {} servers in start order{}, one column = {}:\n",
        started.len(),
        if per_row > 1 {
            format!(" ({per_row} a row)")
        } else {
            String::new()
        },
        fmt_duration(Duration::from_secs_f64(per_column))
    ));
    for row in &rows {
        let mut cells = [' '; AXIS];
        for s in &row.servers {
            let Some((start, end)) = span(s) else {
                continue;
            };
            // Columns [from, to]: the last is the one its end falls in,
            // not the next one when it ends on a boundary.
            let from = column(start);
            let to = (((end / per_column).ceil() as usize).saturating_sub(1))
                .min(AXIS - 1)
                .max(from);
            for c in cells.iter_mut().take(to + 1).skip(from) {
                if *c == ' ' {
                    *c = '=';
                }
            }
            if let Some(m) = end_mark(s) {
                cells[to] = m;
            }
            if s.canary {
                cells[from] = 'C';
            }
        }
        let bar: String = cells.iter().collect();
        out.push_str(&format!("  {:<w$} |{bar}|\n", row.label(), w = LABEL));
    }
    // The axis: the planned finish marked where it falls.
    let mut axis = ['-'; AXIS];
    if let Some(p) = planned {
        axis[column(p)] = 'P';
    }
    out.push_str(&format!(
        "  {:<w$} +{}+\n",
        "",
        axis.iter().collect::<String>(),
        w = LABEL
    ));
    let (left, right) = (
        "0s".to_string(),
        fmt_duration(Duration::from_secs_f64(total)),
    );
    out.push_str(&format!(
        "  {:<w$}  {left}{:>pad$}\n",
        "",
        right,
        w = LABEL,
        pad = AXIS - left.len()
    ));
    out.push_str(&format!(
        "  real finish {}{}\n",
        fmt_duration(Duration::from_secs_f64(real_end)),
        match planned {
            Some(p) => format!(
                ", planned {} (P on the axis)",
                fmt_duration(Duration::from_secs_f64(p))
            ),
            None => ", no planned finish (no install history when it was planned)".to_string(),
        }
    ));
    out.push_str("  = running   C canary   x failed   ! outlier   ? interrupted or unknown\n");
    if let Some(spread) = spread(&started) {
        out.push_str(&spread);
    }
    Some(out)
}

/// The same picture as an SVG document, for a ticket or a wiki
/// (`agentsadm history RUN --svg FILE`): one bar per server in start
/// order, coloured by how it ended, the canary outlined, outliers marked,
/// the planned finish as a dashed line beside the real one. Self-contained
/// (no script, font or link outside it). `None` as for [`timeline`].
pub fn svg(e: &HistoryEntry) -> Option<String> {
    let RunAxis {
        started,
        real_end,
        planned,
        total,
    } = RunAxis::of(e)?;
    let (left, plot, row, top): (f64, f64, f64, f64) = (140.0, 640.0, 14.0, 40.0);
    let x = |t: f64| left + t / total * plot;
    let height = top + row * started.len() as f64 + 40.0;
    let width = left + plot + 20.0;
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"13\">{}: {} servers, real finish {}{}</text>\n",
        esc(&e.operation),
        started.len(),
        fmt_duration(Duration::from_secs_f64(real_end)),
        planned
            .map(|p| format!(", planned {}", fmt_duration(Duration::from_secs_f64(p))))
            .unwrap_or_default()
    );
    for (i, s) in started.iter().enumerate() {
        let Some((start, end)) = span(s) else {
            continue;
        };
        let y = top + row * i as f64;
        let colour = match s.outcome.as_str() {
            "succeeded" if s.outlier => "#e69f00",
            "succeeded" => "#4c9a2a",
            "failed" | "timed-out" => "#d62728",
            _ => "#999999",
        };
        let w = (x(end) - x(start)).max(1.0);
        out.push_str(&format!(
            "<text x=\"10\" y=\"{}\">{}</text>\n<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{}\" fill=\"{colour}\"{}><title>{} {} {}</title></rect>\n",
            y + row - 3.0,
            esc(&s.hostname),
            x(start),
            y + 2.0,
            row - 4.0,
            if s.canary { " stroke=\"black\" stroke-width=\"1.5\"" } else { "" },
            esc(&s.hostname),
            esc(&s.outcome),
            fmt_duration(Duration::from_secs_f64(s.elapsed_s.max(0.0)))
        ));
    }
    let bottom = top + row * started.len() as f64;
    out.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>\n<text x=\"{left}\" y=\"{}\">0s</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        left + plot,
        bottom + 14.0,
        left + plot,
        bottom + 14.0,
        fmt_duration(Duration::from_secs_f64(total))
    ));
    if let Some(p) = planned {
        out.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{top}\" x2=\"{:.1}\" y2=\"{bottom}\" stroke=\"#1f77b4\" stroke-dasharray=\"4 3\"/>\n<text x=\"{:.1}\" y=\"{}\" fill=\"#1f77b4\">planned</text>\n",
            x(p),
            x(p),
            x(p) + 3.0,
            top - 4.0
        ));
    }
    out.push_str(&format!(
        "<text x=\"10\" y=\"{}\">green: succeeded; orange: outlier; red: failed; grey: interrupted or unknown; outlined: canary</text>\n</svg>\n",
        bottom + 32.0
    ));
    Some(out)
}

/// P50, P90 and the maximum of the succeeded servers' times, and a strip
/// of how many fell in each tenth of the range.
fn spread(servers: &[&ServerRecord]) -> Option<String> {
    let mut times: Vec<f64> = servers
        .iter()
        .filter(|s| s.outcome == "succeeded")
        .map(|s| s.elapsed_s)
        .collect();
    if times.is_empty() {
        return None;
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let d = |s: f64| fmt_duration(Duration::from_secs_f64(s.max(0.0)));
    let (min, max) = (times[0], times[times.len() - 1]);
    const BUCKETS: usize = 10;
    let mut counts = [0usize; BUCKETS];
    for t in &times {
        let i = if max > min {
            (((t - min) / (max - min)) * BUCKETS as f64) as usize
        } else {
            0
        };
        counts[i.min(BUCKETS - 1)] += 1;
    }
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    // Darker for more: a count as one of ten shades.
    const SHADES: &[u8] = b" .:-=+*#%@";
    let strip: String = counts
        .iter()
        .map(|&c| {
            if c == 0 {
                ' '
            } else {
                SHADES[(1 + c * (SHADES.len() - 2) / most).min(SHADES.len() - 1)] as char
            }
        })
        .collect();
    Some(format!(
        "Install times of the {} succeeded: P50 {}, P90 {}, max {}\n  how many took how long: {} [{strip}] {}\n",
        times.len(),
        d(at(0.5)),
        d(at(0.9)),
        d(max),
        d(min),
        d(max)
    ))
}

/// `text` in lines of at most `width` columns, the first after `first`,
/// the others after `indent` spaces; at most `max_lines`, the last ending
/// in "..." when the text was longer.
pub fn wrap(first: &str, text: &str, indent: usize, width: usize, max_lines: usize) -> String {
    let pad = " ".repeat(indent);
    let mut lines: Vec<String> = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        // A word longer than a line is cut to one.
        let word: String = word
            .chars()
            .take(width.saturating_sub(indent).max(1))
            .collect();
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, pad.clone()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(&word);
        empty = false;
    }
    lines.push(line);
    if lines.len() > max_lines {
        lines.truncate(max_lines.max(1));
        if let Some(last) = lines.last_mut() {
            let keep = width.saturating_sub(4);
            if last.chars().count() > keep {
                *last = last.chars().take(keep).collect();
            }
            last.push_str(" ...");
        }
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_orchestrate::history::entry::PlanRecord;

    fn server(host: &str, start: f64, took: f64, outcome: &str) -> ServerRecord {
        ServerRecord {
            hostname: host.into(),
            outcome: outcome.into(),
            elapsed_s: took,
            started_s: Some(start),
            ..ServerRecord::default()
        }
    }

    #[test]
    fn a_run_drawn_on_one_axis() {
        let mut servers = vec![server("cn0001", 0.0, 10.0, "succeeded")];
        servers[0].canary = true;
        for n in 2..=5 {
            servers.push(server(&format!("cn{n:04}"), 10.0, 10.0, "succeeded"));
        }
        servers.push(server("cn0006", 20.0, 40.0, "succeeded"));
        servers[5].outlier = true;
        servers.push(server("cn0007", 20.0, 1.0, "failed"));
        let e = HistoryEntry {
            servers,
            plan: PlanRecord {
                expected_finish_s: Some(30.0),
                ..PlanRecord::default()
            },
            ..HistoryEntry::default()
        };
        let text = timeline(&e).unwrap();
        assert!(
            text.lines().all(|l| l.chars().count() <= PICTURE_WIDTH),
            "{text}"
        );
        let row = |h: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(h))
                .unwrap()
        };
        // 60 s on 60 columns: the canary from 0 to 10, the next wave from
        // 10, the outlier to the end, the failure at 20.
        assert!(row("cn0001").contains("|C========= "), "{text}");
        assert!(
            row("cn0002").contains(&format!("|{}==========", " ".repeat(10))),
            "{text}"
        );
        assert!(row("cn0006").ends_with("!|"), "{text}");
        assert!(
            row("cn0007").contains(&format!("|{}x ", " ".repeat(20))),
            "{text}"
        );
        let axis = text.lines().find(|l| l.contains("+---")).unwrap();
        assert_eq!(
            axis.find('P').unwrap() - axis.find('+').unwrap() - 1,
            30,
            "{text}"
        );
        assert!(text.contains("real finish 1m00s, planned 30.0s"), "{text}");
        assert!(
            text.contains("Install times of the 6 succeeded: P50 10.0s, P90 40.0s, max 40.0s"),
            "{text}"
        );
    }

    #[test]
    fn a_large_run_shares_rows() {
        let servers: Vec<ServerRecord> = (0..600)
            .map(|n| {
                server(
                    &format!("cn{n:04}"),
                    (n / 20) as f64 * 5.0,
                    5.0,
                    "succeeded",
                )
            })
            .collect();
        let e = HistoryEntry {
            servers,
            ..HistoryEntry::default()
        };
        let text = timeline(&e).unwrap();
        let rows = text.lines().filter(|l| l.contains(" +24 ")).count();
        assert_eq!(rows, 24, "{text}");
        assert!(
            text.contains("600 servers in start order (25 a row)"),
            "{text}"
        );
        assert!(
            text.lines().all(|l| l.chars().count() <= PICTURE_WIDTH),
            "{text}"
        );
        assert!(text.contains("no planned finish"), "{text}");
    }

    #[test]
    fn no_start_recorded_no_picture() {
        let mut s = server("cn0001", 0.0, 1.0, "succeeded");
        s.started_s = None;
        let e = HistoryEntry {
            servers: vec![s],
            ..HistoryEntry::default()
        };
        assert_eq!(timeline(&e), None);
    }

    #[test]
    fn long_text_is_wrapped_and_shortened() {
        let long = "word ".repeat(200);
        let text = wrap("  cn0001: ", &long, 4, 100, 3);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{text}");
        assert!(lines[0].starts_with("  cn0001: word word"));
        assert!(lines[1].starts_with("    word"));
        assert!(lines[2].ends_with(" ..."));
        assert_eq!(wrap("  a: ", "short one", 4, 100, 3), "  a: short one\n");
    }
}
