//! The simulated SAPI (docs/triton/apis.md §2), in full mode with compact
//! JSON. Reproduced: `type` on services and instances only for
//! `Accept-Version >= 2`, and v1 lists hiding `type=agent` objects unless
//! `?type=agent`; ListInstances filtering only by `service_uuid` or `type`
//! (no server filter, no paging); CreateInstance copying `type` from the
//! service, storing agents without deploying anything, overwriting on a
//! duplicate `uuid`, and deleting the instance of that `uuid` when the
//! create fails (unknown service or manifest, a storage error), as
//! `model.js createInstance` does; UpdateInstance actions and the plain
//! `{message}` 500 for a missing object; DeleteInstance 404 with a body;
//! empty-bodied 404s for DeleteService/DeleteApplication; and
//! UpgradeInstance on an agent instance dropping the connection, as the real
//! process crashes (§2.6).
//!
//! Also as restify 4 and SAPI's model do it: parameters from a `qs` query
//! string and a JSON or form-encoded body ([`crate::params`]); update
//! actions iterating `Object.keys` of each change (so `action=delete` with
//! an array deletes the keys `"0"`, `"1"`..., in practice nothing); an
//! application's `metadata_schema` checked on create and update (409
//! SchemaValidationError, `schema`); and an argument of the wrong type that
//! SAPI asserts on (a `params` that is not an object...) crashing the
//! process like UpgradeInstance does.
//!
//! It takes the real SAPI's time per list and write, as a latency model
//! (`timing`, [`crate::config::SapiTiming`]).
//!
//! Modules: `store` (the objects), `applications`, `services` and
//! `instances` (their routes), `schema` (the `metadata_schema` check),
//! `timing` (the latency model); this file has the router and what the
//! routes share (parameters, update actions, error answers).

mod applications;
mod instances;
mod schema;
mod services;
mod store;
mod timing;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, RawQuery, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Map, Value, json};

use crate::http::ApiInfo;
use crate::http::ApiStyle;
use crate::http::ApiVersion;
use crate::http::Conn;
use crate::http::JsonStyle;
use crate::http::bad_method;
use crate::http::empty;
use crate::http::json_response;
use crate::http::not_found_route;
use crate::http::parse_query;
use crate::http::plain_error;
use crate::http::query_get;
use crate::http::rest_error;
use crate::params::js_entries;
use crate::params::restify_params;
use crate::params::truthy;
use agentsadm_api::sapi::ServiceType;

pub use self::store::SapiStore;

const STYLE: JsonStyle = JsonStyle::Compact;

/// Shared state of the simulated SAPI.
pub(crate) struct SapiService {
    pub store: Mutex<SapiStore>,
    pub info: Arc<ApiInfo>,
    /// How long SAPI stays down after a crash (UpgradeInstance of an agent,
    /// an argument SAPI asserts on; SMF restarts it); zero means only the
    /// crashing request is affected.
    pub crash_restart: Duration,
    /// Whether a failed CreateInstance deletes the instance of its `uuid`
    /// (real SAPI does; see [`crate::config::Strictness`]).
    pub delete_on_failed_create: bool,
    /// How long lists and writes take.
    pub timing: crate::config::SapiTiming,
}

impl SapiService {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SapiStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process dies mid-request: the connection closes with no answer
    /// and SAPI stays down for [`SapiService::crash_restart`].
    fn crash(&self, conn: &Conn, why: &str) -> Response {
        tracing::warn!("sim SAPI: {why}; dropping the connection as the real SAPI crashes");
        conn.cut();
        if !self.crash_restart.is_zero() {
            self.info.crash_for(self.crash_restart);
        }
        empty(StatusCode::INTERNAL_SERVER_ERROR)
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
        // The real SAPI's restify bodyParser is set up without a
        // maxBodySize, so it has no limit (a 3.9 MB application metadata
        // body was accepted, apis.md §2.10); axum's 2 MB default would
        // refuse what the real one takes.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            svc.clone(),
            timing::sapi_timing,
        ))
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

/// `req.params` (query string and body, as restify builds it) as a handler
/// argument (the last one: it reads the body).
struct Params(Map<String, Value>);

impl<T: Send + Sync> FromRequest<T> for Params {
    type Rejection = Response;

