//! The simulated SAPI (docs/triton/apis.md §2), in full mode with compact
//! JSON. Reproduced: `type` on services and instances only for
//! `Accept-Version >= 2`, and v1 lists hiding `type=agent` objects unless
//! `?type=agent`; ListInstances filtering only by `service_uuid` or `type`
//! (no server filter, no paging); CreateInstance copying `type` from the
//! service, storing agents without deploying anything and overwriting on a
//! duplicate `uuid`; UpdateInstance actions and the plain `{message}` 500 for
//! a missing object; DeleteInstance 404 with a body; empty-bodied 404s for
//! DeleteService/DeleteApplication; and UpgradeInstance on an agent
//! instance dropping the connection, as the real process crashes (§2.6).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, Path, RawQuery, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::http::{
    ApiInfo, ApiStyle, ApiVersion, Conn, JsonStyle, bad_method, empty, json_response, merge_params,
    not_found_route, parse_query, plain_error, query_get, rest_error,
};
use crate::api::sapi::{Application, Instance, Service, ServiceType};
use crate::ids::{ApplicationUuid, InstanceUuid, ServiceUuid};

const STYLE: JsonStyle = JsonStyle::Compact;

/// SAPI's objects, in creation order (what Moray's `_id` order gives).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SapiStore {
    pub applications: Vec<Application>,
    pub services: Vec<Service>,
    /// Keyed by a creation sequence number, so lists come out in creation
    /// order and an overwrite keeps its place.
    pub instances: BTreeMap<u64, Instance>,
    #[serde(skip)]
    instance_index: HashMap<InstanceUuid, u64>,
    pub next_seq: u64,
}

impl SapiStore {
    /// Rebuild the uuid index after loading.
    pub(crate) fn reindex(&mut self) {
        self.instance_index = self.instances.iter().map(|(s, i)| (i.uuid, *s)).collect();
    }

    pub fn instance(&self, uuid: InstanceUuid) -> Option<&Instance> {
        self.instance_index
            .get(&uuid)
            .and_then(|s| self.instances.get(s))
    }

    /// Create or overwrite an instance (SAPI has no conflict check).
    pub fn put_instance(&mut self, inst: Instance) {
        match self.instance_index.get(&inst.uuid) {
            Some(seq) => {
                self.instances.insert(*seq, inst);
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.instance_index.insert(inst.uuid, seq);
                self.instances.insert(seq, inst);
            }
        }
    }

    pub fn remove_instance(&mut self, uuid: InstanceUuid) -> Option<Instance> {
        let seq = self.instance_index.remove(&uuid)?;
        self.instances.remove(&seq)
    }

    pub fn service(&self, uuid: ServiceUuid) -> Option<&Service> {
        self.services.iter().find(|s| s.uuid == uuid)
    }

    pub fn application(&self, uuid: ApplicationUuid) -> Option<&Application> {
        self.applications.iter().find(|a| a.uuid == uuid)
    }
}

/// Shared state of the simulated SAPI.
pub(crate) struct SapiService {
    pub store: Mutex<SapiStore>,
    pub info: Arc<ApiInfo>,
    /// How long SAPI stays down after the UpgradeInstance crash (SMF
    /// restarts it); zero means only the crashing request is affected.
    pub crash_restart: Duration,
}

impl SapiService {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SapiStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Svc = State<Arc<SapiService>>;

pub(crate) fn router(svc: Arc<SapiService>) -> Router {
    Router::new()
        .route("/ping", get(ping))
        .route("/mode", get(get_mode).post(set_mode))
        .route(
            "/applications",
            get(list_applications).post(create_application),
        )
        .route(
            "/applications/{uuid}",
            get(get_application)
                .put(update_application)
                .delete(delete_application),
        )
        .route("/services", get(list_services).post(create_service))
        .route(
            "/services/{uuid}",
            get(get_service).put(update_service).delete(delete_service),
        )
        .route("/instances", get(list_instances).post(create_instance))
        .route(
            "/instances/{uuid}",
            get(get_instance)
                .put(update_instance)
                .delete(delete_instance),
        )
        .route("/instances/{uuid}/payload", get(get_payload))
        .route("/instances/{uuid}/upgrade", put(upgrade_instance))
        .route("/configs/{uuid}", get(get_config))
        .route("/cache", post(sync_cache))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(svc)
}

async fn fallback(uri: Uri) -> Response {
    not_found_route(STYLE, uri.path())
}

async fn method_not_allowed(method: Method) -> Response {
    bad_method(STYLE, &method)
}

/// SAPI's style for the shared extractors.
struct Sapi;

impl ApiStyle for Sapi {
    const STYLE: JsonStyle = STYLE;
}

type Version = ApiVersion<Sapi>;

fn not_found(kind: &str, uuid: &str) -> Response {
    rest_error(
        STYLE,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        format!("no such {kind}: {uuid}"),
    )
}

fn missing_keys(keys: &[&str]) -> Response {
    rest_error(
        STYLE,
        StatusCode::CONFLICT,
        "MissingParameter",
        format!("missing required keys: {}", keys.join(", ")),
    )
}

/// Body plus query string (the query wins on a clash).
fn params(raw_query: Option<&str>, body: &Bytes) -> Result<Map<String, Value>, Response> {
    merge_params(STYLE, raw_query, body)
}

/// [`params`] as a handler argument (the last one: it reads the body).
struct Params(Map<String, Value>);

impl<T: Send + Sync> FromRequest<T> for Params {
    type Rejection = Response;

