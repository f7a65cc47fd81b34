//! One orchestrator at a time per datacenter.
//!
//! The lock lives in the SAPI `sdc` application's metadata, one key per
//! orchestrator ([`board`]): `agentsadm_lock_claim_<token>` holds who
//! (`user@host:pid`), what, since when, its stage (claim or held) and its
//! generation, a number that only grows (`agentsadm_lock_generation` keeps
//! the highest ever handed out), so that of two records the later holder
//! is known.
//!
//! SAPI has no compare-and-set, but it merges an update's metadata keys,
//! so writes to different keys never undo each other. Taking the lock:
//!
//! 1. read every lock key: a live lock of someone else refuses (naming
//!    it); a live claim (someone taking it right now) is waited for; a
//!    record that cannot be read, or is dated in the future, is reported
//!    (nothing is written); stale ones are broken, with a warning;
//! 2. write our own claim (generation = highest seen + 1);
//! 3. read again: we hold the lock only if no other live record is there.
//!    Of two claims that see each other, the one with the smaller token
//!    stays and reads again, the other withdraws.
//!
//! Whichever way SAPI orders two contenders' writes, the later writer's
//! read (made after its write) sees the earlier one's record, which stays
//! until its owner withdraws or releases: two orchestrators never both
//! hold the lock, however slow SAPI is. The settle pause only saves
//! rounds.
//!
//! Holding it, the run confirms the lock ([`DcLock::confirm`], one read)
//! before the changes it makes: its record gone (an operator's cleanup, a
//! colleague's `--break-lock`) or a held record of a higher generation
//! means it was lost. A confirmation that saw no one else's record stands
//! for [`DcLock::fence_window`] (half the settle pause) from the moment its
//! read was sent: every acquisition, `--break-lock` included, writes its
//! claim and waits the settle pause before it reads again and holds, so
//! whoever takes the lock over holds it only after that window closed
//! (see [`holding::LockFence`]). [`DcLock::refresh`] records that the
//! holder is alive every [`LockOptions::refresh_every`]; a record not
//! refreshed for [`LockOptions::stale_after`], or whose owner process on
//! this host is gone, is stale. `--break-lock` breaks whatever is there.

pub mod board;
mod sapi;
pub mod sdcadm;

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use agentsadm_api::ApiError;

pub use board::{Entry, LockBoard, LockRecord, Stage, Standing, Unreadable, standing};
pub use sapi::SapiLockStore;
pub use sdcadm::{SdcadmLock, SdcadmLockError, SdcadmLockOptions};
// Work outside a run's executor (self-update) holds the lock through it.
pub(crate) mod holding;
pub use holding::{LockFence, hold};

use board::ECHO;

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
        err: Box<ApiError>,
    },
    #[error(transparent)]
    Sdcadm(#[from] SdcadmLockError),
    #[error("the orchestrator lock was taken over by {owner} while this run held it")]
    Lost { owner: String },
    #[error(
        "the orchestrator lock record {key} in SAPI (metadata of the sdc application) cannot be read ({why}: {excerpt}); nothing was changed: if no other agentsadm is running, pass --break-lock to remove it"
    )]
    Unreadable {
        key: String,
        why: String,
        excerpt: String,
    },
    #[error(
        "the orchestrator lock record of {owner} ({operation:?}) is dated {refreshed}, in the future of this host's clock (is a clock wrong?); nothing was changed: if that agentsadm is not running, pass --break-lock"
    )]
    FutureDated {
        owner: String,
        operation: String,
        refreshed: String,
    },
    #[error(
        "other agentsadm processes kept taking the orchestrator lock at the same time ({rounds} rounds); nothing was changed: run the command again"
    )]
    Contended { rounds: u32 },
}

