//! What a run asks before it changes anything: whether it still holds the
//! datacenter lock ([`Fence`]), and, when something failed, whether an API
//! stopped answering ([`ApiProbe`]), so that an outage is named as one
//! instead of being blamed on the servers.
//!
//! The executor confirms the lock before the record changes, before each
//! wave and each server it starts, and hands the fence to the transport
//! with every step ([`crate::transport::Transport::run_fenced`]), which
//! confirms it at the last moment before the request that changes the
//! server. A confirmation stands for a short window ([`LockFence`]), so
//! a fleet of quick steps costs a few lock reads a second, not one or two
//! per step. Once lost, the lock stays lost for the run: nothing more
//! starts, and the report says which servers this run changed and may
//! since have been changed by the new holder.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;
use serde::Serialize;

use super::lock::{DcLock, LockError};
use super::report::FailureStage;
use super::transport::StepFailure;
use agentsadm_api::Api;
use agentsadm_api::CnapiClient;
use agentsadm_api::ImgapiClient;
use agentsadm_api::SapiClient;
use agentsadm_plan::Step;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ServerUuid;

/// What a confirmation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Still ours: go on.
    Held,
    /// Lost (taken over, or its record removed): change nothing more.
    Lost,
    /// The lock could not be read: this API does not answer.
    Unconfirmed(Api),
}

/// The run's hold on the datacenter lock.
pub trait Fence: Send + Sync {
    /// Confirm the lock before `what` (for the report: "the vm-agent step
    /// on cn0003"). One read of the lock; once lost, lost for good.
    fn confirm<'a>(&'a self, what: &'a str) -> BoxFuture<'a, Hold>;

    /// Whether the lock is known to be lost (no read).
    fn is_lost(&self) -> bool;
}

/// No lock to confirm (tests and benchmarks that execute a plan directly,
/// headnode setup before SAPI holds anything).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unfenced;

impl Fence for Unfenced {
    fn confirm<'a>(&'a self, _what: &'a str) -> BoxFuture<'a, Hold> {
        Box::pin(async { Hold::Held })
    }

    fn is_lost(&self) -> bool {
        false
    }
}

/// How a run lost the datacenter lock, for its report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockLoss {
    /// What the run was about to do when it noticed.
    pub noticed: String,
    /// Who holds it now, as far as its record says.
    pub holder: String,
    /// The servers this run started (it may have changed them), which
    /// the new holder may since have changed as well: filled in with the
    /// run's report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub may_have_changed: Vec<ServerUuid>,
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
    /// When the last read that found our record alone was sent.
    alone_since: Mutex<Option<Instant>>,
    /// One read at a time: the steps that start together wait for it and
    /// share it.
    reading: tokio::sync::Mutex<()>,
}

impl<'l> LockFence<'l> {
    pub fn new(lock: &'l DcLock<'l>) -> LockFence<'l> {
        LockFence {
            lock,
            loss: Mutex::new(None),
            alone_since: Mutex::new(None),
            reading: tokio::sync::Mutex::new(()),
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
        let _one = self.reading.lock().await;
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
                tracing::warn!(what, error = %error_chain(&e), "cannot confirm the datacenter lock");
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
            let _one = self.reading.lock().await;
            // Read while waiting by another step: that read stands.
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

/// Confirm the run's lock before changing `server` for `step`.
pub async fn fenced(fence: &dyn Fence, server: ServerUuid, step: &Step) -> Result<(), StepFailure> {
    let what = format!(
        "before the {} {} on server {server}",
        step.component,
        step.action.verb()
    );
    match fence.confirm(&what).await {
        Hold::Held => Ok(()),
        Hold::Lost => Err(StepFailure::new(
            FailureStage::LockLost,
            "not started: this run no longer holds the datacenter lock",
        )),
        Hold::Unconfirmed(api) => Err(StepFailure::new(
            FailureStage::ApiLost { api },
            format!(
                "not started: the datacenter lock could not be confirmed ({api} did not answer)"
            ),
        )),
    }
}

/// Asked when a server's turn failed: does an API the run needs not
/// answer? Then the failure is the outage's, not the server's.
pub trait ApiProbe: Send + Sync {
    /// The first API that does not answer, if any.
    fn down(&self) -> BoxFuture<'_, Option<Api>>;
}

/// Never finds an outage (fakes, benchmarks).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbe;

impl ApiProbe for NoProbe {
    fn down(&self) -> BoxFuture<'_, Option<Api>> {
        Box::pin(async { None })
    }
}

/// Pings the run's APIs (CNAPI, SAPI, IMGAPI), each within a bound.
#[derive(Clone, Debug)]
pub struct ApiPings {
    pub sapi: SapiClient,
    pub cnapi: Option<CnapiClient>,
    pub imgapi: Option<ImgapiClient>,
    /// How long one ping may take, retries included, before the API
    /// counts as not answering.
    pub bound: Duration,
}

impl ApiPings {
    async fn answers<T, E>(&self, ping: impl std::future::Future<Output = Result<T, E>>) -> bool {
        matches!(tokio::time::timeout(self.bound, ping).await, Ok(Ok(_)))
    }
}

impl ApiProbe for ApiPings {
    fn down(&self) -> BoxFuture<'_, Option<Api>> {
        Box::pin(async move {
            if let Some(c) = &self.cnapi
                && !self.answers(c.ping()).await
            {
                return Some(Api::Cnapi);
            }
            if !self.answers(self.sapi.ping()).await {
                return Some(Api::Sapi);
            }
            if let Some(i) = &self.imgapi
                && !self.answers(i.ping()).await
            {
                return Some(Api::Imgapi);
            }
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Map, Value};

    use super::*;
    use crate::lock::{LockBoard, LockOptions, LockRecord, LockStore, Stage, acquire};

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

    /// Twenty servers starting together and a hundred steps in the window
    /// cost one read; after the window, one more. While someone is taking
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
        let together = futures::future::join_all((0..20).map(|_| fence.confirm("a server"))).await;
        assert!(together.iter().all(|h| *h == Hold::Held));
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
