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
    ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} servers, ETA {eta} {msg}",
    )
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
    fn draw(&self, rows: &[(ServerUuid, String)], done: usize, _total: usize) {
        self.overall.set_position(done as u64);
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
        let _ = self.multi.println(line);
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
