//! CNAPI's CommandExecute: the request's checks, the path it takes to the
//! server, and running the `agentsadm` command lines the orchestrator
//! sends against a mock server (install latency and failure injection for
//! the ones that change it; an install of the image the server already
//! runs changes nothing, so an injected failure spares it).
//!
//! Through either path the command's environment is exactly the request's
//! `env` (`{}` when absent): Ur's `executeFile` and cn-agent's
//! `command_execute` both pass it as the whole environment, so nothing
//! such as `SMF_FMRI`, PATH or HOME appears unless the caller sent it (see
//! [`crate::SimDc::executes`] for what each request carried). (The API URLs
//! a real GZ reads from its own SDC config ride along as `IMGAPI_URL`,
//! `SAPI_URL` and `CNAPI_URL` where the request did not set them: the
//! in-process installer reads them from there.)
//!
//! The path is CNAPI's, per request: cn-agent when the running process
//! has the feature flag on ([`crate::SimConfig::execute_transport`] at
//! start, then whatever config-agent last rendered from SAPI, see
//! `config_agent`) and the server's `server.agents` has cn-agent >= 2.6.0
//! (`TASK_COMMAND_EXECUTE_MIN_VERSON`), else Ur.
//!
//! - Ur: a `timeout` crashes CNAPI (it logs its refusal through an
//!   undefined logger; the connection drops with no answer). The answer is
//!   `{exitCode, stderr, stdout}`; exit 113 reads as 0 and the server then
//!   reboots; a command killed by a signal reads as exit 1 with no
//!   `stderr`; past 5 MB of output the command is stopped and `exitCode` is
//!   the string `ERR_CHILD_PROCESS_STDIO_MAXBUFFER`. A command that does
//!   not end, a server whose ur-agent is down ([`crate::Faults::stop_ur`])
//!   or a mockcloud server (no Ur; when
//!   [`crate::Strictness::mockcloud_refuses_execute`]) gets no reply: CNAPI
//!   gives up after its Ur timeout ([`crate::SimConfig::ur_reply_timeout_ms`])
//!   with a plain 500.
//! - cn-agent: `timeout` kills the command with SIGKILL; the answer is the
//!   task's finish event `{err, exitCode, signal, stderr, stdout, req_id}`
//!   (`err` as forkexec's VError serializes). On a mockcloud server
//!   cn-agent's dummy backend answers exit 666 without running anything.
//!
//! The `agentsadm` behind [`agentsadm_api::remote::EXEC_SCRIPT`] is the
//! server's own ([`crate::Strictness::execute_runs_the_servers_agentsadm`]):
//! none there answers 127, an old one refuses words newer than itself.
//! The bootstrap script ([`agentsadm_api::bootstrap`]) runs for real on
//! rooted servers (`bootstrap`). What the `agentsadm` does can be forced
//! per server ([`crate::CommandFault`]); the script's own
//! handling of its status ([`agentsadm_api::remote::exec_script_status`])
//! applies to it as on a real server.

use agentsadm_types::component::ComponentName;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::ExecuteTransport;
use crate::core::DcCore;
use crate::faults::CommandFault;
use crate::fleet::MockServer;
use crate::http::Conn;
use crate::http::empty;
use crate::http::json_response;
use crate::http::plain_error;
use crate::http::rest_error;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::remote::FailureStep;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_api::remote::HookPhase;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;

use super::Core;

use super::STYLE;

use super::ServerRecord;

use super::bool_param;

use super::control::ExecuteSeen;

use super::invalid_parameters;

use super::physical;

use super::request_id;

use super::sleep_or_shutdown;

use super::sleep_until_or_shutdown;

use super::task_request;

/// What a command run produced (forkexec's `info`).
pub(super) struct CommandOutcome {
    exit_code: Option<i32>,
    signal: Option<&'static str>,
    stdout: String,
    stderr: String,
    /// It printed more than Ur's `maxBuffer` and was stopped.
    oversized: bool,
}

