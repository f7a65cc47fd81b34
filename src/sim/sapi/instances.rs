//! SAPI's instance routes: ListInstances, CreateInstance, GetInstance,
//! GetInstancePayload, UpdateInstance, DeleteInstance, UpgradeInstance
//! (the crash on an agent instance) and GetConfig.

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::api::sapi::{Instance, ServiceType};
use crate::ids::{InstanceUuid, ServiceUuid};
use crate::sim::http::{
    ApiVersion, Conn, empty, json_response, parse_query, plain_error, query_get, rest_error,
};

use super::{
    Params, STYLE, Svc, Version, apply_change, missing_keys, no_record, not_found, obj_field,
    type_str, update_action,
};

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

pub(super) async fn create_instance(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    Params(p): Params,
) -> Response {
    let Some(service_raw) = p.get("service_uuid").and_then(Value::as_str) else {
        return missing_keys(&["service_uuid"]);
    };
    let mut store = svc.lock();
    let Some(service) = service_raw
        .parse::<ServiceUuid>()
        .ok()
        .and_then(|s| store.service(s))
        .cloned()
    else {
        return not_found("service", service_raw);
    };
    if let Some(manifests) = p.get("manifests").and_then(Value::as_object)
        && let Some((_, m)) = manifests.iter().next()
    {
        // No manifests exist in the simulator: any reference is unknown.
        return plain_error(
            STYLE,
            format!(
                "first of 1 error: no such manifest: {}",
                m.as_str().unwrap_or_default()
            ),
        );
    }
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(InstanceUuid::new_v4);
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
    Params(p): Params,
) -> Response {
    let action = match update_action(&p) {
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
        tracing::warn!(instance = %uuid, "sim SAPI: UpgradeInstance on an agent instance; dropping the connection as the real SAPI crashes");
        conn.cut();
        if !svc.crash_restart.is_zero() {
            svc.info.crash_for(svc.crash_restart);
        }
        return empty(StatusCode::INTERNAL_SERVER_ERROR);
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
