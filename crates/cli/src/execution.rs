//! What the commands that change the datacenter set up the same way around
//! the library's one run ([`agentsadm_orchestrate::run::Run`]):
//!
//! - [`Execution`]: the progress display (and the observer of an
//!   in-process run), as the run's reporter.
//! - [`CliOperator`]: the run's [`Operator`]: it shows plans the way each
//!   command renders them, asks on the terminal, continues after a passed
//!   canary wave with `-y` (or asks), and waits for servers in flight
//!   after a first Ctrl-C in a terminal.
//! - [`interrupted`]: Ctrl-C, which stops starting servers.
//! - [`run_error`]: a run's error as the command line reports it.

use std::borrow::Cow;
use std::future::Future;

use super::GlobalOpts;
use super::Tee;
use super::progress::CliProgress;
use super::progress::Display;
use super::progress::ProgressMode;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::InFlight;
use agentsadm_orchestrate::run::{AskError, Operator, RunError, RunOutcome, Shown};
use agentsadm_types::output::Output;

/// The last line of every `-n`: nothing was changed.
pub(crate) const DRY_RUN_NOTE: &str = "Dry run (-n): nothing was changed.";

/// A run that changed nothing, said alike by `adopt` and `server
/// delete|factory-reset`: the plan in `--json`, the dry-run note,
/// "Nothing was changed."; `Err` is its exit status. An executed run's
/// plan and report come back to be rendered by the command.
pub(crate) fn unless_executed<P: serde::Serialize>(
    out: Output,
    outcome: RunOutcome<P>,
) -> Result<(P, ExecReport), u8> {
    match outcome {
        RunOutcome::DryRun(plan) => {
            if out.json {
                out.json(&serde_json::json!({"plan": plan, "executed": false, "exit_status": 0}));
            } else {
                out.line(DRY_RUN_NOTE);
            }
            Err(0)
        }
        RunOutcome::Empty(plan) => {
            if out.json {
                out.json(&serde_json::json!({"plan": plan, "executed": false, "exit_status": 0}));
            }
            Err(0)
        }
        RunOutcome::Declined(_) => {
            out.line("Nothing was changed.");
            Err(1)
        }
        RunOutcome::Executed { planned, report } => Ok((planned, report)),
    }
}

/// How one run shows its progress.
pub(crate) struct Execution<'g> {
    progress: CliProgress,
    global: &'g GlobalOpts,
}

impl<'g> Execution<'g> {
    /// `verb` names the operation in progress lines ("update", "repair").
    pub(crate) fn new(g: &'g GlobalOpts, verb: &'static str) -> Execution<'g> {
        Execution {
            progress: CliProgress::new(ProgressMode::detect(g.json, g.quiet), verb),
            global: g,
        }
    }

    /// Where execution events go: the progress display, then the
    /// observer of an in-process run (the demo), if any.
    pub(crate) fn reporter(&self) -> Tee<'_> {
        self.global.reporter(&self.progress)
    }

    /// The live display, for the operator's questions while servers run.
    pub(crate) fn display(&self) -> Display {
        self.progress.display()
    }
}