impl CommandOutcome {
    pub(super) fn exited(code: i32, stdout: String, stderr: String) -> CommandOutcome {
        CommandOutcome {
            exit_code: Some(code),
            signal: None,
            stdout,
            stderr,
            oversized: false,
        }
    }

    /// Killed by a signal (a script that killed itself, as the tests'
    /// checkpoints do, dies by SIGKILL).
    pub(super) fn signalled(stdout: String, stderr: String) -> CommandOutcome {
        CommandOutcome {
            exit_code: None,
            signal: Some("SIGKILL"),
            stdout,
            stderr,
            oversized: false,
        }
    }
}

/// What cn-agent's mockcloud ("dummy") backend answers to command_execute.
const MOCKCLOUD_NO_EXECUTE: &str = "command_execute not implemented for mockcloud servers";

/// Ur's `maxBuffer` (ur-agent `MAX_BUFFER`), and Node's error code for it.
const UR_MAX_BUFFER: usize = 5 * 1024 * 1024;
const MAX_BUFFER_CODE: &str = "ERR_CHILD_PROCESS_STDIO_MAXBUFFER";

/// The path CNAPI takes for a CommandExecute to this server.
fn path_for(core: &DcCore, rec: &ServerRecord) -> ExecuteTransport {
    let new_enough = rec
        .agents
        .iter()
        .find(|a| a.name == "cn-agent")
        // node-semver's `semver.gte`, as CNAPI compares.
        .is_some_and(|a| {
            agentsadm_types::version::node_semver_at_least(
                &a.version,
                &agentsadm_api::cnapi::CNAPI_CN_AGENT_EXECUTE_MIN,
            )
        });
    if core.cnapi.mode() == ExecuteTransport::CnAgent && new_enough {
        ExecuteTransport::CnAgent
    } else {
        ExecuteTransport::Ur
    }
}

/// The request's parameters, checked as CNAPI's `ensureParamsValid` does.
fn parse_request(p: &Map<String, Value>) -> Result<ExecuteRequest, Response> {
    let mut errors = Vec::new();
    if !p.get("script").is_some_and(Value::is_string) {
        errors.push(("script", "value was not a string".to_string()));
    }
    if p.get("args").is_some_and(|a| !a.is_array()) {
        errors.push(("args", "value was not an array".to_string()));
    }
    if p.get("env").is_some_and(|e| !e.is_object()) {
        errors.push(("env", "value was not an object".to_string()));
    }
    let json_flag = match p.get("json") {
        None => false,
        Some(v) => bool_param(v).unwrap_or_else(|| {
            errors.push(("json", "Invalid value".to_string()));
            false
        }),
    };
    if p.get("timeout").is_some_and(|t| !t.is_number()) {
        errors.push(("timeout", "value was not a number".to_string()));
    }
    if !errors.is_empty() {
        return Err(invalid_parameters(
            StatusCode::INTERNAL_SERVER_ERROR,
            errors,
        ));
    }
    let strings = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(ExecuteRequest {
        script: p["script"].as_str().unwrap_or_default().to_string(),
        args: p
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(strings).collect())
            .unwrap_or_default(),
        env: p
            .get("env")
            .and_then(Value::as_object)
            .map(|o| o.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
            .unwrap_or_default(),
        json: json_flag,
        timeout: p.get("timeout").and_then(Value::as_u64),
    })
}

