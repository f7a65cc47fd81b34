//! The live display's terminal: indicatif on stderr, the terminal's size,
//! and taking the bars off the screen while a question is asked (so the
//! next redraw cannot wipe the question, nor an ETA tick over it).

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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

/// indicatif on stderr: one bar, the overall line with the server rows
/// under it as lines of its message.
///
/// One bar, not a `MultiProgress` of a bar per server: adding and removing
/// bars while lines were printed above them lost indicatif its count of
/// the rows on the screen, and a copy of the overall line was left behind
/// (`1/41 servers, ETA 6s`, at every line printed mid-run on 80x24).
pub(crate) struct IndicatifTerminal {
    bar: Mutex<Option<ProgressBar>>,
    /// Control characters not echoed while the bars are up.
    echo: Mutex<Option<QuietControls>>,
    total: u64,
    started: std::time::Instant,
}

fn style(with_rows: bool) -> ProgressStyle {
    let template = if with_rows {
        "{elapsed_precise} [{wide_bar}] {pos}/{len} servers, ETA {prefix}\n{msg}"
    } else {
        "{elapsed_precise} [{wide_bar}] {pos}/{len} servers, ETA {prefix}"
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl IndicatifTerminal {
    pub(crate) fn new(total: usize) -> IndicatifTerminal {
        let t = IndicatifTerminal {
            bar: Mutex::new(None),
            echo: Mutex::new(None),
            total: total as u64,
            started: std::time::Instant::now(),
        };
        t.show();
        t
    }

    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) -> bool {
        match self.bar.lock() {
            Ok(bar) => match bar.as_ref() {
                Some(b) => {
                    f(b);
                    true
                }
                None => false,
            },
            Err(_) => false,
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
        let lines: Vec<String> = rows.iter().map(|(_, line)| format!("  {line}")).collect();
        self.with_bar(|bar| {
            bar.set_style(style(!lines.is_empty()));
            bar.set_position(done as u64);
            // The run's own estimate (waves of servers), not indicatif's.
            bar.set_prefix(super::progress::Eta::show(eta));
            bar.set_message(lines.join("\n"));
        });
    }

    fn println(&self, line: &str) {
        // Lines are folded to the width, so none wraps under the bar's
        // count of its rows either.
        let text = match term_size() {
            Some((_, columns)) => fold(line, columns.saturating_sub(1).max(20)),
            None => line.to_string(),
        };
        if !self.with_bar(|bar| bar.suspend(|| eprintln!("{text}"))) {
            eprintln!("{text}");
        }
    }

    fn hide(&self) {
        if let Ok(mut bar) = self.bar.lock()
            && let Some(b) = bar.take()
        {
            b.finish_and_clear();
        }
        if let Ok(mut echo) = self.echo.lock() {
            *echo = None;
        }
    }

    fn around(&self, f: &mut dyn FnMut()) {
        if !self.with_bar(|bar| bar.suspend(&mut *f)) {
            f();
        }
    }

    fn show(&self) {
        if let Ok(mut bar) = self.bar.lock()
            && bar.is_none()
        {
            let b = ProgressBar::with_draw_target(Some(self.total), ProgressDrawTarget::stderr())
                .with_style(style(false))
                .with_prefix("-")
                .with_elapsed(self.started.elapsed());
            b.enable_steady_tick(std::time::Duration::from_millis(250));
            *bar = Some(b);
            if let Ok(mut echo) = self.echo.lock() {
                *echo = QuietControls::on_stdin();
            }
        }
    }

    fn clear(&self) {
        self.hide();
    }

    fn size(&self) -> Option<(usize, usize)> {
        term_size()
    }
}

/// The terminal's `ECHOCTL` off while it lasts, back as it was when
/// dropped. A Ctrl-C typed under the bars is echoed by the terminal as
/// `^C` at the cursor, which moves it a line down behind indicatif's back:
/// the next redraw then left the bar's first line on the screen, stale.
/// The interrupt still works (ISIG is untouched); only its echo goes.
struct QuietControls {
    saved: libc::termios,
}

impl QuietControls {
    fn on_stdin() -> Option<QuietControls> {
        // SAFETY: isatty/tcgetattr/tcsetattr read and write a termios
        // struct owned here, on descriptor 0, which is only queried.
        unsafe {
            if libc::isatty(libc::STDIN_FILENO) != 1 {
                return None;
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0
                || saved.c_lflag & libc::ECHOCTL == 0
            {
                return None;
            }
            let mut quiet = saved;
            quiet.c_lflag &= !libc::ECHOCTL;
            (libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &quiet) == 0)
                .then_some(QuietControls { saved })
        }
    }
}

impl Drop for QuietControls {
    fn drop(&mut self) {
        // SAFETY: as above; `saved` is what tcgetattr returned.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.saved);
        }
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
