//! Waiting for a cn-agent task when CNAPI may never say how it ended.
//!
//! CNAPI marks a task done in the callback of its long `POST /tasks` to
//! cn-agent. When the CNAPI process dies meanwhile (a crash, `sdcadm
//! update cnapi`, a headnode hiccup), or its write of the result fails, the
//! record stays `active` for ever, and cn-agent's report of the new
//! `server.agents`, if sent while CNAPI was down, is lost (docs/triton/
//! apis.md §3.12). Waiting out the task timeout would then report a
//! timeout for an install that succeeded, and `list` would keep showing
//! the old version.
//!
//! So [`TaskWaiter`] waits with TaskWait as usual, and asks the server
//! itself when CNAPI cannot be trusted on the task: right after a
//! connection failure or 5xx during the wait (once CNAPI answers again),
//! and when the task stays `active` far longer than its peers of the run
//! ([`TaskPeers`]). The server's answer is cn-agent's own task history
//! (`GET /servers/:uuid/task-history`), else what `server.agents` shows.
//! A task found finished there ends the wait with cn-agent's result; a
//! success then refreshes `server.agents` through ServerUpdate, the path
//! cn-agent's own report takes ([`refresh_agents`]).
//!
//! An `agents_uninstall` is different: cn-agent fails it when its final
//! refresh fails (the mockcloud backend when its POST meets a CNAPI that is
//! away, SmartOS when it cannot list `node_modules`), after the removals
//! ran. Such a failure is [`Waited::Unsettled`], and the transport asks
//! the server whether the package is gone.

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::cnapi::CnAgentTask;
use agentsadm_api::cnapi::CnapiClient;
use agentsadm_api::cnapi::Task;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

use crate::vocabulary::outcomes::StepFailure;
use crate::vocabulary::report::FailureStage;

/// When and how often the server is asked.
#[derive(Clone, Debug)]
pub struct RecoveryConfig {
    /// A task counts as stuck once `active` this many times the median of
    /// its finished peers...
    pub stale_factor: u32,
    /// ...and at least this long.
    pub stale_floor: Duration,
    /// With fewer than [`PEERS_NEEDED`] finished peers: stuck after this.
    pub stale_alone: Duration,
    /// Between two looks at the server once CNAPI cannot be trusted on a
    /// task (also the TaskWait chunk then).
    pub server_poll: Duration,
    /// First and longest pause between attempts to reach CNAPI again.
    pub cnapi_poll: (Duration, Duration),
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            stale_factor: 4,
            stale_floor: Duration::from_secs(30),
            stale_alone: Duration::from_secs(5 * 60),
            server_poll: Duration::from_secs(5),
            cnapi_poll: (Duration::from_millis(250), Duration::from_secs(5)),
        }
    }
}

/// Finished peers needed before their median says what is normal.
pub const PEERS_NEEDED: usize = 3;

/// How long the tasks of a run took, shared by a transport's clones.
#[derive(Clone, Debug, Default)]
pub struct TaskPeers(Arc<Mutex<Vec<Duration>>>);

impl TaskPeers {
    pub fn record(&self, took: Duration) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(took);
    }

    /// How long a task may stay `active` before the server is asked.
    pub fn stale_after(&self, config: &RecoveryConfig) -> Duration {
        let mut took = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if took.len() < PEERS_NEEDED {
            return config.stale_alone;
        }
        took.sort();
        let median = took[took.len() / 2];
        (median * config.stale_factor).max(config.stale_floor)
    }
}

/// What a task was started to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskGoal {
    /// `agent_install` of `image` (the package's `version` is what
    /// `server.agents` shows once it is in).
    Install {
        package: ComponentName,
        image: ImageUuid,
        version: String,
    },
    /// `agents_uninstall` of these packages.
    Uninstall { packages: Vec<ComponentName> },
}