impl LockError {
    fn held(r: &LockRecord) -> LockError {
        LockError::Held {
            owner: r.owner_shown(),
            operation: agentsadm_types::output::clip(&r.operation, ECHO),
            started: agentsadm_types::output::clip(&r.started, 40),
            refreshed: agentsadm_types::output::clip(&r.refreshed, 40),
        }
    }

    fn unreadable(u: &Unreadable) -> LockError {
        LockError::Unreadable {
            key: u.key.clone(),
            why: u.why.clone(),
            excerpt: u.excerpt.clone(),
        }
    }

    fn future(r: &LockRecord) -> LockError {
        LockError::FutureDated {
            owner: r.owner_shown(),
            operation: agentsadm_types::output::clip(&r.operation, ECHO),
            refreshed: agentsadm_types::output::clip(&r.refreshed, 40),
        }
    }

    /// SAPI is out (not reached, or a gateway answered 502-504 for it),
    /// as opposed to answering about the lock: the lock is unconfirmed,
    /// not lost.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, LockError::Api { err, .. } if err.is_outage())
    }
}

/// Where the lock records live.
pub trait LockStore: Send + Sync {
    /// Every lock key.
    fn read(&self) -> BoxFuture<'_, Result<LockBoard, LockError>>;
    /// Write one record under its own key ([`LockRecord::key`]).
    fn write<'a>(&'a self, record: &'a LockRecord) -> BoxFuture<'a, Result<(), LockError>>;
    /// Remove these keys.
    fn remove<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<(), LockError>>;
    /// Record the highest generation handed out.
    fn mark_generation(&self, generation: u64) -> BoxFuture<'_, Result<(), LockError>>;
}

/// Timing of the lock protocol.
#[derive(Clone, Debug)]
pub struct LockOptions {
    /// Pause between writing a claim and reading the records back.
    pub settle: Duration,
    pub refresh_every: Duration,
    /// A held lock not refreshed for this long is broken automatically.
    pub stale_after: Duration,
    /// A claim (an orchestrator taking the lock) not refreshed for this
    /// long is broken automatically: taking the lock takes seconds.
    pub claim_stale_after: Duration,
    /// Break whatever lock is there (`--break-lock`).
    pub break_lock: bool,
    /// Reads of the records while taking the lock before giving up.
    pub rounds: u32,
    /// Attempts to remove the record when the run ends, and the first
    /// pause between them (doubling): SAPI may be down right then.
    pub release_attempts: u32,
    pub release_backoff: Duration,
    /// On a headnode: hold sdcadm's lock too, for as long as this one
    /// ([`sdcadm`]); `None` elsewhere.
    pub sdcadm: Option<SdcadmLockOptions>,
    /// Who takes it.
    pub login: Login,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            settle: Duration::from_millis(500),
            refresh_every: Duration::from_secs(60),
            stale_after: Duration::from_secs(10 * 60),
            claim_stale_after: Duration::from_secs(2 * 60),
            break_lock: false,
            rounds: 12,
            release_attempts: 6,
            release_backoff: Duration::from_secs(1),
            sdcadm: None,
            login: Login::default(),
        }
    }
}

/// The login name this process runs as, which the lock and the history
/// name their owner by. The command line resolves it (`USER`, else
/// `LOGNAME`: its settings) and hands it in, because the orchestrator reads
/// no environment (`tests/architecture`); a caller that names no one (a
/// test, a benchmark) is `root`, as the command line is when neither
/// variable is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login(pub String);

impl Default for Login {
    fn default() -> Self {
        Login("root".to_string())
    }
}

impl Login {
    /// Who we are on the lock: `user@host:pid` (the host and pid tell
    /// whether the holder still runs: [`owner_alive`]).
    pub fn owner(&self) -> String {
        format!(
            "{}@{}:{}",
            self.0,
            agentsadm_types::log::hostname(),
            std::process::id()
        )
    }
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
    let (host, pid) = board::owner_host_pid(owner)?;
    if host != agentsadm_types::log::hostname() {
        return None;
    }
    Some(std::path::Path::new(&format!("/proc/{pid}")).exists())
}

