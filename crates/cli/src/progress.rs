//! Progress on the command line, drawn from the executor's events: the
//! only place that knows indicatif (the library only emits
//! [`ExecEvent`]s to a [`Reporter`]).
//!
//! - On a terminal: one overall bar (servers done / total, ETA) and one
//!   line per active server (its current component and step, elapsed),
//!   with failures and outlier warnings printed above the bars.
//! - Otherwise (pipe, `--json`, `-q`): plain lines on stderr, one per
//!   finished server plus warnings; `-q` keeps only failures and warnings.
//!
//! Everything goes to stderr: stdout carries the plan, the summary or the
//! one JSON document.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use agentsadm_orchestrate::report::ExecEvent;
use agentsadm_orchestrate::report::Reporter;
use agentsadm_orchestrate::report::ServerOutcome;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::report::fmt_duration;
use agentsadm_types::ids::ServerUuid;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    Bars,
    Lines,
    /// Only failures and warnings.
    Quiet,
}

impl ProgressMode {
    /// Bars on an interactive stderr (unless `no_progress`:
    /// `AGENTSADM_NO_PROGRESS` is set); lines otherwise; quiet with `-q`.
    pub fn detect(json: bool, quiet: bool, no_progress: bool) -> ProgressMode {
        use std::io::IsTerminal;
        if quiet {
            ProgressMode::Quiet
        } else if !json && std::io::stderr().is_terminal() && !no_progress {
            ProgressMode::Bars
        } else {
            ProgressMode::Lines
        }
    }
}

/// One server in flight: what it is doing and since when. Times come from
/// tokio's clock, so tests pause and advance it.
#[derive(Clone, Debug)]
struct Row {
    hostname: String,
    step: String,
    started: Instant,
    /// Flagged slow: what it was compared with (`median 633ms`,
    /// `expected 1m00s`).
    outlier: Option<String>,
}

/// The live rows, one per server in flight, rendered for a given instant.
#[derive(Debug, Default)]
pub struct LiveRows {
    rows: BTreeMap<ServerUuid, Row>,
}

impl LiveRows {
    fn start(&mut self, server: ServerUuid, hostname: &str, now: Instant) {
        self.rows.insert(
            server,
            Row {
                hostname: hostname.to_string(),
                step: "starting".to_string(),
                started: now,
                outlier: None,
            },
        );
    }

    fn step(&mut self, server: ServerUuid, step: String) {
        if let Some(r) = self.rows.get_mut(&server) {
            r.step = step;
        }
    }

    fn outlier(&mut self, server: ServerUuid, reference: String) {
        if let Some(r) = self.rows.get_mut(&server) {
            r.outlier = Some(reference);
        }
    }

    fn finish(&mut self, server: &ServerUuid) {
        self.rows.remove(server);
    }

    /// One line per server in flight, in hostname order: hostname, whole
    /// seconds elapsed, current step, and a `SLOW` mark on an outlier
    /// (yellow where `color`). With the terminal's `size` (rows, columns),
    /// lines are cut to its width and the rows that do not fit under the
    /// overall bar are one last line, `+N more running` (keyed by
    /// [`MORE_ROWS`]), instead of being cut off by the terminal.
    pub fn render(
        &self,
        now: Instant,
        color: bool,
        size: Option<(usize, usize)>,
    ) -> Vec<(ServerUuid, String)> {
        let mut rows: Vec<(&str, ServerUuid, String, bool)> = self
            .rows
            .iter()
            .map(|(u, r)| {
                let elapsed = fmt_elapsed(now.saturating_duration_since(r.started));
                let mut line = format!("{:<24} {elapsed:>6}  {}", r.hostname, r.step);
                if let Some(reference) = &r.outlier {
                    line = format!("{line}  SLOW ({reference})");
                }
                (r.hostname.as_str(), *u, line, r.outlier.is_some())
            })
            .collect();
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        // The overall bar, and one line free for the cursor.
        let fits = size.map(|(h, _)| h.saturating_sub(2).max(1));
        let hidden = match fits {
            Some(n) if rows.len() > n => rows.len() - (n - 1),
            _ => 0,
        };
        let width = size.map(|(_, w)| w.saturating_sub(5).max(20));
        let cut = |line: String| match width {
            Some(w) if line.chars().count() > w => line.chars().take(w).collect(),
            _ => line,
        };
        let mut out: Vec<(ServerUuid, String)> = rows
            .into_iter()
            .take(rows_len_shown(hidden, fits))
            .map(|(_, u, line, slow)| {
                let line = cut(line);
                if slow && color {
                    (u, format!("\x1b[33m{line}\x1b[0m"))
                } else {
                    (u, line)
                }
            })
            .collect();
        if hidden > 0 {
            out.push((MORE_ROWS, format!("+{hidden} more running")));
        }
        out
    }
}

