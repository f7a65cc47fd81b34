//! CNAPI's install-agent and uninstall-agents routes and the cn-agent
//! tasks behind them: each answers a task id at once and finishes the task
//! in the background after the injected latency, with the real GZ work
//! running inside that latency. cn-agent records each task in its own
//! history; CNAPI records its end only if it did not die meanwhile (and
//! its write does not fail, [`crate::Faults::lose_task_results_on`]).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::http::Conn;
use crate::http::empty;
use crate::http::json_response;
use crate::http::rest_error;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::TaskId;

use super::tasks::TaskFailure;

use super::Core;
use super::STYLE;
use super::agent;
use super::invalid_parameters;
use super::physical;
use super::request_id;
use super::sleep_or_shutdown;
use super::sleep_until_or_shutdown;
use super::task_request;
use super::tasks::TaskKind;

pub(super) async fn install_agent(
    State(core): Core,
    Path(raw): Path<String>,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    // No validation here: the whole request goes to cn-agent, which fails
    // the task if image_uuid is missing or bad.
    let image = p.get("image_uuid").and_then(Value::as_str).map(|s| {
        s.parse::<ImageUuid>()
            .map_err(|_| TaskFailure::InvalidImage { raw: s.to_string() })
    });
    let id = core
        .cnapi
        .tasks
        .create(rec.uuid, TaskKind::AgentInstall, &request_id(&headers));
    let core2 = core.clone();
    let arrived = tokio::time::Instant::now();
    let run = TaskRun {
        id,
        kind: TaskKind::AgentInstall,
        server: rec.uuid,
        pid: agent::cn_agent_up(&rec).then(|| {
            core.cnapi
                .agents
                .started(rec.uuid, "agent_install", Value::Object(p))
        }),
    };
    tokio::spawn(async move {
        match image {
            Some(Ok(image)) => run_agent_install(core2, run, server, image, arrived).await,
            Some(Err(bad)) => run.finish(&core2, Err(bad)),
            None => run.finish(&core2, Err(TaskFailure::MissingImage)),
        }
    });
    json_response(STYLE, StatusCode::OK, &json!({"id": id}))
}

/// One cn-agent task: CNAPI's record `id`, and cn-agent's history entry
/// (`pid`; none when no cn-agent took the task).
#[derive(Clone, Copy)]
struct TaskRun {
    id: TaskId,
    kind: TaskKind,
    server: agentsadm_types::ids::ServerUuid,
    pid: Option<u32>,
}

impl TaskRun {
    /// cn-agent ends the task and answers CNAPI, which records the end
    /// unless it died since or its write fails.
    fn finish(&self, core: &DcCore, result: Result<(), TaskFailure>) {
        if let Some(pid) = self.pid {
            let history = result
                .as_ref()
                .map(|_| ())
                .map_err(|f| format!("{} error: {}", self.kind.error_prefix(), error_chain(f)));
            core.cnapi.agents.finished(self.server, pid, history);
        }
        if core.faults.loses_task_results(self.server) {
            tracing::warn!(task = %self.id, "sim CNAPI: the task's result is not recorded (injected Moray failure)");
            return;
        }
        core.cnapi.tasks.finish(self.id, result);
    }
}

/// Only a set-up server runs cn-agent; CNAPI's task request to any other
/// fails to connect.
fn cn_agent_reachable(core: &DcCore, server: &MockServer) -> Result<(), TaskFailure> {
    let setup = core
        .cnapi
        .servers()
        .get(&server.uuid)
        .is_some_and(|r| r.setup);
    if setup {
        Ok(())
    } else {
        Err(TaskFailure::CnAgentDown {
            admin_ip: server.admin_ip.clone(),
            hostname: server.hostname.clone(),
        })
    }
}

