//! How a planned step reaches a server.
//!
//! [`Transport`] runs one [`Step`] on one server and returns when the server
//! has done it (or failed). Two real carriers exist, both through CNAPI, and
//! [`CnapiTransport`] implements both, choosing by the step's
//! [`TransportKind`] (the plan decided it):
//!
//! - **install-agent**: `POST /servers/:uuid/install-agent {image_uuid}`
//!   (cn-agent's `agent_install` task; every Triton has it) and
//!   `uninstall-agents` for removals. Waiting uses `GET /tasks/:id/wait`
//!   in chunks, never tight polling. It only knows apm packages, which is
//!   why the default ("auto") mode sends gz-tools, dockerlogger and sdcadm
//!   through execute.
//! - **execute**: CNAPI CommandExecute of `agentsadm gz install|remove ...
//!   --json` on the server ([`agentsadm_api::remote`]), parsing the printed
//!   [`GzResult`]. It gives the atomic install with rollback and handles
//!   every component kind. CNAPI documents execute as deprecated, but it is
//!   the only way to run an installer without Ur; a dedicated cn-agent task
//!   would slot in here as a third carrier.
//!
//! cn-agent cannot replace itself in-process: its task finishes (or is cut)
//! before the new cn-agent runs. For it (the catalog's `core-last`
//! component) success is confirmed through CNAPI `server.agents` showing
//! the new image, whatever the task said, as sdcadm does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsadm_plan::HealthFlags;

use futures::future::BoxFuture;
use serde::Serialize;

use agentsadm_plan::Action;

use agentsadm_plan::Step;

use super::report::FailureStage;
use agentsadm_api::ApiError;
use agentsadm_api::cnapi::CnapiClient;
use agentsadm_api::cnapi::TaskStatus;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::gz_execute_request;
use agentsadm_plan::TransportKind;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::TaskId;

/// Said on every execute: CNAPI runs the command through Ur by default and
/// through cn-agent behind a CNAPI feature flag, and which one is not
/// visible from here. Inside cn-agent, work that stops cn-agent must be
/// handed off; under Ur the hand-off costs one transient-service run, and
/// cn-agent's new image is confirmed through `server.agents` either way.
const INSIDE_CN_AGENT: &str = "--inside-cn-agent";

/// How often a `gz health` check whose request failed is asked again, and
/// the pause before the first retry (growing linearly).
const HEALTH_CHECK_RETRIES: u32 = 3;
const HEALTH_CHECK_PAUSE: Duration = Duration::from_millis(500);

/// What a successful step reports back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepDone {
    /// The instance UUID the server keeps for the component, when known
    /// (needed to adopt a fresh install into SAPI).
    pub instance: Option<InstanceUuid>,
}

/// A step that failed on the server or on the way there: which part of the
/// step (`install-agent`, `agent_install task`, `gz hook:postinstall`,
/// `confirm through server.agents`, ...) and the remote error text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{stage}: {message}")]
pub struct StepFailure {
    pub stage: FailureStage,
    /// The remote error text (for API errors, the whole chain on one line:
    /// it is shown as data in reports, not printed as a cause chain).
    pub message: String,
    /// For an unhealthy step: why the previous image could not be put
    /// back on the server (the reinstall after cn-agent's task failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_error: Option<String>,
}

impl StepFailure {
    pub fn new(stage: FailureStage, message: impl Into<String>) -> StepFailure {
        StepFailure {
            stage,
            message: message.into(),
            revert_error: None,
        }
    }

    /// Whether the step failed its health gate.
    pub fn is_unhealthy(&self) -> bool {
        self.stage == FailureStage::Unhealthy
    }

    fn api(stage: FailureStage, err: &ApiError) -> StepFailure {
        StepFailure::new(stage, error_chain(err))
    }
}

/// Runs one step on one server.
pub trait Transport: Send + Sync {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>>;

    /// The CNAPI tasks this transport started on `server` so far, oldest
    /// first: what an operator looks up with `sdc-cnapi /tasks/<id>` when a
    /// run was interrupted or a step timed out. None for transports without
    /// tasks (CNAPI execute answers in the same request).
    fn tasks(&self, _server: ServerUuid) -> Vec<TaskRef> {
        Vec::new()
    }
}