/// The key of the `+N more running` line.
pub const MORE_ROWS: ServerUuid = ServerUuid::from_u128(0);

/// How many rows are drawn: all, or those that fit beside the `+N more`
/// line.
fn rows_len_shown(hidden: usize, fits: Option<usize>) -> usize {
    match fits {
        Some(n) if hidden > 0 => n - 1,
        _ => usize::MAX,
    }
}

/// Whole seconds, as a live row shows them: `7s`, `3m05s`, `1h02m`.
pub fn fmt_elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s / 60) % 60)
    }
}

/// Where the live display draws: indicatif on a real terminal, a recorder
/// in tests.
pub trait Terminal: Send + Sync {
    /// Replace the live rows (one per server in flight) and the overall
    /// line's counts.
    /// `eta` is the time left as [`Eta`] estimates it (`None`: no server
    /// finished yet, nothing to go by).
    fn draw(&self, rows: &[(ServerUuid, String)], done: usize, total: usize, eta: Option<Duration>);
    /// A line printed above the live rows.
    fn println(&self, line: &str);
    /// Take the live rows off the screen.
    fn clear(&self);
    /// Take the rows off the screen and draw nothing until [`Terminal::show`]
    /// (a question is being asked under them).
    fn hide(&self) {}
    /// Draw again after [`Terminal::hide`].
    fn show(&self) {}
    /// Run `f` (which prints) with the rows off the screen, then draw
    /// them again below what it printed.
    fn around(&self, f: &mut dyn FnMut()) {
        f()
    }
    /// The terminal's rows and columns, when known: rows beyond what fits
    /// are counted in one line rather than cut off by the terminal.
    fn size(&self) -> Option<(usize, usize)> {
        None
    }
}

/// The time a run has left, from the servers finished so far: their mean
/// time, once per wave of `concurrency` servers still to finish. indicatif's
/// own estimate knew neither the waves nor the pauses: it said `ETA 0s`
/// before the first server finished and `ETA 12m` for a 10 s remainder
/// after a canary question.
#[derive(Clone, Copy, Debug, Default)]
pub struct Eta {
    pub concurrency: usize,
    finished: usize,
    sum: Duration,
    /// When the last server finished: the estimate counts down from it.
    last: Option<Instant>,
}

impl Eta {
    /// One more server finished, after `elapsed`.
    pub fn finished(&mut self, elapsed: Duration, now: Instant) {
        self.finished += 1;
        self.sum += elapsed;
        self.last = Some(now);
    }

    /// The time left at `now` for `remaining` servers; `None` before any
    /// finished.
    pub fn left(&self, remaining: usize, now: Instant) -> Option<Duration> {
        let last = self.last?;
        let mean = self.sum / self.finished.max(1) as u32;
        let waves = remaining.div_ceil(self.concurrency.max(1));
        Some((mean * waves as u32).saturating_sub(now.saturating_duration_since(last)))
    }

    /// A question was on the screen until `now`: the countdown starts
    /// again from here (the servers did not move while it waited).
    pub fn resumed(&mut self, now: Instant) {
        if self.last.is_some() {
            self.last = Some(now);
        }
    }

    /// As the bar shows it: whole seconds, minutes beyond one.
    pub fn show(left: Option<Duration>) -> String {
        let Some(left) = left else {
            return "-".to_string();
        };
        let secs = left.as_secs_f64().ceil() as u64;
        match secs {
            0..60 => format!("{secs}s"),
            _ => format!("{}m{:02}s", secs / 60, secs % 60),
        }
    }
}

/// How often every live row is redrawn, whether or not anything happened.
pub const TICK: Duration = Duration::from_secs(1);