pub(super) async fn execute(
    State(core): Core,
    Path(raw): Path<String>,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    ConnectInfo(conn): ConnectInfo<Conn>,
    body: Bytes,
) -> Response {
    let died = core.cnapi.died();
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let request = match parse_request(&p) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let path = path_for(&core, &rec);
    core.cnapi
        .executes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(ExecuteSeen {
            server: rec.uuid,
            path,
            timeout: request.timeout,
            env: request.env.clone(),
            args: request.args.clone(),
        });
    let timeout_ms = request.timeout;
    if timeout_ms.is_some() && path == ExecuteTransport::Ur {
        core.cnapi.crash(
            Some(&conn),
            &format!(
                "CommandExecute with timeout to {}, whose commands go through Ur (self.log is undefined in Server.executeCommand)",
                rec.hostname
            ),
            Duration::from_millis(core.config.cnapi_restart_ms),
        );
        return empty(StatusCode::INTERNAL_SERVER_ERROR);
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let json_flag = request.json;
    let mockcloud = core.config.mockcloud_without_execute();
    let ur_wait = Duration::from_millis(core.config.ur_reply_timeout_ms);
    let no_ur = mockcloud || core.faults.ur_down(rec.uuid);
    let outcome = match (path, mockcloud) {
        (ExecuteTransport::Ur, _) if no_ur => {
            // Nothing answers on the server's Ur queue.
            tokio::select! {
                _ = sleep_or_shutdown(&core, ur_wait) => return ur_timed_out(&core),
                () = died => { conn.cut(); return empty(StatusCode::INTERNAL_SERVER_ERROR); }
            }
        }
        (ExecuteTransport::CnAgent, true) => CommandOutcome::exited(
            666,
            String::new(),
            format!("cn-agent: {MOCKCLOUD_NO_EXECUTE}\n"),
        ),
        (path, _) => {
            // The command runs on the server whatever becomes of CNAPI.
            let cmd_timeout = (path == ExecuteTransport::CnAgent)
                .then_some(timeout_ms)
                .flatten();
            let run = tokio::spawn(run_command(
                core.clone(),
                server.clone(),
                request,
                cmd_timeout,
            ));
            // Ur has no timeout of its own: CNAPI stops waiting for its reply.
            let limit = match path {
                ExecuteTransport::Ur => ur_wait,
                ExecuteTransport::CnAgent => Duration::MAX,
            };
            tokio::select! {
                r = tokio::time::timeout(limit, run) => match r {
                    Ok(Ok(o)) => o,
                    Ok(Err(_)) => killed(),
                    Err(_) => return ur_timed_out(&core),
                },
                () = died => { conn.cut(); return empty(StatusCode::INTERNAL_SERVER_ERROR); }
            }
        }
    };
    if path == ExecuteTransport::Ur && outcome.exit_code == Some(113) {
        // Ur answers, then reboots the server.
        core.cnapi
            .reboots
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(reboot(core.clone(), server.clone()));
    }
    answer(&outcome, path, json_flag, mockcloud, &request_id(&headers))
}

/// The HTTP answer for a command's outcome on `path`.
fn answer(
    outcome: &CommandOutcome,
    path: ExecuteTransport,
    json_flag: bool,
    mockcloud: bool,
    req_id: &str,
) -> Response {
    let exit_code = match (path, outcome.exit_code) {
        // Ur replies 0 for 113 ("reboot after replying").
        (ExecuteTransport::Ur, Some(113)) => Some(0),
        // A command Ur saw killed: exit_status 1, no stderr.
        (ExecuteTransport::Ur, None) => Some(1),
        (_, code) => code,
    };
    if json_flag {
        let body = match path {
            ExecuteTransport::Ur => {
                // `{exitCode, stderr, stdout}`; Ur sends no stderr for a
                // command it saw killed, and Node's error code for one it
                // stopped past its buffer.
                let mut b = serde_json::Map::new();
                if outcome.oversized {
                    b.insert("exitCode".into(), json!(MAX_BUFFER_CODE));
                } else {
                    b.insert("exitCode".into(), json!(exit_code));
                }
                if outcome.exit_code.is_some() || outcome.oversized {
                    b.insert("stderr".into(), json!(outcome.stderr));
                }
                b.insert("stdout".into(), json!(outcome.stdout));
                Value::Object(b)
            }
            ExecuteTransport::CnAgent => json!({
                "err": forkexec_error(outcome, mockcloud),
                "exitCode": exit_code,
                "signal": outcome.signal,
                "stderr": outcome.stderr,
                "stdout": outcome.stdout,
                "req_id": req_id,
            }),
        };
        json_response(STYLE, StatusCode::OK, &body)
    } else if exit_code != Some(0) || outcome.oversized {
        // Without json, a non-zero exit is an InternalError and stderr is lost.
        rest_error(
            STYLE,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Error executing on remote system",
        )
    } else {
        json_response(STYLE, StatusCode::OK, &json!(outcome.stdout.trim()))
    }
}

/// Ur's "reboot after replying": the server goes away a second later
/// (cn-agent with it: the tasks CNAPI had sent it fail), and comes back
/// after [`crate::SimConfig::server_reboot_ms`] with a fresh cn-agent.
async fn reboot(core: Arc<DcCore>, server: Arc<MockServer>) {
    if !sleep_or_shutdown(&core, Duration::from_secs(1)).await {
        return;
    }
    tracing::warn!(server = %server.hostname, "sim: Ur reboots the server (exit status 113)");
    if let Some(r) = core.cnapi.servers().get_mut(&server.uuid) {
        r.status = super::ServerStatus::Unknown;
        r.transitional_status = "rebooting".to_string();
    }
    core.cnapi.agents.forget(server.uuid);
    core.cnapi
        .tasks
        .fail_active_on(server.uuid, "socket hang up (the server rebooted)");
    core.touch();
    if !sleep_or_shutdown(&core, Duration::from_millis(core.config.server_reboot_ms)).await {
        return;
    }
    if let Some(r) = core.cnapi.servers().get_mut(&server.uuid) {
        r.status = super::ServerStatus::Running;
        r.transitional_status = String::new();
    }
    super::agent::cn_agent_started(&core, &server).await;
}

/// CNAPI's Ur client giving up on a reply (a server without Ur, a command
/// that never ends): a plain Error, HTTP 500 with `{message}` only.
fn ur_timed_out(core: &DcCore) -> Response {
    let ms = core.config.ur_reply_timeout_ms;
    // JavaScript prints the number of seconds as it is: 3600, or 0.2.
    let secs = if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        (ms as f64 / 1000.0).to_string()
    };
    plain_error(
        STYLE,
        format!("Timed out waiting for ur response after {secs} seconds"),
    )
}