impl TaskGoal {
    /// cn-agent's name of the task.
    fn task_name(&self) -> &'static str {
        match self {
            TaskGoal::Install { .. } => "agent_install",
            TaskGoal::Uninstall { .. } => "agents_uninstall",
        }
    }

    /// Whether a history entry is this task's.
    fn matches(&self, entry: &CnAgentTask) -> bool {
        if entry.task != self.task_name() {
            return false;
        }
        match self {
            TaskGoal::Install { image, .. } => {
                entry.params.get("image_uuid").and_then(|v| v.as_str())
                    == Some(image.to_string().as_str())
            }
            TaskGoal::Uninstall { packages } => {
                let listed: Vec<&str> = entry
                    .params
                    .get("agents")
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                    .unwrap_or_default();
                packages.iter().all(|p| listed.contains(&p.as_str()))
            }
        }
    }

    /// Whether `agents` already shows the task done.
    pub fn shown_in(&self, agents: &[AgentEntry]) -> bool {
        match self {
            TaskGoal::Install { package, image, .. } => agents
                .iter()
                .any(|a| a.name == *package && a.image_uuid == Some(*image)),
            TaskGoal::Uninstall { packages } => agents.iter().all(|a| !packages.contains(&a.name)),
        }
    }

    /// `agents` as they are once the task is done: its entry replaced
    /// (keeping the instance UUID the server had), or its entries gone.
    pub fn applied_to(&self, agents: &[AgentEntry]) -> Vec<AgentEntry> {
        match self {
            TaskGoal::Install {
                package,
                image,
                version,
            } => {
                let mut out: Vec<AgentEntry> = agents.to_vec();
                let entry = AgentEntry {
                    name: package.clone(),
                    version: package_version(version),
                    image_uuid: Some(*image),
                    uuid: agents
                        .iter()
                        .find(|a| a.name == *package)
                        .and_then(|a| a.uuid),
                };
                match out.iter_mut().find(|a| a.name == *package) {
                    Some(slot) => *slot = entry,
                    None => out.push(entry),
                }
                out
            }
            TaskGoal::Uninstall { packages } => agents
                .iter()
                .filter(|a| !packages.contains(&a.name))
                .cloned()
                .collect(),
        }
    }
}

/// The package version `server.agents` shows for an image version
/// (`2.15.0-master-20220101T000000Z-g1234567` is package 2.15.0).
fn package_version(image_version: &str) -> ComponentVersion {
    let version = agentsadm_types::image::parse_agent_version(image_version)
        .map(|v| v.to_string())
        .unwrap_or_else(|| image_version.to_string());
    ComponentVersion::reported(&version).unwrap_or_default()
}

/// What the server says about a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// cn-agent finished it: `Ok`, or the error it reported.
    Finished(Result<(), String>),
    /// cn-agent is still running it.
    Running,
    /// Neither the history nor `server.agents` tells (cn-agent restarted
    /// since, or the task never reached it).
    Unknown,
}

/// How far a history entry may seem to start before CNAPI's record of the
/// task (the two clocks are different machines').
const CLOCK_SLACK: Duration = Duration::from_secs(120);

/// The newest entry of `history` that is the task CNAPI recorded at
/// `recorded` (ISO time, when it parses).
pub fn find_in_history(history: &[CnAgentTask], goal: &TaskGoal, recorded: &str) -> Verdict {
    let since = humantime::parse_rfc3339_weak(recorded)
        .ok()
        .and_then(|t| t.checked_sub(CLOCK_SLACK));
    let started_in_time = |e: &CnAgentTask| -> bool {
        match (since, humantime::parse_rfc3339_weak(&e.started_at).ok()) {
            (Some(since), Some(started)) => started >= since,
            _ => true,
        }
    };
    let Some(entry) = history
        .iter()
        .rev()
        .find(|e| goal.matches(e) && started_in_time(e))
    else {
        return Verdict::Unknown;
    };
    if !entry.is_finished() {
        return Verdict::Running;
    }
    if entry.failed() {
        let message = entry
            .error_message()
            .unwrap_or_else(|| "failed without an error message".to_string());
        return Verdict::Finished(Err(message));
    }
    Verdict::Finished(Ok(()))
}

