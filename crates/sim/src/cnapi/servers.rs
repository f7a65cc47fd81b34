//! CNAPI's server routes: ServerList (strict parameters, `extras` and
//! `fields` projection, paging), ServerGet, ServerUpdate and ServerDelete.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use crate::http::empty;
use crate::http::json_response;
use crate::http::rest_error;
use crate::imgapi::iso_millis;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_types::ids::ServerUuid;

use super::Core;
use super::LIST_MAX_LIMIT;
use super::STYLE;
use super::bool_param;
use super::invalid_argument;
use super::invalid_parameters;
use super::params;
use super::prepopulate;
use super::record::Groups;
use super::strict;

pub(super) fn list_regex_ok(s: &str) -> bool {
    !s.is_empty()
        && s.split(',')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_'))
}

pub(super) async fn list_servers(State(core): Core, RawQuery(rq): RawQuery) -> Response {
    let p = match params(None, rq.as_deref(), &Bytes::new()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = strict(
        &p,
        &[
            "uuids",
            "setup",
            "headnode",
            "reserved",
            "reservoir",
            "hostname",
            "extras",
            "fields",
            "limit",
            "offset",
        ],
    ) {
        return r;
    }
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let mut errors = Vec::new();
    let mut bools: BTreeMap<&str, bool> = BTreeMap::new();
    for key in ["setup", "headnode", "reserved", "reservoir"] {
        if let Some(v) = p.get(key) {
            match bool_param(v) {
                Some(b) => {
                    bools.insert(key, b);
                }
                None => errors.push((key, "Invalid value".to_string())),
            }
        }
    }
    for key in ["extras", "fields"] {
        if s(key).is_some_and(|v| !list_regex_ok(v)) {
            errors.push((key, "Invalid value".to_string()));
        }
    }
    if let Some(u) = s("uuids") {
        let ok = u
            .split(',')
            .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        if !ok {
            errors.push(("uuids", "Invalid value".to_string()));
        }
    }
    let parse_int = |key: &'static str, errors: &mut Vec<(&str, String)>| -> Option<i64> {
        let v = s(key)?;
        match v.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.push((key, "Invalid integer".to_string()));
                None
            }
        }
    };
    let limit = parse_int("limit", &mut errors);
    let offset = parse_int("offset", &mut errors);
    if !errors.is_empty() {
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    if let Some(l) = limit
        && !(1..=LIST_MAX_LIMIT as i64).contains(&l)
    {
        return invalid_parameters(
            StatusCode::BAD_REQUEST,
            vec![(
                "limit",
                format!("limit must be in the range 1-{LIST_MAX_LIMIT} (inclusive)"),
            )],
        );
    }
    let limit = limit.unwrap_or(LIST_MAX_LIMIT as i64) as usize;
    let offset = offset.unwrap_or(0).max(0) as usize;
    let groups = match s("extras") {
        None => Groups::default(),
        Some(e) => {
            let mut g = Groups {
                last_heartbeat: true,
                ..Groups::default()
            };
            for x in e.split(',') {
                match x {
                    "agents" => g.agents = true,
                    "vms" => g.vms = true,
                    "memory" => g.memory = true,
                    "disk" => g.disk = true,
                    "sysinfo" => g.sysinfo = true,
                    "capacity" => g.capacity = true,
                    "all" => g = Groups::all(),
                    _ => {}
                }
            }
            g
        }
    };
    let uuids: Option<Vec<&str>> = s("uuids").map(|u| u.split(',').map(str::trim).collect());
    let hostname = s("hostname");
    let now = iso_millis(SystemTime::now());
    let servers = core.cnapi.servers();
    let fields: Option<Vec<&str>> = s("fields").map(|f| f.split(',').collect());
    let out: Vec<Value> = servers
        .values()
        .filter(|r| {
            uuids
                .as_ref()
                .is_none_or(|u| u.contains(&r.uuid.to_string().as_str()))
        })
        .filter(|r| hostname.is_none_or(|h| r.hostname == h))
        .filter(|r| {
            bools.iter().all(|(k, want)| match *k {
                "setup" => r.setup == *want,
                "headnode" => r.headnode == *want,
                "reserved" => r.reserved == *want,
                _ => r.reservoir == *want,
            })
        })
        .skip(offset)
        .take(limit)
        .map(|r| {
            let v = r.to_json(groups, &now);
            match &fields {
                None => v,
                Some(f) => {
                    let obj = v.as_object().cloned().unwrap_or_default();
                    Value::Object(
                        f.iter()
                            .filter_map(|k| obj.get(*k).map(|x| (k.to_string(), x.clone())))
                            .collect(),
                    )
                }
            }
        })
        .collect();
    json_response(STYLE, StatusCode::OK, &out)
}