/// cn-agent's `err`: `null` on success, else the VError forkexec builds
/// (`exec "<script> <args>": <why>`) as JSON shows it.
fn forkexec_error(outcome: &CommandOutcome, mockcloud: bool) -> Value {
    let why = match (outcome.exit_code, outcome.signal) {
        _ if mockcloud => {
            return json!({"jse_shortmsg": MOCKCLOUD_NO_EXECUTE, "jse_info": {}, "message": MOCKCLOUD_NO_EXECUTE});
        }
        (Some(0), _) => return Value::Null,
        (Some(n), _) => format!("exited with status {n}"),
        (None, Some(sig)) => format!("unexpectedly terminated by signal {sig}"),
        (None, None) => "unexpectedly terminated".to_string(),
    };
    // The script is written to a temporary file first (its name is random).
    let short = format!("exec \"/tmp/cnagent-{:08x}\"", rand::random::<u32>());
    json!({
        "jse_shortmsg": short,
        "jse_cause": {"jse_shortmsg": why, "jse_info": {}, "message": why},
        "jse_info": {},
        "message": format!("{short}: {why}"),
    })
}

/// `gz` subcommands that change the server (and so get install latency
/// and failure injection).
const CHANGING: [&str; 4] = ["install", "remove", "setup", "rollback"];

