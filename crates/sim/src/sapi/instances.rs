//! SAPI's instance routes: ListInstances, CreateInstance (overwrite, and
//! delete on failure), GetInstance, GetInstancePayload, UpdateInstance,
//! DeleteInstance, UpgradeInstance (the crash on an agent instance) and
//! GetConfig.

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use agentsadm_api::sapi::Instance;

use crate::http::ApiVersion;
use crate::http::Conn;
use crate::http::empty;
use crate::http::json_response;
use crate::http::parse_query;
use crate::http::plain_error;
use crate::http::query_get;
use crate::http::rest_error;
use agentsadm_api::sapi::ServiceType;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;

use super::Params;

use super::STYLE;

use super::SapiStore;

use super::Svc;

use super::Version;

use super::action_or_answer;

use super::apply_change;

use super::missing_keys;

use super::no_record;

use super::not_found;

use super::obj_field;

use super::type_str;

fn ser_instance(i: &Instance, v: u64) -> Instance {
    let mut i = i.clone();
    if v < 2 {
        i.service_type = None;
    }
    i
}

pub(super) async fn list_instances(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(rq): RawQuery,
) -> Response {
    let q = parse_query(rq.as_deref());
    // service_uuid is the only filter when given; else type (implicitly vm
    // for v1 clients). server_uuid and everything else are ignored.
    let service = query_get(&q, "service_uuid").map(str::to_string);
    let type_filter = match (service.is_some(), query_get(&q, "type")) {
        (true, _) => None,
        (false, Some(t)) => Some(t.to_string()),
        (false, None) if v < 2 => Some("vm".to_string()),
        (false, None) => None,
    };
    let store = svc.lock();
    let out: Vec<Instance> = store
        .instances
        .values()
        .filter(|i| {
            service
                .as_deref()
                .is_none_or(|s| i.service_uuid.to_string() == s)
        })
        .filter(|i| {
            type_filter
                .as_deref()
                .is_none_or(|t| type_str(i.service_type) == t)
        })
        .map(|i| ser_instance(i, v))
        .collect();
    json_response(STYLE, StatusCode::OK, &out)
}

/// CreateInstance (`model.js createInstance`): validate the manifests,
/// find the service (copying its `type`), store the object, then deploy
/// (nothing for an agent; a vm is only stored, as in proto mode). Storing
/// overwrites an instance of the same `uuid`; when any step fails, SAPI
/// deletes the object of that `uuid`, so a failed re-create of an existing
/// instance loses it ([`super::SapiService::delete_on_failed_create`]).
pub(super) async fn create_instance(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    ConnectInfo(conn): ConnectInfo<Conn>,
    Params(p): Params,
) -> Response {
    let Some(service_raw) = p.get("service_uuid") else {
        return missing_keys(&["service_uuid"]);
    };
    // The model asserts these types; a failed assertion throws.
    let bad_type = !service_raw.is_string()
        || p.get("uuid")
            .is_some_and(|u| !u.is_null() && !u.is_string())
        || ["params", "metadata", "manifests"]
            .into_iter()
            .any(|k| p.get(k).is_some_and(|v| !v.is_null() && !v.is_object()))
        || p.get("manifests")
            .and_then(Value::as_object)
            .is_some_and(|m| m.values().any(|u| !u.is_string()));
    if bad_type {
        return svc.crash(&conn, "CreateInstance with an argument of the wrong type");
    }
    let service_raw = service_raw.as_str().unwrap_or_default();
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(InstanceUuid::new_v4);
    let mut store = svc.lock();
    // Each failure below deletes the object of this uuid (an existing
    // instance included) before answering.
    let fail = |store: &mut SapiStore, answer: Response| {
        if svc.delete_on_failed_create && store.remove_instance(uuid).is_some() {
            tracing::info!(instance = %uuid, "sim SAPI: CreateInstance failed; the existing instance is deleted, as SAPI does");
        }
        answer
    };
    if let Some(manifests) = p.get("manifests").and_then(Value::as_object)
        && let Some((_, first)) = manifests.iter().next()
    {
        // No manifests exist in the simulator: every reference is unknown
        // (a vasync MultiError of one error per manifest).
        let n = manifests.len();
        let answer = plain_error(
            STYLE,
            format!(
                "first of {n} error{}: no such manifest: {}",
                if n == 1 { "" } else { "s" },
                first.as_str().unwrap_or_default()
            ),
        );
        return fail(&mut store, answer);
    }
    let Some(service) = service_raw
        .parse::<ServiceUuid>()
        .ok()
        .and_then(|s| store.service(s))
        .cloned()
    else {
        return fail(&mut store, not_found("service", service_raw));
    };
    let inst = Instance {
        uuid,
        service_uuid: service.uuid,
        params: obj_field(&p, "params"),
        metadata: obj_field(&p, "metadata"),
        manifests: obj_field(&p, "manifests"),
        master: p.get("master").and_then(Value::as_bool),
        job_uuid: None,
        // Copied from the service at create time, never changed after.
        service_type: Some(service.service_type.unwrap_or(ServiceType::Vm)),
    };
    if svc.info.faults.take_sapi_write_failure() {
        // Moray refused the put (the wording is the simulator's; the shape,
        // a plain 500 `{message}`, is what a storage error gives).
        let answer = plain_error(
            STYLE,
            format!("injected storage error: putObject sapi_instances {uuid} failed"),
        );
        return fail(&mut store, answer);
    }
    // type=agent: nothing is deployed, the object is only stored. A vm
    // instance would be provisioned through VMAPI; the simulator has none,
    // so it behaves as proto mode does and only stores it too.
    store.put_instance(inst.clone());
    json_response(STYLE, StatusCode::OK, &ser_instance(&inst, v))
}

