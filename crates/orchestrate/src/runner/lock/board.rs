//! What the lock keys in the SAPI `sdc` application's metadata say: one
//! record per orchestrator that claims or holds the lock, the generation
//! high-water mark, and whatever is there that cannot be read.
//!
//! SAPI merges an update's top-level metadata keys (and retries Moray etag
//! conflicts), so each orchestrator writing its own key never loses
//! another's write: that is what makes the lock safe without a
//! compare-and-set. A record found here came from another host or another
//! version, so every field is checked and bounded before it is used or
//! echoed.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentsadm_types::output::clip;

/// The key older agentsadm versions kept their single record under (read
/// as a held lock of generation 0, never written).
pub const LEGACY_KEY: &str = "agentsadm_lock";
/// Each orchestrator's record: this prefix and its token.
pub const RECORD_PREFIX: &str = "agentsadm_lock_claim_";
/// The highest generation ever handed out (it only grows).
pub const GENERATION_KEY: &str = "agentsadm_lock_generation";

/// How far ahead of this host's clock a record may be dated before it
/// counts as dated in the future (clocks of headnode zones drift a little).
pub const FUTURE_SKEW: Duration = Duration::from_secs(5 * 60);

/// Longest owner, operation and token accepted from SAPI.
const MAX_FIELD: usize = 512;
/// How much of a value is echoed in messages.
pub(crate) const ECHO: usize = 120;

/// Where an orchestrator's record stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Written, not yet confirmed as the only one: another orchestrator
    /// seeing it waits rather than claims.
    Claim,
    /// The lock: this orchestrator confirmed it was the only one.
    #[default]
    Held,
}

/// One orchestrator's record, as stored in SAPI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// `user@host:pid`.
    pub owner: String,
    pub token: String,
    /// Orders holders: a record with a higher generation was written
    /// later. Never reused (see [`GENERATION_KEY`]).
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub stage: Stage,
    pub operation: String,
    /// RFC 3339.
    pub started: String,
    /// RFC 3339; refreshed while the holder runs.
    pub refreshed: String,
}

impl LockRecord {
    pub(crate) fn refreshed_at(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(&self.refreshed).ok()
    }

    /// The owner's host and pid, if the owner string has that form.
    pub fn owner_host_pid(&self) -> Option<(&str, u32)> {
        owner_host_pid(&self.owner)
    }

    /// The metadata key of this record.
    pub fn key(&self) -> String {
        format!("{RECORD_PREFIX}{}", self.token)
    }

    /// The owner as it may be shown.
    pub fn owner_shown(&self) -> String {
        clip(&self.owner, ECHO)
    }
}

/// The host and pid of an owner string (`user@host:pid`), if it has that
/// form.
pub fn owner_host_pid(owner: &str) -> Option<(&str, u32)> {
    let (user_host, pid) = owner.rsplit_once(':')?;
    let host = user_host
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(user_host);
    Some((host, pid.parse().ok()?))
}

/// A record and the key it was found under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub record: LockRecord,
}

/// A lock key whose value cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub key: String,
    /// What is wrong with it.
    pub why: String,
    /// The start of the value, bounded and escaped.
    pub excerpt: String,
}

/// Every lock key in the metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockBoard {
    pub entries: Vec<Entry>,
    pub unreadable: Vec<Unreadable>,
    /// The high-water mark stored under [`GENERATION_KEY`].
    pub generation: u64,
}

impl LockBoard {
    /// Read the lock keys of an application's metadata. Pure.
    pub fn from_metadata(metadata: &serde_json::Map<String, Value>) -> LockBoard {
        let mut board = LockBoard::default();
        for (key, value) in metadata {
            if key == GENERATION_KEY {
                match value.as_u64() {
                    Some(g) => board.generation = g,
                    None => {
                        board
                            .unreadable
                            .push(unreadable(key, "not a generation number", value))
                    }
                }
                continue;
            }
            if key != LEGACY_KEY && !key.starts_with(RECORD_PREFIX) {
                continue;
            }
            match parse_record(key, value) {
                Ok(record) => board.entries.push(Entry {
                    key: key.clone(),
                    record,
                }),
                Err(why) => board.unreadable.push(unreadable(key, &why, value)),
            }
        }
        board
    }

    /// The highest generation anyone used.
    pub fn max_generation(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.record.generation)
            .chain(std::iter::once(self.generation))
            .max()
            .unwrap_or(0)
    }

    /// The record with this token.
    pub fn find(&self, token: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.record.token == token)
    }

    /// The holder: the held record of the highest generation.
    pub fn holder(&self) -> Option<&LockRecord> {
        self.entries
            .iter()
            .map(|e| &e.record)
            .filter(|r| r.stage == Stage::Held)
            .max_by_key(|r| r.generation)
    }

    /// No record of any kind (readable or not).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.unreadable.is_empty()
    }
}

fn unreadable(key: &str, why: &str, value: &Value) -> Unreadable {
    Unreadable {
        key: clip(key, ECHO),
        why: why.to_string(),
        excerpt: clip(&value.to_string(), ECHO),
    }
}

