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
//! - [`ended`]: how a run that executed nothing ended, said once for every
//!   command; [`executed`]: how an executed plan ended.

use std::borrow::Cow;
use std::future::Future;

use anyhow::Context;

use super::GlobalOpts;
use super::Tee;
use super::progress::CliProgress;
use super::progress::Display;
use crate::settings::Settings;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::InFlight;
use agentsadm_orchestrate::run::{AskError, Operator, Run, RunError, RunOutcome, Shown};
use agentsadm_plan::Plan;
use agentsadm_types::output::Output;

/// The last line of every `-n`: nothing was changed.
pub(crate) const DRY_RUN_NOTE: &str = "Dry run (-n): nothing was changed.";

/// What a command's plan says when its run stops before executing it
/// (`-n`, or nothing to do): its exit status and its `--json` document.
pub(crate) trait Unexecuted {
    /// The exit status: `dry_run` for `-n`, else nothing was left to do.
    fn status(&self, dry_run: bool) -> u8;
    /// The `--json` document.
    fn document(&self, status: u8) -> serde_json::Value;
}

/// The document of a plan that was not executed.
fn not_executed<P: serde::Serialize>(plan: &P, status: u8) -> serde_json::Value {
    serde_json::json!({"plan": plan, "executed": false, "exit_status": status})
}

impl Unexecuted for Plan {
    /// `-n` shows the plan: 0; an empty plan that skipped something
    /// blocking: 2.
    fn status(&self, dry_run: bool) -> u8 {
        if !dry_run && self.has_blocking_skips() {
            crate::EXIT_PARTIAL
        } else {
            0
        }
    }
    fn document(&self, status: u8) -> serde_json::Value {
        not_executed(self, status)
    }
}

impl Unexecuted for agentsadm_orchestrate::adopt::AdoptPlan {
    fn status(&self, _: bool) -> u8 {
        0
    }
    fn document(&self, status: u8) -> serde_json::Value {
        not_executed(self, status)
    }
}

impl Unexecuted for agentsadm_flows::cleanup::CleanupPlan {
    fn status(&self, _: bool) -> u8 {
        0
    }
    fn document(&self, status: u8) -> serde_json::Value {
        not_executed(self, status)
    }
}

/// How every changing command's run ended, said once: `-n` (the plan in
/// `--json`, else the dry-run note when `dry_run_note`), nothing to do,
/// or declined ("Nothing was changed.", exit 1); `Err` is the exit status.
/// An executed run's plan and report come back for the command to render
/// ([`executed`] for a [`Plan`]).
pub(crate) fn ended<P: Unexecuted>(
    out: Output,
    outcome: RunOutcome<P>,
    dry_run_note: bool,
) -> Result<(P, ExecReport), u8> {
    match outcome {
        RunOutcome::DryRun(plan) => {
            let status = plan.status(true);
            if out.json {
                out.json(&plan.document(status));
            } else if dry_run_note {
                out.line(DRY_RUN_NOTE);
            }
            Err(status)
        }
        RunOutcome::Empty(plan) => {
            let status = plan.status(false);
            if out.json {
                out.json(&plan.document(status));
            }
            Err(status)
        }
        RunOutcome::Declined(_) => {
            out.line("Nothing was changed.");
            Err(1)
        }
        RunOutcome::Executed { planned, report } => Ok((planned, report)),
    }
}

/// How an executed run of a [`Plan`] ended (update, install, remove,
/// revert, disable, enable, hold, release): the result document, or the
/// summary and the history line; its exit status.
pub(crate) fn executed(out: Output, planned: &Plan, report: &ExecReport) -> u8 {
    let status = report.exit_status(planned);
    if out.json {
        out.json(&serde_json::json!({
            "plan": planned,
            "executed": true,
            "result": report,
            "summary": report.summary(planned),
            "exit_status": status,
        }));
    } else if !out.quiet || status != 0 {
        println!("\n{}", report.render(planned).trim_end());
        if let Some(line) = recorded_line(report) {
            out.line(line);
        }
    }
    status
}

/// `Recorded as run 1f0c2a9e (agentsadm history 1f0c2a9e; undo with
/// agentsadm revert 1f0c2a9e).` after a run's summary.
pub(crate) fn recorded_line(report: &ExecReport) -> Option<String> {
    let id = report.run?.to_string();
    let short = &id[..8];
    Some(format!(
        "Recorded as run {short} (agentsadm history {short}; put it back with agentsadm revert {short})."
    ))
}

/// Where execution events go and how a run is recorded, for `run`: the
/// history as the settings resolved it.
pub(crate) fn recorded<'a>(mut run: Run<'a>, here: &Settings) -> Run<'a> {
    run.history = Some(here.history_settings());
    run
}

/// How one run shows its progress.
pub(crate) struct Execution<'g> {
    progress: CliProgress,
    global: &'g GlobalOpts,
}

impl<'g> Execution<'g> {
    /// `verb` names the operation in progress lines ("update", "repair").
    pub(crate) fn new(here: &'g Settings, verb: &'static str) -> Execution<'g> {
        Execution {
            progress: CliProgress::new(here.progress, verb),
            global: &here.global,
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
        !self.out.json && stdin_is_terminal()
    }

    fn ask(&self, planned: &P) -> impl Future<Output = Result<bool, AskError>> {
        let question = (self.question)(planned);
        async move {
            let question = question?;
            confirm(&question).await.map_err(AskError::from)
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
        if in_flight.is_empty() || !stdin_is_terminal() {
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

/// The question before a change plan runs: a plain "Proceed?", or the
/// clauses that need an explicit yes named first (update, install,
/// remove, check --fix and revert all ask it).
pub(crate) fn proceed_question(plan: &Plan) -> Result<Cow<'static, str>, AskError> {
    Ok(if plan.needs_explicit_yes() {
        format!(
            "This plan needs an explicit yes: {}. Proceed?",
            agentsadm_plan::ExplicitYes::clauses(plan.explicit_yes())
        )
        .into()
    } else {
        "Proceed?".into()
    })
}

/// Ask a yes/no question on the terminal (no by default).
pub(crate) async fn confirm(question: &str) -> anyhow::Result<bool> {
    let question = question.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        eprint!("{question} [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
    })
    .await
    .context("cannot read the answer")?
}

/// Whether someone can answer a question.
pub(crate) fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
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
