//! CNAPI's ServerSetup and ServerFactoryReset and the background jobs
//! behind them: setup installs the default agent set and marks the server
//! set up; factory reset wipes the GZ and leaves the record not set up.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::core::DcCore;
use crate::fleet::MockServer;
use crate::http::empty;
use crate::http::json_response;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::JobUuid;

use super::Core;

use super::STYLE;

use super::invalid_argument;

use super::physical;

use super::sleep_or_shutdown;

use super::strict;

use super::task_request;

use super::validate::{Rule, params_valid};

/// ServerSetup's disk layouts.
const DISK_LAYOUTS: [&str; 5] = ["single", "mirror", "raidz1", "raidz2", "raidz3"];

pub(super) async fn setup_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(r) = strict(
        &p,
        &[
            "hostname",
            "nics",
            "postsetup_script",
            "server_uuid",
            "disk_spares",
            "disk_width",
            "disk_cache",
            "disk_layout",
            "encryption_enabled",
            "disk_exclude",
        ],
    ) {
        return r;
    }
    if let Err(r) = params_valid(
        &p,
        &[
            ("hostname", Rule::String),
            ("nics", Rule::Array),
            ("postsetup_script", Rule::String),
            ("server_uuid", Rule::String),
            ("disk_spares", Rule::NonNegativeNumber),
            ("disk_width", Rule::NonNegativeNumber),
            ("disk_cache", Rule::BooleanString),
            ("disk_layout", Rule::String),
            ("encryption_enabled", Rule::BooleanString),
            ("disk_exclude", Rule::String),
        ],
    ) {
        return r;
    }
    if let Some(l) = p.get("disk_layout").and_then(Value::as_str)
        && !DISK_LAYOUTS.contains(&l)
    {
        return invalid_argument(format!(
            "disk_layout must be one of: '{}'",
            DISK_LAYOUTS.join("', '")
        ));
    }
    if rec.setup {
        return empty(StatusCode::NO_CONTENT);
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    {
        let mut servers = core.cnapi.servers();
        if let Some(r) = servers.get_mut(&rec.uuid) {
            if let Some(h) = p.get("hostname").and_then(Value::as_str) {
                r.hostname = h.to_string();
            }
            // mark_as_setting_up, then clear_server_agents.
            r.setting_up = true;
            r.agents = Vec::new();
        }
    }
    core.touch();
    let job = JobUuid::new_v4();
    let core2 = core.clone();
    tokio::spawn(async move { run_setup_job(core2, server).await });
    // 202 with the job (the docs say 200).
    json_response(STYLE, StatusCode::ACCEPTED, &json!({"job_uuid": job}))
}

/// The server-setup workflow, reduced to what matters for agents: `gz setup
/// --source imgapi` (each default component at its SAPI service's
/// `params.image_uuid`), report, mark set up.
async fn run_setup_job(core: Arc<DcCore>, server: Arc<MockServer>) {
    if !sleep_or_shutdown(&core, Duration::from_millis(core.config.setup_job_ms)).await {
        return;
    }
    let result = match core.ensure_prepared(&server) {
        Ok(()) => {
            core.gz
                .setup(core.env(), server.target(&core.config.datacenter))
                .await
        }
        Err(e) => Err(e),
    };
    core.refresh_agents(&server).await;
    let mut servers = core.cnapi.servers();
    if let Some(r) = servers.get_mut(&server.uuid) {
        match result {
            // mark_server_as_setup: the job's last task clears setting_up.
            Ok(()) => {
                r.setup = true;
                r.setting_up = false;
            }
            // The real job's onerror only fails the job: nothing clears
            // setting_up, so the record keeps saying "setting up" until a
            // setup succeeds (ServerSetup itself only looks at `setup`).
            Err(e) => {
                tracing::warn!(server = %server.hostname, error = %error_chain(&e), "sim: server-setup job failed")
            }
        }
    }
    drop(servers);
    core.touch();
    core.cnapi.jobs_ended.fetch_add(1, Ordering::Relaxed);
}

pub(super) async fn factory_reset(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let (rec, p) = match task_request(&core, &raw, rq.as_deref(), &body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(r) = strict(&p, &["server_uuid", "creator_uuid", "origin"]) {
        return r;
    }
    if let Err(r) = params_valid(
        &p,
        &[
            ("server_uuid", Rule::String),
            ("creator_uuid", Rule::String),
            ("origin", Rule::String),
        ],
    ) {
        return r;
    }
    if !rec.vms.is_empty() {
        // The body is a bare JSON string, not an error object.
        return json_response(
            STYLE,
            StatusCode::CONFLICT,
            &json!(format!(
                "Server may not be reset because it has {} vms",
                rec.vms.len()
            )),
        );
    }
    let server = match physical(&core, rec.uuid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let job = JobUuid::new_v4();
    let core2 = core.clone();
    tokio::spawn(async move {
        if !sleep_or_shutdown(&core2, Duration::from_millis(core2.config.factory_reset_ms)).await {
            return;
        }
        if let Err(e) = server.wipe() {
            tracing::warn!(server = %server.hostname, error = %e, "sim: factory reset could not wipe the GZ");
        }
        // The record stays; it comes back not set up (the rebooted server's
        // sysinfo says so). The job writes nothing to the record:
        // `setting_up` stays as it was, and `agents` is only cleared by the
        // next setup; SAPI is not touched.
        if let Some(r) = core2.cnapi.servers().get_mut(&server.uuid) {
            r.setup = false;
        }
        core2.touch();
        core2.cnapi.jobs_ended.fetch_add(1, Ordering::Relaxed);
    });
    json_response(STYLE, StatusCode::ACCEPTED, &json!({"job_uuid": job}))
}