fn standing_now(r: &LockRecord, options: &LockOptions) -> Standing {
    standing(
        r,
        SystemTime::now(),
        options.stale_after,
        options.claim_stale_after,
        local_owner_alive(r),
    )
}

/// What the records found before writing ours mean.
enum Found {
    /// Nothing live: take it, breaking these stale records (and, with
    /// `--break-lock`, everything else that was there).
    Free {
        to_break: Vec<Entry>,
        unreadable: Vec<Unreadable>,
    },
    /// Someone is taking it right now: look again shortly.
    Claimed(LockRecord),
}

fn assess(board: &LockBoard, options: &LockOptions) -> Result<Found, LockError> {
    if options.break_lock {
        return Ok(Found::Free {
            to_break: board.entries.clone(),
            unreadable: board.unreadable.clone(),
        });
    }
    if let Some(u) = board.unreadable.first() {
        return Err(LockError::unreadable(u));
    }
    let mut to_break = Vec::new();
    let mut claimed = None;
    for e in &board.entries {
        match standing_now(&e.record, options) {
            Standing::Future => return Err(LockError::future(&e.record)),
            Standing::Stale => to_break.push(e.clone()),
            Standing::Live if e.record.stage == Stage::Held => {
                return Err(LockError::held(&e.record));
            }
            Standing::Live => claimed = Some(e.record.clone()),
        }
    }
    Ok(match claimed {
        Some(c) => Found::Claimed(c),
        None => Found::Free {
            to_break,
            unreadable: Vec::new(),
        },
    })
}

/// Refuse early, before a long plan, when another agentsadm holds the
/// lock or its records cannot be read (unless `--break-lock`); [`acquire`]
/// still takes it properly afterwards. Writes nothing.
pub async fn check_free(store: &dyn LockStore, options: &LockOptions) -> Result<(), LockError> {
    if options.break_lock {
        return Ok(());
    }
    assess(&store.read().await?, options).map(|_| ())
}

/// A stale or broken record this acquisition removed (for a warning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    pub owner: String,
    pub operation: String,
    pub refreshed: String,
}

impl Broken {
    fn of(r: &LockRecord) -> Broken {
        Broken {
            owner: r.owner_shown(),
            operation: agentsadm_types::output::clip(&r.operation, ECHO),
            refreshed: agentsadm_types::output::clip(&r.refreshed, 40),
        }
    }

    fn unreadable(u: &Unreadable) -> Broken {
        Broken {
            owner: format!("an unreadable record {} ({})", u.key, u.why),
            operation: u.excerpt.clone(),
            refreshed: "never".to_string(),
        }
    }
}

/// A held lock. Confirm it with [`DcLock::confirm`], refresh it with
/// [`DcLock::refresh`], release it with [`DcLock::release`].
pub struct DcLock<'a> {
    store: &'a dyn LockStore,
    record: Mutex<LockRecord>,
    token: String,
    generation: u64,
    /// [`LockOptions::release_attempts`] and [`LockOptions::release_backoff`].
    release: (u32, Duration),
    /// [`LockOptions::settle`]: how long any contender waits between its
    /// claim and holding the lock.
    settle: Duration,
    /// The records this acquisition broke (stale, or `--break-lock`).
    pub broke: Vec<Broken>,
    /// sdcadm's lock, held as long as this one (dropped with it).
    _sdcadm: Option<SdcadmLock>,
}

impl std::fmt::Debug for DcLock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcLock")
            .field("token", &self.token)
            .field("generation", &self.generation)
            .finish()
    }
}

fn now_text(now: SystemTime) -> String {
    humantime::format_rfc3339_seconds(now).to_string()
}