    async fn from_request(req: Request, state: &T) -> Result<Self, Response> {
        let raw_query = req.uri().query().map(str::to_owned);
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        params(raw_query.as_deref(), &body).map(Params)
    }
}

fn obj_field(p: &Map<String, Value>, key: &str) -> Option<Map<String, Value>> {
    p.get(key).and_then(Value::as_object).cloned()
}

/// A service as serialized for this API version.
fn ser_service(s: &Service, v: u64) -> Service {
    let mut s = s.clone();
    if v < 2 {
        s.service_type = None;
    }
    s
}

fn ser_instance(i: &Instance, v: u64) -> Instance {
    let mut i = i.clone();
    if v < 2 {
        i.service_type = None;
    }
    i
}

async fn ping() -> Response {
    json_response(
        STYLE,
        StatusCode::OK,
        &json!({"mode": "full", "storType": "MorayLocalStorage", "storAvailable": true}),
    )
}

async fn get_mode() -> Response {
    json_response(STYLE, StatusCode::OK, &json!("full"))
}

async fn set_mode(RawQuery(rq): RawQuery) -> Response {
    let q = parse_query(rq.as_deref());
    match query_get(&q, "mode") {
        Some("full") => empty(StatusCode::NO_CONTENT),
        other => rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "InvalidArgument",
            format!("invalid mode: {}", other.unwrap_or("")),
        ),
    }
}

async fn sync_cache() -> Response {
    empty(StatusCode::NO_CONTENT)
}

async fn list_applications(State(svc): Svc, RawQuery(rq): RawQuery) -> Response {
    let q = parse_query(rq.as_deref());
    let store = svc.lock();
    let apps: Vec<&Application> = store
        .applications
        .iter()
        .filter(|a| query_get(&q, "name").is_none_or(|n| a.name == n))
        .filter(|a| query_get(&q, "owner_uuid").is_none_or(|o| a.owner_uuid == o))
        .collect();
    // An empty list is `[]` (the docs' 404 is wrong).
    json_response(STYLE, StatusCode::OK, &apps)
}

async fn create_application(State(svc): Svc, Params(p): Params) -> Response {
    let missing: Vec<&str> = ["name", "owner_uuid"]
        .into_iter()
        .filter(|k| !p.get(*k).is_some_and(Value::is_string))
        .collect();
    if !missing.is_empty() {
        return missing_keys(&missing);
    }
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(ApplicationUuid::new_v4);
    let mut extra = Map::new();
    for key in ["metadata_schema", "manifests", "master"] {
        if let Some(v) = p.get(key) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    let app = Application {
        uuid,
        name: p["name"].as_str().unwrap_or_default().to_string(),
        owner_uuid: p["owner_uuid"].as_str().unwrap_or_default().to_string(),
        params: obj_field(&p, "params").unwrap_or_default(),
        metadata: obj_field(&p, "metadata").unwrap_or_default(),
        extra,
    };
    let mut store = svc.lock();
    store.applications.retain(|a| a.uuid != uuid);
    store.applications.push(app.clone());
    // CreateApplication answers 200 with the object (the docs say 204).
    json_response(STYLE, StatusCode::OK, &app)
}

async fn get_application(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let store = svc.lock();
    match store
        .applications
        .iter()
        .find(|a| a.uuid.to_string() == uuid)
    {
        Some(a) => json_response(STYLE, StatusCode::OK, a),
        None => not_found("application", &uuid),
    }
}

/// The `action` of an update, or SAPI's 409 with an empty message.
fn update_action(p: &Map<String, Value>) -> Result<String, Response> {
    let action = p
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("update")
        .to_lowercase();
    match action.as_str() {
        "update" | "replace" | "delete" => Ok(action),
        _ => Err(rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "InvalidArgument",
            "",
        )),
    }
}