    async fn from_request(req: Request, state: &T) -> Result<Self, Response> {
        let raw_query = req.uri().query().map(str::to_owned);
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        restify_params(raw_query.as_deref(), content_type.as_deref(), &body)
            .map(Params)
            .map_err(|e| rest_error(STYLE, StatusCode::BAD_REQUEST, "InvalidContent", e.0))
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

/// SetMode as SAPI 2.1.3 answers it (the simulator is always in full
/// mode): no `mode`, or an empty one, is restify's MissingParameter; a mode
/// other than `full` is InvalidArgument (the harness's api-refusals check).
async fn set_mode(RawQuery(rq): RawQuery) -> Response {
    let q = parse_query(rq.as_deref());
    match query_get(&q, "mode") {
        Some("full") => empty(StatusCode::NO_CONTENT),
        None | Some("") => rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "MissingParameter",
            "missing \"mode\" parameter".to_string(),
        ),
        Some(other) => rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "InvalidArgument",
            format!("invalid mode: {other}"),
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

/// What an update request's `action` says.
enum ActionParam {
    Valid(UpdateAction),
    /// Not one of the three: SAPI's 409 with an empty message.
    Invalid(Response),
    /// Not a string: `req.params.action.toLowerCase()` throws.
    Crash,
}

/// The `action` of an update (default `update`, any case).
fn update_action(p: &Map<String, Value>) -> ActionParam {
    let action = match p.get("action") {
        None => "update".to_string(),
        Some(v) if !truthy(v) => "update".to_string(),
        Some(Value::String(a)) => a.to_lowercase(),
        Some(_) => return ActionParam::Crash,
    };
    match action.as_str() {
        "update" => ActionParam::Valid(UpdateAction::Update),
        "replace" => ActionParam::Valid(UpdateAction::Replace),
        "delete" => ActionParam::Valid(UpdateAction::Delete),
        _ => ActionParam::Invalid(rest_error(
            STYLE,
            StatusCode::CONFLICT,
            "InvalidArgument",
            "",
        )),
    }
}

/// The action of an update request, or the answer that ends it.
fn action_or_answer(
    svc: &SapiService,
    conn: &Conn,
    p: &Map<String, Value>,
) -> Result<UpdateAction, Response> {
    match update_action(p) {
        ActionParam::Valid(a) => Ok(a),
        ActionParam::Invalid(r) => Err(r),
        ActionParam::Crash => Err(svc.crash(conn, "an update whose action is not a string")),
    }
}

/// Apply one attribute change (`attributes.js applyChange`). A change is
/// applied only when truthy; `update` and `delete` walk `Object.keys` of
/// it, so an array (`{"metadata": ["A"]}`, or `metadata[]=A` in a form)
/// names the keys `"0"`, `"1"`...; `delete` creates the attribute empty if
/// it was missing. `replace` with something other than an object is not
/// representable here and leaves the attribute as it was.
fn apply_change(
    target: &mut Option<Map<String, Value>>,
    change: Option<&Value>,
    action: UpdateAction,
) {
    let Some(change) = change.filter(|c| truthy(c)) else {
        return;
    };
    match action {
        UpdateAction::Replace => {
            if let Some(o) = change.as_object() {
                *target = Some(o.clone());
            }
        }
        UpdateAction::Delete => {
            let t = target.get_or_insert_with(Map::new);
            for (k, _) in js_entries(change) {
                t.remove(&k);
            }
        }
        UpdateAction::Update => {
            let t = target.get_or_insert_with(Map::new);
            for (k, v) in js_entries(change) {
                t.insert(k, v);
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

    #[test]
    fn changes_walk_object_keys() {
        // delete with an array: the keys "0" and "1", not the values.
        let mut t = Some(Map::from_iter([
            ("a".to_string(), json!(1)),
            ("0".to_string(), json!("zero")),
        ]));
        apply_change(&mut t, Some(&json!(["a", "b"])), UpdateAction::Delete);
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"a": 1}));
        apply_change(&mut t, Some(&json!(["x"])), UpdateAction::Update);
        assert_eq!(Value::Object(t.clone().unwrap()), json!({"a": 1, "0": "x"}));
        // Falsy changes do nothing; delete creates a missing attribute.
        apply_change(&mut t, Some(&json!("")), UpdateAction::Replace);
        assert!(t.is_some());
        let mut none = None;
        apply_change(&mut none, Some(&json!({"k": 1})), UpdateAction::Delete);
        assert_eq!(none, Some(Map::new()));
    }
}
