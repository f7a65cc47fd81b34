//! Holding the datacenter lock while a run works: the lock is refreshed
//! every [`LockOptions::refresh_every`] (the run confirms it before each
//! change besides, see [`crate::guard`]); a refresh that finds it lost
//! records the loss in the run's [`LockFence`] and says so at once.

use std::future::Future;

use super::guard::LockFence;
use super::lock::{DcLock, LockError, LockOptions};
use agentsadm_types::error::error_chain;

/// Run `work` while refreshing `lock`. Failing to refresh is a note: the
/// work has started, and the fence stops whatever has not.
pub(crate) async fn hold<T>(
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
    loop {
        tokio::select! {
            r = &mut work => return r,
            _ = refresh.tick() => match lock.refresh().await {
                Ok(()) => {}
                Err(e) if e.is_unreachable() => note(&format!(
                    "warning: cannot refresh the orchestrator lock: {}",
                    error_chain(&e)
                )),
                Err(e) => {
                    if fence.lost("when the lock was refreshed", &e) {
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
