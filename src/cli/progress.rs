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
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ids::ServerUuid;
use crate::orchestrate::report::{ExecEvent, Reporter, ServerStatus, fmt_duration};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    Bars,
    Lines,
    /// Only failures and warnings.
    Quiet,
}

impl ProgressMode {
    /// Bars on an interactive stderr; lines otherwise; quiet with `-q`.
    pub fn detect(json: bool, quiet: bool) -> ProgressMode {
        use std::io::IsTerminal;
        if quiet {
            ProgressMode::Quiet
        } else if !json
            && std::io::stderr().is_terminal()
            && std::env::var_os("AGENTSADM_NO_PROGRESS").is_none()
        {
            ProgressMode::Bars
        } else {
            ProgressMode::Lines
        }
    }
}

struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    servers: BTreeMap<ServerUuid, ProgressBar>,
}

/// A [`Reporter`] for the command line.
pub struct CliProgress {
    mode: ProgressMode,
    verb: &'static str,
    bars: Mutex<Option<Bars>>,
    done: Mutex<(usize, usize)>,
}

impl CliProgress {
    /// `verb` names the operation in lines ("update", "install", "remove").
    pub fn new(mode: ProgressMode, verb: &'static str) -> CliProgress {
        CliProgress {
            mode,
            verb,
            bars: Mutex::new(None),
            done: Mutex::new((0, 0)),
        }
    }

    fn line(&self, text: &str) {
        if let Ok(b) = self.bars.lock()
            && let Some(b) = b.as_ref()
        {
            let _ = b.multi.println(text);
            return;
        }
        eprintln!("{text}");
    }

    fn count(&self) -> (usize, usize) {
        self.done.lock().map(|d| *d).unwrap_or((0, 0))
    }
}

fn overall_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} servers, ETA {eta} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn server_style() -> ProgressStyle {
    ProgressStyle::with_template("  {spinner} {prefix:24} {elapsed:>4} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Reporter for CliProgress {
    fn event(&self, event: &ExecEvent<'_>) {
        match event {
            ExecEvent::Started {
                servers,
                concurrency,
                ..
            } => {
                if let Ok(mut d) = self.done.lock() {
                    *d = (0, *servers);
                }
                if self.mode == ProgressMode::Bars {
                    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
                    let overall = multi.add(ProgressBar::new(*servers as u64));
                    overall.set_style(overall_style());
                    overall.enable_steady_tick(Duration::from_millis(250));
                    if let Ok(mut b) = self.bars.lock() {
                        *b = Some(Bars {
                            multi,
                            overall,
                            servers: BTreeMap::new(),
                        });
                    }
                } else if self.mode == ProgressMode::Lines {
                    eprintln!("{}: {servers} servers, {concurrency} at a time", self.verb);
                }
            }
            ExecEvent::ServerStarted { server, hostname } => {
                if let Ok(mut b) = self.bars.lock()
                    && let Some(b) = b.as_mut()
                {
                    let bar = b.multi.add(ProgressBar::new_spinner());
                    bar.set_style(server_style());
                    bar.set_prefix(hostname.to_string());
                    b.servers.insert(*server, bar);
                }
            }
            ExecEvent::StepStarted { server, step, .. } => {
                if let Ok(b) = self.bars.lock()
                    && let Some(bar) = b.as_ref().and_then(|b| b.servers.get(server))
                {
                    bar.set_message(format!("{} {}", step.component, step.action.verb()));
                    bar.tick();
                }
            }
            ExecEvent::StepFinished { .. } => {}
            ExecEvent::ServerFinished { server, outcome } => {
                let (n, total) = {
                    let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
                    d.0 += 1;
                    *d
                };
                if let Ok(mut b) = self.bars.lock()
                    && let Some(b) = b.as_mut()
                {
                    if let Some(bar) = b.servers.remove(server) {
                        bar.finish_and_clear();
                        b.multi.remove(&bar);
                    }
                    b.overall.inc(1);
                }
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
            ExecEvent::Outlier(o) => {
                self.line(&format!(
                    "warning: {} ({}) is slow: running for {}, the median server took {}",
                    o.hostname,
                    o.server,
                    fmt_duration(o.elapsed),
                    fmt_duration(o.median)
                ));
            }
            ExecEvent::StragglersAbandoned { servers } => {
                let names: Vec<&str> = servers.iter().map(|(_, h)| h.as_str()).collect();
                self.line(&format!(
                    "warning: stopped waiting for {} straggler{}: {}",
                    servers.len(),
                    if servers.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ));
            }
            ExecEvent::Interrupted => {
                self.line("interrupted: no further servers will be started; run the same command again to finish");
            }
            ExecEvent::Finished(_) => {
                if let Ok(mut b) = self.bars.lock()
                    && let Some(b) = b.take()
                {
                    for bar in b.servers.values() {
                        bar.finish_and_clear();
                    }
                    b.overall.finish_and_clear();
                    let _ = b.multi.clear();
                }
                let (n, total) = self.count();
                if self.mode == ProgressMode::Lines && n < total {
                    eprintln!("{}: {n} of {total} servers finished", self.verb);
                }
            }
        }
    }
}