pub(super) async fn get_instance(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ApiVersion { major: v, .. }: Version,
) -> Response {
    let store = svc.lock();
    match uuid.parse().ok().and_then(|u| store.instance(u)) {
        Some(i) => json_response(STYLE, StatusCode::OK, &ser_instance(i, v)),
        None => not_found("instance", &uuid),
    }
}

pub(super) async fn get_payload(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let store = svc.lock();
    match uuid.parse().ok().and_then(|u| store.instance(u)) {
        Some(i) if i.service_type == Some(ServiceType::Agent) => {
            json_response(STYLE, StatusCode::OK, &json!({}))
        }
        Some(i) => json_response(
            STYLE,
            StatusCode::OK,
            &json!({"uuid": i.uuid, "brand": "joyent-minimal"}),
        ),
        None => not_found("instance", &uuid),
    }
}

pub(super) async fn update_instance(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ApiVersion { major: v, .. }: Version,
    ConnectInfo(conn): ConnectInfo<Conn>,
    Params(p): Params,
) -> Response {
    let action = match action_or_answer(&svc, &conn, &p) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let Some(mut inst) = uuid.parse().ok().and_then(|u| store.instance(u)).cloned() else {
        return no_record("sapi_instances", &uuid);
    };
    apply_change(&mut inst.params, p.get("params"), action);
    apply_change(&mut inst.metadata, p.get("metadata"), action);
    apply_change(&mut inst.manifests, p.get("manifests"), action);
    store.put_instance(inst.clone());
    json_response(STYLE, StatusCode::OK, &ser_instance(&inst, v))
}

pub(super) async fn delete_instance(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    if svc.info.faults.take_sapi_delete_failure() {
        return plain_error(
            STYLE,
            format!("injected storage error: delObject sapi_instances {uuid} failed"),
        );
    }
    let mut store = svc.lock();
    match uuid.parse().ok().and_then(|u| store.remove_instance(u)) {
        // Agents: the object is deleted; nothing on the server is touched.
        Some(_) => empty(StatusCode::NO_CONTENT),
        None => not_found("instance", &uuid),
    }
}

pub(super) async fn upgrade_instance(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ConnectInfo(conn): ConnectInfo<Conn>,
    ApiVersion { major: v, .. }: Version,
    Params(p): Params,
) -> Response {
    if !p.get("image_uuid").is_some_and(Value::is_string) {
        return rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "MissingParameter",
            "missing image_uuid",
        );
    }
    let inst = {
        let store = svc.lock();
        match uuid.parse().ok().and_then(|u| store.instance(u)) {
            Some(i) => i.clone(),
            None => return not_found("instance", &uuid),
        }
    };
    if inst.service_type == Some(ServiceType::Agent) {
        // The real SAPI throws serializing `undefined` and the process
        // exits: the client sees the connection close with no reply.
        return svc.crash(&conn, &format!("UpgradeInstance on agent instance {uuid}"));
    }
    // vm: reprovision (proto-like here) and answer the unchanged instance.
    json_response(STYLE, StatusCode::OK, &ser_instance(&inst, v))
}

/// GetConfig: the merged metadata (application < service < instance) and no
/// manifests (the simulator has none).
pub(super) async fn get_config(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let store = svc.lock();
    let Some(inst) = uuid.parse().ok().and_then(|u| store.instance(u)) else {
        return not_found("instance", &uuid);
    };
    let mut metadata = Map::new();
    if let Some(svc_obj) = store.service(inst.service_uuid) {
        if let Some(app) = store.application(svc_obj.application_uuid) {
            metadata.extend(app.metadata.clone());
        }
        metadata.extend(svc_obj.metadata.clone().unwrap_or_default());
    }
    metadata.extend(inst.metadata.clone().unwrap_or_default());
    if let Some(server) = inst.params.as_ref().and_then(|p| p.get("server_uuid")) {
        metadata.insert("SERVER_UUID".into(), server.clone());
    }
    metadata.insert("INSTANCE_UUID".into(), json!(inst.uuid));
    json_response(
        STYLE,
        StatusCode::OK,
        &json!({"manifests": [], "metadata": metadata}),
    )
}