/// Ask the server: cn-agent's history, else `server.agents`.
pub async fn ask_server(
    cnapi: &CnapiClient,
    server: ServerUuid,
    goal: &TaskGoal,
    task: &Task,
) -> Result<Verdict, ApiError> {
    let history = cnapi.task_history(server).await?;
    let verdict = find_in_history(&history, goal, &task.timestamp);
    if verdict != Verdict::Unknown {
        return Ok(verdict);
    }
    let shown = cnapi
        .list_server(server)
        .await?
        .is_some_and(|s| goal.shown_in(&s.agents.unwrap_or_default()));
    Ok(if shown {
        Verdict::Finished(Ok(()))
    } else {
        Verdict::Unknown
    })
}

/// Make `server.agents` show what the server runs after a task CNAPI lost:
/// `live` (the server's own report) when there is one, else the entry the
/// task changed. Returns whether anything was posted.
pub async fn refresh_agents(
    cnapi: &CnapiClient,
    server: ServerUuid,
    goal: &TaskGoal,
    live: Option<Vec<AgentEntry>>,
) -> Result<bool, ApiError> {
    let Some(current) = cnapi.list_server(server).await? else {
        return Ok(false);
    };
    let current = current.agents.unwrap_or_default();
    let wanted = match live {
        Some(agents) => agents,
        None if goal.shown_in(&current) => return Ok(false),
        None => goal.applied_to(&current),
    };
    if wanted == current {
        return Ok(false);
    }
    cnapi.update_server_agents(server, &wanted).await?;
    Ok(true)
}

/// Whether an error while waiting means CNAPI (not the task) failed: it
/// went away, or answered a 5xx.
pub fn lost_cnapi(err: &ApiError) -> bool {
    err.is_outage() || err.status().is_some_and(|s| s >= 500)
}

/// How a wait ended, short of a failure that stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waited {
    /// CNAPI reported the task complete.
    Complete,
    /// CNAPI could not say; the server did (`why` says what happened).
    FromServer { why: String },
    /// An `agents_uninstall` that cn-agent reports failed where the
    /// failure may be only its final refresh of `server.agents`: the task
    /// CNAPI lost (cn-agent's refresh met the CNAPI that was away), or one
    /// whose only error is the refresh ([`refresh_only`]). The removals
    /// ran before it; the caller settles it from the server, and reports
    /// `failure` if the server still has the package.
    Unsettled { failure: StepFailure },
}

/// cn-agent's SmartOS `agents_uninstall` lists its removal errors first
/// and its refresh's last: a message that starts with the refresh had no
/// removal error.
const REFRESH_ONLY: &str = "AgentsUninstallTask error: Error refreshing agent info in CNAPI:";

/// Whether an `agents_uninstall` failure is only its final refresh.
pub fn refresh_only(message: &str) -> bool {
    message.starts_with(REFRESH_ONLY)
}

/// A task CNAPI reports failed: an uninstall that failed only at its
/// refresh is left for the caller to settle.
fn reported_failure(task: &Task, id: TaskId, goal: &TaskGoal) -> Result<Waited, StepFailure> {
    let failure = task_failure(task, id);
    if matches!(goal, TaskGoal::Uninstall { .. }) && refresh_only(&failure.message) {
        return Ok(Waited::Unsettled { failure });
    }
    Err(failure)
}

/// Waits for one task (module docs).
pub struct TaskWaiter<'a> {
    pub cnapi: &'a CnapiClient,
    pub config: &'a RecoveryConfig,
    pub peers: &'a TaskPeers,
    /// How long one TaskWait may block while all is well.
    pub chunk: Duration,
}