/// cn-agent's `agent_install` task, with the injected faults.
async fn run_agent_install(
    core: Arc<DcCore>,
    run: TaskRun,
    server: Arc<MockServer>,
    image: ImageUuid,
    arrived: tokio::time::Instant,
) {
    if let Err(failure) = cn_agent_reachable(&core, &server) {
        run.finish(&core, Err(failure));
        return;
    }
    let name = core.image_name(image);
    let fate = core
        .faults
        .install_fate(server.uuid, name.as_deref().unwrap_or(""));
    if fate.hang {
        // Never finishes: waiters get the active task on their timeout.
        return;
    }
    let target = server.target(&core.config.datacenter);
    let deadline = arrived + fate.latency;
    // These finish after the latency without doing the install here.
    let finishes_early = fate.fail || name.as_deref() == Some("cn-agent") || name.is_none();
    if finishes_early && !sleep_until_or_shutdown(&core, deadline).await {
        return;
    }
    if fate.fail {
        let failure = TaskFailure::Injected {
            what: name.unwrap_or_else(|| "image".to_string()),
            hostname: server.hostname.clone(),
        };
        run.finish(&core, Err(failure));
        core.touch();
        return;
    }
    let Some(name) = name else {
        let failure = TaskFailure::ImageNotFound {
            imgapi_url: core.env().imgapi_url.clone(),
            image,
        };
        run.finish(&core, Err(failure));
        return;
    };
    if name == "cn-agent" {
        // cn-agent hands the install to cn-agent-update and restarts; the
        // task it answered for is done, the report comes from the new
        // cn-agent a little later.
        run.finish(&core, Ok(()));
        core.touch();
        if !sleep_or_shutdown(
            &core,
            Duration::from_millis(core.config.cn_agent_restart_ms),
        )
        .await
        {
            return;
        }
        let result = match core.ensure_prepared(&server) {
            Ok(()) => core.gz.install(core.env(), target, image).await,
            Err(e) => Err(e),
        };
        match result {
            // The new cn-agent starts and reports the whole GZ.
            Ok(_) => agent::cn_agent_started(&core, &server).await,
            Err(e) => {
                tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: cn-agent self-update failed; server.agents unchanged")
            }
        }
        return;
    }
    // The injected latency is the whole install's duration: the real work
    // runs inside it, so the simulator's own cost stays off the critical
    // path of a benchmark (it only shows when it exceeds the latency).
    let work = async {
        core.ensure_prepared(&server)?;
        let results = core.gz.install(core.env(), target, image).await?;
        postinstall_readoption(&core, &results);
        // cn-agent reports the new agents when its task ends, not when the
        // GZ work inside it does: a CNAPI that dies before the end loses
        // the report.
        tokio::time::sleep_until(deadline).await;
        core.record_results(&server, &results).await;
        Ok::<(), TaskFailure>(())
    };
    finish_within(&core, run, deadline, work).await;
}

/// The agents whose postinstall re-adopts their SAPI instance with a bare
/// create (`{service_uuid, uuid}`) that SAPI stores over the whole object,
/// so the params anyone wrote before the install are gone afterwards
/// (docs/triton/agent-install.md §2.6, the "modern pattern"; cn-agent's
/// own sends server and image, and the legacy agents adopt only when SAPI
/// has no instance).
const READOPT_WITHOUT_PARAMS: [&str; 2] = ["vm-agent", "net-agent"];

/// What those postinstalls leave in SAPI after cn-agent's install task.
fn postinstall_readoption(core: &DcCore, results: &[agentsadm_api::remote::ComponentResult]) {
    use agentsadm_api::remote::ComponentAction;
    let mut store = core.sapi.lock();
    let readopted = results.iter().filter(|r| {
        matches!(
            r.action,
            ComponentAction::Installed | ComponentAction::Upgraded
        ) && READOPT_WITHOUT_PARAMS.contains(&r.name.as_str())
    });
    for r in readopted {
        let Some(uuid) = r.instance_uuid else {
            continue;
        };
        let Some(service_uuid) = store
            .services
            .iter()
            .find(|s| s.name == r.name)
            .map(|s| s.uuid)
        else {
            continue;
        };
        store.put_instance(agentsadm_api::sapi::Instance {
            uuid,
            service_uuid,
            params: None,
            metadata: None,
            manifests: None,
            master: None,
            job_uuid: None,
            service_type: Some(agentsadm_api::sapi::ServiceType::Agent),
        });
    }
}