/// A pause of `base` plus up to half of it again, so that contenders
/// drift apart.
fn jittered(base: Duration) -> Duration {
    let spread = (base.as_micros() as u64 / 2).max(1);
    let extra = (uuid::Uuid::new_v4().as_u128() % u128::from(spread)) as u64;
    base + Duration::from_micros(extra)
}

/// Take the lock for `operation`, as `owner`. See the module
/// documentation for the protocol.
pub async fn acquire<'a>(
    store: &'a dyn LockStore,
    owner: &str,
    operation: &str,
    options: &LockOptions,
) -> Result<DcLock<'a>, LockError> {
    // sdcadm's first: a local lock that sdcadm may hold for a while (the
    // wait is bounded), and nothing is written to SAPI while it does.
    let sdcadm = match &options.sdcadm {
        Some(o) => Some(SdcadmLock::acquire(o).await?),
        None => None,
    };
    let rounds = options.rounds.max(1);
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut round = 0;
    while round < rounds {
        round += 1;
        let board = store.read().await?;
        let (to_break, unreadable) = match assess(&board, options)? {
            Found::Claimed(other) => {
                if round == rounds {
                    return Err(LockError::held(&other));
                }
                tokio::time::sleep(jittered(options.settle * 2)).await;
                continue;
            }
            Found::Free {
                to_break,
                unreadable,
            } => (to_break, unreadable),
        };
        let now = now_text(SystemTime::now());
        let mut record = LockRecord {
            owner: owner.to_string(),
            token: token.clone(),
            generation: board.max_generation() + 1,
            stage: Stage::Claim,
            operation: operation.to_string(),
            started: now.clone(),
            refreshed: now,
        };
        store.write(&record).await?;
        let claim = Claim {
            store,
            options,
            record: &record,
            to_break: &to_break,
            unreadable: &unreadable,
        };
        match claim.settle(&mut round, rounds).await? {
            Settled::Alone => {}
            Settled::Withdrew => {
                tokio::time::sleep(jittered(options.settle * 3)).await;
                continue;
            }
        }
        let mut keys: Vec<String> = to_break.iter().map(|e| e.key.clone()).collect();
        keys.extend(unreadable.iter().map(|u| u.key.clone()));
        if !keys.is_empty() {
            store.remove(&keys).await?;
        }
        record.stage = Stage::Held;
        store.write(&record).await?;
        store.mark_generation(record.generation).await?;
        let mut broke: Vec<Broken> = to_break.iter().map(|e| Broken::of(&e.record)).collect();
        broke.extend(unreadable.iter().map(Broken::unreadable));
        return Ok(DcLock {
            store,
            generation: record.generation,
            record: Mutex::new(record),
            token,
            release: (options.release_attempts.max(1), options.release_backoff),
            settle: options.settle,
            broke,
            _sdcadm: sdcadm,
        });
    }
    Err(LockError::Contended { rounds })
}

/// Our claim, written: what it is up against.
struct Claim<'c> {
    store: &'c dyn LockStore,
    options: &'c LockOptions,
    record: &'c LockRecord,
    to_break: &'c [Entry],
    unreadable: &'c [Unreadable],
}

enum Settled {
    /// No other live record: the lock is ours.
    Alone,
    /// Another claim goes first: ours is withdrawn.
    Withdrew,
}