impl TaskWaiter<'_> {
    /// Wait for task `id` on `server`, started to do `goal`.
    pub async fn wait(
        &self,
        server: ServerUuid,
        id: TaskId,
        goal: &TaskGoal,
    ) -> Result<Waited, StepFailure> {
        let started = tokio::time::Instant::now();
        loop {
            let stale = started.elapsed() >= self.peers.stale_after(self.config);
            let chunk = if stale {
                self.config.server_poll
            } else {
                self.chunk
            };
            let task = match self.cnapi.wait_task_once(id, chunk).await {
                Ok(task) => task,
                Err(e) if lost_cnapi(&e) => {
                    tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET, %server, task = %id, error = %error_chain(&e), "CNAPI failed during a task wait; asking the server once CNAPI answers");
                    return self.after_outage(server, id, goal).await;
                }
                Err(e) => return Err(StepFailure::api(FailureStage::TaskWait, &e)),
            };
            match task.status {
                TaskStatus::Complete => {
                    self.peers.record(started.elapsed());
                    return Ok(Waited::Complete);
                }
                TaskStatus::Failure => return reported_failure(&task, id, goal),
                TaskStatus::Active if stale => {
                    if let Ok(Verdict::Finished(result)) =
                        ask_server(self.cnapi, server, goal, &task).await
                    {
                        let why = format!(
                            "CNAPI still shows task {id} active after {:?}, far longer than its peers, but cn-agent finished it",
                            started.elapsed()
                        );
                        return finished(result, &task, id, goal, why);
                    }
                }
                TaskStatus::Active => {}
            }
        }
    }

    /// CNAPI failed mid-wait: wait until it answers, then trust whichever
    /// of CNAPI and the server knows first.
    async fn after_outage(
        &self,
        server: ServerUuid,
        id: TaskId,
        goal: &TaskGoal,
    ) -> Result<Waited, StepFailure> {
        let (mut pause, max_pause) = self.config.cnapi_poll;
        let mut task = loop {
            match self.cnapi.get_task(id).await {
                Ok(task) => break task,
                Err(e) if lost_cnapi(&e) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(max_pause);
                }
                Err(e) => return Err(StepFailure::api(FailureStage::TaskWait, &e)),
            }
        };
        loop {
            match task.status {
                TaskStatus::Complete => return Ok(Waited::Complete),
                TaskStatus::Failure => return reported_failure(&task, id, goal),
                TaskStatus::Active => {}
            }
            match ask_server(self.cnapi, server, goal, &task).await {
                Ok(Verdict::Finished(result)) => {
                    let why = format!(
                        "CNAPI went away while task {id} ran and still shows it active; cn-agent's task history says how it ended"
                    );
                    return finished(result, &task, id, goal, why);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(%server, error = %error_chain(&e), "cannot ask the server about its task yet")
                }
            }
            // CNAPI may still finish it (only a connection failed).
            match self.cnapi.wait_task_once(id, self.config.server_poll).await {
                Ok(t) => task = t,
                Err(_) => tokio::time::sleep(self.config.server_poll).await,
            }
        }
    }
}

/// The wait's end from cn-agent's result. An uninstall that failed there
/// is left for the caller to settle: its refresh may have failed only
/// because CNAPI was away.
fn finished(
    result: Result<(), String>,
    task: &Task,
    id: TaskId,
    goal: &TaskGoal,
    why: String,
) -> Result<Waited, StepFailure> {
    let message = match result {
        Ok(()) => return Ok(Waited::FromServer { why }),
        Err(message) => message,
    };
    let failure = StepFailure::new(
        FailureStage::Task {
            task: task.task.clone(),
            id: Some(id),
        },
        format!("{message} ({why})"),
    );
    match goal {
        TaskGoal::Uninstall { .. } => Ok(Waited::Unsettled { failure }),
        TaskGoal::Install { .. } => Err(failure),
    }
}