/// A CNAPI task a step started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskRef {
    pub component: String,
    pub task: TaskId,
    /// Still waited for (the step has not ended). Not in `--json`: a
    /// report is written after waiting stopped.
    #[serde(skip)]
    pub waiting: bool,
}

/// The tasks a transport started, by server (shared by the clones of a
/// transport).
#[derive(Clone, Debug, Default)]
pub struct TaskLedger(Arc<Mutex<BTreeMap<ServerUuid, Vec<TaskRef>>>>);

impl TaskLedger {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<ServerUuid, Vec<TaskRef>>) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// `task` was started for `component` on `server`.
    pub fn started(&self, server: ServerUuid, component: &str, task: TaskId) {
        self.with(|m| {
            m.entry(server).or_default().push(TaskRef {
                component: component.to_string(),
                task,
                waiting: true,
            })
        });
    }

    /// Waiting for `task` ended (it finished, failed, or waiting failed).
    pub fn ended(&self, server: ServerUuid, task: TaskId) {
        self.with(|m| {
            for t in m.get_mut(&server).into_iter().flatten() {
                if t.task == task {
                    t.waiting = false;
                }
            }
        });
    }

    /// The tasks started on `server`, oldest first.
    pub fn of(&self, server: ServerUuid) -> Vec<TaskRef> {
        self.with(|m| m.get(&server).cloned().unwrap_or_default())
    }
}

/// Tuning of [`CnapiTransport`].
#[derive(Clone, Debug)]
pub struct CnapiTransportConfig {
    /// How long one `GET /tasks/:id/wait` may block server-side. The whole
    /// step is bounded by the executor's task timeout, not by this.
    pub wait_chunk: Duration,
    /// Timeout given to CNAPI execute (and so to `agentsadm gz`).
    pub execute_timeout: Duration,
    /// Environment for `agentsadm gz` on the server (API URLs when the
    /// server cannot read its SDC config, as in the simulator).
    pub execute_env: BTreeMap<String, String>,
    /// First and longest pause between `GET /servers/:uuid` while waiting
    /// for cn-agent to report its new image.
    pub confirm_poll: (Duration, Duration),
    /// How long to keep looking at `server.agents` after cn-agent's own
    /// task reported a failure (the self-update cuts that task, so a
    /// failure there is expected and not conclusive).
    pub confirm_grace_after_failure: Duration,
    /// How long to wait for the new cn-agent to report after its task
    /// completed (it restarts, then reports).
    pub confirm_timeout: Duration,
    /// `--min-healthy` and `--health-timeout` for `agentsadm gz` on the
    /// servers (`None`: the installer's defaults).
    pub health: Option<HealthFlags>,
}

impl Default for CnapiTransportConfig {
    fn default() -> Self {
        CnapiTransportConfig {
            wait_chunk: Duration::from_secs(60),
            execute_timeout: Duration::from_secs(30 * 60),
            execute_env: BTreeMap::new(),
            confirm_poll: (Duration::from_millis(200), Duration::from_secs(5)),
            confirm_grace_after_failure: Duration::from_secs(30),
            confirm_timeout: Duration::from_secs(10 * 60),
            health: None,
        }
    }
}

/// The real transport: CNAPI install-agent / uninstall-agents tasks and
/// CNAPI execute of `agentsadm gz`.
#[derive(Clone, Debug)]
pub struct CnapiTransport {
    cnapi: CnapiClient,
    catalog: Catalog,
    config: CnapiTransportConfig,
    tasks: TaskLedger,
}

impl CnapiTransport {
    pub fn new(
        cnapi: CnapiClient,
        catalog: Catalog,
        config: CnapiTransportConfig,
    ) -> CnapiTransport {
        CnapiTransport {
            cnapi,
            catalog,
            config,
            tasks: TaskLedger::default(),
        }
    }

    fn package_name(&self, component: &str) -> String {
        self.catalog
            .get(component)
            .map(|c| c.package_name().to_string())
            .unwrap_or_else(|| component.to_string())
    }

