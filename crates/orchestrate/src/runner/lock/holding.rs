//! Holding the datacenter lock while a run works: the lock is refreshed
//! every [`LockOptions::refresh_every`] (the run confirms it before each
//! change besides, see [`crate::guard`]); a refresh that finds it lost
//! records the loss in the run's [`LockFence`] and says so at once.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;

use crate::carriers::guard::{Fence, Hold};
use crate::runner::lock::{DcLock, LockError, LockOptions, LockStore};
use crate::vocabulary::outcomes::LockLoss;
use agentsadm_api::Api;
use agentsadm_types::error::error_chain;

/// Take the datacenter lock for `operation`, run `work` while refreshing
/// it, then release it (retrying while SAPI does not answer): for work
/// that holds the lock outside a run's executor (self-update). A lock
/// found lost sets `lost` and is said at once; failing to release is a
/// note (the work is done).
pub async fn hold<T>(
    store: &dyn LockStore,
    operation: &str,
    options: &LockOptions,
    lost: &AtomicBool,
    note: impl Fn(&str),
    work: impl Future<Output = T>,
) -> Result<T, LockError> {
    let owner = crate::runner::lock::this_owner();
    let dc_lock = crate::runner::lock::acquire(store, &owner, operation, options).await?;
    log_acquired(&owner, operation, &dc_lock);
    for old in &dc_lock.broke {
        note(&format!(
            "warning: broke the orchestrator lock of {} ({:?}, last seen {})",
            old.owner, old.operation, old.refreshed
        ));
    }
    let fence = LockFence::new(&dc_lock);
    let result = refreshing(&dc_lock, &fence, options, &note, work).await;
    // Once more when the work is done: a loss between two refreshes is
    // said too.
    if !fence.is_lost() && fence.confirm("when the work was done").await == Hold::Lost {
        note("warning: the orchestrator lock was lost while the work ran");
    }
    if fence.is_lost() {
        lost.store(true, Ordering::SeqCst);
    }
    drop(fence);
    let released = dc_lock.release().await;
    log_released(&released);
    if let Err(e) = released {
        note(&format!("warning: {}", release_failed(&e)));
    }
    Ok(result)
}

/// Run `work` while refreshing `lock`. Failing to refresh is a note: the
/// work has started, and the fence stops whatever has not.
pub(crate) async fn refreshing<T>(
    lock: &DcLock<'_>,
    fence: &LockFence<'_>,
    options: &LockOptions,
    note: impl Fn(&str),
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut refresh = tokio::time::interval(options.refresh_every);
    // The first tick is immediate; the lock was just written.
    refresh.tick().await;
    // Said once per outage, not once per refresh (the run says the
    // outage itself).
    let mut unanswered = false;
    loop {
        tokio::select! {
            r = &mut work => return r,
            _ = refresh.tick() => match lock.refresh().await {
                Ok(()) => unanswered = false,
                Err(e) if e.is_unreachable() => {
                    tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                        error = %error_chain(&e), "cannot refresh the orchestrator lock");
                    if !std::mem::replace(&mut unanswered, true) {
                        note("warning: cannot refresh the orchestrator lock: SAPI does not answer; trying again on each refresh");
                    }
                }
                Err(e) => {
                    if fence.lost("when the lock was refreshed", &e) {
                        log_lock("lost", &error_chain(&e));
                        note(&format!(
                            "warning: {}: nothing more will be started",
                            error_chain(&e)
                        ));
                    }
                }
            },
        }
    }
}

/// What a release that failed (after its retries) leaves, and what to do.
pub(crate) fn release_failed(e: &LockError) -> String {
    format!(
        "cannot release the orchestrator lock ({}): it goes stale 10 minutes after its last refresh; to run again sooner, pass --break-lock once nothing else runs",
        error_chain(e)
    )
}

/// The lock taken, in the run's log (with the records it broke).
pub(crate) fn log_acquired(owner: &str, operation: &str, lock: &DcLock<'_>) {
    let broke: Vec<String> = lock
        .broke
        .iter()
        .map(|old| format!("{} (last seen {})", old.owner, old.refreshed))
        .collect();
    let broke = if broke.is_empty() {
        String::new()
    } else {
        format!(" (broke the lock of {})", broke.join(", "))
    };
    log_lock(
        "acquired",
        &format!("took the datacenter lock as {owner} for {operation:?}{broke}"),
    );
}

/// The lock's release (or why it failed), in the run's log.
pub(crate) fn log_released(released: &Result<(), LockError>) {
    log_lock(
        "released",
        &match released {
            Ok(()) => "released the datacenter lock".to_string(),
            Err(e) => format!("cannot release the datacenter lock: {}", error_chain(e)),
        },
    );
}

/// A datacenter lock event in the run's log (the file only: the terminal
/// gets the notes).
fn log_lock(event: &str, message: &str) {
    if event == "lost" {
        tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "lock", event, "{message}");
    } else {
        tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "lock", event, "{message}");
    }
}

/// The datacenter lock a run holds, as its fence.
pub struct LockFence<'l> {
    lock: &'l DcLock<'l>,
    loss: Mutex<Option<LockLoss>>,
}

impl<'l> LockFence<'l> {
    pub fn new(lock: &'l DcLock<'l>) -> LockFence<'l> {
        LockFence {
            lock,
            loss: Mutex::new(None),
        }
    }

    /// How the lock was lost, if it was.
    pub fn loss(&self) -> Option<LockLoss> {
        self.loss.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Record the loss (the first noticed is kept). Returns whether it is
    /// news.
    pub fn lost(&self, noticed: &str, err: &LockError) -> bool {
        let holder = match err {
            LockError::Lost { owner } => owner.clone(),
            other => error_chain(other),
        };
        let mut loss = self.loss.lock().unwrap_or_else(|e| e.into_inner());
        if loss.is_none() {
            tracing::warn!(noticed, holder = %holder, "the datacenter lock was lost");
            *loss = Some(LockLoss {
                noticed: noticed.to_string(),
                holder,
                may_have_changed: Vec::new(),
            });
            return true;
        }
        false
    }

    /// What a confirmation's error means: SAPI not answering leaves the
    /// lock unconfirmed; anything else (lost, or records that can no
    /// longer be read) loses it.
    pub fn judge(&self, what: &str, result: Result<(), LockError>) -> Hold {
        match result {
            Ok(()) => Hold::Held,
            Err(e) if e.is_unreachable() => {
                tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET, what, error = %error_chain(&e), "cannot confirm the datacenter lock");
                Hold::Unconfirmed(Api::Sapi)
            }
            Err(e) => {
                self.lost(what, &e);
                Hold::Lost
            }
        }
    }
}

impl Fence for LockFence<'_> {
    fn confirm<'a>(&'a self, what: &'a str) -> BoxFuture<'a, Hold> {
        Box::pin(async move {
            if self.is_lost() {
                return Hold::Lost;
            }
            let result = self.lock.confirm().await;
            self.judge(what, result)
        })
    }

    fn is_lost(&self) -> bool {
        self.loss
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}
