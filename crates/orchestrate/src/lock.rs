//! One orchestrator at a time per datacenter.
//!
//! The lock is a record in the SAPI `sdc` application's metadata
//! (`agentsadm_lock`): owner (`user@host:pid`), a random token, the
//! operation, when it started and when it was last refreshed.
//!
//! SAPI has no compare-and-set, so acquisition is built on last-writer-wins:
//! read (free, or stale), write our record, wait a settle interval, read
//! again. Only the last of several concurrent writers reads back its own
//! token; every other one gives up naming the holder. The settle interval
//! must exceed the time between one contender's read and its write (one
//! SAPI round trip), which is why it is hundreds of milliseconds.
//!
//! Stale locks: the holder refreshes its record every
//! [`LockOptions::refresh_every`]. A record not refreshed for
//! [`LockOptions::stale_after`], or owned by a process on this host that no
//! longer exists, is broken automatically (with a warning). `--break-lock`
//! breaks any lock (for when the holder is known to be dead elsewhere).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentsadm_api::ApiError;
use agentsadm_api::sapi::SapiClient;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::UpdateAction;
use agentsadm_api::sapi::object;
use agentsadm_types::ids::ApplicationUuid;

/// The `sdc` application metadata key holding the lock.
pub const LOCK_KEY: &str = "agentsadm_lock";

/// The lock record as stored in SAPI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// `user@host:pid`.
    pub owner: String,
    pub token: String,
    pub operation: String,
    /// RFC 3339.
    pub started: String,
    /// RFC 3339; refreshed while the holder runs.
    pub refreshed: String,
}

impl LockRecord {
    fn refreshed_at(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(&self.refreshed).ok()
    }

    /// The owner's host and pid, if the owner string has that form.
    pub fn owner_host_pid(&self) -> Option<(&str, u32)> {
        let (user_host, pid) = self.owner.rsplit_once(':')?;
        let host = user_host
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(user_host);
        Some((host, pid.parse().ok()?))
    }
}

/// Lock errors. None of them changed anything except where stated.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another agentsadm is running in this datacenter: {owner} started {operation:?} at {started} (last seen {refreshed}); wait for it, or pass --break-lock if it is dead"
    )]
    Held {
        owner: String,
        operation: String,
        started: String,
        refreshed: String,
    },
    #[error(
        "no SAPI application named \"sdc\": cannot record the orchestrator lock (is this a Triton datacenter?)"
    )]
    NoSdcApplication,
    #[error("cannot {what} the orchestrator lock in SAPI")]
    Api {
        what: &'static str,
        #[source]
        err: ApiError,
    },
    #[error("the orchestrator lock was taken over by {owner} while this run held it")]
    Lost { owner: String },
}

impl LockError {
    fn held(r: &LockRecord) -> LockError {
        LockError::Held {
            owner: r.owner.clone(),
            operation: r.operation.clone(),
            started: r.started.clone(),
            refreshed: r.refreshed.clone(),
        }
    }
}

/// Where the lock record lives.
pub trait LockStore: Send + Sync {
    fn read(&self) -> BoxFuture<'_, Result<Option<LockRecord>, LockError>>;
    fn write<'a>(&'a self, record: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>>;
    fn clear(&self) -> BoxFuture<'_, Result<(), LockError>>;
}

/// Timing of the lock protocol.
#[derive(Clone, Debug)]
pub struct LockOptions {
    /// Pause between writing the record and reading it back.
    pub settle: Duration,
    pub refresh_every: Duration,
    /// A record not refreshed for this long is broken automatically.
    pub stale_after: Duration,
    /// Break whatever lock is there (`--break-lock`).
    pub break_lock: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            settle: Duration::from_millis(500),
            refresh_every: Duration::from_secs(60),
            stale_after: Duration::from_secs(10 * 60),
            break_lock: false,
        }
    }
}

/// What an existing record means for us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held,
    /// Not refreshed in time, or its local owner process is gone.
    Stale,
}

/// Decide about an existing record. `owner_alive` is whether the owner's
/// process still exists, when that can be known (owner on this host).
pub fn evaluate(
    existing: Option<&LockRecord>,
    now: SystemTime,
    stale_after: Duration,
    owner_alive: Option<bool>,
) -> LockState {
    let Some(r) = existing else {
        return LockState::Free;
    };
    if owner_alive == Some(false) {
        return LockState::Stale;
    }
    match r.refreshed_at() {
        Some(t) if now.duration_since(t).unwrap_or(Duration::ZERO) <= stale_after => {
            LockState::Held
        }
        // Unreadable times count as stale: nobody could refresh such a record.
        _ => LockState::Stale,
    }
}

