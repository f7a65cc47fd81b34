//! What the commands that change the datacenter set up the same way.
//!
//! - [`with_dc_lock`]: take the orchestrator lock (warning when it breaks
//!   a stale one), refresh it while the work runs, release it after.
//! - [`Execution`]: for the commands that run steps on servers (`update`,
//!   `install`, `remove`, `check --fix`), the executor's options, the
//!   CNAPI transport's configuration and the progress display, built from
//!   the command line once.
//! - [`interrupted`]: Ctrl-C, which stops starting servers.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use super::GlobalOpts;
use super::Tee;
use super::progress::CliProgress;
use super::progress::ProgressMode;
use agentsadm_api::SapiClient;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::execute::RunGate;
use agentsadm_orchestrate::lock;
use agentsadm_orchestrate::lock::LockError;
use agentsadm_orchestrate::lock::LockOptions;
use agentsadm_orchestrate::lock::SapiLockStore;
use agentsadm_orchestrate::transport::CnapiTransportConfig;
use agentsadm_types::output::Output;

/// How one run reaches servers and shows its progress.
pub(crate) struct Execution<'g> {
    pub(crate) options: ExecOptions,
    pub(crate) transport: CnapiTransportConfig,
    progress: CliProgress,
    global: &'g GlobalOpts,
}

impl<'g> Execution<'g> {
    /// `verb` names the operation in progress lines ("update", "repair").
    pub(crate) fn new(
        g: &'g GlobalOpts,
        verb: &'static str,
        options: ExecOptions,
    ) -> Execution<'g> {
        // `agentsadm gz` on a server may take as long as one step may.
        let transport = CnapiTransportConfig {
            execute_timeout: options.task_timeout,
            health: options.health,
            ..Default::default()
        };
        Execution {
            options,
            transport,
            progress: CliProgress::new(ProgressMode::detect(g.json, g.quiet), verb),
            global: g,
        }
    }

    /// Where execution events go: the progress display, then the
    /// observer of an in-process run (the demo), if any.
    pub(crate) fn reporter(&self) -> Tee<'_> {
        self.global.reporter(&self.progress)
    }
}

/// Resolves when the operator presses Ctrl-C; never, where it cannot be
/// caught.
pub(crate) async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Refuse early, before the plan is shown, when another agentsadm holds
/// the datacenter lock (and `--break-lock` was not given); [`with_dc_lock`]
/// still takes the lock properly afterwards.
pub(crate) async fn refuse_if_locked(sapi: &SapiClient, break_lock: bool) -> anyhow::Result<()> {
    if break_lock {
        return Ok(());
    }
    let store = SapiLockStore::new(sapi.clone()).await?;
    let Some(r) = lock::LockStore::read(&store).await? else {
        return Ok(());
    };
    // The owner's process, when it ran on this host (as lock::acquire
    // decides).
    let here = [
        agentsadm_types::log::hostname(),
        std::fs::read_to_string("/etc/hostname")
            .unwrap_or_default()
            .trim()
            .to_string(),
    ];
    let alive = r
        .owner_host_pid()
        .filter(|(host, _)| here.iter().any(|h| h == host))
        .map(|(_, pid)| std::path::Path::new(&format!("/proc/{pid}")).exists());
    let options = LockOptions::default();
    if lock::evaluate(
        Some(&r),
        std::time::SystemTime::now(),
        options.stale_after,
        alive,
    ) == lock::LockState::Held
    {
        return Err(lock::LockError::Held {
            owner: r.owner.clone(),
            operation: r.operation.clone(),
            started: r.started.clone(),
            refreshed: r.refreshed.clone(),
        }
        .into());
    }
    Ok(())
}

/// Take the datacenter lock for `operation`, run `work` while refreshing
/// the lock, then release it. Failing to refresh or release is a warning:
/// the work has started (or is done) and stopping it would leave it half
/// done.
pub(crate) async fn with_dc_lock<T>(
    sapi: &SapiClient,
    operation: &str,
    break_lock: bool,
    out: &Output,
    work: impl Future<Output = T>,
) -> anyhow::Result<T> {
    with_dc_lock_watched(
        sapi,
        operation,
        break_lock,
        out,
        &AtomicBool::new(false),
        work,
    )
    .await
}

/// [`with_dc_lock`], setting `lost` when a refresh finds that another
/// process broke the lock (the executor then starts no new server).
pub(crate) async fn with_dc_lock_watched<T>(
    sapi: &SapiClient,
    operation: &str,
    break_lock: bool,
    out: &Output,
    lost: &AtomicBool,
    work: impl Future<Output = T>,
) -> anyhow::Result<T> {
    let store = SapiLockStore::new(sapi.clone()).await?;
    let options = LockOptions {
        break_lock,
        ..LockOptions::default()
    };
    let mut dc_lock = lock::acquire(&store, &lock::this_owner(), operation, &options).await?;
    if let Some(old) = &dc_lock.broke {
        out.warn(format!(
            "broke the orchestrator lock of {} ({:?}, last seen {})",
            old.owner, old.operation, old.refreshed
        ));
    }
    tokio::pin!(work);
    let mut refresh = tokio::time::interval(options.refresh_every);
    // The first tick is immediate; the lock was just written.
    refresh.tick().await;
    let result = loop {
        tokio::select! {
            r = &mut work => break r,
            _ = refresh.tick() => {
                match dc_lock.refresh().await {
                    Err(e @ LockError::Lost { .. }) => {
                        if !lost.swap(true, Ordering::SeqCst) {
                            out.warn(format!("{e:#}; no new server will be started"));
                        }
                    }
                    Err(e) => out.warn(format!("{e:#}")),
                    Ok(()) => {}
                }
            }
        }
    };
    if let Err(e) = dc_lock.release().await {
        out.warn(format!("cannot release the orchestrator lock: {e:#}"));
    }
    Ok(result)
}

/// The command line's answers to the executor: continue after the canary
/// wave with `-y`, ask in a terminal, stop otherwise; the lock is lost once
/// [`with_dc_lock_watched`] says so.
pub(crate) struct CliGate<'a> {
    pub(crate) yes: bool,
    pub(crate) lost: &'a AtomicBool,
    pub(crate) out: &'a Output,
}

impl RunGate for CliGate<'_> {
    fn lock_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    async fn canary_passed(&self, canaries: &[String], remaining: usize) -> bool {
        let head = format!(
            "canary passed on {}: continue with {} servers?",
            canaries.join(", "),
            thousands(remaining)
        );
        if self.yes {
            self.out.line(
                head.replace("continue with", "continuing with")
                    .trim_end_matches('?'),
            );
            return true;
        }
        if self.out.json || !super::orch::stdin_is_terminal() {
            return false;
        }
        super::orch::confirm(&head).await.unwrap_or(false)
    }

    /// In a terminal, the first Ctrl-C keeps waiting for the servers in
    /// flight (their tasks may complete); the second stops waiting.
    /// Elsewhere (a script's SIGINT) waiting stops at once.
    fn keep_waiting(
        &self,
        in_flight: &[agentsadm_orchestrate::report::InFlight],
    ) -> Option<futures::future::LocalBoxFuture<'_, ()>> {
        if in_flight.is_empty() || !super::orch::stdin_is_terminal() {
            return None;
        }
        Some(Box::pin(interrupted()))
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
