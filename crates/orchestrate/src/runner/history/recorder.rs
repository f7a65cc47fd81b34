//! Recording one run as it goes: [`crate::run::Run`] begins an entry once
//! the plan is confirmed, passes every execution event through the
//! recorder (each finished server is one journal line, written at once),
//! mirrors the entry to SAPI now and then while the run lasts, and ends it
//! with the report or the error. Nothing here ever fails the run: what
//! cannot be written is a warning (sdcadm's TOOLS-1527 made the same rule).
//!
//! A command that changes the datacenter without a [`Plan`] (`agentsadm
//! self-update`) records through the same calls: [`Recorder::begin`] with
//! an empty plan, then [`Recorder::finish_error`] or
//! [`Recorder::finish_outside`] with the servers it changed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::entry::{self, HistoryEntry, RunStatus, ServerRecord};
use super::local::{End, Line, LocalHistory};
use super::mirror::SapiHistory;
use crate::vocabulary::report::{ExecEvent, ExecReport, Reporter};
use agentsadm_plan::Plan;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::{RunId, ServerUuid};

/// How often a running run's entry is sent to SAPI (when something
/// changed).
pub const MIRROR_EVERY: Duration = Duration::from_secs(30);

/// Where a run's history goes.
#[derive(Clone, Debug)]
pub struct HistorySettings {
    /// The headnode's journals (`None`: not kept locally).
    pub local: Option<LocalHistory>,
    /// Also keep it in SAPI.
    pub mirror: bool,
    /// The command line recorded (default: this process's arguments).
    pub command: String,
    /// How often the entry of a run in progress goes to SAPI.
    pub mirror_every: Duration,
}

impl HistorySettings {
    /// Only the datacenter's copy in SAPI, with no command line: a run's
    /// default until its caller says more (the command line adds the
    /// headnode's journal directory and the command, resolved once in its
    /// settings). Nothing here reads the environment or a file.
    pub fn datacenter_only() -> HistorySettings {
        HistorySettings {
            local: None,
            mirror: true,
            command: String::new(),
            mirror_every: MIRROR_EVERY,
        }
    }

    /// Only in `dir` (and SAPI when `mirror`); for tests and tools.
    pub fn in_dir(dir: impl Into<PathBuf>, mirror: bool) -> HistorySettings {
        HistorySettings {
            local: Some(LocalHistory::new(dir)),
            mirror,
            command: String::new(),
            mirror_every: MIRROR_EVERY,
        }
    }
}

