//! The live display's terminal: indicatif on stderr, the terminal's size,
//! and taking the bars off the screen while a question is asked (so the
//! next redraw cannot wipe the question, nor an ETA tick over it).

use std::collections::BTreeMap;
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::progress::Terminal;
use agentsadm_types::ids::ServerUuid;

/// The terminal's size on stderr (rows, columns), when it is one.
pub fn term_size() -> Option<(usize, usize)> {
    // SAFETY: TIOCGWINSZ fills a winsize struct; the pointer is valid for
    // the call and the descriptor is only read.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row as usize, ws.ws_col as usize))
}

/// indicatif on stderr: one overall bar, one line per row.
pub(crate) struct IndicatifTerminal {
    multi: MultiProgress,
    overall: ProgressBar,
    bars: Mutex<BTreeMap<ServerUuid, ProgressBar>>,
}

fn overall_style() -> ProgressStyle {
    ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} servers, ETA {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

fn server_style() -> ProgressStyle {
    ProgressStyle::with_template("  {spinner} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl IndicatifTerminal {
    pub(crate) fn new(total: usize) -> IndicatifTerminal {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(total as u64));
        overall.set_style(overall_style());
        overall.enable_steady_tick(std::time::Duration::from_millis(250));
        IndicatifTerminal {
            multi,
            overall,
            bars: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Terminal for IndicatifTerminal {
    fn draw(
        &self,
        rows: &[(ServerUuid, String)],
        done: usize,
        _total: usize,
        eta: Option<std::time::Duration>,
    ) {
        self.overall.set_position(done as u64);
        // The run's own estimate (waves of servers), not indicatif's.
        self.overall.set_message(super::progress::Eta::show(eta));
        let Ok(mut bars) = self.bars.lock() else {
            return;
        };
        let live: Vec<ServerUuid> = rows.iter().map(|(u, _)| *u).collect();
        bars.retain(|u, bar| {
            let keep = live.contains(u);
            if !keep {
                bar.finish_and_clear();
                self.multi.remove(bar);
            }
            keep
        });
        for (u, line) in rows {
            let bar = bars.entry(*u).or_insert_with(|| {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(server_style());
                bar
            });
            bar.set_message(line.clone());
            bar.tick();
        }
    }

    fn println(&self, line: &str) {
        // Not indicatif's own println: it keeps printed text as rows of
        // its block, and when text and bars together outgrow the screen
        // it loses count and leaves a stale bar behind (an interrupt's
        // four-row line left `1/61 servers, ETA 12m` on an 80x24 screen).
        // Taking the bars off, printing, and drawing them again keeps its
        // count to the bars alone; lines are folded to the width so none
        // wraps under it either.
        let text = match term_size() {
            Some((_, columns)) => fold(line, columns.saturating_sub(1).max(20)),
            None => line.to_string(),
        };
        self.multi.suspend(|| eprintln!("{text}"));
    }

    fn hide(&self) {
        let _ = self.multi.clear();
        self.multi.set_draw_target(ProgressDrawTarget::hidden());
    }

    fn show(&self) {
        self.multi.set_draw_target(ProgressDrawTarget::stderr());
    }

    fn clear(&self) {
        if let Ok(mut bars) = self.bars.lock() {
            for bar in bars.values() {
                bar.finish_and_clear();
            }
            bars.clear();
        }
        self.overall.finish_and_clear();
        let _ = self.multi.clear();
    }

    fn size(&self) -> Option<(usize, usize)> {
        term_size()
    }
}

/// `text` in lines of at most `width` characters, broken at spaces where
/// a line has one (a word longer than the line is cut).
pub(crate) fn fold(text: &str, width: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut current = String::new();
        for word in line.split(' ') {
            let (len, word_len) = (current.chars().count(), word.chars().count());
            if len > 0 && len + 1 + word_len > width {
                out.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
            while current.chars().count() > width {
                let head: String = current.chars().take(width).collect();
                current = current.chars().skip(width).collect();
                out.push(head);
            }
        }
        out.push(current);
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::fold;

    #[test]
    fn printed_lines_never_reach_the_last_column() {
        let text = "interrupted: no further servers will be started; 20 in flight (cn0002, cn0003, cn0004, cn0005 and 16 more)";
        let folded = fold(text, 40);
        assert!(folded.lines().all(|l| l.chars().count() <= 40), "{folded}");
        assert_eq!(folded.replace('\n', " "), text);
        assert_eq!(fold("short", 40), "short");
        assert_eq!(fold(&"x".repeat(50), 20).lines().count(), 3);
        assert_eq!(fold("a\nb", 20), "a\nb");
    }
}