/// Run an execute request on a mock server. Only `agentsadm` command lines
/// built by `remote::gz_execute_request`, the bootstrap and the probe
/// (`remote::probe_request`) run; any other script is answered as a server
/// without that command would: exit 127 and nothing run.
async fn run_command(
    core: Arc<DcCore>,
    server: Arc<MockServer>,
    request: ExecuteRequest,
    timeout_ms: Option<u64>,
) -> CommandOutcome {
    let core = &core;
    if agentsadm_api::remote::is_probe(&request) {
        // An `echo`: it needs nothing on the server.
        let out = format!("{}\n", agentsadm_api::remote::PROBE_OUTPUT);
        return CommandOutcome::exited(0, out, String::new());
    }
    if let Some(image) = agentsadm_api::bootstrap::parse_bootstrap(&request) {
        if let Some(fault) = core.faults.command_fault(server.uuid) {
            return forced(fault);
        }
        return super::bootstrap::run(core, &server, &request, image, timeout_ms).await;
    }
    let Some(args) = agentsadm_api::remote::parse_gz_execute(&request) else {
        return CommandOutcome::exited(
            127,
            String::new(),
            "agentsadm sim: simulated servers only run agentsadm command lines (remote::EXEC_SCRIPT) and the bootstrap (bootstrap::BOOTSTRAP_SCRIPT); the script was not run\n".into(),
        );
    };
    if let Some(fault) = core.faults.command_fault(server.uuid) {
        return forced(fault);
    }
    if let Err(e) = core.ensure_prepared(&server) {
        return CommandOutcome::exited(
            1,
            String::new(),
            format!("agentsadm: error: {}\n", error_chain(&e)),
        );
    }
    if core.config.strictness.execute_runs_the_servers_agentsadm
        && let Some(refused) = refused_by_the_servers_agentsadm(core, &server, args)
    {
        return refused;
    }
    let arrived = tokio::time::Instant::now();
    let argv = args.to_vec();
    let changing = argv.first().map(String::as_str) == Some("gz")
        && argv.get(1).is_some_and(|c| CHANGING.contains(&c.as_str()));
    let mut latency = Duration::ZERO;
    if changing {
        let component = component_of(core, &argv);
        let fate = core.faults.install_fate(server.uuid, &component);
        latency = fate.latency;
        if fate.hang {
            match timeout_ms {
                Some(ms) => {
                    sleep_or_shutdown(core, Duration::from_millis(ms)).await;
                    return killed();
                }
                None => {
                    core.shutdown.cancelled().await;
                    return killed();
                }
            }
        }
        if fate.fail && !installs_what_is_there(core, &server, &argv).await {
            if !sleep_until_or_shutdown(core, arrived + fate.latency).await {
                return killed();
            }
            let message = format!(
                "injected failure installing {component} on {}",
                server.hostname
            );
            let result = GzResult {
                server_uuid: server.uuid,
                components: Vec::new(),
                error: Some(GzFailure {
                    component: ComponentName::new(component).ok(),
                    step: FailureStep::Hook(HookPhase::Postinstall),
                    message: message.clone(),
                }),
                warnings: Vec::new(),
            };
            return CommandOutcome::exited(
                1,
                serde_json::to_string(&result).unwrap_or_default() + "\n",
                format!("agentsadm: error: {message}\n"),
            );
        }
    }
    // A changing command takes at least the injected latency; its real
    // work runs inside it.
    let env = core.env();
    // Exactly the request's environment, plus the server's own API URLs
    // where the request does not name them (module docs).
    let mut vars = request.env.clone();
    for (k, v) in env.command_env() {
        vars.entry(k).or_insert(v);
    }
    let run = core
        .gz
        .run(env, server.target(&core.config.datacenter), argv, vars);
    let fut = async {
        let (r, alive) = tokio::join!(run, sleep_until_or_shutdown(core, arrived + latency));
        alive.then_some(r)
    };
    let result = match timeout_ms {
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
            Ok(Some(r)) => r,
            _ => return killed(),
        },
        None => match fut.await {
            Some(r) => r,
            None => return killed(),
        },
    };
    if changing {
        core.touch();
    }
    CommandOutcome::exited(
        agentsadm_api::remote::exec_script_status(result.exit_status),
        result.stdout,
        result.stderr,
    )
}

