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
//!
//! Modules: `store` (the objects), `applications`, `services` and
//! `instances` (their routes); this file has the router and what the
//! routes share (parameters, update actions, error answers).

mod applications;
mod instances;
mod services;
mod store;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, RawQuery, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Map, Value, json};

use crate::api::sapi::ServiceType;
use crate::sim::http::{
    ApiInfo, ApiStyle, ApiVersion, JsonStyle, bad_method, empty, json_response, merge_params,
    not_found_route, parse_query, plain_error, query_get, rest_error,
};

pub use self::store::SapiStore;

const STYLE: JsonStyle = JsonStyle::Compact;

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
            get(applications::list_applications).post(applications::create_application),
        )
        .route(
            "/applications/{uuid}",
            get(applications::get_application)
                .put(applications::update_application)
                .delete(applications::delete_application),
        )
        .route(
            "/services",
            get(services::list_services).post(services::create_service),
        )
        .route(
            "/services/{uuid}",
            get(services::get_service)
                .put(services::update_service)
                .delete(services::delete_service),
        )
        .route(
            "/instances",
            get(instances::list_instances).post(instances::create_instance),
        )
        .route(
            "/instances/{uuid}",
            get(instances::get_instance)
                .put(instances::update_instance)
                .delete(instances::delete_instance),
        )
        .route("/instances/{uuid}/payload", get(instances::get_payload))
        .route(
            "/instances/{uuid}/upgrade",
            put(instances::upgrade_instance),
        )
        .route("/configs/{uuid}", get(instances::get_config))
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

/// How an update changes an object's attributes (`action`, any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpdateAction {
    /// Merge the given keys in (the default).
    Update,
    /// Replace the attribute with the given object.
    Replace,
    /// Remove the given keys.
    Delete,
}

/// The `action` of an update, or SAPI's 409 with an empty message.
fn update_action(p: &Map<String, Value>) -> Result<UpdateAction, Response> {
    let action = p
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("update")
        .to_lowercase();
    match action.as_str() {
        "update" => Ok(UpdateAction::Update),
        "replace" => Ok(UpdateAction::Replace),
        "delete" => Ok(UpdateAction::Delete),
        _ => Err(rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "InvalidArgument",
            "",
        )),
    }
}

/// Apply one attribute change (`attributes.js applyChange`).
fn apply_change(
    target: &mut Option<Map<String, Value>>,
    change: Option<&Value>,
    action: UpdateAction,
) {
    let Some(change) = change else { return };
    match action {
        UpdateAction::Replace => {
            *target = change.as_object().cloned();
        }
        UpdateAction::Delete => {
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
        UpdateAction::Update => {
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
fn type_str(t: Option<ServiceType>) -> &'static str {
    match t {
        Some(ServiceType::Agent) => "agent",
        _ => "vm",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_change_actions() {
        let mut t = Some(Map::from_iter([("a".to_string(), json!(1))]));
        apply_change(&mut t, Some(&json!({"b": 2})), UpdateAction::Update);
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"a": 1, "b": 2}));
        apply_change(&mut t, Some(&json!({"a": null})), UpdateAction::Delete);
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"b": 2}));
        apply_change(&mut t, Some(&json!({"c": 3})), UpdateAction::Replace);
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"c": 3}));
        let mut none = None;
        apply_change(&mut none, Some(&json!({"x": 1})), UpdateAction::Update);
        assert!(none.is_some());
    }
}
