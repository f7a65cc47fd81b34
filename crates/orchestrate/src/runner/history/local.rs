//! The headnode's own copy of the history: a directory of append-only
//! journals, one per run (`<started>-<run id>.jsonl`), as sdcadm kept one
//! JSON file per run under `/var/sdcadm/history`.
//!
//! - Append-only and crash-safe: a run's journal gets one line when it
//!   begins (`{"begin": entry}`), one per server as it finishes
//!   (`{"server": record}`), one when it ends (`{"end": ...}`), and one
//!   once SAPI has the final entry (`{"mirrored": true}`). Each line is one
//!   `write` of the whole line on a file opened for appending, then
//!   `fsync`: a kill -9 loses at most the line being written, and a torn
//!   last line is ignored when reading. A journal without an end is a run
//!   that is still going or was interrupted ([`super::settle`] decides).
//! - Bounded: when a run begins, the oldest journals (by the start their
//!   begin line records, never by name) go beyond [`LocalHistory::keep`]
//!   runs or [`LocalHistory::max_bytes`] in all.
//! - Read as hostile: only regular files (a FIFO or a link named
//!   `*.jsonl` is never opened), streamed line by line up to a bound, a
//!   bad byte costing its line only, server records indexed by server.
//! - Blocking file I/O: called from blocking threads (the recorder's
//!   writer, `spawn_blocking`), never on the async runtime.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::entry::{HistoryEntry, RunStatus, ServerRecord};
use agentsadm_types::ids::{RunId, ServerUuid};

/// Runs kept on the headnode.
pub const DEFAULT_KEEP: usize = 200;
/// Bytes of journals kept on the headnode, in all.
pub const DEFAULT_MAX_BYTES: u64 = 32 * 1024 * 1024;

/// One journal line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Line {
    Begin(Box<HistoryEntry>),
    Server(Box<ServerRecord>),
    End(Box<End>),
    Mirrored(bool),
}

/// How a run ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct End {
    pub ended: String,
    pub status: RunStatus,
    #[serde(default)]
    pub elapsed_s: Option<f64>,
    #[serde(default)]
    pub exit_status: Option<u8>,
    #[serde(default)]
    pub halted: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_reason: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    /// Service defaults put back by a halt.
    #[serde(default)]
    pub put_back: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_made: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_failed: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub record_servers: Vec<agentsadm_types::ids::ServerUuid>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub params_written: std::collections::BTreeMap<agentsadm_types::ids::ServerUuid, Vec<String>>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl End {
    /// The end of `entry` as it stands.
    pub fn of(entry: &HistoryEntry) -> End {
        End {
            ended: entry
                .ended
                .clone()
                .unwrap_or_else(super::entry::now_rfc3339),
            status: entry.status,
            elapsed_s: entry.elapsed_s,
            exit_status: entry.exit_status,
            halted: entry.halted.clone(),
            halt_reason: entry.halt_reason.clone(),
            error: entry.error.clone(),
            put_back: entry
                .plan
                .service_changes
                .iter()
                .filter(|c| c.put_back)
                .map(|c| c.component.clone())
                .collect(),
            records_made: entry.records_made,
            records_failed: entry.records_failed,
            record_servers: entry.record_servers.clone(),
            params_written: entry.params_written.clone(),
        }
    }

    fn apply(self, entry: &mut HistoryEntry) {
        entry.ended = Some(self.ended);
        entry.status = self.status;
        entry.elapsed_s = self.elapsed_s;
        entry.exit_status = self.exit_status;
        entry.halted = self.halted;
        entry.halt_reason = self.halt_reason;
        entry.error = self.error;
        entry.records_made = self.records_made;
        entry.records_failed = self.records_failed;
        entry.record_servers = self.record_servers;
        entry.params_written = self.params_written;
        for c in &mut entry.plan.service_changes {
            c.put_back = self.put_back.contains(&c.component);
        }
    }
}

/// A journal read back.
#[derive(Clone, Debug)]
pub struct Journal {
    pub path: PathBuf,
    pub entry: HistoryEntry,
    /// An end line was written.
    pub ended: bool,
    /// SAPI has the final entry.
    pub mirrored: bool,
}

/// Why the local history could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("cannot {what} the run history at {path}")]
pub struct LocalError {
    what: &'static str,
    path: PathBuf,
    #[source]
    err: std::io::Error,
}

/// The directory of journals.
#[derive(Clone, Debug)]
pub struct LocalHistory {
    pub dir: PathBuf,
    pub keep: usize,
    pub max_bytes: u64,
}