/// Whether `argv` is a `gz install` of the image the server's GZ already
/// reports for it. A real installer answers such an install `unchanged`
/// and runs no hook, so an injected failure (a failing postinstall) cannot
/// happen to it: an orchestrator retrying a turn that an API outage cut
/// short sends exactly that for the steps the first try finished.
async fn installs_what_is_there(core: &DcCore, server: &MockServer, argv: &[String]) -> bool {
    // `--force` reinstalls (and runs the hooks) whatever is there.
    if argv.get(1).map(String::as_str) != Some("install") || argv.iter().any(|a| a == "--force") {
        return false;
    }
    // The image is the first operand, as in `component_of`.
    let Some(image) = argv
        .iter()
        .skip(2)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse::<ImageUuid>().ok())
    else {
        return false;
    };
    match core.gz.report(server.target(&core.config.datacenter)).await {
        Ok(report) => report.agents.iter().any(|a| a.image_uuid == Some(image)),
        // Nothing known about the server: the fault applies as before.
        Err(_) => false,
    }
}

/// What the server's own agentsadm makes of `argv` when it cannot run it
/// (strict mode): none there, and the script's bash answers 127 as for any
/// missing command; one older than a word of the command line, and its
/// parser refuses the whole line (clap's exit status 2), as a real old
/// binary would.
fn refused_by_the_servers_agentsadm(
    core: &DcCore,
    server: &MockServer,
    argv: &[String],
) -> Option<CommandOutcome> {
    let target = server.target(&core.config.datacenter);
    let Some(version) = core.gz.agentsadm(&target) else {
        return Some(CommandOutcome::exited(
            127,
            String::new(),
            format!(
                "/tmp/cnagent-script: line 2: {}: No such file or directory\n",
                agentsadm_api::remote::GZ_BINARY
            ),
        ));
    };
    let key = agentsadm_types::version::VersionKey::of(&version);
    let word = agentsadm_api::compat::first_unknown(argv, key.as_ref())?;
    Some(CommandOutcome::exited(
        agentsadm_api::compat::USAGE_EXIT_STATUS,
        String::new(),
        agentsadm_api::compat::refusal(argv, word),
    ))
}

/// The outcome a [`CommandFault`] forces, through the script around
/// agentsadm.
fn forced(fault: CommandFault) -> CommandOutcome {
    match fault {
        CommandFault::Exit(status) => CommandOutcome::exited(
            agentsadm_api::remote::exec_script_status(status),
            String::new(),
            format!("agentsadm: (simulated) exit status {status}\n"),
        ),
        CommandFault::ScriptExit(status) => CommandOutcome::exited(
            status,
            String::new(),
            format!("(simulated) the script exits {status}\n"),
        ),
        CommandFault::Signal => killed(),
        CommandFault::Oversized => CommandOutcome {
            exit_code: None,
            signal: Some("SIGTERM"),
            // What fitted in the buffer when the command was stopped.
            stdout: "y\n".repeat(UR_MAX_BUFFER / 2),
            stderr: String::new(),
            oversized: true,
        },
    }
}

/// A command killed on its timeout (forkexec sets `killSignal: SIGKILL`) or
/// by the datacenter shutting down.
pub(super) fn killed() -> CommandOutcome {
    CommandOutcome {
        exit_code: None,
        signal: Some("SIGKILL"),
        stdout: String::new(),
        stderr: String::new(),
        oversized: false,
    }
}

/// The component a `gz` command line is about (for fault selection): the
/// first operand, with image UUIDs resolved to their name.
fn component_of(core: &DcCore, argv: &[String]) -> String {
    let operand = argv
        .iter()
        .skip(2)
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    match operand.parse::<ImageUuid>() {
        Ok(u) => core.image_name(u).unwrap_or(operand),
        Err(_) => operand,
    }
}