/// `agentsadm update vm-agent -y` from the process's arguments (the
/// program as its file name), each word quoted as a shell needs it, so
/// that the line can be run again: `hold vm-agent --reason 'case 4711'`.
pub fn command_line(args: &[String]) -> String {
    let mut words: Vec<String> = args.to_vec();
    if let Some(first) = words.first_mut()
        && let Some(name) = std::path::Path::new(first.as_str()).file_name()
    {
        *first = name.to_string_lossy().into_owned();
    }
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` as a POSIX shell reads it back: as it is when it has only
/// characters no shell treats specially, else in single quotes (a `'`
/// inside as `'\''`).
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// Appends journal lines on a blocking thread, in order.
struct Writer {
    tx: std::sync::mpsc::Sender<Line>,
    done: tokio::task::JoinHandle<()>,
}

/// One run being recorded.
pub struct Recorder {
    entry: Mutex<HistoryEntry>,
    plan: Plan,
    written: Mutex<BTreeSet<ServerUuid>>,
    writer: Mutex<Option<Writer>>,
    local: Option<(LocalHistory, PathBuf)>,
    mirror: Option<SapiHistory>,
    /// The entry changed since SAPI last got it.
    dirty: AtomicBool,
    warned: AtomicBool,
    warn: Box<dyn Fn(&str) + Send + Sync>,
    /// When the run started, and each server since then: the timeline.
    began: std::time::Instant,
    timeline: Mutex<Timeline>,
}

/// What the timeline of a run needs beyond the outcomes: when each server
/// started, and which were flagged as outliers while they ran.
#[derive(Default)]
struct Timeline {
    started: std::collections::BTreeMap<ServerUuid, f64>,
    outliers: BTreeSet<ServerUuid>,
}

impl Recorder {
    /// Begin the entry of a confirmed plan: settle runs that died before
    /// they ended, make room, write the first line, and send it (and any
    /// runs SAPI missed) to SAPI. `owner` is who runs it, as the lock
    /// names them ([`crate::lock::Login::owner`]). `warn` receives what
    /// could not be done.
    pub async fn begin(
        settings: &HistorySettings,
        sapi: Option<SapiHistory>,
        plan: &Plan,
        operation: &str,
        reverts: Option<RunId>,
        owner: String,
        warn: impl Fn(&str) + Send + Sync + 'static,
    ) -> Recorder {
        let id = RunId::new_v4();
        let entry = HistoryEntry {
            id: Some(id),
            operation: operation.to_string(),
            command: settings.command.clone(),
            user: owner.split('@').next().unwrap_or_default().to_string(),
            host: agentsadm_types::log::hostname(),
            owner,
            started: entry::now_rfc3339(),
            status: RunStatus::Running,
            reverts,
            plan: entry::plan_record(plan),
            ..HistoryEntry::default()
        };
        let mut recorder = Recorder {
            entry: Mutex::new(entry.clone()),
            plan: plan.clone(),
            written: Mutex::new(BTreeSet::new()),
            writer: Mutex::new(None),
            local: None,
            mirror: sapi.filter(|_| settings.mirror),
            dirty: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            warn: Box::new(warn),
            began: std::time::Instant::now(),
            timeline: Mutex::new(Timeline::default()),
        };
        let mut catch_up = Vec::new();
        if let Some(local) = &settings.local {
            let path = local.path_for(id, &entry.started);
            let (l, p, e) = (local.clone(), path.clone(), entry.clone());
            match tokio::task::spawn_blocking(move || prepare_local(&l, &p, e)).await {
                Ok(Ok(unmirrored)) => {
                    catch_up = unmirrored;
                    recorder.writer = Mutex::new(Some(spawn_writer(local.clone(), path.clone())));
                    recorder.local = Some((local.clone(), path));
                }
                Ok(Err(e)) => recorder.warn_once(&error_chain(&e)),
                Err(e) => recorder.warn_once(&e.to_string()),
            }
        }
        if let Some(m) = &recorder.mirror {
            if let Err(e) = m.put(&entry).await {
                recorder.warn_once(&error_chain(&e));
            } else {
                recorder.catch_up(m, catch_up).await;
                if let Err(e) = m.prune().await {
                    tracing::warn!(error = %error_chain(&e), "cannot prune the run history in SAPI");
                }
            }
        }
        recorder
    }

    /// The run's id.
    pub fn id(&self) -> Option<RunId> {
        self.lock_entry().id
    }

    /// The entry as it stands.
    pub fn snapshot(&self) -> HistoryEntry {
        self.lock_entry().clone()
    }

    fn lock_entry(&self) -> std::sync::MutexGuard<'_, HistoryEntry> {
        self.entry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn warn_once(&self, message: &str) {
        tracing::warn!(error = message, "run history");
        if !self.warned.swap(true, Ordering::SeqCst) {
            (self.warn)(&format!("warning: {message}; the run goes on"));
        }
    }

    /// Send journals SAPI missed (runs that ended while it was down, or
    /// that died), then mark them sent.
    async fn catch_up(&self, mirror: &SapiHistory, journals: Vec<(PathBuf, HistoryEntry)>) {
        let Some((local, _)) = &self.local else {
            return;
        };
        for (path, e) in journals {
            if mirror.put(&e).await.is_ok() {
                let l = local.clone();
                let _ = tokio::task::spawn_blocking(move || l.append(&path, &Line::Mirrored(true)))
                    .await;
            }
        }
    }

    /// Record what an execution event says (a server started, was slow,
    /// finished).
    pub fn observe(&self, event: &ExecEvent<'_>) {
        let (server, outcome) = match event {
            ExecEvent::ServerStarted { server, .. } => {
                let at = entry::round3(self.began.elapsed().as_secs_f64());
                self.lock_timeline().started.insert(*server, at);
                return;
            }
            ExecEvent::Outlier(o) => {
                self.lock_timeline().outliers.insert(o.server);
                return;
            }
            ExecEvent::ServerFinished { server, outcome } => (server, outcome),
            _ => return,
        };
        let Some(sp) = self.plan.servers().get(server) else {
            return;
        };
        let mut record = entry::server_record(*server, sp, outcome);
        self.annotate(*server, &mut record);
        self.send(Line::Server(Box::new(record.clone())));
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(*server);
        self.lock_entry().record_server(record);
        self.dirty.store(true, Ordering::SeqCst);
    }

    fn lock_timeline(&self) -> std::sync::MutexGuard<'_, Timeline> {
        self.timeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The timeline's facts on a server's record: when it started, whether
    /// it was a canary or an outlier.
    fn annotate(&self, server: ServerUuid, record: &mut ServerRecord) {
        let timeline = self.lock_timeline();
        record.started_s = timeline.started.get(&server).copied();
        record.outlier = timeline.outliers.contains(&server);
        record.canary = self
            .plan
            .rollout()
            .waves
            .iter()
            .any(|w| w.canary && w.servers.iter().any(|s| s.server == server));
    }

    fn send(&self, line: Line) {
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = writer.as_ref() {
            let _ = w.tx.send(line);
        }
    }

    /// Send the entry to SAPI if it changed since last time.
    pub async fn mirror_if_changed(&self) {
        let Some(m) = &self.mirror else { return };
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return;
        }
        let snapshot = self.snapshot();
        if let Err(e) = m.put(&snapshot).await {
            self.dirty.store(true, Ordering::SeqCst);
            tracing::warn!(error = %error_chain(&e), "cannot update the run history in SAPI");
        }
    }

    /// End the entry with the run's report.
    pub async fn finish_report(self, report: &ExecReport) -> HistoryEntry {
        let unwritten: Vec<Line> = {
            let mut e = self.lock_entry();
            entry::finish_from_report(&mut e, &self.plan, report);
            e.ended = Some(entry::now_rfc3339());
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            // The report's records replaced those observed: annotate them
            // all again.
            for s in e.servers.iter_mut() {
                if let Some(u) = s.server {
                    self.annotate(u, s);
                }
            }
            e.servers
                .iter()
                .filter(|s| s.server.is_none_or(|u| !written.contains(&u)))
                .map(|s| Line::Server(Box::new(s.clone())))
                .collect()
        };
        for line in unwritten {
            self.send(line);
        }
        self.end().await
    }

    /// End the entry of a command run outside the executor (self-update)
    /// with what it did to each server: succeeded, or ended by the lock's
    /// loss (exit status 2).
    pub async fn finish_outside(self, servers: Vec<ServerRecord>, exit_status: u8) -> HistoryEntry {
        {
            let mut e = self.lock_entry();
            e.status = if exit_status == 0 {
                RunStatus::Succeeded
            } else {
                RunStatus::Partial
            };
            e.exit_status = Some(exit_status);
            e.elapsed_s = Some(self.began.elapsed().as_secs_f64());
            e.ended = Some(entry::now_rfc3339());
            for s in &servers {
                e.record_server(s.clone());
            }
        }
        for s in servers {
            self.send(Line::Server(Box::new(s)));
        }
        self.end().await
    }

    /// End the entry with the error that stopped the run.
    pub async fn finish_error(self, error: &str) -> HistoryEntry {
        {
            let mut e = self.lock_entry();
            e.status = RunStatus::Failed;
            e.error = Some(error.to_string());
            e.exit_status = Some(1);
            e.ended = Some(entry::now_rfc3339());
        }
        self.end().await
    }

    /// The end line, then SAPI, then the line that says SAPI has it.
    async fn end(self) -> HistoryEntry {
        let final_entry = self.snapshot();
        self.send(Line::End(Box::new(End::of(&final_entry))));
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = writer {
            drop(w.tx);
            let _ = w.done.await;
        }
        if let Some(m) = &self.mirror {
            match m.put(&final_entry).await {
                Ok(()) => {
                    if let Some((local, path)) = self.local.clone() {
                        let _ = tokio::task::spawn_blocking(move || {
                            local.append(&path, &Line::Mirrored(true))
                        })
                        .await;
                    }
                }
                Err(e) => self.warn_once(&format!(
                    "{}; the headnode keeps it and sends it with the next run",
                    error_chain(&e)
                )),
            }
        }
        final_entry
    }
}