impl LocalHistory {
    pub fn new(dir: impl Into<PathBuf>) -> LocalHistory {
        LocalHistory {
            dir: dir.into(),
            keep: DEFAULT_KEEP,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// Where the history lives by default: `/var/agentsadm/history` on a
    /// headnode (beside sdcadm's `/var/sdcadm`), else under
    /// `$XDG_STATE_HOME/agentsadm/history` (or `~/.local/state`); under
    /// the process's own state directory when it set one (the demo).
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = agentsadm_types::log::own_state_dir() {
            return Some(dir.join("agentsadm/history"));
        }
        if Path::new("/lib/sdc/config.sh").exists() {
            return Some(PathBuf::from("/var/agentsadm/history"));
        }
        agentsadm_types::log::default_log_dir()
            .and_then(|logs| logs.parent().map(|p| p.join("history")))
    }

    /// The journal of run `id` begun at `started` (RFC 3339): names sort
    /// by start time.
    pub fn path_for(&self, id: RunId, started: &str) -> PathBuf {
        let stamp: String = started
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(15)
            .collect();
        self.dir.join(format!("{stamp}-{id}.jsonl"))
    }

    /// Append one line to a journal and make it durable.
    pub fn append(&self, path: &Path, line: &Line) -> Result<(), LocalError> {
        let err = |what, err| LocalError {
            what,
            path: path.to_path_buf(),
            err,
        };
        let mut text = serde_json::to_string(line).map_err(|e| err("encode", e.into()))?;
        text.push('\n');
        let new = !path.exists();
        if new {
            std::fs::create_dir_all(&self.dir).map_err(|e| err("create", e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| err("open", e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_data())
            .map_err(|e| err("write", e))?;
        if new {
            // The new name itself must survive a crash.
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Every journal, oldest first (by the start its begin line records).
    /// Unreadable files and lines are left out (logged): the history never
    /// stops a command.
    pub fn read_all(&self) -> Vec<Journal> {
        let cap = self.journal_cap();
        let mut all: Vec<Journal> = self
            .journal_paths()
            .iter()
            .filter_map(|p| read_journal(p, cap))
            .collect();
        all.sort_by(|a, b| {
            (started_key(&a.entry.started), &a.path).cmp(&(started_key(&b.entry.started), &b.path))
        });
        all
    }

    /// The bytes of one journal read at most: the whole history's bound
    /// (a journal over it is damaged; its first part is still listed).
    fn journal_cap(&self) -> u64 {
        self.max_bytes.max(1 << 20)
    }

    /// The regular files named `*.jsonl` (a FIFO, device or link of that
    /// name is not a journal: never opened, never pruned).
    fn journal_paths(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect()
    }

    /// Remove the oldest journals beyond the bounds; returns how many.
    /// Oldest by the start recorded in each journal's begin line, never by
    /// name (a file named in the future must not push real runs out); a
    /// journal with no readable begin line, or one that claims a start
    /// more than a day ahead of this clock, goes first.
    pub fn prune(&self) -> usize {
        let now = super::entry::now_rfc3339();
        let horizon = started_key(&shift_days(&now, 1));
        let mut files: Vec<((u8, String), PathBuf, u64)> = self
            .journal_paths()
            .into_iter()
            .map(|p| {
                let len = std::fs::symlink_metadata(&p).map(|m| m.len()).unwrap_or(0);
                let key = match begin_started(&p) {
                    Some(s) if started_key(&s) <= horizon => (1, started_key(&s)),
                    _ => (0, String::new()),
                };
                (key, p, len)
            })
            .collect();
        // Newest first: keep while within both bounds.
        files.sort_by(|a, b| (&b.0, &b.1).cmp(&(&a.0, &a.1)));
        let mut total = 0u64;
        let mut removed = 0;
        for (i, (_, path, len)) in files.iter().enumerate() {
            total += len;
            if (i >= self.keep.max(1) || total > self.max_bytes)
                && i > 0
                && std::fs::remove_file(path).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }
}

/// The longest line read from a journal (a begin line with its plan is a
/// few KiB; a longer one is damaged and left out).
const LINE_CAP: usize = 4 << 20;

/// A start time as a key that sorts in time order: RFC 3339 in UTC with
/// the same precision sorts as text; anything else sorts first.
fn started_key(started: &str) -> String {
    match humantime::parse_rfc3339_weak(started.trim_end_matches('Z')) {
        Ok(t) => humantime::format_rfc3339_nanos(t).to_string(),
        Err(_) => String::new(),
    }
}

/// `now` (RFC 3339) plus `days`.
fn shift_days(now: &str, days: u64) -> String {
    match humantime::parse_rfc3339_weak(now.trim_end_matches('Z')) {
        Ok(t) => humantime::format_rfc3339_nanos(t + std::time::Duration::from_secs(days * 86_400))
            .to_string(),
        Err(_) => now.to_string(),
    }
}

/// The `started` of a journal's begin line (its first line).
fn begin_started(path: &Path) -> Option<String> {
    let mut lines = agentsadm_types::bounded::Lines::open(path, LINE_CAP as u64, LINE_CAP)
        .ok()
        .flatten()?;
    match serde_json::from_str::<Line>(&lines.next()?.ok()?).ok()? {
        Line::Begin(e) => Some(e.started),
        _ => None,
    }
}

/// A journal folded into its entry; `None` without a readable begin line.
/// Streamed line by line (a journal of any size costs one line of memory
/// beyond its entry), at most `cap` bytes; a bad byte spoils its line only;
/// server records are indexed by server, so each is one lookup.
fn read_journal(path: &Path, cap: u64) -> Option<Journal> {
    let lines = match agentsadm_types::bounded::Lines::open(path, cap, LINE_CAP) {
        Ok(Some(l)) => l,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read a run history journal");
            return None;
        }
    };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.len() > cap) {
        tracing::warn!(path = %path.display(), cap, "a run history journal is over its bound; only its first part is read");
    }
    let mut journal: Option<Journal> = None;
    let mut index: BTreeMap<ServerUuid, usize> = BTreeMap::new();
    for (n, raw) in lines.enumerate() {
        let Ok(raw) = raw else {
            tracing::warn!(path = %path.display(), line = n + 1, "cannot read a run history journal further");
            break;
        };
        let line: Line = match serde_json::from_str(&raw) {
            Ok(l) => l,
            Err(e) => {
                // The last line of a run killed while writing is torn.
                tracing::debug!(path = %path.display(), line = n + 1, error = %e, "history line left out");
                continue;
            }
        };
        match (line, journal.as_mut()) {
            (Line::Begin(entry), None) => {
                index = entry
                    .servers
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.server.map(|u| (u, i)))
                    .rev()
                    .collect();
                journal = Some(Journal {
                    path: path.to_path_buf(),
                    entry: *entry,
                    ended: false,
                    mirrored: false,
                })
            }
            (Line::Server(record), Some(j)) => record_indexed(&mut j.entry, &mut index, *record),
            (Line::End(end), Some(j)) => {
                end.apply(&mut j.entry);
                j.ended = true;
                j.mirrored = false;
            }
            (Line::Mirrored(m), Some(j)) => j.mirrored = m,
            _ => {}
        }
    }
    journal
}

/// [`HistoryEntry::record_server`] with an index by server: a later record
/// of a server replaces its earlier one in one lookup, not a scan.
fn record_indexed(
    entry: &mut HistoryEntry,
    index: &mut BTreeMap<ServerUuid, usize>,
    record: ServerRecord,
) {
    match record.server.and_then(|u| index.get(&u).copied()) {
        Some(i) => entry.servers[i] = record,
        None => {
            if let Some(u) = record.server {
                index.insert(u, entry.servers.len());
            }
            entry.servers.push(record);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::ids::ServerUuid;

    fn entry(n: u128, started: &str) -> HistoryEntry {
        HistoryEntry {
            id: Some(RunId::from_u128(n)),
            operation: "update vm-agent".into(),
            started: started.into(),
            ..HistoryEntry::default()
        }
    }

    #[test]
    fn a_torn_last_line_is_left_out_and_a_run_without_end_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let h = LocalHistory::new(dir.path());
        let e = entry(1, "2026-01-02T03:04:05.000Z");
        let path = h.path_for(RunId::from_u128(1), &e.started);
        h.append(&path, &Line::Begin(Box::new(e))).unwrap();
        let record = ServerRecord {
            server: Some(ServerUuid::from_u128(7)),
            hostname: "cn7".into(),
            outcome: "succeeded".into(),
            ..ServerRecord::default()
        };
        h.append(&path, &Line::Server(Box::new(record))).unwrap();
        // A kill -9 in the middle of the next line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"server\": {\"hostn")
            .unwrap();
        let all = h.read_all();
        assert_eq!(all.len(), 1);
        assert!(!all[0].ended);
        assert_eq!(all[0].entry.servers.len(), 1);
        assert_eq!(all[0].entry.servers[0].hostname, "cn7");
        assert!(
            path.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("20260102T030405")
        );
    }

    #[test]
    fn pruning_keeps_the_newest_runs_within_both_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = LocalHistory::new(dir.path());
        h.keep = 3;
        for n in 0..5u128 {
            let started = format!("2026-01-0{}T00:00:00.000Z", n + 1);
            let e = entry(n, &started);
            let path = h.path_for(RunId::from_u128(n), &started);
            h.append(&path, &Line::Begin(Box::new(e))).unwrap();
        }
        assert_eq!(h.prune(), 2);
        let ids: Vec<RunId> = h.read_all().iter().filter_map(|j| j.entry.id).collect();
        assert_eq!(ids, [2u128, 3, 4].map(RunId::from_u128).to_vec());
        // A byte bound smaller than one journal still keeps the newest.
        h.max_bytes = 1;
        assert_eq!(h.prune(), 2);
        assert_eq!(h.read_all().len(), 1);
    }

    fn begin(h: &LocalHistory, n: u128, started: &str) -> PathBuf {
        let path = h.path_for(RunId::from_u128(n), started);
        h.append(&path, &Line::Begin(Box::new(entry(n, started))))
            .unwrap();
        path
    }

    fn mkfifo(p: &Path) {
        let made = std::process::Command::new("mkfifo").arg(p).status();
        assert!(made.unwrap().success(), "mkfifo {}", p.display());
    }

    #[test]
    fn fifos_links_and_bad_bytes_cost_nothing_but_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let h = LocalHistory::new(dir.path());
        let path = begin(&h, 1, "2026-01-02T03:04:05.000Z");
        for n in [7u128, 8] {
            let record = ServerRecord {
                server: Some(ServerUuid::from_u128(n)),
                hostname: format!("cn{n}"),
                outcome: "succeeded".into(),
                ..ServerRecord::default()
            };
            h.append(&path, &Line::Server(Box::new(record))).unwrap();
        }
        // A bad byte in cn7's line: replaced, the rest of the journal read.
        let mut text = std::fs::read(&path).unwrap();
        let at = text.windows(3).position(|w| w == b"cn7").unwrap();
        text[at + 1] = 0xff;
        std::fs::write(&path, &text).unwrap();
        mkfifo(&dir.path().join("20270101T000000-fifo.jsonl"));
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("20270101T000000-zero.jsonl"))
            .unwrap();
        let all = h.read_all();
        assert_eq!(all.len(), 1);
        let hosts: Vec<&str> = all[0]
            .entry
            .servers
            .iter()
            .map(|s| s.hostname.as_str())
            .collect();
        assert_eq!(hosts, ["c\u{fffd}7", "cn8"]);
        // Neither the FIFO nor the link is a journal to prune.
        let mut h = h;
        h.keep = 1;
        assert_eq!(h.prune(), 0);
        assert!(std::fs::symlink_metadata(dir.path().join("20270101T000000-fifo.jsonl")).is_ok());
    }

    #[test]
    fn a_later_record_of_a_server_replaces_its_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let h = LocalHistory::new(dir.path());
        let path = begin(&h, 1, "2026-01-02T03:04:05.000Z");
        for (n, outcome) in [(7u128, "running"), (8, "running"), (7, "succeeded")] {
            let record = ServerRecord {
                server: Some(ServerUuid::from_u128(n)),
                outcome: outcome.into(),
                ..ServerRecord::default()
            };
            h.append(&path, &Line::Server(Box::new(record))).unwrap();
        }
        let e = &h.read_all()[0].entry;
        let got: Vec<(Option<ServerUuid>, &str)> = e
            .servers
            .iter()
            .map(|s| (s.server, s.outcome.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(ServerUuid::from_u128(7)), "succeeded"),
                (Some(ServerUuid::from_u128(8)), "running")
            ]
        );
    }