struct Live {
    term: Arc<dyn Terminal>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

struct State {
    rows: LiveRows,
    done: usize,
    total: usize,
    eta: Eta,
    color: bool,
    /// A question is on the screen: nothing is drawn.
    paused: bool,
}

/// A [`Reporter`] for the command line.
pub struct CliProgress {
    mode: ProgressMode,
    verb: &'static str,
    state: Arc<Mutex<State>>,
    live: Arc<Mutex<Option<Live>>>,
    /// A terminal given by the caller (tests) instead of indicatif.
    term: Option<Arc<dyn Terminal>>,
}

/// The live display as the run's operator uses it while servers run:
/// lines above the bars, and the bars off the screen while a question is
/// asked (a redraw would wipe the question; an ETA would tick over it).
#[derive(Clone)]
pub struct Display {
    state: Arc<Mutex<State>>,
    live: Arc<Mutex<Option<Live>>>,
}

impl Display {
    /// Whether bars are on the screen (a run in progress, in a terminal).
    pub fn is_live(&self) -> bool {
        self.live.lock().is_ok_and(|l| l.is_some())
    }

    /// A line above the bars (or on stderr when there are none).
    pub fn println(&self, line: &str) {
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            l.term.println(line);
            return;
        }
        eprintln!("{line}");
    }

    /// Run `f`, which prints (on stdout or stderr), with the bars off the
    /// screen: a line printed under them would leave a copy of them behind.
    pub fn around(&self, mut f: impl FnMut()) {
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            l.term.around(&mut f);
            return;
        }
        f();
    }

    /// Take the bars off the screen and draw nothing until
    /// [`Display::resume`]: what is printed meanwhile stays.
    pub fn suspend(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.paused = true;
        }
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            l.term.hide();
        }
    }

    /// Draw the bars again, below whatever was printed while suspended.
    pub fn resume(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.paused = false;
            s.eta.resumed(Instant::now());
        }
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            l.term.show();
            draw(&self.state, l.term.as_ref());
        }
    }
}

impl CliProgress {
    /// `verb` names the operation in lines ("update", "install", "remove").
    pub fn new(mode: ProgressMode, verb: &'static str) -> CliProgress {
        CliProgress {
            mode,
            verb,
            state: Arc::new(Mutex::new(State {
                rows: LiveRows::default(),
                done: 0,
                total: 0,
                eta: Eta::default(),
                color: agentsadm_types::output::colour_on_stderr(),
                paused: false,
            })),
            live: Arc::new(Mutex::new(None)),
            term: None,
        }
    }

    /// The display, for the run's operator (questions, notes).
    pub fn display(&self) -> Display {
        Display {
            state: self.state.clone(),
            live: self.live.clone(),
        }
    }

    /// Live rows drawn on `term` (a test's recorder), coloured if `color`.
    pub fn with_terminal(verb: &'static str, term: Arc<dyn Terminal>, color: bool) -> CliProgress {
        let mut p = CliProgress::new(ProgressMode::Bars, verb);
        if let Ok(mut s) = p.state.lock() {
            s.color = color;
        }
        p.term = Some(term);
        p
    }

    fn line(&self, text: &str) {
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            l.term.println(text);
            return;
        }
        eprintln!("{text}");
    }

    fn count(&self) -> (usize, usize) {
        self.state
            .lock()
            .map(|s| (s.done, s.total))
            .unwrap_or((0, 0))
    }

    fn redraw(&self) {
        if let Ok(l) = self.live.lock()
            && let Some(l) = l.as_ref()
        {
            draw(&self.state, l.term.as_ref());
        }
    }
}

fn draw(state: &Mutex<State>, term: &dyn Terminal) {
    let Ok(s) = state.lock() else { return };
    if s.paused {
        return;
    }
    let rows = s.rows.render(Instant::now(), s.color, term.size());
    let (done, total) = (s.done, s.total);
    let eta = s.eta.left(total.saturating_sub(done), Instant::now());
    drop(s);
    term.draw(&rows, done, total, eta);
}