/// Before a run's first line: end the journals of runs whose process died
/// (interrupted, with what they recorded), make room, write the begin
/// line. Returns the ended journals SAPI does not have yet.
fn prepare_local(
    local: &LocalHistory,
    path: &std::path::Path,
    entry: HistoryEntry,
) -> Result<Vec<(PathBuf, HistoryEntry)>, super::local::LocalError> {
    let mut unmirrored = Vec::new();
    for mut j in local.read_all() {
        if !j.ended && !super::owner_running(&j.entry.owner, None) {
            super::mark_interrupted(&mut j.entry);
            local.append(&j.path, &Line::End(Box::new(End::of(&j.entry))))?;
            j.ended = true;
        }
        if j.ended && !j.mirrored {
            unmirrored.push((j.path, j.entry));
        }
    }
    local.prune();
    unmirrored.retain(|(p, _)| p.exists());
    local.append(path, &Line::Begin(Box::new(entry)))?;
    Ok(unmirrored)
}

fn spawn_writer(local: LocalHistory, path: PathBuf) -> Writer {
    let (tx, rx) = std::sync::mpsc::channel::<Line>();
    let done = tokio::task::spawn_blocking(move || {
        while let Ok(line) = rx.recv() {
            if let Err(e) = local.append(&path, &line) {
                tracing::warn!(error = %error_chain(&e), "cannot append to the run history");
            }
        }
    });
    Writer { tx, done }
}

/// The run's reporter and the recorder: every event goes to both.
pub struct RecordingTee<'a> {
    pub inner: &'a dyn Reporter,
    pub recorder: &'a Recorder,
}

impl Reporter for RecordingTee<'_> {
    fn event(&self, event: &ExecEvent<'_>) {
        self.recorder.observe(event);
        self.inner.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::command_line;

    /// The recorded command keeps its quoting: it once read `--reason
    /// support case 4711`, which runs as something else.
    #[test]
    fn the_command_line_is_quoted_as_a_shell_reads_it() {
        let args: Vec<String> = [
            "/opt/smartdc/bin/agentsadm",
            "hold",
            "vm-agent",
            "--reason",
            "support case 4711",
            "-s",
            "cn0007,cn0008",
            "",
            "it's",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            command_line(&args),
            "agentsadm hold vm-agent --reason 'support case 4711' -s cn0007,cn0008 '' 'it'\\''s'"
        );
    }
}