    async fn run_step(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        let self_replacing = step.order == OrderClass::CoreLast;
        match (step.transport, &step.action) {
            (TransportKind::InstallAgent, Action::Install { to } | Action::Upgrade { to, .. }) => {
                let id = self
                    .cnapi
                    .install_agent(server, to.uuid)
                    .await
                    .map_err(|e| StepFailure::api(FailureStage::InstallAgent, &e))?;
                let task = self.wait(server, &step.component, id).await;
                if self_replacing {
                    let failed = task.err();
                    let done = self.confirm_image(server, step, to.uuid, failed).await?;
                    self.gz_health(server, step).await?;
                    return Ok(done);
                }
                task?;
                let done = self.done(server, step).await?;
                self.gz_health(server, step).await?;
                Ok(done)
            }
            (TransportKind::InstallAgent, Action::Remove { .. }) => {
                let id = self
                    .cnapi
                    .uninstall_agents(server, &[self.package_name(&step.component)])
                    .await
                    .map_err(|e| StepFailure::api(FailureStage::UninstallAgents, &e))?;
                self.wait(server, &step.component, id).await?;
                Ok(StepDone::default())
            }
            (TransportKind::Execute, action) => {
                let args: Vec<String> = match action {
                    Action::Install { to } | Action::Upgrade { to, .. } => {
                        let mut args: Vec<String> = vec![
                            "gz".into(),
                            "install".into(),
                            to.uuid.to_string(),
                            "--json".into(),
                            INSIDE_CN_AGENT.into(),
                        ];
                        // The server refuses if it changed since the plan.
                        if let Some(expected) = step.expect_current() {
                            args.push("--expect-current".into());
                            args.push(
                                expected
                                    .map(|i| i.to_string())
                                    .unwrap_or_else(|| "none".into()),
                            );
                        }
                        if let Some(h) = &self.config.health {
                            args.extend(h.gz_args());
                        }
                        args
                    }
                    Action::Remove { .. } => {
                        vec![
                            "gz".into(),
                            "remove".into(),
                            step.component.clone(),
                            "--json".into(),
                            INSIDE_CN_AGENT.into(),
                        ]
                    }
                };
                let done = self.execute(server, step, &args).await?;
                match action {
                    Action::Install { to } | Action::Upgrade { to, .. } if self_replacing => {
                        // The installer handed the swap to a transient SMF
                        // service; the new cn-agent reports when it runs.
                        let mut confirmed = self.confirm_image(server, step, to.uuid, None).await?;
                        confirmed.instance = confirmed.instance.or(done.instance);
                        Ok(confirmed)
                    }
                    _ => Ok(done),
                }
            }
        }
    }

