//! CNAPI's CommandExecute: the request's checks, and running the
//! `agentsadm` command lines the orchestrator sends against a mock server
//! (install latency and failure injection for the ones that change it).
//!
//! Through either transport the command's environment is exactly the
//! request's `env` (`{}` when absent): Ur's `executeFile` and cn-agent's
//! `command_execute` both pass it as the whole environment, so nothing
//! such as `SMF_FMRI` appears unless the caller sent it. (The API URLs a
//! real GZ reads from its own SDC config ride along as `IMGAPI_URL`,
//! `SAPI_URL` and `CNAPI_URL` where the request did not set them: the
//! in-process installer reads them from there.)
//!
//! - Ur (CNAPI's default): `timeout` is refused with 409; the answer is
//!   `{exitCode, stderr, stdout}`; exit 113 (Ur's "reboot after replying")
//!   reads as 0. A command that does not end, or a mockcloud server (no
//!   Ur; when [`crate::Strictness::mockcloud_refuses_execute`]), gets
//!   no reply: CNAPI gives up after its Ur timeout
//!   ([`crate::SimConfig::ur_reply_timeout_ms`]) with a plain 500.
//! - cn-agent: `timeout` kills the command with SIGKILL; the answer is the
//!   task's finish event `{err, exitCode, signal, stderr, stdout, req_id}`
//!   (`err` as forkexec's VError serializes). On a mockcloud server
//!   cn-agent's dummy backend answers exit 666 without running anything.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::ExecuteTransport;
use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::http::json_response;
use crate::http::plain_error;
use crate::http::rest_error;
use agentsadm_api::cnapi::ExecuteRequest;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;

use super::Core;

use super::STYLE;

use super::bool_param;

use super::invalid_argument;

use super::invalid_parameters;

use super::physical;

use super::request_id;

use super::sleep_or_shutdown;

use super::sleep_until_or_shutdown;

use super::task_request;

/// What a command run produced (forkexec's `info`).
struct CommandOutcome {
    exit_code: Option<i32>,
    signal: Option<&'static str>,
    stdout: String,
    stderr: String,
}

/// What cn-agent's mockcloud ("dummy") backend answers to command_execute.
const MOCKCLOUD_NO_EXECUTE: &str = "command_execute not implemented for mockcloud servers";

pub(super) async fn execute(
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
        Some(v) => match bool_param(v) {
            Some(b) => b,
            None => {
                errors.push(("json", "Invalid value".to_string()));
                false
            }
        },
    };
    if p.get("timeout").is_some_and(|t| !t.is_number()) {
        errors.push(("timeout", "value was not a number".to_string()));
    }
    if !errors.is_empty() {
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    let timeout_ms = p.get("timeout").and_then(Value::as_u64);
    let transport = core.config.execute_transport;
    if timeout_ms.is_some() && transport == ExecuteTransport::Ur {
        return invalid_argument(
            "timeout only supported when using cn-agent (See: FEATURE_USE_CNAGENT_COMMAND_EXECUTE)",
        );
    }
    let request = ExecuteRequest {
        script: p["script"].as_str().unwrap_or_default().to_string(),
        args: p
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        env: p
            .get("env")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        json: json_flag,
        timeout: timeout_ms,
    };
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let mockcloud = core.config.mockcloud_without_execute();
    let ur_wait = Duration::from_millis(core.config.ur_reply_timeout_ms);
    let outcome = match (transport, mockcloud) {
        (ExecuteTransport::Ur, true) => {
            sleep_or_shutdown(&core, ur_wait).await;
            return ur_timed_out(&core);
        }
        (ExecuteTransport::CnAgent, true) => CommandOutcome {
            exit_code: Some(666),
            signal: None,
            stdout: String::new(),
            stderr: format!("cn-agent: {MOCKCLOUD_NO_EXECUTE}\n"),
        },
        // Ur has no timeout of its own: CNAPI stops waiting for its reply.
        (ExecuteTransport::Ur, false) => {
            match tokio::time::timeout(ur_wait, run_command(&core, &server, request, None)).await {
                Ok(o) => o,
                Err(_) => return ur_timed_out(&core),
            }
        }
        (ExecuteTransport::CnAgent, false) => {
            run_command(&core, &server, request, timeout_ms).await
        }
    };
    let req_id = request_id(&headers);
    let exit_code = match (transport, outcome.exit_code) {
        // Ur replies 0 for 113 ("reboot after replying").
        (ExecuteTransport::Ur, Some(113)) => Some(0),
        // A command Ur saw killed: exit_status 1, no stderr.
        (ExecuteTransport::Ur, None) => Some(1),
        (_, code) => code,
    };
    if json_flag {
        let body = match transport {
            ExecuteTransport::Ur => {
                // `{exitCode, stderr, stdout}`; Ur sends no stderr for a
                // command it saw killed.
                let mut b = serde_json::Map::new();
                b.insert("exitCode".into(), json!(exit_code));
                if outcome.exit_code.is_some() {
                    b.insert("stderr".into(), json!(outcome.stderr));
                }
                b.insert("stdout".into(), json!(outcome.stdout));
                Value::Object(b)
            }
            ExecuteTransport::CnAgent => json!({
                "err": forkexec_error(&outcome, mockcloud),
                "exitCode": exit_code,
                "signal": outcome.signal,
                "stderr": outcome.stderr,
                "stdout": outcome.stdout,
                "req_id": req_id,
            }),
        };
        json_response(STYLE, StatusCode::OK, &body)
    } else if exit_code != Some(0) {
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
/// built by `remote::gz_execute_request` run; any other script is answered
/// as a server without that command would: exit 127 and nothing run.
async fn run_command(
    core: &Arc<DcCore>,
    server: &Arc<MockServer>,
    request: ExecuteRequest,
    timeout_ms: Option<u64>,
) -> CommandOutcome {
    let Some(args) = agentsadm_api::remote::parse_gz_execute(&request) else {
        return CommandOutcome {
            exit_code: Some(127),
            signal: None,
            stdout: String::new(),
            stderr: "agentsadm sim: simulated servers only run agentsadm command lines (remote::EXEC_SCRIPT); the script was not run\n".into(),
        };
    };
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
        if fate.fail {
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
                    component: Some(component),
                    step: "injected".into(),
                    message: message.clone(),
                }),
                warnings: Vec::new(),
            };
            return CommandOutcome {
                exit_code: Some(1),
                signal: None,
                stdout: serde_json::to_string(&result).unwrap_or_default() + "\n",
                stderr: format!("agentsadm: error: {message}\n"),
            };
        }
    }
    // A changing command takes at least the injected latency; its real
    // work runs inside it.
    if let Err(e) = core.ensure_prepared(server) {
        return CommandOutcome {
            exit_code: Some(1),
            signal: None,
            stdout: String::new(),
            stderr: format!("agentsadm: error: {}\n", error_chain(&e)),
        };
    }
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
    CommandOutcome {
        exit_code: Some(result.exit_status),
        signal: None,
        stdout: result.stdout,
        stderr: result.stderr,
    }
}

/// A command killed on its timeout (forkexec sets `killSignal: SIGKILL`) or
/// by the datacenter shutting down.
fn killed() -> CommandOutcome {
    CommandOutcome {
        exit_code: None,
        signal: Some("SIGKILL"),
        stdout: String::new(),
        stderr: String::new(),
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