/// Who we are: `user@host:pid`.
pub fn this_owner() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "root".to_string());
    format!(
        "{user}@{}:{}",
        agentsadm_types::log::hostname(),
        std::process::id()
    )
}

/// Whether a lock owner's process exists, when it runs on this host (the
/// one hostname function, so that the early check and the lock agree).
fn local_owner_alive(r: &LockRecord) -> Option<bool> {
    owner_alive(&r.owner)
}

/// Whether the process of an owner string (`user@host:pid`) exists, when
/// it runs on this host; `None` elsewhere or when the string has another
/// form.
pub fn owner_alive(owner: &str) -> Option<bool> {
    let probe = LockRecord {
        owner: owner.to_string(),
        token: String::new(),
        operation: String::new(),
        started: String::new(),
        refreshed: String::new(),
    };
    let (host, pid) = probe.owner_host_pid()?;
    if host != agentsadm_types::log::hostname() {
        return None;
    }
    Some(std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Refuse early, before a long plan, when another agentsadm holds the
/// lock (unless `--break-lock`); [`acquire`] still takes it properly
/// afterwards. Writes nothing.
pub async fn check_free(store: &dyn LockStore, options: &LockOptions) -> Result<(), LockError> {
    if options.break_lock {
        return Ok(());
    }
    let Some(r) = store.read().await? else {
        return Ok(());
    };
    match evaluate(
        Some(&r),
        SystemTime::now(),
        options.stale_after,
        local_owner_alive(&r),
    ) {
        LockState::Held => Err(LockError::held(&r)),
        _ => Ok(()),
    }
}

/// A held lock. Release it with [`DcLock::release`]; refresh it with
/// [`DcLock::refresh`] every [`LockOptions::refresh_every`].
pub struct DcLock<'a> {
    store: &'a dyn LockStore,
    record: LockRecord,
    /// The stale record this acquisition broke, if any (for a warning).
    pub broke: Option<LockRecord>,
}

impl std::fmt::Debug for DcLock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcLock")
            .field("record", &self.record)
            .finish()
    }
}

fn now_text(now: SystemTime) -> String {
    humantime::format_rfc3339_seconds(now).to_string()
}

/// Take the lock for `operation`, as `owner`.
pub async fn acquire<'a>(
    store: &'a dyn LockStore,
    owner: &str,
    operation: &str,
    options: &LockOptions,
) -> Result<DcLock<'a>, LockError> {
    let existing = store.read().await?;
    let mut broke = None;
    if let Some(r) = &existing {
        let alive = local_owner_alive(r);
        match evaluate(Some(r), SystemTime::now(), options.stale_after, alive) {
            LockState::Held if !options.break_lock => return Err(LockError::held(r)),
            _ => broke = Some(r.clone()),
        }
    }
    let now = now_text(SystemTime::now());
    let record = LockRecord {
        owner: owner.to_string(),
        token: uuid::Uuid::new_v4().to_string(),
        operation: operation.to_string(),
        started: now.clone(),
        refreshed: now,
    };
    store.write(&record).await?;
    tokio::time::sleep(options.settle).await;
    match store.read().await? {
        Some(r) if r.token == record.token => Ok(DcLock {
            store,
            record,
            broke,
        }),
        Some(r) => Err(LockError::held(&r)),
        // Someone released or broke it between our write and read: treat
        // it as lost rather than race again.
        None => Err(LockError::Lost {
            owner: "(released by another process)".to_string(),
        }),
    }
}

impl DcLock<'_> {
    pub fn record(&self) -> &LockRecord {
        &self.record
    }

    /// Record that we are alive. Fails with [`LockError::Lost`] if someone
    /// broke the lock meanwhile.
    pub async fn refresh(&mut self) -> Result<(), LockError> {
        match self.store.read().await? {
            Some(r) if r.token == self.record.token => {
                self.record.refreshed = now_text(SystemTime::now());
                self.store.write(&self.record).await
            }
            Some(r) => Err(LockError::Lost { owner: r.owner }),
            None => Err(LockError::Lost {
                owner: "(cleared)".to_string(),
            }),
        }
    }

    /// Remove the record, unless someone else holds it by now.
    pub async fn release(self) -> Result<(), LockError> {
        match self.store.read().await? {
            Some(r) if r.token == self.record.token => self.store.clear().await,
            _ => Ok(()),
        }
    }
}