/// Run a task's `work` inside its injected latency (the task ends at
/// `deadline` or when the work does, whichever is later), then finish the
/// task. Nothing is finished if the datacenter shuts down first.
async fn finish_within(
    core: &DcCore,
    run: TaskRun,
    deadline: tokio::time::Instant,
    work: impl std::future::Future<Output = Result<(), TaskFailure>>,
) {
    let (result, alive) = tokio::join!(work, sleep_until_or_shutdown(core, deadline));
    if !alive {
        return;
    }
    run.finish(core, result);
    core.touch();
}

pub(super) async fn uninstall_agents(
    State(core): Core,
    Path(raw): Path<String>,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    ConnectInfo(conn): ConnectInfo<Conn>,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let names: Vec<String> = match p.get("agents") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => {
            return invalid_parameters(
                StatusCode::INTERNAL_SERVER_ERROR,
                vec![("agents", "value was not an array".to_string())],
            );
        }
    };
    // agents_uninstall needs cn-agent >= 2.8.0. Without a cn-agent entry
    // the real CNAPI formats its refusal with an undefined version, which
    // throws: the process dies.
    let Some(cn_agent) = rec.agents.iter().find(|a| a.name == "cn-agent") else {
        core.cnapi.crash(
            Some(&conn),
            &format!(
                "uninstall-agents on {} whose server.agents has no cn-agent",
                rec.hostname
            ),
            Duration::from_millis(core.config.cnapi_restart_ms),
        );
        return empty(StatusCode::INTERNAL_SERVER_ERROR);
    };
    let version = cn_agent.version.clone();
    let min = agentsadm_types::version::parse_as_node_semver(&core.config.uninstall_min_cn_agent)
        .unwrap_or(semver::Version::new(2, 8, 0));
    // node-semver's `semver.lt`, as the real CNAPI compares: a build's
    // `-master-<stamp>-g<sha>` is a pre-release, so a build of 2.8.0 is
    // below 2.8.0 and refused.
    let new_enough = agentsadm_types::version::node_semver_at_least(&version, &min);
    if !new_enough {
        return rest_error(
            STYLE,
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            format!(
                "cn-agent (v{}) on server {} does not support \"agents_uninstall\": require at least cn-agent v{min}",
                if version.is_empty() {
                    "undefined"
                } else {
                    &version
                },
                rec.uuid
            ),
        );
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let id = core
        .cnapi
        .tasks
        .create(rec.uuid, TaskKind::AgentsUninstall, &request_id(&headers));
    let core2 = core.clone();
    let arrived = tokio::time::Instant::now();
    let run = TaskRun {
        id,
        kind: TaskKind::AgentsUninstall,
        server: rec.uuid,
        pid: agent::cn_agent_up(&rec).then(|| {
            core.cnapi
                .agents
                .started(rec.uuid, "agents_uninstall", Value::Object(p.clone()))
        }),
    };
    tokio::spawn(async move {
        if let Err(failure) = cn_agent_reachable(&core2, &server) {
            run.finish(&core2, Err(failure));
            return;
        }
        let fate = core2.faults.install_fate(server.uuid, "");
        let deadline = arrived + fate.latency;
        if fate.hang {
            return;
        }
        // As for installs, the work runs inside the injected latency.
        let target = server.target(&core2.config.datacenter);
        let work = async {
            core2.ensure_prepared(&server)?;
            let results = core2.gz.uninstall(core2.env(), target, names).await?;
            // The refresh is the task's last step, as for installs; unlike
            // agent_install, agents_uninstall fails when it does, although
            // the removals are done.
            tokio::time::sleep_until(deadline).await;
            core2.try_record_results(&server, &results).await?;
            Ok::<(), TaskFailure>(())
        };
        finish_within(&core2, run, deadline, work).await;
    });
    json_response(STYLE, StatusCode::OK, &json!({"id": id}))
}