/// Resolves when the operator presses Ctrl-C, or the process is told to
/// stop (SIGTERM: `kill`, an SMF stop; SIGHUP: the terminal went away):
/// every one ends a rollout the same way, with its summary and run-log
/// records, never silently. Never resolves where none can be caught.
pub(crate) async fn interrupted() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let stop = |kind: SignalKind| async move {
            match signal(kind) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = ctrl_c => {}
            () = stop(SignalKind::terminate()) => {
                tracing::warn!("SIGTERM received: stopping as for Ctrl-C");
            }
            () = stop(SignalKind::hangup()) => {
                tracing::warn!("SIGHUP received: stopping as for Ctrl-C");
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

type Show<'a, P> = Box<dyn Fn(&P, Shown) + Sync + 'a>;
type Question<'a, P> = Box<dyn Fn(&P) -> Result<Cow<'static, str>, AskError> + Sync + 'a>;

/// The command line as the run's operator. `show` renders a plan the
/// command's way; `question` is what to ask about it (or a refusal).
pub(crate) struct CliOperator<'a, P> {
    pub(crate) out: Output,
    pub(crate) show: Show<'a, P>,
    pub(crate) question: Question<'a, P>,
    /// The run's live display, taken off the screen while the canary
    /// question is asked.
    display: Option<Display>,
}

impl<'a, P> CliOperator<'a, P> {
    pub(crate) fn new(
        out: Output,
        show: impl Fn(&P, Shown) + Sync + 'a,
        question: impl Fn(&P) -> Result<Cow<'static, str>, AskError> + Sync + 'a,
    ) -> CliOperator<'a, P> {
        CliOperator {
            out,
            show: Box::new(show),
            question: Box::new(question),
            display: None,
        }
    }

    /// Ask the canary question with `display` off the screen.
    pub(crate) fn with_display(mut self, display: Display) -> Self {
        self.display = Some(display);
        self
    }

    /// `f` prints: with the live display's bars off the screen meanwhile.
    fn around(&self, f: impl FnMut()) {
        match &self.display {
            Some(d) => d.around(f),
            None => {
                let mut f = f;
                f()
            }
        }
    }
}

impl<P> Operator<P> for CliOperator<'_, P> {
    fn show(&self, planned: &P, shown: Shown) {
        (self.show)(planned, shown);
    }

    fn interactive(&self) -> bool {
        !self.out.json && super::orch::stdin_is_terminal()
    }

    fn ask(&self, planned: &P) -> impl Future<Output = Result<bool, AskError>> {
        let question = (self.question)(planned);
        async move {
            let question = question?;
            super::orch::confirm(&question)
                .await
                .map_err(AskError::from)
        }
    }

    fn note(&self, message: &str) {
        self.around(|| match message.strip_prefix("warning: ") {
            Some(w) => self.out.warn(w),
            None => self.out.line(message),
        });
    }

    /// With `-y`, say so and go on; in a terminal, ask; elsewhere stop.
    /// The question is asked with the live display off the screen (a
    /// redraw would wipe it) and stays there with its answer; Ctrl-C and
    /// the end of input are "no".
    async fn canary_passed(&self, canaries: &[String], remaining: usize, yes: bool) -> bool {
        let servers = if remaining == 1 { "server" } else { "servers" };
        let head = format!(
            "canary passed on {}: continue with {} {servers}?",
            canaries.join(", "),
            thousands(remaining)
        );
        if yes {
            self.around(|| {
                self.out.line(
                    head.replace("continue with", "continuing with")
                        .trim_end_matches('?'),
                )
            });
            return true;
        }
        if !self.interactive() {
            return false;
        }
        if let Some(d) = &self.display {
            d.suspend();
        }
        let answer = super::question::ask(&head).await;
        let go_on = answer == super::question::Answer::Yes;
        eprintln!("{}", answer.canary_words(remaining));
        tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "operator", answer = answer.as_str(),
            "canary question answered: {}", answer.as_str());
        if go_on && let Some(d) = &self.display {
            d.resume();
        }
        go_on
    }

    /// In a terminal, the first Ctrl-C keeps waiting for the servers in
    /// flight (their tasks may complete); the second stops waiting.
    /// Elsewhere (a script's SIGINT) waiting stops at once.
    fn keep_waiting(
        &self,
        in_flight: &[InFlight],
    ) -> Option<futures::future::LocalBoxFuture<'_, ()>> {
        if in_flight.is_empty() || !super::orch::stdin_is_terminal() {
            return None;
        }
        Some(Box::pin(interrupted()))
    }
}

/// A run's error for the command line's one error line.
pub(crate) fn run_error<E>(e: RunError<E>) -> anyhow::Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    match e {
        RunError::Plan(e) => e.into(),
        RunError::Ask(e) => anyhow::anyhow!(e),
        other => other.into(),
    }
}

/// `1999` as `1,999`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::thousands(1999), "1,999");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1_000_000), "1,000,000");
    }
}