impl Claim<'_> {
    /// Read back until ours is the only live claim, or we withdraw (or
    /// someone else holds it).
    async fn settle(&self, round: &mut u32, rounds: u32) -> Result<Settled, LockError> {
        loop {
            tokio::time::sleep(self.options.settle).await;
            let board = self.store.read().await?;
            let Some(_) = board.find(&self.record.token) else {
                // Removed between our write and read: a colleague's
                // --break-lock. Theirs is the lock.
                return Err(match board.holder() {
                    Some(h) => LockError::held(h),
                    None => LockError::Lost {
                        owner: "(removed by another process)".to_string(),
                    },
                });
            };
            let breaking = |key: &str| {
                self.to_break.iter().any(|e| e.key == key)
                    || self.unreadable.iter().any(|u| u.key == key)
            };
            if let Some(u) = board.unreadable.iter().find(|u| !breaking(&u.key)) {
                self.withdraw().await?;
                return Err(LockError::unreadable(u));
            }
            let rivals: Vec<&LockRecord> = board
                .entries
                .iter()
                .filter(|e| e.record.token != self.record.token && !breaking(&e.key))
                .map(|e| &e.record)
                .filter(|r| standing_now(r, self.options) != Standing::Stale)
                .collect();
            if rivals.is_empty() {
                return Ok(Settled::Alone);
            }
            if let Some(held) = rivals.iter().find(|r| r.stage == Stage::Held) {
                self.withdraw().await?;
                return Err(LockError::held(held));
            }
            let first = rivals.iter().all(|r| self.record.token < r.token);
            if !first || *round >= rounds {
                self.withdraw().await?;
                return Ok(Settled::Withdrew);
            }
            *round += 1;
        }
    }

    async fn withdraw(&self) -> Result<(), LockError> {
        self.store.remove(&[self.record.key()]).await
    }
}

impl DcLock<'_> {
    /// The record as last written.
    pub fn record(&self) -> LockRecord {
        self.record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// This holder's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the lock is still ours (one read): [`LockError::Lost`] if
    /// our record is gone or a later holder's record is there.
    pub async fn confirm(&self) -> Result<(), LockError> {
        self.confirm_alone().await.map(drop)
    }

    /// [`DcLock::confirm`], also saying whether the read found our record
    /// alone (`true`): no other record, so no one was taking the lock
    /// then, and whoever starts now holds it only after the settle pause.
    pub async fn confirm_alone(&self) -> Result<bool, LockError> {
        let board = self.store.read().await?;
        self.judge(&board)?;
        Ok(board.entries.iter().all(|e| e.record.token == self.token)
            && board.unreadable.is_empty())
    }

    /// How long a confirmation that found our record alone stands, from
    /// the moment its read was sent: half the settle pause (every
    /// contender, `--break-lock` too, writes its claim and then waits the
    /// settle pause before it holds the lock; the other half is margin for
    /// the two hosts' clocks and the time a request takes to leave).
    pub fn fence_window(&self) -> Duration {
        self.settle / 2
    }

    fn judge(&self, board: &LockBoard) -> Result<(), LockError> {
        if board.find(&self.token).is_none() {
            return Err(LockError::Lost {
                owner: board
                    .holder()
                    .map(LockRecord::owner_shown)
                    .unwrap_or_else(|| "(its record was removed)".to_string()),
            });
        }
        if let Some(later) = board.entries.iter().map(|e| &e.record).find(|r| {
            r.token != self.token && r.stage == Stage::Held && r.generation > self.generation
        }) {
            return Err(LockError::Lost {
                owner: later.owner_shown(),
            });
        }
        Ok(())
    }

    /// Confirm, then record that we are alive.
    pub async fn refresh(&self) -> Result<(), LockError> {
        let board = self.store.read().await?;
        self.judge(&board)?;
        let record = {
            let mut r = self.record.lock().unwrap_or_else(|e| e.into_inner());
            r.refreshed = now_text(SystemTime::now());
            r.clone()
        };
        self.store.write(&record).await
    }

    /// Remove our record (whoever holds the lock now: ours is ours), trying
    /// again while SAPI does not answer.
    pub async fn release(self) -> Result<(), LockError> {
        let key = [self.record().key()];
        let (attempts, mut pause) = self.release;
        let mut attempt = 1;
        loop {
            match self.store.remove(&key).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= attempts => return Err(e),
                Err(e) => {
                    tracing::warn!(attempt, error = %agentsadm_types::error::error_chain(&e), "cannot release the orchestrator lock yet; trying again");
                }
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
            attempt += 1;
        }
    }
}