impl CliProgress {
    /// The run started: the bars (and their ticker), or a first line.
    fn started(&self, servers: usize, concurrency: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.done = 0;
            s.total = servers;
            s.eta = Eta {
                concurrency: concurrency.max(1),
                ..Eta::default()
            };
        }
        if self.mode == ProgressMode::Bars {
            let term: Arc<dyn Terminal> = match &self.term {
                Some(t) => t.clone(),
                None => Arc::new(crate::terminal::IndicatifTerminal::new(servers)),
            };
            // Every row is redrawn each second, so a server stuck
            // in one step still shows its time growing.
            let ticker = tokio::runtime::Handle::try_current().ok().map(|h| {
                let state = self.state.clone();
                let term = term.clone();
                h.spawn(async move {
                    let mut every = tokio::time::interval(TICK);
                    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        every.tick().await;
                        draw(&state, term.as_ref());
                    }
                })
            });
            if let Ok(mut l) = self.live.lock() {
                *l = Some(Live { term, ticker });
            }
        } else if self.mode == ProgressMode::Lines && servers > 0 {
            eprintln!(
                "{}: {}, {concurrency} at a time",
                self.verb,
                agentsadm_types::output::plural(servers, "server", "servers")
            );
        }
    }

    /// One server ended: its bar goes; a line says how it ended.
    fn server_finished(&self, server: &ServerUuid, outcome: &ServerOutcome) {
        let (n, total) = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.done += 1;
            s.eta.finished(outcome.elapsed, Instant::now());
            s.rows.finish(server);
            (s.done, s.total)
        };
        self.redraw();
        let label = format!("{} ({server})", outcome.hostname);
        match outcome.status {
            ServerStatus::Succeeded => {
                if self.mode == ProgressMode::Lines {
                    let steps: Vec<String> = outcome
                        .steps
                        .iter()
                        .map(|s| format!("{} {}", s.component, fmt_duration(s.elapsed)))
                        .collect();
                    let what = if steps.is_empty() {
                        "SAPI only".to_string()
                    } else {
                        steps.join(", ")
                    };
                    eprintln!("[{n}/{total}] {label}: ok ({what})");
                }
            }
            _ => {
                let why = outcome
                    .failure
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| outcome.status.as_str().to_string());
                self.line(&format!(
                    "[{n}/{total}] {label}: {}: {why}",
                    outcome.status.as_str()
                ));
            }
        }
    }
}

/// What an interrupt leaves: the servers in flight and what happens next.
fn interrupted_text(
    in_flight: &[agentsadm_orchestrate::report::InFlight],
    waiting: bool,
) -> String {
    let mut text = "interrupted: no further servers will be started".to_string();
    if in_flight.is_empty() {
        text.push_str("; run the same command again to finish");
    } else {
        // One line on the screen: a few hostnames, never every task id
        // (20 of them made a paragraph); the ids are in the run log and
        // the summary.
        const SHOWN: usize = 4;
        let mut names: Vec<&str> = in_flight.iter().map(|f| f.hostname.as_str()).collect();
        names.sort_unstable();
        let mut shown = names
            .iter()
            .take(SHOWN)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > SHOWN {
            shown.push_str(&format!(" and {} more", names.len() - SHOWN));
        }
        let tasks: usize = in_flight.iter().map(|f| f.tasks.len()).sum();
        text.push_str(&format!(
            "; {} in flight ({shown}), whose {} may still complete on their own{}",
            in_flight.len(),
            agentsadm_types::output::plural(tasks, "CNAPI task", "CNAPI tasks"),
            if tasks == 0 {
                String::new()
            } else {
                " (task ids in the run log and the summary)".to_string()
            }
        ));
        if waiting {
            text.push_str("; waiting for them to finish (press Ctrl-C again to stop waiting)");
        } else {
            text.push_str("; run the same command again to finish");
        }
    }
    text
}