/// A task CNAPI reports failed.
fn task_failure(task: &Task, id: TaskId) -> StepFailure {
    let message = task
        .error_message()
        .unwrap_or_else(|| "failed without an error message".to_string());
    StepFailure::new(
        FailureStage::Task {
            task: task.task.clone(),
            id: Some(id),
        },
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::SystemTime;

    /// cn-agent's ISO times.
    fn iso(t: SystemTime) -> String {
        humantime::format_rfc3339_millis(t).to_string()
    }

    fn entry(
        task: &str,
        image: &str,
        status: &str,
        errors: u32,
        started: SystemTime,
    ) -> CnAgentTask {
        serde_json::from_value(json!({
            "task": task, "status": status, "started_at": iso(started),
            "params": {"image_uuid": image}, "errorCount": errors,
            "messages": if errors > 0 {
                json!([{"type": "event", "name": "error", "event": {"error": "AgentInstall error: boom"}}])
            } else { json!([]) }
        }))
        .unwrap()
    }

    #[test]
    fn history_entries_answer_for_their_task_only() {
        let image = ImageUuid::from_u128(7);
        let goal = TaskGoal::Install {
            package: "vm-agent".parse().unwrap(),
            image,
            version: "1.1.0-master-20260201T000000Z-gabcdef0".into(),
        };
        let now = SystemTime::now();
        let recorded = iso(now);
        let old = now - Duration::from_secs(3600);
        let img = image.to_string();
        assert_eq!(find_in_history(&[], &goal, &recorded), Verdict::Unknown);
        // An older run of the same install does not count.
        let h = vec![entry("agent_install", &img, "finished", 0, old)];
        assert_eq!(find_in_history(&h, &goal, &recorded), Verdict::Unknown);
        let h = vec![
            entry("agent_install", &img, "finished", 1, old),
            entry("agent_install", &img, "active", 0, now),
        ];
        assert_eq!(find_in_history(&h, &goal, &recorded), Verdict::Running);
        let h = vec![entry("agent_install", &img, "finished", 0, now)];
        assert_eq!(
            find_in_history(&h, &goal, &recorded),
            Verdict::Finished(Ok(()))
        );
        let h = vec![entry("agent_install", &img, "finished", 1, now)];
        assert_eq!(
            find_in_history(&h, &goal, &recorded),
            Verdict::Finished(Err("AgentInstall error: boom".into()))
        );
        let other = ImageUuid::from_u128(8).to_string();
        let h = vec![entry("agent_install", &other, "finished", 0, now)];
        assert_eq!(find_in_history(&h, &goal, &recorded), Verdict::Unknown);
    }

    #[test]
    fn goals_patch_server_agents() {
        let image = ImageUuid::from_u128(7);
        let instance = agentsadm_types::ids::InstanceUuid::from_u128(3);
        let goal = TaskGoal::Install {
            package: "vm-agent".parse().unwrap(),
            image,
            version: "1.1.0-master-20260201T000000Z-gabcdef0".into(),
        };
        let before = vec![
            AgentEntry {
                name: "vm-agent".parse().unwrap(),
                version: "1.0.0".parse().unwrap(),
                image_uuid: Some(ImageUuid::from_u128(1)),
                uuid: Some(instance),
            },
            AgentEntry {
                name: "cn-agent".parse().unwrap(),
                version: "2.15.0".parse().unwrap(),
                image_uuid: None,
                uuid: None,
            },
        ];
        assert!(!goal.shown_in(&before));
        let after = goal.applied_to(&before);
        assert!(goal.shown_in(&after));
        assert_eq!(after[0].version, "1.1.0");
        assert_eq!(after[0].uuid, Some(instance));
        assert_eq!(after[1], before[1]);
        let gone = TaskGoal::Uninstall {
            packages: vec!["vm-agent".parse().unwrap()],
        };
        assert!(!gone.shown_in(&before));
        assert_eq!(gone.applied_to(&before), vec![before[1].clone()]);
    }

    #[test]
    fn an_uninstall_that_failed_only_at_its_refresh_is_told_apart() {
        assert!(refresh_only(
            "AgentsUninstallTask error: Error refreshing agent info in CNAPI: Cannot get agents image versions"
        ));
        // A removal error comes first: it stands.
        assert!(!refresh_only(
            "AgentsUninstallTask error: postuninstall returned 1; Error refreshing agent info in CNAPI: x"
        ));
        assert!(!refresh_only("AgentInstall error: boom"));
    }

    #[test]
    fn peers_set_how_long_is_too_long() {
        let config = RecoveryConfig {
            stale_floor: Duration::from_secs(1),
            ..RecoveryConfig::default()
        };
        let peers = TaskPeers::default();
        assert_eq!(peers.stale_after(&config), config.stale_alone);
        for ms in [100, 200, 300] {
            peers.record(Duration::from_millis(ms));
        }
        assert_eq!(peers.stale_after(&config), Duration::from_secs(1));
        for s in [10, 20, 30] {
            peers.record(Duration::from_secs(s));
        }
        assert_eq!(peers.stale_after(&config), Duration::from_secs(40));
    }
}
