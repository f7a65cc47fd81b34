//! `agentsadm bench journal`: what reading a large run history costs
//! (issue 32). A history directory holding one journal of `--lines`
//! server records (each server recorded twice, as a rollout records it
//! when it starts and when it ends, with one step each) is read the way
//! `history` and `update -n` read it (every journal folded, then the
//! durations the planner takes from the newest runs).
//!
//! The same run also folds `--compare-lines` of those records both ways:
//! the indexed reader's, and one record at a time through
//! [`HistoryEntry::record_server`] (a scan of the servers so far, the
//! reader before issue 32), and prints the ratio.

use std::time::Instant;

use serde_json::json;

use agentsadm_orchestrate::history::local::Line;
use agentsadm_orchestrate::history::{
    HistoryEntry, LocalHistory, ServerRecord, StepRecord, durations_of,
};
use agentsadm_types::ids::{RunId, ServerUuid};

/// Options of `agentsadm bench journal`.
#[derive(clap::Args, Clone, Debug)]
pub struct JournalBenchArgs {
    /// Server records in the journal read as `history` reads it.
    #[arg(long, default_value_t = 100_000)]
    pub lines: usize,
    /// Records folded both ways for the ratio (the scan is quadratic).
    #[arg(long, default_value_t = 10_000)]
    pub compare_lines: usize,
}

impl Default for JournalBenchArgs {
    fn default() -> Self {
        JournalBenchArgs {
            lines: 100_000,
            compare_lines: 10_000,
        }
    }
}

/// A scratch directory removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(what: &str) -> std::io::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!(
            "agentsadm-bench-journal-{}-{what}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Record `i` of a journal: server `i / 2`, its second record ending it.
fn record(i: usize) -> ServerRecord {
    let done = i % 2 == 1;
    ServerRecord {
        server: Some(ServerUuid::from_u128(1 + (i / 2) as u128)),
        hostname: format!("cn{}", i / 2),
        outcome: if done { "succeeded" } else { "running" }.into(),
        elapsed_s: 20.0,
        steps: vec![StepRecord {
            component: "vm-agent".into(),
            action: "upgrade".into(),
            status: if done { "done" } else { "running" }.into(),
            elapsed_s: 20.0 + (i % 7) as f64,
            ..StepRecord::default()
        }],
        ..ServerRecord::default()
    }
}

/// A history directory with one journal of `lines` records.
fn write_history(dir: &std::path::Path, lines: usize) -> anyhow::Result<LocalHistory> {
    let h = LocalHistory::new(dir);
    let started = "2026-01-02T03:04:05.000Z";
    let entry = HistoryEntry {
        id: Some(RunId::from_u128(1)),
        operation: "update vm-agent".into(),
        started: started.into(),
        ..HistoryEntry::default()
    };
    let path = h.path_for(RunId::from_u128(1), started);
    let mut text = serde_json::to_string(&Line::Begin(Box::new(entry)))?;
    text.push('\n');
    for i in 0..lines {
        text.push_str(&serde_json::to_string(&Line::Server(Box::new(record(i))))?);
        text.push('\n');
    }
    std::fs::write(&path, text)?;
    Ok(h)
}

pub async fn run(args: &JournalBenchArgs) -> anyhow::Result<serde_json::Value> {
    let tmp = Scratch::new("large")?;
    let h = write_history(&tmp.0, args.lines)?;
    let bytes = std::fs::read_dir(&tmp.0)?
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum::<u64>();
    let t = Instant::now();
    let journals = tokio::task::spawn_blocking(move || h.read_all()).await?;
    let entries: Vec<HistoryEntry> = journals.into_iter().map(|j| j.entry).collect();
    let durations = durations_of(&entries);
    let read_s = t.elapsed().as_secs_f64();
    let servers = entries.first().map(|e| e.servers.len()).unwrap_or(0);
    anyhow::ensure!(
        servers == args.lines.div_ceil(2),
        "the journal read back has {servers} servers, expected {}",
        args.lines.div_ceil(2)
    );
    drop(durations);

    // The ratio: the same records folded both ways.
    let n = args.compare_lines.min(args.lines);
    let small = Scratch::new("small")?;
    let hs = write_history(&small.0, n)?;
    let t = Instant::now();
    let indexed = tokio::task::spawn_blocking(move || hs.read_all()).await?;
    let indexed_s = t.elapsed().as_secs_f64();
    let records: Vec<ServerRecord> = (0..n).map(record).collect();
    let t = Instant::now();
    let mut scanned = HistoryEntry::default();
    for r in records {
        scanned.record_server(r);
    }
    let scanned_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        indexed.first().map(|j| j.entry.servers.len()) == Some(scanned.servers.len()),
        "the two folds disagree"
    );
    let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
    Ok(json!({
        "lines": args.lines,
        "journal_mb": r3(bytes as f64 / 1e6),
        "history_read_s": r3(read_s),
        "compare_lines": n,
        "indexed_read_s": r3(indexed_s),
        "scan_fold_s": r3(scanned_s),
        "scan_over_indexed": r3(scanned_s / indexed_s.max(1e-9)),
    }))
}