impl Reporter for CliProgress {
    fn event(&self, event: &ExecEvent<'_>) {
        match event {
            ExecEvent::Started {
                servers,
                concurrency,
                ..
            } => self.started(*servers, *concurrency),
            ExecEvent::ServerStarted { server, hostname } => {
                if let Ok(mut s) = self.state.lock() {
                    s.rows.start(*server, hostname, Instant::now());
                }
                self.redraw();
            }
            ExecEvent::StepStarted { server, step, .. } => {
                if let Ok(mut s) = self.state.lock() {
                    s.rows.step(
                        *server,
                        format!("{} {}", step.component, step.action.verb()),
                    );
                }
                self.redraw();
            }
            ExecEvent::StepFinished { .. } => {}
            ExecEvent::ServerFinished { server, outcome } => self.server_finished(server, outcome),
            ExecEvent::Outlier(o) => {
                if let Ok(mut s) = self.state.lock() {
                    s.rows.outlier(o.server, o.reference());
                }
                self.redraw();
                self.line(&format!(
                    "warning: {} ({}) is slow: {}",
                    o.hostname,
                    o.server,
                    o.describe()
                ));
            }
            ExecEvent::StragglersAbandoned { servers } => {
                let mut names: Vec<&str> = servers.iter().map(|(_, h)| h.as_str()).collect();
                names.sort_unstable();
                self.line(&format!(
                    "warning: stopped waiting for {} straggler{}: {}",
                    servers.len(),
                    if servers.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ));
            }
            ExecEvent::Interrupted { in_flight, waiting } => {
                self.line(&interrupted_text(in_flight, *waiting));
            }
            ExecEvent::StoppedWaiting { in_flight } => {
                let mut names: Vec<&str> = in_flight.iter().map(|f| f.hostname.as_str()).collect();
                names.sort_unstable();
                self.line(&format!(
                    "stopped waiting for {} server{} still in flight ({}): they may still complete; run the same command again to finish or confirm",
                    in_flight.len(),
                    if in_flight.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ));
            }
            ExecEvent::Stopping(h) => self.line(&format!("warning: {h}")),
            ExecEvent::Paused {
                api,
                noticed,
                bound,
            } => self.line(&agentsadm_orchestrate::report::paused_text(
                *api, noticed, *bound,
            )),
            ExecEvent::Resumed { api, after } => self.line(&format!(
                "{api} answers again after {}: carrying on",
                agentsadm_orchestrate::report::fmt_duration(*after)
            )),
            ExecEvent::Finished(_) => {
                if let Ok(mut l) = self.live.lock()
                    && let Some(l) = l.take()
                {
                    if let Some(t) = l.ticker {
                        t.abort();
                    }
                    l.term.clear();
                }
                let (n, total) = self.count();
                if self.mode == ProgressMode::Lines && n < total {
                    eprintln!("{}: {n} of {total} servers finished", self.verb);
                }
            }
        }
    }
}

