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
//! - Bounded: when a run begins, the oldest journals go beyond
//!   [`LocalHistory::keep`] runs or [`LocalHistory::max_bytes`] in all.
//! - Blocking file I/O: called from blocking threads (the recorder's
//!   writer, `spawn_blocking`), never on the async runtime.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::entry::{HistoryEntry, RunStatus, ServerRecord};
use agentsadm_types::ids::RunId;

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
    #[serde(default)]
    pub error: Option<String>,
    /// Service defaults put back by a halt.
    #[serde(default)]
    pub put_back: Vec<String>,
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
            error: entry.error.clone(),
            put_back: entry
                .plan
                .service_changes
                .iter()
                .filter(|c| c.put_back)
                .map(|c| c.component.clone())
                .collect(),
        }
    }

    fn apply(self, entry: &mut HistoryEntry) {
        entry.ended = Some(self.ended);
        entry.status = self.status;
        entry.elapsed_s = self.elapsed_s;
        entry.exit_status = self.exit_status;
        entry.halted = self.halted;
        entry.error = self.error;
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

    /// Every journal, oldest first. Unreadable files and lines are left
    /// out (logged): the history never stops a command.
    pub fn read_all(&self) -> Vec<Journal> {
        let mut paths = self.journal_paths();
        paths.sort();
        paths.iter().filter_map(|p| read_journal(p)).collect()
    }

    fn journal_paths(&self) -> Vec<PathBuf> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect()
    }

    /// Remove the oldest journals beyond the bounds; returns how many.
    pub fn prune(&self) -> usize {
        let mut files: Vec<(PathBuf, u64)> = self
            .journal_paths()
            .into_iter()
            .map(|p| {
                let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                (p, len)
            })
            .collect();
        // Newest first: keep while within both bounds.
        files.sort_by(|a, b| b.0.cmp(&a.0));
        let mut total = 0u64;
        let mut removed = 0;
        for (i, (path, len)) in files.iter().enumerate() {
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

/// A journal folded into its entry; `None` without a readable begin line.
fn read_journal(path: &Path) -> Option<Journal> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read a run history journal");
            return None;
        }
    };
    let mut journal: Option<Journal> = None;
    for (n, raw) in text.lines().enumerate() {
        let line: Line = match serde_json::from_str(raw) {
            Ok(l) => l,
            Err(e) => {
                // The last line of a run killed while writing is torn.
                tracing::debug!(path = %path.display(), line = n + 1, error = %e, "history line left out");
                continue;
            }
        };
        match (line, journal.as_mut()) {
            (Line::Begin(entry), None) => {
                journal = Some(Journal {
                    path: path.to_path_buf(),
                    entry: *entry,
                    ended: false,
                    mirrored: false,
                })
            }
            (Line::Server(record), Some(j)) => j.entry.record_server(*record),
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
}
