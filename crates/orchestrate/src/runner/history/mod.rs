//! The run history: every changing run (update, install, remove, check
//! --fix, adopt, server delete|factory-reset, revert) leaves one entry:
//! who ran it (user, host), when it started and ended, the command line,
//! the plan's changes, and per server and component the image before and
//! after, the outcome, the CNAPI tasks, the time taken and the health
//! gate's verdict.
//!
//! - [`entry`]: the entry.
//! - [`local`]: the headnode's append-only, bounded, crash-safe journals.
//! - [`mirror`]: the copy in SAPI (and why where it is).
//! - [`recorder`]: recording one run, through [`crate::run::Run`], so that
//!   every changing command gets it without doing anything.
//! - [`HistoryStore`]: reading it back (both copies merged) for `agentsadm
//!   history`, `agentsadm revert`, and the durations the planner schedules
//!   from ([`HistoryStore::durations`]).

pub mod entry;
pub mod local;
pub mod mirror;
pub mod recorder;

use std::collections::BTreeMap;
use std::time::Duration;

pub use entry::{HistoryEntry, RunStatus, ServerRecord, StepRecord};
pub use local::LocalHistory;
pub use mirror::SapiHistory;
pub use recorder::{HistorySettings, Recorder, RecordingTee};

use crate::runner::lock::LockRecord;
use agentsadm_plan::Gate;
use agentsadm_plan::timing::{Durations, Sample, SampleOutcome};
use agentsadm_types::error::error_chain;

/// Runs whose step durations feed the planner's estimates (the newest).
pub const DURATION_RUNS: usize = 50;

/// A run that cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("no run {run:?} in the history (see 'agentsadm history' for run ids)")]
    NotFound { run: String },
    #[error("run {run:?} is ambiguous: it starts {ids}; give more of the id")]
    Ambiguous { run: String, ids: String },
}

/// The history as both copies have it.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// Oldest first; runs that died marked interrupted.
    pub entries: Vec<HistoryEntry>,
    /// Why SAPI's copy could not be read (then only this headnode's runs
    /// are listed).
    pub sapi_error: Option<String>,
}

/// Where the history is read from.
#[derive(Clone, Debug, Default)]
pub struct HistoryStore {
    pub local: Option<LocalHistory>,
    pub sapi: Option<SapiHistory>,
}

impl HistoryStore {
    /// Both copies, merged by run: the more complete copy of each wins (an
    /// ended entry over one still open, then the one with more servers).
    /// A run still open is settled: running while its process lives (or,
    /// elsewhere, while it holds the datacenter lock), else interrupted.
    pub async fn list(&self) -> Listing {
        let mut by_id: BTreeMap<agentsadm_types::ids::RunId, HistoryEntry> = BTreeMap::new();
        if let Some(local) = self.local.clone() {
            let journals = tokio::task::spawn_blocking(move || local.read_all())
                .await
                .unwrap_or_default();
            for j in journals {
                merge(&mut by_id, j.entry);
            }
        }
        let mut listing = Listing::default();
        let mut lock = None;
        if let Some(sapi) = &self.sapi {
            match sapi.list().await {
                Ok(entries) => {
                    for e in entries {
                        merge(&mut by_id, e);
                    }
                }
                Err(e) => listing.sapi_error = Some(error_chain(&e)),
            }
            lock = read_lock(sapi).await;
        }
        let mut entries: Vec<HistoryEntry> = by_id.into_values().collect();
        for e in &mut entries {
            if e.status == RunStatus::Running && !owner_running(&e.owner, lock.as_ref()) {
                mark_interrupted(e);
            }
        }
        entries.sort_by(|a, b| a.started.cmp(&b.started));
        entry::link_continuations(&mut entries);
        listing.entries = entries;
        listing
    }

    /// The run whose id is `run` or starts with it.
    pub async fn find(&self, run: &str) -> Result<HistoryEntry, HistoryError> {
        find_in(self.list().await.entries, run)
    }

    /// What servers took per component in the newest runs, for the
    /// planner. Only completed steps are durations (a failure's time says
    /// nothing about the server's speed); failed, timed-out and reverted
    /// steps mark the server as no canary for the component.
    pub async fn durations(&self) -> Durations {
        durations_of(&self.list().await.entries)
    }
}