impl Drop for CliProgress {
    /// A run that ended without its last event (an error) leaves no bar
    /// behind on the screen.
    fn drop(&mut self) {
        if let Ok(mut l) = self.live.lock()
            && let Some(l) = l.take()
        {
            if let Some(t) = l.ticker {
                t.abort();
            }
            l.term.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_orchestrate::outlier::Outlier;
    use agentsadm_plan::{Action, ImageRef, Step, TransportKind};
    use agentsadm_types::catalog::OrderClass;
    use agentsadm_types::ids::ImageUuid;

    fn server_uuid(i: u128) -> ServerUuid {
        ServerUuid::from_u128(0x5e000000_0000_4000_8000_000000000000 | i)
    }

    /// Records every frame the display draws.
    #[derive(Default)]
    struct Recorder {
        frames: Mutex<Vec<Vec<String>>>,
        printed: Mutex<Vec<String>>,
    }

    impl Recorder {
        fn last(&self) -> Vec<String> {
            self.frames
                .lock()
                .unwrap()
                .last()
                .cloned()
                .unwrap_or_default()
        }
        fn count(&self) -> usize {
            self.frames.lock().unwrap().len()
        }
    }

    impl Terminal for Recorder {
        fn draw(
            &self,
            rows: &[(ServerUuid, String)],
            _done: usize,
            _total: usize,
            _eta: Option<Duration>,
        ) {
            let rows = rows.iter().map(|(_, l)| l.clone()).collect();
            self.frames.lock().unwrap().push(rows);
        }
        fn println(&self, line: &str) {
            self.printed.lock().unwrap().push(line.to_string());
        }
        fn clear(&self) {}
    }

    fn upgrade_step() -> Step {
        let image = |n: u128, version: &str| ImageRef {
            uuid: ImageUuid::from_u128(n),
            name: "vm-agent".into(),
            version: version.into(),
            import_from: None,
        };
        let (from, to) = (image(1, "1.0.0"), image(2, "1.1.0"));
        Step {
            component: "vm-agent".parse().unwrap(),
            order: OrderClass::ParallelSafe,
            action: Action::Upgrade {
                from: agentsadm_plan::types::InstalledRef {
                    version: from.version.parse().unwrap(),
                    image: Some(from.uuid),
                },
                to,
            },
            transport: TransportKind::InstallAgent,
            gate: agentsadm_plan::Gate::GzHealth,
            keep_off: None,
            record: None,
            needs_agentsadm: None,
            needed_by: Vec::new(),
        }
    }

    /// Move the clock 100 ms at a time, letting the ticker task run.
    async fn advance(d: Duration) {
        let step = Duration::from_millis(100);
        let mut left = d;
        while !left.is_zero() {
            let by = left.min(step);
            tokio::time::advance(by).await;
            left -= by;
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rows_tick_every_second_and_mark_outliers() {
        let step = upgrade_step();
        let term = Arc::new(Recorder::default());
        let p = CliProgress::with_terminal("update", term.clone(), false);
        let (a, b) = (server_uuid(1), server_uuid(2));
        p.event(&ExecEvent::Started {
            servers: 2,
            steps: 2,
            concurrency: 2,
        });
        p.event(&ExecEvent::ServerStarted {
            server: b,
            hostname: "cn0002",
        });
        p.event(&ExecEvent::ServerStarted {
            server: a,
            hostname: "cn0001",
        });
        // A new row shows a step from the start.
        let first = term.last();
        assert_eq!(first.len(), 2);
        assert!(first[0].starts_with("cn0001"), "{first:?}");
        assert!(first[0].contains("0s  starting"), "{first:?}");
        p.event(&ExecEvent::StepStarted {
            server: a,
            hostname: "cn0001",
            step: &step,
        });
        assert!(term.last()[0].contains("0s  vm-agent upgrade"));

        // Nothing happens on the servers for 3 seconds: the rows still
        // tick, once a second.
        let before = term.count();
        advance(Duration::from_millis(3_100)).await;
        assert!(
            term.count() - before >= 3,
            "{} frames",
            term.count() - before
        );
        let rows = term.last();
        assert!(rows[0].contains("3s  vm-agent upgrade"), "{rows:?}");
        assert!(rows[1].starts_with("cn0002") && rows[1].contains("3s  starting"));

        // The slow one is marked in its own row.
        p.event(&ExecEvent::Outlier(&Outlier {
            server: b,
            hostname: "cn0002".into(),
            elapsed: Duration::from_secs(3),
            median: Duration::from_millis(633),
            basis: Default::default(),
        }));
        advance(Duration::from_secs(62)).await;
        let rows = term.last();
        assert!(rows[0].contains("1m05s  vm-agent upgrade") && !rows[0].contains("SLOW"));
        assert!(
            rows[1].contains("1m05s  starting  SLOW (median 633ms)"),
            "{rows:?}"
        );
        assert!(!rows[1].contains('\x1b'), "no colour when asked for none");
        // The row and the warning name the same time.
        let printed = term.printed.lock().unwrap()[0].clone();
        assert!(
            printed.contains("cn0002") && printed.ends_with("the median server took 633ms"),
            "{printed}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn outlier_rows_are_coloured_and_interruption_names_servers() {
        let term = Arc::new(Recorder::default());
        let p = CliProgress::with_terminal("update", term.clone(), true);
        let a = server_uuid(1);
        p.event(&ExecEvent::Started {
            servers: 3,
            steps: 3,
            concurrency: 3,
        });
        p.event(&ExecEvent::ServerStarted {
            server: a,
            hostname: "cn0001",
        });
        p.event(&ExecEvent::Outlier(&Outlier {
            server: a,
            hostname: "cn0001".into(),
            elapsed: Duration::from_secs(3),
            median: Duration::from_secs(1),
            basis: Default::default(),
        }));
        assert!(term.last()[0].starts_with("\x1b[33m"));
        let task = agentsadm_types::ids::TaskId::from_u128(7);
        let in_flight = [agentsadm_orchestrate::report::InFlight {
            server: a,
            hostname: "cn0001".into(),
            elapsed: Duration::from_secs(3),
            tasks: vec![agentsadm_orchestrate::transport::TaskRef {
                component: "vm-agent".into(),
                task,
                waiting: true,
            }],
        }];
        p.event(&ExecEvent::Interrupted {
            in_flight: &in_flight,
            waiting: true,
        });
        let printed = term.printed.lock().unwrap().clone();
        let last = printed.last().unwrap();
        assert!(
            last.contains("1 in flight (cn0001), whose 1 CNAPI task may still complete")
                && last.contains("task ids in the run log")
                && !last.contains(&task.to_string())
                && last.contains("press Ctrl-C again to stop waiting"),
            "{last}"
        );
        p.event(&ExecEvent::StoppedWaiting {
            in_flight: &in_flight,
        });
        let printed = term.printed.lock().unwrap().clone();
        let last = printed.last().unwrap();
        assert!(
            last.contains("stopped waiting for 1 server still in flight (cn0001)")
                && last.contains("may still complete"),
            "{last}"
        );
    }

    /// Ctrl-C with 20 servers in flight: one line naming four, not a
    /// paragraph of 20 task ids.
    #[test]
    fn an_interrupt_with_many_in_flight_is_one_short_line() {
        let in_flight: Vec<agentsadm_orchestrate::report::InFlight> = (1..=20u128)
            .map(|n| agentsadm_orchestrate::report::InFlight {
                server: ServerUuid::from_u128(n),
                hostname: format!("cn{n:04}"),
                elapsed: Duration::from_secs(3),
                tasks: vec![agentsadm_orchestrate::transport::TaskRef {
                    component: "vm-agent".into(),
                    task: agentsadm_types::ids::TaskId::from_u128(n),
                    waiting: true,
                }],
            })
            .collect();
        let text = super::interrupted_text(&in_flight, true);
        assert_eq!(
            text,
            "interrupted: no further servers will be started; 20 in flight (cn0001, cn0002, cn0003, cn0004 and 16 more), whose 20 CNAPI tasks may still complete on their own (task ids in the run log and the summary); waiting for them to finish (press Ctrl-C again to stop waiting)"
        );
    }

    #[test]
    fn rows_that_do_not_fit_are_counted_not_cut_off() {
        // -j 40 at 80x24: 22 lines under the bar, so 21 rows and
        // "+19 more running"; every line within the width.
        let now = Instant::now();
        let mut rows = LiveRows::default();
        for i in 1..=40 {
            rows.start(server_uuid(i), &format!("cn{i:04}"), now);
            rows.step(server_uuid(i), "vm-agent upgrade".into());
        }
        rows.outlier(server_uuid(1), "median 633ms".into());
        let lines = rows.render(now, false, Some((24, 80)));
        assert_eq!(lines.len(), 22);
        assert_eq!(
            lines[0].1,
            "cn0001                       0s  vm-agent upgrade  SLOW (median 633ms)"
        );
        assert_eq!(lines[20].1.split_whitespace().next(), Some("cn0021"));
        assert_eq!(lines[21], (MORE_ROWS, "+19 more running".to_string()));
        assert!(lines.iter().all(|(_, l)| l.chars().count() <= 75));
        // A narrow terminal cuts lines rather than wrapping them.
        let narrow = rows.render(now, false, Some((24, 40)));
        assert!(narrow.iter().all(|(_, l)| l.chars().count() <= 35));
        // All rows fit: no count line; no terminal: every row.
        assert_eq!(rows.render(now, false, Some((60, 80))).len(), 40);
        assert_eq!(rows.render(now, false, None).len(), 40);
    }

    #[test]
    fn the_eta_counts_waves_from_the_servers_finished_and_counts_down() {
        let t0 = Instant::now();
        let mut eta = Eta {
            concurrency: 20,
            ..Eta::default()
        };
        // Nothing finished: nothing to go by (indicatif said `0s`).
        assert_eq!(eta.left(60, t0), None);
        assert_eq!(Eta::show(eta.left(60, t0)), "-");
        // The canary took 3 s: 60 servers left are 3 waves of 20, 9 s
        // (indicatif said 12m, a server at a time).
        eta.finished(Duration::from_secs(3), t0);
        assert_eq!(eta.left(60, t0), Some(Duration::from_secs(9)));
        assert_eq!(eta.left(61, t0), Some(Duration::from_secs(12)));
        // It counts down between finishes...
        assert_eq!(
            eta.left(60, t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(5))
        );
        // ...but not while a question waited.
        eta.resumed(t0 + Duration::from_secs(30));
        assert_eq!(
            eta.left(60, t0 + Duration::from_secs(31)),
            Some(Duration::from_secs(8))
        );
        assert_eq!(Eta::show(Some(Duration::from_millis(7_200))), "8s");
        assert_eq!(Eta::show(Some(Duration::from_secs(125))), "2m05s");
        assert_eq!(Eta::show(Some(Duration::ZERO)), "0s");
    }

    #[test]
    fn elapsed_is_whole_seconds() {
        assert_eq!(fmt_elapsed(Duration::from_millis(999)), "0s");
        assert_eq!(fmt_elapsed(Duration::from_secs(65)), "1m05s");
        assert_eq!(fmt_elapsed(Duration::from_secs(3720)), "1h02m");
    }
}