/// Apply one attribute change (`attributes.js applyChange`).
fn apply_change(target: &mut Option<Map<String, Value>>, change: Option<&Value>, action: &str) {
    let Some(change) = change else { return };
    match action {
        "replace" => {
            *target = change.as_object().cloned();
        }
        "delete" => {
            if let Some(t) = target.as_mut() {
                match change {
                    Value::Object(o) => o.keys().for_each(|k| {
                        t.remove(k);
                    }),
                    Value::Array(a) => a.iter().filter_map(Value::as_str).for_each(|k| {
                        t.remove(k);
                    }),
                    _ => {}
                }
            }
        }
        _ => {
            if let Some(o) = change.as_object() {
                let t = target.get_or_insert_with(Map::new);
                for (k, v) in o {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn no_record(bucket: &str, uuid: &str) -> Response {
    // A plain Error from the model: HTTP 500 with only a message.
    plain_error(
        STYLE,
        format!("updateObject failed: no record for bucket {bucket} object {uuid}"),
    )
}

async fn update_application(
    State(svc): Svc,
    Path(uuid): Path<String>,
    Params(p): Params,
) -> Response {
    let action = match update_action(&p) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let Some(app) = store
        .applications
        .iter_mut()
        .find(|a| a.uuid.to_string() == uuid)
    else {
        return no_record("sapi_applications", &uuid);
    };
    let mut params = Some(std::mem::take(&mut app.params));
    apply_change(&mut params, p.get("params"), &action);
    app.params = params.unwrap_or_default();
    let mut metadata = Some(std::mem::take(&mut app.metadata));
    apply_change(&mut metadata, p.get("metadata"), &action);
    app.metadata = metadata.unwrap_or_default();
    for key in ["metadata_schema", "manifests"] {
        let mut cur = app.extra.get(key).and_then(Value::as_object).cloned();
        apply_change(&mut cur, p.get(key), &action);
        match cur {
            Some(c) => app.extra.insert(key.to_string(), Value::Object(c)),
            None => app.extra.remove(key),
        };
    }
    if let Some(o) = p.get("owner_uuid").and_then(Value::as_str) {
        app.owner_uuid = o.to_string();
    }
    let app = app.clone();
    json_response(STYLE, StatusCode::OK, &app)
}

async fn delete_application(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let mut store = svc.lock();
    let before = store.applications.len();
    store.applications.retain(|a| a.uuid.to_string() != uuid);
    if store.applications.len() == before {
        return empty(StatusCode::NOT_FOUND);
    }
    empty(StatusCode::NO_CONTENT)
}

fn parse_type(v: Option<&Value>) -> Result<ServiceType, Response> {
    match v.and_then(Value::as_str) {
        None => Ok(ServiceType::Vm),
        Some("vm") => Ok(ServiceType::Vm),
        Some("agent") => Ok(ServiceType::Agent),
        Some(other) => Err(plain_error(
            STYLE,
            format!("service type is invalid: {other}"),
        )),
    }
}

async fn list_services(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(rq): RawQuery,
) -> Response {
    let q = parse_query(rq.as_deref());
    // v1 clients get an implicit type=vm; an explicit type overrides it.
    let type_filter = match query_get(&q, "type") {
        Some(t) => Some(t.to_string()),
        None if v < 2 => Some("vm".to_string()),
        None => None,
    };
    let store = svc.lock();
    let out: Vec<Service> = store
        .services
        .iter()
        .filter(|s| query_get(&q, "name").is_none_or(|n| s.name == n))
        .filter(|s| {
            query_get(&q, "application_uuid").is_none_or(|a| s.application_uuid.to_string() == a)
        })
        .filter(|s| {
            type_filter
                .as_deref()
                .is_none_or(|t| type_str(s.service_type) == t)
        })
        .map(|s| ser_service(s, v))
        .collect();
    json_response(STYLE, StatusCode::OK, &out)
}

fn type_str(t: Option<ServiceType>) -> &'static str {
    match t {
        Some(ServiceType::Agent) => "agent",
        _ => "vm",
    }
}

async fn create_service(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    Params(p): Params,
) -> Response {
    let missing: Vec<&str> = ["name", "application_uuid"]
        .into_iter()
        .filter(|k| !p.get(*k).is_some_and(Value::is_string))
        .collect();
    if !missing.is_empty() {
        return missing_keys(&missing);
    }
    let service_type = match parse_type(p.get("type")) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let app_raw = p["application_uuid"].as_str().unwrap_or_default();
    let mut store = svc.lock();
    let Some(app_uuid) = app_raw
        .parse::<ApplicationUuid>()
        .ok()
        .filter(|a| store.application(*a).is_some())
    else {
        return not_found("application", app_raw);
    };
    let uuid = p
        .get("uuid")
        .and_then(Value::as_str)
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(ServiceUuid::new_v4);
    let service = Service {
        uuid,
        name: p["name"].as_str().unwrap_or_default().to_string(),
        application_uuid: app_uuid,
        params: obj_field(&p, "params"),
        metadata: obj_field(&p, "metadata"),
        manifests: obj_field(&p, "manifests"),
        master: p.get("master").and_then(Value::as_bool),
        service_type: Some(service_type),
    };
    store.services.retain(|s| s.uuid != uuid);
    store.services.push(service.clone());
    json_response(STYLE, StatusCode::OK, &ser_service(&service, v))
}

async fn get_service(
    State(svc): Svc,
    Path(uuid): Path<String>,
    ApiVersion { major: v, .. }: Version,
) -> Response {
    let store = svc.lock();
    match store.services.iter().find(|s| s.uuid.to_string() == uuid) {
        Some(s) => json_response(STYLE, StatusCode::OK, &ser_service(s, v)),
        None => not_found("service", &uuid),
    }
}

async fn update_service(
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
    let Some(s) = store
        .services
        .iter_mut()
        .find(|s| s.uuid.to_string() == uuid)
    else {
        return no_record("sapi_services", &uuid);
    };
    apply_change(&mut s.params, p.get("params"), &action);
    apply_change(&mut s.metadata, p.get("metadata"), &action);
    apply_change(&mut s.manifests, p.get("manifests"), &action);
    let out = ser_service(s, v);
    json_response(STYLE, StatusCode::OK, &out)
}

async fn delete_service(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let mut store = svc.lock();
    let before = store.services.len();
    // Instances of the service are not checked (nor deleted).
    store.services.retain(|s| s.uuid.to_string() != uuid);
    if store.services.len() == before {
        return empty(StatusCode::NOT_FOUND);
    }
    empty(StatusCode::NO_CONTENT)
}

async fn list_instances(
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

async fn create_instance(
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

async fn get_instance(
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

async fn get_payload(State(svc): Svc, Path(uuid): Path<String>) -> Response {
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

async fn update_instance(
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
    apply_change(&mut inst.params, p.get("params"), &action);
    apply_change(&mut inst.metadata, p.get("metadata"), &action);
    apply_change(&mut inst.manifests, p.get("manifests"), &action);
    store.put_instance(inst.clone());
    json_response(STYLE, StatusCode::OK, &ser_instance(&inst, v))
}

async fn delete_instance(State(svc): Svc, Path(uuid): Path<String>) -> Response {
    let mut store = svc.lock();
    match uuid.parse().ok().and_then(|u| store.remove_instance(u)) {
        // Agents: the object is deleted; nothing on the server is touched.
        Some(_) => empty(StatusCode::NO_CONTENT),
        None => not_found("instance", &uuid),
    }
}

async fn upgrade_instance(
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
async fn get_config(State(svc): Svc, Path(uuid): Path<String>) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_change_actions() {
        let mut t = Some(Map::from_iter([("a".to_string(), json!(1))]));
        apply_change(&mut t, Some(&json!({"b": 2})), "update");
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"a": 1, "b": 2}));
        apply_change(&mut t, Some(&json!({"a": null})), "delete");
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"b": 2}));
        apply_change(&mut t, Some(&json!({"c": 3})), "replace");
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"c": 3}));
        let mut none = None;
        apply_change(&mut none, Some(&json!({"x": 1})), "update");
        assert!(none.is_some());
    }

    #[test]
    fn store_overwrites_in_place() {
        let mut s = SapiStore::default();
        let svc = ServiceUuid::from_u128(9);
        let mk = |n: u128, tag: &str| Instance {
            uuid: InstanceUuid::from_u128(n),
            service_uuid: svc,
            params: Some(Map::from_iter([("t".to_string(), json!(tag))])),
            metadata: None,
            manifests: None,
            master: None,
            job_uuid: None,
            service_type: Some(ServiceType::Agent),
        };
        s.put_instance(mk(1, "a"));
        s.put_instance(mk(2, "b"));
        s.put_instance(mk(1, "c"));
        let order: Vec<u128> = s.instances.values().map(|i| i.uuid.0.as_u128()).collect();
        assert_eq!(order, vec![1, 2]);
        assert_eq!(
            s.instance(InstanceUuid::from_u128(1))
                .unwrap()
                .params
                .as_ref()
                .unwrap()["t"],
            "c"
        );
        assert!(s.remove_instance(InstanceUuid::from_u128(1)).is_some());
        assert!(s.instance(InstanceUuid::from_u128(1)).is_none());
    }
}