/// The estimates from `entries` (oldest first): the newest
/// [`DURATION_RUNS`] runs' completed steps, and their failed ones (failed
/// and timed out on the server, or reverted as unhealthy). Steps that did
/// not run, and those whose end is unknown (an API stopped answering, the
/// run was interrupted), say nothing about the server.
pub fn durations_of(entries: &[HistoryEntry]) -> Durations {
    let skip = entries.len().saturating_sub(DURATION_RUNS);
    let steps = || {
        entries[skip..]
            .iter()
            .flat_map(|e| &e.servers)
            .flat_map(|s| &s.steps)
    };
    // The `gz health` gates that passed: their time overlaps what follows.
    let gates = steps()
        .filter(|st| {
            st.gate.as_deref() == Some(Gate::GzHealth.as_str()) && st.gate_passed == Some(true)
        })
        .filter_map(|st| {
            Some((
                st.component.clone(),
                Duration::try_from_secs_f64(st.gate_s?).ok()?,
            ))
        });
    let gates: Vec<(String, Duration)> = gates.collect();
    Durations::from_samples(entries[skip..].iter().flat_map(|e| {
        e.servers.iter().flat_map(|s| {
            s.steps.iter().filter_map(move |st| {
                let outcome = match st.status.as_str() {
                    "done" if st.elapsed_s > 0.0 => SampleOutcome::Completed,
                    "failed" | "reverted" => SampleOutcome::Failed,
                    _ => return None,
                };
                Some(Sample {
                    server: s.server?,
                    component: st.component.to_string(),
                    elapsed: st.elapsed(),
                    outcome,
                })
            })
        })
    }))
    .with_gates(gates)
}

/// The entry among `entries` whose id is `run` or starts with it.
pub fn find_in(entries: Vec<HistoryEntry>, run: &str) -> Result<HistoryEntry, HistoryError> {
    let wanted = run.trim().to_ascii_lowercase();
    if wanted.is_empty() {
        return Err(HistoryError::NotFound {
            run: run.to_string(),
        });
    }
    let mut found: Vec<HistoryEntry> = entries
        .into_iter()
        .filter(|e| e.id.is_some_and(|i| i.to_string().starts_with(&wanted)))
        .collect();
    match found.len() {
        0 => Err(HistoryError::NotFound {
            run: run.to_string(),
        }),
        1 => Ok(found.remove(0)),
        _ => Err(HistoryError::Ambiguous {
            run: run.to_string(),
            ids: found
                .iter()
                .map(HistoryEntry::short_id)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn merge(by_id: &mut BTreeMap<agentsadm_types::ids::RunId, HistoryEntry>, e: HistoryEntry) {
    let Some(id) = e.id else { return };
    match by_id.get(&id) {
        Some(have) if rank(have) >= rank(&e) => {}
        _ => {
            by_id.insert(id, e);
        }
    }
}

/// How complete an entry is.
fn rank(e: &HistoryEntry) -> (bool, usize) {
    (e.ended.is_some(), e.servers.len())
}

async fn read_lock(sapi: &SapiHistory) -> Option<LockRecord> {
    use crate::runner::lock::LockStore;
    let store = crate::runner::lock::SapiLockStore::new(sapi.sapi.clone())
        .await
        .ok()?;
    store.read().await.ok()?.holder().cloned()
}

/// Whether the run of `owner` (`user@host:pid`) is still going: on this
/// host, while its process exists; elsewhere, while it holds `lock`.
pub fn owner_running(owner: &str, lock: Option<&LockRecord>) -> bool {
    if let Some(alive) = crate::runner::lock::owner_alive(owner) {
        return alive;
    }
    lock.is_some_and(|l| l.owner == owner)
}

/// An open entry whose process is gone.
pub fn mark_interrupted(e: &mut HistoryEntry) {
    e.status = RunStatus::Interrupted;
    if e.error.is_none() {
        e.error = Some(
            "the run's process ended before the run did (killed, crashed, or the headnode rebooted); the servers listed are those it recorded"
                .to_string(),
        );
    }
}
