//! Holding the datacenter lock while a run works: the lock is refreshed
//! every [`LockOptions::refresh_every`] (the run confirms it before each
//! change besides, see [`crate::guard`]); a refresh that finds it lost
//! records the loss in the run's [`LockFence`] and says so at once.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use tokio::time::Instant;

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
    let owner = options.login.owner();
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
    if !fence.is_lost() && fence.confirm_now("when the work was done").await == Hold::Lost {
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
///
/// A confirmation that found the run's record alone stands for
/// [`DcLock::fence_window`] from the moment its read was sent, for every
/// server and step that starts in that window: whoever takes the lock over
/// (a colleague's `--break-lock` as well) writes a claim first and holds
/// only a settle pause later, so a read that saw no claim proves that no
/// one else holds the lock before the window closes. A read that finds
/// another record (someone taking the lock right now) stands for nothing
/// but itself. That is as safe as a read before each step (which could not
/// see a takeover between its read and the step's request either), at a
/// few reads a second whatever the number of steps. The confirmations
/// before the summary and after held work always read
/// ([`LockFence::confirm_now`]).
pub struct LockFence<'l> {
    lock: &'l DcLock<'l>,
    loss: Mutex<Option<LockLoss>>,
    /// When the last read that found our record alone was sent. (No lock
    /// is held across a read: the executor polls its servers' turns and
    /// its own confirmations on one task, and a turn holding such a lock
    /// while not polled would stop the run.)
    alone_since: Mutex<Option<Instant>>,
}

impl<'l> LockFence<'l> {
    pub fn new(lock: &'l DcLock<'l>) -> LockFence<'l> {
        LockFence {
            lock,
            loss: Mutex::new(None),
            alone_since: Mutex::new(None),
        }
    }

    /// Whether a confirmation still stands.
    fn standing(&self) -> bool {
        let window = self.lock.fence_window();
        self.alone_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|sent| sent.elapsed() < window)
    }

    /// Confirm with a read of its own, whatever stands (before the
    /// summary, after held work).
    pub async fn confirm_now(&self, what: &str) -> Hold {
        if self.is_lost() {
            return Hold::Lost;
        }
        self.read(what).await
    }

    async fn read(&self, what: &str) -> Hold {
        let sent = Instant::now();
        match self.lock.confirm_alone().await {
            Ok(alone) => {
                let mut since = self.alone_since.lock().unwrap_or_else(|e| e.into_inner());
                *since = alone.then_some(sent);
                Hold::Held
            }
            Err(e) => self.judge(what, Err(e)),
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
            if self.standing() {
                return Hold::Held;
            }
            self.read(what).await
        })
    }

    fn is_lost(&self) -> bool {
        self.loss
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Map, Value};

    use super::*;
    use std::time::Duration;

    use crate::runner::lock::{LockBoard, LockRecord, Stage, acquire};

    /// Lock records in memory, counting reads.
    #[derive(Default)]
    struct Board {
        meta: Mutex<Map<String, Value>>,
        reads: AtomicUsize,
    }

    impl Board {
        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }

        fn put(&self, r: &LockRecord) {
            let v = serde_json::to_value(r).unwrap();
            self.meta.lock().unwrap().insert(r.key(), v);
        }
    }

    impl LockStore for Board {
        fn read(&self) -> BoxFuture<'_, Result<LockBoard, LockError>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let board = LockBoard::from_metadata(&self.meta.lock().unwrap());
            Box::pin(async move { Ok(board) })
        }
        fn write<'a>(&'a self, r: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>> {
            self.put(r);
            Box::pin(async { Ok(()) })
        }
        fn remove<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<(), LockError>> {
            let mut m = self.meta.lock().unwrap();
            for k in keys {
                m.remove(k);
            }
            Box::pin(async { Ok(()) })
        }
        fn mark_generation(&self, _generation: u64) -> BoxFuture<'_, Result<(), LockError>> {
            Box::pin(async { Ok(()) })
        }
    }

    /// A colleague's record: `stage` at a later generation.
    fn theirs(stage: Stage) -> LockRecord {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        LockRecord {
            owner: "colleague@elsewhere:7".to_string(),
            token: "ffff".to_string(),
            generation: 99,
            stage,
            operation: "update --all".to_string(),
            started: now.clone(),
            refreshed: now,
        }
    }

    /// A hundred servers and steps starting in the window (one after the
    /// other, as the executor starts them) cost one read; after the
    /// window, one more. While someone is taking
    /// the lock (their claim is there) every confirmation reads, so their
    /// `--break-lock` is seen by the next step.
    #[tokio::test(start_paused = true)]
    async fn a_confirmation_stands_for_its_window_unless_someone_is_taking_the_lock() {
        let store = Board::default();
        let options = LockOptions {
            settle: Duration::from_millis(500),
            ..LockOptions::default()
        };
        let lock = acquire(&store, "me@here:1", "update vm-agent", &options)
            .await
            .unwrap();
        assert_eq!(lock.fence_window(), Duration::from_millis(250));
        let fence = LockFence::new(&lock);
        let before = store.reads();
        for _ in 0..100 {
            assert_eq!(fence.confirm("a step").await, Hold::Held);
        }
        assert_eq!(store.reads() - before, 1, "one read for the window");
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(fence.confirm("a step").await, Hold::Held);
        assert_eq!(store.reads() - before, 2, "the window closed: read again");

        // A colleague's claim: each confirmation reads.
        store.put(&theirs(Stage::Claim));
        tokio::time::advance(Duration::from_millis(250)).await;
        for n in 3..6 {
            assert_eq!(fence.confirm("a step").await, Hold::Held);
            assert_eq!(store.reads() - before, n);
        }
        // Their --break-lock removes our record and holds: the next step
        // is refused, and so is everything after it, without a read.
        store.meta.lock().unwrap().remove(&lock.record().key());
        store.put(&theirs(Stage::Held));
        assert_eq!(fence.confirm("a step").await, Hold::Lost);
        let reads = store.reads();
        assert_eq!(fence.confirm("a step").await, Hold::Lost);
        assert_eq!(store.reads(), reads);
        assert!(fence.loss().unwrap().holder.contains("colleague"));
    }

    /// Before the summary, the lock is read whatever stands.
    #[tokio::test(start_paused = true)]
    async fn confirm_now_always_reads() {
        let store = Board::default();
        let lock = acquire(&store, "me@here:1", "update", &LockOptions::default())
            .await
            .unwrap();
        let fence = LockFence::new(&lock);
        assert_eq!(fence.confirm("a step").await, Hold::Held);
        let reads = store.reads();
        store.meta.lock().unwrap().clear();
        assert_eq!(fence.confirm("a step").await, Hold::Held, "it stands");
        assert_eq!(fence.confirm_now("before the summary").await, Hold::Lost);
        assert_eq!(store.reads(), reads + 1);
    }
}