/// A record, checked: every field within bounds, times readable, and the
/// key its own.
fn parse_record(key: &str, value: &Value) -> Result<LockRecord, String> {
    let record: LockRecord = serde_json::from_value(value.clone())
        .map_err(|e| format!("not a lock record: {}", clip(&e.to_string(), ECHO)))?;
    for (name, field) in [
        ("owner", &record.owner),
        ("token", &record.token),
        ("operation", &record.operation),
    ] {
        if field.len() > MAX_FIELD {
            return Err(format!("its {name} is {} bytes long", field.len()));
        }
    }
    let token_ok = !record.token.is_empty()
        && record
            .token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !token_ok {
        return Err("its token is empty or not plain ASCII".to_string());
    }
    if key != LEGACY_KEY && key != record.key() {
        return Err("its key does not name its token".to_string());
    }
    for (name, t) in [
        ("started", &record.started),
        ("refreshed", &record.refreshed),
    ] {
        if humantime::parse_rfc3339_weak(t).is_err() {
            return Err(format!("its {name} time {:?} is not a time", clip(t, 40)));
        }
    }
    Ok(record)
}

/// What a record found when taking the lock means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Its owner runs (as far as can be told).
    Live,
    /// Not refreshed in time, or its owner process on this host is gone:
    /// broken automatically, with a warning.
    Stale,
    /// Dated ahead of this host's clock by more than [`FUTURE_SKEW`]:
    /// reported, never taken as live for ever nor broken silently.
    Future,
}

/// Decide about a record. `owner_alive`: whether the owner's process
/// exists, when that can be known (owner on this host). A claim goes
/// stale sooner than a held lock: taking the lock takes seconds.
pub fn standing(
    r: &LockRecord,
    now: SystemTime,
    stale_after: Duration,
    claim_stale_after: Duration,
    owner_alive: Option<bool>,
) -> Standing {
    if owner_alive == Some(false) {
        return Standing::Stale;
    }
    // Checked when the record was read; an unreadable time never gets here.
    let Some(t) = r.refreshed_at() else {
        return Standing::Future;
    };
    if t > now + FUTURE_SKEW {
        return Standing::Future;
    }
    let limit = match r.stage {
        Stage::Held => stale_after,
        Stage::Claim => claim_stale_after,
    };
    if now.duration_since(t).unwrap_or(Duration::ZERO) > limit {
        Standing::Stale
    } else {
        Standing::Live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn record(token: &str, refreshed: SystemTime, stage: Stage) -> LockRecord {
        let t = humantime::format_rfc3339_seconds(refreshed).to_string();
        LockRecord {
            owner: "root@hn:123".into(),
            token: token.into(),
            generation: 3,
            stage,
            operation: "update vm-agent".into(),
            started: t.clone(),
            refreshed: t,
        }
    }

    #[test]
    fn standings_of_fresh_stale_dead_and_future_records() {
        let t0 = at(1_800_000_000);
        let (stale, claim) = (Duration::from_secs(600), Duration::from_secs(60));
        let held = record("a", t0, Stage::Held);
        let s = |r: &LockRecord, now, alive| standing(r, now, stale, claim, alive);
        assert_eq!(
            s(&held, t0 + Duration::from_secs(599), None),
            Standing::Live
        );
        assert_eq!(
            s(&held, t0 + Duration::from_secs(601), None),
            Standing::Stale
        );
        assert_eq!(s(&held, t0, Some(false)), Standing::Stale);
        assert_eq!(s(&held, t0, Some(true)), Standing::Live);
        let claimed = record("a", t0, Stage::Claim);
        assert_eq!(
            s(&claimed, t0 + Duration::from_secs(61), None),
            Standing::Stale
        );
        // A minute ahead is clock drift; a year ahead is reported.
        assert_eq!(s(&held, t0 - Duration::from_secs(60), None), Standing::Live);
        assert_eq!(
            s(&held, t0 - Duration::from_secs(365 * 86_400), None),
            Standing::Future
        );
        assert_eq!(held.owner_host_pid(), Some(("hn", 123)));
    }

    #[test]
    fn the_board_reads_records_and_reports_what_it_cannot_read() {
        let t0 = at(1_800_000_000);
        let good = record("abc-1", t0, Stage::Held);
        let mut bad_time = record("abc-2", t0, Stage::Held);
        bad_time.refreshed = "yesterday".into();
        let mut long_owner = record("abc-3", t0, Stage::Held);
        long_owner.owner = "x".repeat(10_000);
        let mut meta = serde_json::Map::new();
        meta.insert(good.key(), serde_json::to_value(&good).unwrap());
        meta.insert(bad_time.key(), serde_json::to_value(&bad_time).unwrap());
        meta.insert(long_owner.key(), serde_json::to_value(&long_owner).unwrap());
        meta.insert(format!("{RECORD_PREFIX}zzz"), json!("\u{1b}[2J garbage"));
        meta.insert(
            format!("{RECORD_PREFIX}other"),
            serde_json::to_value(&good).unwrap(),
        );
        meta.insert(GENERATION_KEY.into(), json!(7));
        meta.insert("unrelated".into(), json!({"owner": 1}));
        let b = LockBoard::from_metadata(&meta);
        assert_eq!(b.entries.len(), 1);
        assert_eq!(b.unreadable.len(), 4, "{:?}", b.unreadable);
        assert!(b.unreadable.iter().all(|u| !u.excerpt.contains('\u{1b}')));
        assert!(b.unreadable.iter().all(|u| u.excerpt.len() < 200));
        assert_eq!(b.max_generation(), 7);
        assert_eq!(b.holder().unwrap().token, "abc-1");
        // A record of an older agentsadm: held, generation 0.
        let legacy = json!({"owner": "root@hn:9", "token": "t", "operation": "update",
            "started": "2026-01-01T00:00:00Z", "refreshed": "2026-01-01T00:00:00Z"});
        let b = LockBoard::from_metadata(&serde_json::Map::from_iter([(
            LEGACY_KEY.to_string(),
            legacy,
        )]));
        assert_eq!(b.holder().unwrap().generation, 0);
    }
}