/// Take the datacenter lock for `operation`, run `work` while refreshing
/// the lock, then release it. Failing to refresh or release is a note: the
/// work has started (or is done) and stopping it would leave it half done;
/// a lock another process took sets `lost` (the executor then starts no new
/// server).
pub async fn hold<T>(
    store: &dyn LockStore,
    operation: &str,
    options: &LockOptions,
    lost: &AtomicBool,
    note: impl Fn(&str),
    work: impl Future<Output = T>,
) -> Result<T, LockError> {
    let owner = this_owner();
    let mut dc_lock = acquire(store, &owner, operation, options).await?;
    if let Some(old) = &dc_lock.broke {
        note(&format!(
            "warning: broke the orchestrator lock of {} ({:?}, last seen {})",
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
            _ = refresh.tick() => match dc_lock.refresh().await {
                Err(e @ LockError::Lost { .. }) => {
                    if !lost.swap(true, Ordering::SeqCst) {
                        note(&format!(
                            "warning: {}; no new server will be started",
                            agentsadm_types::error::error_chain(&e)
                        ));
                    }
                }
                Err(e) => note(&format!(
                    "warning: {}",
                    agentsadm_types::error::error_chain(&e)
                )),
                Ok(()) => {}
            },
        }
    };
    if let Err(e) = dc_lock.release().await {
        note(&format!(
            "warning: cannot release the orchestrator lock: {}",
            agentsadm_types::error::error_chain(&e)
        ));
    }
    Ok(result)
}

/// [`LockStore`] in the SAPI `sdc` application's metadata.
#[derive(Clone, Debug)]
pub struct SapiLockStore {
    sapi: SapiClient,
    app: ApplicationUuid,
}

impl SapiLockStore {
    /// Find the `sdc` application.
    pub async fn new(sapi: SapiClient) -> Result<SapiLockStore, LockError> {
        let app = sapi
            .sdc_application()
            .await
            .map_err(|err| LockError::Api { what: "find", err })?
            .ok_or(LockError::NoSdcApplication)?;
        Ok(SapiLockStore {
            sapi,
            app: app.uuid,
        })
    }
}

impl LockStore for SapiLockStore {
    fn read(&self) -> BoxFuture<'_, Result<Option<LockRecord>, LockError>> {
        Box::pin(async move {
            let app = self
                .sapi
                .get_application(self.app)
                .await
                .map_err(|err| LockError::Api { what: "read", err })?;
            Ok(app
                .metadata
                .get(LOCK_KEY)
                .and_then(|v| serde_json::from_value(v.clone()).ok()))
        })
    }

    fn write<'a>(&'a self, record: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            let value = serde_json::to_value(record).unwrap_or(Value::Null);
            self.sapi
                .update_application(self.app, &Update::metadata(object([(LOCK_KEY, value)])))
                .await
                .map(|_| ())
                .map_err(|err| LockError::Api { what: "write", err })
        })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            let update = Update {
                action: Some(UpdateAction::Delete),
                params: None,
                metadata: Some(object([(LOCK_KEY, Value::Null)])),
            };
            self.sapi
                .update_application(self.app, &update)
                .await
                .map(|_| ())
                .map_err(|err| LockError::Api {
                    what: "release",
                    err,
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(refreshed: SystemTime) -> LockRecord {
        LockRecord {
            owner: "root@hn:123".into(),
            token: "t".into(),
            operation: "update vm-agent".into(),
            started: now_text(refreshed),
            refreshed: now_text(refreshed),
        }
    }

    #[test]
    fn evaluates_fresh_stale_and_dead_owners() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let stale = Duration::from_secs(600);
        assert_eq!(evaluate(None, t0, stale, None), LockState::Free);
        let r = record(t0);
        assert_eq!(
            evaluate(Some(&r), t0 + Duration::from_secs(599), stale, None),
            LockState::Held
        );
        assert_eq!(
            evaluate(Some(&r), t0 + Duration::from_secs(601), stale, None),
            LockState::Stale
        );
        assert_eq!(evaluate(Some(&r), t0, stale, Some(false)), LockState::Stale);
        assert_eq!(evaluate(Some(&r), t0, stale, Some(true)), LockState::Held);
        let mut bad = r.clone();
        bad.refreshed = "yesterday".into();
        assert_eq!(evaluate(Some(&bad), t0, stale, None), LockState::Stale);
        assert_eq!(r.owner_host_pid(), Some(("hn", 123)));
    }
}