    /// The health gate after cn-agent's task (plan gate `gz health`):
    /// `agentsadm gz health NAME` through execute. Unhealthy: the previous
    /// image is reinstalled through install-agent (cn-agent's task cannot
    /// roll back by itself) and the step fails as `unhealthy`.
    async fn gz_health(&self, server: ServerUuid, step: &Step) -> Result<(), StepFailure> {
        if step.gate != agentsadm_plan::Gate::GzHealth {
            return Ok(());
        }
        let mut args: Vec<String> = vec![
            "gz".into(),
            "health".into(),
            step.component.clone(),
            "--json".into(),
        ];
        if let Some(h) = &self.config.health {
            args.extend(h.gz_args());
        }
        // `gz health` only reads: a request CNAPI failed (a 5xx, a dropped
        // connection) is asked again, a few times, before the install is
        // reported as unconfirmed.
        let mut attempt = 0u32;
        let checked = loop {
            match self.execute(server, step, &args).await {
                Err(e) if e.stage == FailureStage::Execute && attempt < HEALTH_CHECK_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(HEALTH_CHECK_PAUSE * attempt).await;
                }
                other => break other,
            }
        };
        let Err(mut unhealthy) = checked.map(|_| ()) else {
            return Ok(());
        };
        if !unhealthy.is_unhealthy() {
            // The check itself could not run (execute refused, no
            // agentsadm on the server): the install stands, unconfirmed.
            unhealthy.message = format!(
                "the install finished but its health could not be checked with 'agentsadm gz health': {}",
                unhealthy.message
            );
            return Err(unhealthy);
        }
        let previous = match &step.action {
            Action::Upgrade { from, .. } => from.image,
            _ => None,
        };
        // What the server runs again: the previous image reinstalled, or
        // (a fresh install) nothing.
        let reverted: Result<Option<ImageUuid>, StepFailure> = match previous {
            Some(image) => match self.cnapi.install_agent(server, image).await {
                Ok(id) => self
                    .wait(server, &step.component, id)
                    .await
                    .map(|()| Some(image)),
                Err(e) => Err(StepFailure::api(FailureStage::InstallAgent, &e)),
            },
            None => match self
                .cnapi
                .uninstall_agents(server, &[self.package_name(&step.component)])
                .await
            {
                Ok(id) => self.wait(server, &step.component, id).await.map(|()| None),
                Err(e) => Err(StepFailure::api(FailureStage::UninstallAgents, &e)),
            },
        };
        match reverted {
            Ok(Some(image)) => {
                unhealthy.message =
                    format!("{}; reverted: image {image} reinstalled", unhealthy.message);
            }
            Ok(None) => {
                unhealthy.message = format!("{}; reverted: removed again", unhealthy.message);
            }
            Err(e) => {
                unhealthy.revert_error = Some(e.to_string());
                unhealthy.message = format!(
                    "{}; REVERT FAILED ({e}): reinstall the previous image by hand",
                    unhealthy.message
                );
            }
        }
        Err(unhealthy)
    }

    /// Wait for a task with `GET /tasks/:id/wait`, chunk after chunk,
    /// keeping it in the ledger while it is waited for.
    async fn wait(
        &self,
        server: ServerUuid,
        component: &str,
        id: TaskId,
    ) -> Result<(), StepFailure> {
        self.tasks.started(server, component, id);
        let r = self.wait_task(id).await;
        self.tasks.ended(server, id);
        r
    }

    async fn wait_task(&self, id: TaskId) -> Result<(), StepFailure> {
        loop {
            let task = self
                .cnapi
                .wait_task(id, self.config.wait_chunk)
                .await
                .map_err(|e| StepFailure::api(FailureStage::TaskWait, &e))?;
            match task.status {
                TaskStatus::Active => continue,
                TaskStatus::Complete => return Ok(()),
                TaskStatus::Failure => {
                    let message = task
                        .error_message()
                        .unwrap_or_else(|| "failed without an error message".to_string());
                    return Err(StepFailure::new(
                        FailureStage::Task {
                            task: task.task,
                            id: Some(id),
                        },
                        message,
                    ));
                }
            }
        }
    }

    /// After a successful install: the instance UUID the server reports.
    async fn done(&self, server: ServerUuid, step: &Step) -> Result<StepDone, StepFailure> {
        if !matches!(step.action, Action::Install { .. }) {
            return Ok(StepDone::default());
        }
        let s = self
            .cnapi
            .get_server(server)
            .await
            .map_err(|e| StepFailure::api(FailureStage::ReadServerAgents, &e))?;
        let package = self.package_name(&step.component);
        let instance = s
            .reported_agents()
            .into_iter()
            .find(|a| a.name == package || a.name == step.component)
            .and_then(|a| a.uuid);
        Ok(StepDone { instance })
    }

    /// Poll `GET /servers/:uuid` until the component reports `image`.
    async fn confirm_image(
        &self,
        server: ServerUuid,
        step: &Step,
        image: ImageUuid,
        task_failure: Option<StepFailure>,
    ) -> Result<StepDone, StepFailure> {
        let package = self.package_name(&step.component);
        let started = tokio::time::Instant::now();
        let (mut pause, max_pause) = self.config.confirm_poll;
        loop {
            let s = self
                .cnapi
                .get_server(server)
                .await
                .map_err(|e| StepFailure::api(FailureStage::ConfirmServerAgents, &e))?;
            if let Some(a) = s
                .reported_agents()
                .into_iter()
                .find(|a| a.name == package || a.name == step.component)
                && a.image_uuid == Some(image)
            {
                return Ok(StepDone { instance: a.uuid });
            }
            if task_failure.is_none() && started.elapsed() >= self.config.confirm_timeout {
                let now = s
                    .reported_agents()
                    .into_iter()
                    .find(|a| a.name == package || a.name == step.component)
                    .and_then(|a| a.image_uuid)
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "nothing".to_string());
                return Err(StepFailure::new(
                    FailureStage::ConfirmServerAgents,
                    format!(
                        "the install finished but after {:?} server.agents still reports {now}, not {image}: the new {} did not report (check its SMF service on the server)",
                        self.config.confirm_timeout, step.component
                    ),
                ));
            }
            if let Some(f) = &task_failure
                && started.elapsed() >= self.config.confirm_grace_after_failure
            {
                return Err(StepFailure::new(
                    f.stage.clone(),
                    format!(
                        "{} (and server.agents still does not show image {image} after {:?})",
                        f.message, self.config.confirm_grace_after_failure
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(max_pause);
        }
    }

    async fn execute(
        &self,
        server: ServerUuid,
        step: &Step,
        args: &[String],
    ) -> Result<StepDone, StepFailure> {
        let request = gz_execute_request(
            args,
            self.config.execute_env.clone(),
            self.config.execute_timeout,
        );
        let result = self
            .cnapi
            .execute(server, &request, self.config.execute_timeout)
            .await
            .map_err(|e| StepFailure::api(FailureStage::Execute, &e))?;
        match parse_gz_result(&result.stdout) {
            Some(gz) => {
                if let Some(err) = gz.error {
                    let stage = match err.step.as_str() {
                        "unhealthy" => FailureStage::Unhealthy,
                        "expect-current" => FailureStage::Changed,
                        _ => FailureStage::GzStep { step: err.step },
                    };
                    return Err(StepFailure::new(stage, err.message));
                }
                if result.exit_status != 0 {
                    return Err(StepFailure::new(
                        FailureStage::Gz,
                        format!("exited {} ({})", result.exit_status, tail(&result.stderr)),
                    ));
                }
                let package = self.package_name(&step.component);
                let instance = gz
                    .components
                    .iter()
                    .find(|c| c.name == step.component || c.name == package)
                    .and_then(|c| c.instance_uuid);
                Ok(StepDone { instance })
            }
            None => Err(StepFailure::new(
                FailureStage::Execute,
                format!(
                    "agentsadm gz exited {} without a result document (is agentsadm installed at {}?): {}",
                    result.exit_status,
                    agentsadm_api::remote::GZ_BINARY,
                    tail(if result.stderr.trim().is_empty() {
                        &result.stdout
                    } else {
                        &result.stderr
                    })
                ),
            )),
        }
    }
}

/// The [`GzResult`] `agentsadm gz ... --json` printed: the whole of stdout,
/// or, if something was printed before it, the document starting at the
/// last line that opens a JSON object.
fn parse_gz_result(stdout: &str) -> Option<GzResult> {
    let text = stdout.trim();
    if let Ok(r) = serde_json::from_str(text) {
        return Some(r);
    }
    let start = text
        .rmatch_indices("\n{")
        .map(|(i, _)| i + 1)
        .find(|&i| serde_json::from_str::<GzResult>(&text[i..]).is_ok())?;
    serde_json::from_str(&text[start..]).ok()
}

/// The last few lines of command output, for error messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    let start = lines.len().saturating_sub(3);
    let joined = lines[start..].join(" | ");
    if joined.is_empty() {
        "no output".to_string()
    } else {
        joined
    }
}

impl Transport for CnapiTransport {
    fn run<'a>(
        &'a self,
        server: ServerUuid,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<StepDone, StepFailure>> {
        Box::pin(self.run_step(server, step))
    }

    fn tasks(&self, server: ServerUuid) -> Vec<TaskRef> {
        self.tasks.of(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_result_document_after_other_output() {
        let doc = r#"{
  "server_uuid": "44454c4c-4800-1034-804a-b2c04f354d31",
  "components": []
}"#;
        assert!(parse_gz_result(doc).is_some());
        assert!(parse_gz_result(&format!("note: something\n{doc}\n")).is_some());
        assert!(parse_gz_result("no json here").is_none());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\nd\n"), "b | c | d");
        assert_eq!(tail("  "), "no output");
    }
}