    #[test]
    fn future_named_journals_do_not_prune_real_history() {
        let dir = tempfile::tempdir().unwrap();
        let h = LocalHistory::new(dir.path());
        for n in 0..3u128 {
            begin(&h, n, &format!("2026-01-0{}T00:00:00.000Z", n + 1));
        }
        // 250 files named after the year 9999: half with no begin line,
        // half recording a start in the past or far in the future.
        for n in 0..250u128 {
            let name = dir.path().join(format!(
                "99991231T{n:06}-{}.jsonl",
                RunId::from_u128(1000 + n)
            ));
            let body = match n % 3 {
                0 => "not json\n".to_string(),
                1 => {
                    serde_json::to_string(&Line::Begin(Box::new(entry(
                        1000 + n,
                        "2020-01-01T00:00:00.000Z",
                    ))))
                    .unwrap()
                        + "\n"
                }
                _ => {
                    serde_json::to_string(&Line::Begin(Box::new(entry(
                        1000 + n,
                        "9999-12-31T00:00:00.000Z",
                    ))))
                    .unwrap()
                        + "\n"
                }
            };
            std::fs::write(name, body).unwrap();
        }
        assert_eq!(h.prune(), 53);
        let ids: Vec<RunId> = h.read_all().iter().filter_map(|j| j.entry.id).collect();
        for n in 0..3u128 {
            assert!(ids.contains(&RunId::from_u128(n)), "run {n} was pruned");
        }
    }
}