pub(super) async fn get_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
) -> Response {
    let rec = match prepopulate(&core, &raw) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let p = match params(Some(&raw), rq.as_deref(), &Bytes::new()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Strict: even `extras` is refused on ServerGet.
    if let Err(r) = strict(&p, &["server_uuid"]) {
        return r;
    }
    // Capacity comes from VMAPI, whose client retries for about 15 s when
    // VMAPI is down.
    core.cnapi.server_gets.fetch_add(1, Ordering::Relaxed);
    if core.faults.vmapi_down() {
        let d = Duration::from_millis(core.config.vmapi_down_server_get_ms);
        if !super::sleep_or_shutdown(&core, d).await {
            return crate::http::empty(StatusCode::SERVICE_UNAVAILABLE);
        }
    }
    let now = iso_millis(SystemTime::now());
    json_response(STYLE, StatusCode::OK, &rec.to_json(Groups::all(), &now))
}

pub(super) async fn update_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    if let Err(r) = prepopulate(&core, &raw) {
        return r;
    }
    let p = match params(Some(&raw), rq.as_deref(), &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    const KEYS: [(&str, &str); 21] = [
        ("agents", "array"),
        ("boot_params", "object"),
        ("boot_platform", "string"),
        ("comments", "string"),
        ("datacenter", "string"),
        ("default_console", "string"),
        ("etag_retries", "number"),
        ("next_reboot", "string"),
        ("nics", "array"),
        ("overprovision_ratios", "object"),
        ("rack_identifier", "string"),
        ("reservation_ratio", "number"),
        ("reserved", "boolean"),
        ("reservoir", "boolean"),
        ("serial", "string"),
        ("server_uuid", "string"),
        ("setting_up", "boolean"),
        ("setup", "boolean"),
        ("traits", "object"),
        ("transitional_status", "string"),
        ("hostname", "never"),
    ];
    let allowed: Vec<&str> = KEYS
        .iter()
        .filter(|(_, t)| *t != "never")
        .map(|(k, _)| *k)
        .collect();
    if let Err(r) = strict(&p, &allowed) {
        return r;
    }
    let mut errors = Vec::new();
    for (key, ty) in KEYS {
        let Some(v) = p.get(key) else { continue };
        let (ok, msg) = match ty {
            "array" => (v.is_array(), "value was not an array"),
            "object" => (v.is_object(), "value was not an object"),
            "string" => (v.is_string(), "value was not a string"),
            "number" => (v.is_number(), "value was not a number"),
            "boolean" => (v.is_boolean(), "value was not true or false"),
            _ => (true, ""),
        };
        if !ok {
            errors.push((key, msg.to_string()));
        }
    }
    if !errors.is_empty() {
        // Type-check failures are HTTP 500 in CNAPI (a quirk kept here).
        return invalid_parameters(StatusCode::INTERNAL_SERVER_ERROR, errors);
    }
    // The entries cn-agent would report, and whether any was not one.
    let agents: Option<(Vec<AgentEntry>, bool)> = match p.get("agents") {
        Some(a) if a.is_array() => {
            let (entries, problems) = agentsadm_api::agents::read_agents(a);
            Some((entries, !problems.is_empty()))
        }
        Some(a) => {
            return invalid_parameters(
                StatusCode::INTERNAL_SERVER_ERROR,
                vec![(
                    "agents",
                    format!("invalid agent entry: {a} is not an array"),
                )],
            );
        }
        None => None,
    };
    if let Some(n) = p.get("next_reboot").and_then(Value::as_str) {
        let canonical = humantime::parse_rfc3339_weak(n)
            .ok()
            .map(iso_millis)
            .filter(|c| c == n);
        if canonical.is_none() {
            return invalid_argument(format!("next_reboot {n} is not a valid ISO date"));
        }
    }
    if let Some(o) = p.get("overprovision_ratios").and_then(Value::as_object) {
        let bad = o.iter().any(|(k, v)| {
            !["cpu", "ram", "disk", "io", "net"].contains(&k.as_str())
                || !v.as_f64().is_some_and(|x| x >= 0.0)
        });
        if bad {
            return invalid_argument("invalid overprovision_ratios");
        }
    }
    let uuid: ServerUuid = match raw.parse() {
        Ok(u) => u,
        Err(_) => return invalid_argument("Invalid server_uuid"),
    };
    {
        let mut servers = core.cnapi.servers();
        let Some(r) = servers.get_mut(&uuid) else {
            return rest_error(
                STYLE,
                StatusCode::NOT_FOUND,
                "ResourceNotFound",
                format!("Server {uuid} not found"),
            );
        };
        let str_of = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some((a, any_bad)) = agents {
            r.agents_posted = any_bad
                .then(|| p.get("agents").and_then(Value::as_array).cloned())
                .flatten();
            r.agents = a;
        }
        if let Some(v) = p.get("boot_params").and_then(Value::as_object) {
            r.boot_params = v.clone();
        }
        if let Some(v) = str_of("boot_platform") {
            r.boot_platform = v;
        }
        if let Some(v) = str_of("comments") {
            r.comments = v;
        }
        if let Some(v) = str_of("datacenter") {
            r.datacenter = v;
        }
        if let Some(v) = str_of("default_console") {
            r.default_console = v;
        }
        if let Some(v) = str_of("next_reboot") {
            r.next_reboot = Some(v);
        }
        if let Some(v) = p.get("overprovision_ratios").and_then(Value::as_object) {
            r.overprovision_ratios = v.clone();
        }
        if let Some(v) = str_of("rack_identifier") {
            r.rack_identifier = v;
        }
        if let Some(v) = p.get("reservation_ratio").and_then(Value::as_f64) {
            r.reservation_ratio = v;
        }
        if let Some(v) = p.get("reserved").and_then(Value::as_bool) {
            r.reserved = v;
        }
        if let Some(v) = p.get("reservoir").and_then(Value::as_bool) {
            r.reservoir = v;
        }
        if let Some(v) = str_of("serial") {
            r.serial = v;
        }
        if let Some(v) = p.get("setting_up").and_then(Value::as_bool) {
            r.setting_up = v;
        }
        if let Some(v) = p.get("setup").and_then(Value::as_bool) {
            r.setup = v;
        }
        if let Some(v) = p.get("traits").and_then(Value::as_object) {
            r.traits = v.clone();
        }
        if let Some(v) = str_of("transitional_status") {
            r.transitional_status = v;
        }
    }
    empty(StatusCode::NO_CONTENT)
}

pub(super) async fn delete_server(
    State(core): Core,
    Path(raw): Path<String>,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let rec = match prepopulate(&core, &raw) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let p = match params(Some(&raw), rq.as_deref(), &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = strict(&p, &["server_uuid"]) {
        return r;
    }
    // Only the record goes: nothing changes on the server, and nothing in
    // SAPI (TRITON-416 is not implemented).
    core.cnapi.servers().remove(&rec.uuid);
    // res.send(200): a 200 with an empty body (the docs say 204).
    empty(StatusCode::OK)
}
