//! Creating images: CreateImage and AdminImportImage (a manifest in the
//! body, or copied from another IMGAPI with `source=`), and what both
//! share, in IMGAPI's order (`images.js apiCreateImage`,
//! `apiAdminImportImage`, `Image.create`, then `imgmanifest`'s validators):
//!
//! 1. CreateImage refuses `state` (ValidationFailed, NotAllowed);
//! 2. the owner: an import into the DC IMGAPI makes the unset owner
//!    (`00000000-...`) the admin's (IMGAPI-408), an import into a non-dc
//!    IMGAPI resets any owner to the unset one; any other owner of a DC
//!    image must be a UFDS account (OwnerDoesNotExist 422) unless
//!    `skip_owner_check=true`;
//! 3. fields IMGAPI does not know: InvalidParameter `invalid extra
//!    parameters: "a", "b"`;
//! 4. the manifest validators, every failing field at once:
//!    ValidationFailed `invalid image data: name, type` with an
//!    `errors` entry per field (`type` and `os` from fixed lists, `name`
//!    and `version` by length and characters, `v`, `owner`, `disabled`,
//!    `public` (a private IMGAPI refuses public images), `published_at`).
//!
//! The simulator's UFDS has one account, the admin: SAPI's `sdc`
//! application `metadata.ufds_admin_uuid` (what configures a real IMGAPI's
//! `adminUuid`). Without an `sdc` application (an empty datacenter) no
//! admin is known: owners are kept and not checked.

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::http::ApiVersion;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use crate::http::rest_error_fields;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ADMIN_OWNER;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;

use super::store::ImgapiMode;

use super::store::ImgapiService;

use super::store::ImgapiStore;

use super::store::OPTIONAL_KEYS;

use super::STYLE;
use super::Svc;
use super::Version;
use super::invalid_param;
use super::manifest_response;
use super::remote_error;
use super::request_channel;
use super::store::StoredImage;

/// The `owner` IMGAPI uses for "no owner" (`constants.UNSET_OWNER_UUID`).
const UNSET_OWNER: &str = ADMIN_OWNER;

/// imgmanifest's limits and character sets.
const MAX_NAME_LENGTH: usize = 1024;
const MAX_VERSION_LENGTH: usize = 512;
const MAX_DESCRIPTION_LENGTH: usize = 10 * 1024;
const VALID_TYPES: [&str; 6] = [
    "zone-dataset",
    "zvol",
    "lx-dataset",
    "lxd",
    "docker",
    "other",
];
const VALID_OSES: [&str; 6] = ["smartos", "linux", "windows", "bsd", "illumos", "other"];

/// Fields `Image.create` takes from a request (anything else is an "extra
/// parameter"); the zvol-only and import-only ones are added as they apply.
const KNOWN_FIELDS: [&str; 25] = [
    "v",
    "owner",
    "name",
    "version",
    "description",
    "homepage",
    "eula",
    "icon",
    "type",
    "os",
    "origin",
    "public",
    "disabled",
    "acl",
    "error",
    "requirements",
    "users",
    "billing_tags",
    "traits",
    "tags",
    "generate_passwords",
    "inherited_directories",
    "channels",
    "files",
    "state",
];

/// Which endpoint is creating the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Creation {
    Create,
    Import,
}

/// One failed manifest check (`imgmanifest`'s error objects).
struct FieldError {
    field: String,
    code: &'static str,
    message: Option<String>,
}

fn field_error(field: &str, code: &'static str, message: Option<String>) -> FieldError {
    FieldError {
        field: field.to_string(),
        code,
        message,
    }
}

/// ValidationFailed 422 listing every failing field.
fn validation_failed(errors: Vec<FieldError>) -> Response {
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    let message = format!("invalid image data: {}", fields.join(", "));
    let list: Vec<Value> = errors
        .iter()
        .map(|e| {
            let mut o = json!({"field": e.field, "code": e.code});
            if let Some(m) = &e.message {
                o["message"] = json!(m);
            }
            o
        })
        .collect();
    rest_error_fields(
        STYLE,
        StatusCode::UNPROCESSABLE_ENTITY,
        "ValidationFailed",
        message,
        Value::Array(list),
    )
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// JavaScript `String(v)` for the values a manifest field holds.
fn js_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// imgmanifest's `boolFromString` then `typeof === 'boolean'`.
fn is_bool_like(v: &Value) -> bool {
    matches!(v, Value::Bool(_)) || matches!(v, Value::String(s) if s == "true" || s == "false")
}

fn bool_of(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

/// `name` and `version`: missing, too long, or characters outside `allowed`.
fn check_text(
    obj: &Map<String, Value>,
    field: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
    chars_message: &str,
    errors: &mut Vec<FieldError>,
) {
    match obj.get(field) {
        None => errors.push(field_error(field, "MissingParameter", None)),
        Some(Value::String(s)) if s.encode_utf16().count() > max => errors.push(field_error(
            field,
            "Invalid",
            Some(format!("image {field} is too long, max {max} characters")),
        )),
        Some(v) => {
            let text = js_str(v);
            if text.is_empty() || !text.chars().all(&allowed) {
                errors.push(field_error(
                    field,
                    "Invalid",
                    Some(chars_message.to_string()),
                ));
            }
        }
    }
}

/// `type` and `os`: missing, or not one of `valid`.
fn check_enum(obj: &Map<String, Value>, field: &str, valid: &[&str], errors: &mut Vec<FieldError>) {
    match obj.get(field) {
        None => errors.push(field_error(field, "MissingParameter", None)),
        Some(v) => {
            let text = js_str(v);
            if text == "null" || !matches!(v, Value::String(_)) || !valid.contains(&text.as_str()) {
                let message = if text == "null" {
                    format!("invalid image {field}, \"null\"")
                } else {
                    format!(
                        "invalid image {field}, \"{text}\", must be one of: {}",
                        valid.join(", ")
                    )
                };
                errors.push(field_error(field, "Invalid", Some(message)));
            }
        }
    }
}

/// Steps 1, 3 and 4 of the module docs: the request body as a manifest,
/// with `owner` already settled.
fn manifest_from_body(
    body: &Value,
    uuid: ImageUuid,
    mode: ImgapiMode,
    creation: Creation,
) -> Result<ImageManifest, Response> {
    let Some(obj) = body.as_object() else {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "InvalidContent",
            "request body is not a JSON object",
        ));
    };
    let mut obj = obj.clone();
    // Both endpoints drop `channels` (the image goes to the request's).
    obj.remove("channels");
    if creation == Creation::Create && obj.contains_key("state") {
        return Err(state_not_allowed());
    }
    let truthy = |k: &str| obj.get(k).is_some_and(crate::params::truthy);
    if creation == Creation::Import
        && truthy("published_at")
        && !obj.get("published_at").is_some_and(Value::is_string)
    {
        return Err(invalid_param(
            "invalid \"published_at\"".to_string(),
            "published_at",
        ));
    }
    let zvol = obj.get("type").and_then(Value::as_str) == Some("zvol");
    let extra_fields: Vec<&String> = obj
        .keys()
        .filter(|k| {
            let k = k.as_str();
            let zvol_field =
                zvol && matches!(k, "nic_driver" | "disk_driver" | "cpu_type" | "image_size");
            let import_field = creation == Creation::Import
                && (k == "uuid" || (matches!(k, "published_at" | "urn") && truthy(k)));
            !(KNOWN_FIELDS.contains(&k) || zvol_field || import_field)
        })
        .collect();
    if !extra_fields.is_empty() {
        let names: Vec<String> = extra_fields.iter().map(|f| format!("\"{f}\"")).collect();
        return Err(rest_error_fields(
            STYLE,
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidParameter",
            format!("invalid extra parameters: {}", names.join(", ")),
            Value::Array(
                extra_fields
                    .iter()
                    .map(|f| json!({"field": f, "code": "Invalid"}))
                    .collect(),
            ),
        ));
    }

    // imgmanifest, required fields first, in its order.
    let mut errors = Vec::new();
    if let Some(v) = obj.get("v")
        && !v
            .as_f64()
            .or_else(|| js_str(v).parse().ok())
            .is_some_and(|n| n >= 0.0)
    {
        errors.push(field_error(
            "v",
            "Invalid",
            Some("\"v\" must be a positive integer".into()),
        ));
    }
    match obj.get("owner").map(js_str) {
        None => errors.push(field_error("owner", "MissingParameter", None)),
        Some(o) if !is_uuid(&o) => errors.push(field_error("owner", "Invalid", None)),
        Some(_) => {}
    }
    check_text(
        &obj,
        "name",
        MAX_NAME_LENGTH,
        |c| c.is_ascii_alphanumeric() || "._/ -".contains(c),
        "image name has invalid characters (only alpha-numeric characters and \" \", \".\", \"-\", \"_\" and \"/\" are allowed)",
        &mut errors,
    );
    check_text(
        &obj,
        "version",
        MAX_VERSION_LENGTH,
        |c| c.is_ascii_alphanumeric() || "._/+-".contains(c),
        "image version has invalid characters (only alpha-numeric characters and \".\", \"-\", \"_\" and \"/\" are allowed)",
        &mut errors,
    );
    if truthy("disabled") && !is_bool_like(&obj["disabled"]) {
        errors.push(field_error("disabled", "Invalid", None));
    }
    if let Some(p) = obj.get("published_at").and_then(Value::as_str)
        && creation == Creation::Import
        && !published_at_ok(p)
    {
        errors.push(field_error(
            "published_at",
            "Invalid",
            Some("published_at date not in \"YYYY-MM-DDTHH:MM:SS(.SSS)Z\" format".into()),
        ));
    }
    if truthy("public") && !is_bool_like(&obj["public"]) {
        errors.push(field_error("public", "Invalid", None));
    } else if bool_of(obj.get("public")) && mode == ImgapiMode::Private {
        errors.push(field_error(
            "public",
            "Invalid",
            Some("public images are not allowed on a private Images API".into()),
        ));
    }
    check_enum(&obj, "type", &VALID_TYPES, &mut errors);
    check_enum(&obj, "os", &VALID_OSES, &mut errors);
    if let Some(Value::String(d)) = obj.get("description")
        && d.encode_utf16().count() > MAX_DESCRIPTION_LENGTH
    {
        errors.push(field_error(
            "description",
            "Invalid",
            Some(format!(
                "image description is too long, max {MAX_DESCRIPTION_LENGTH} characters"
            )),
        ));
    }
    if obj
        .get("tags")
        .is_some_and(|t| !t.is_null() && !t.is_object())
    {
        errors.push(field_error(
            "tags",
            "Invalid",
            Some("tags must be an object".into()),
        ));
    }
    if !errors.is_empty() {
        return Err(validation_failed(errors));
    }

    let s = |k: &str| obj.get(k).map(js_str).unwrap_or_default();
    let mut extra = std::collections::BTreeMap::new();
    for key in OPTIONAL_KEYS {
        if matches!(key, "description" | "tags") {
            continue;
        }
        if let Some(v) = obj.get(key) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    let tags = match obj.get("tags") {
        Some(Value::Object(t)) => Some(t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        _ => None,
    };
    Ok(ImageManifest {
        v: 2,
        uuid,
        owner: s("owner"),
        name: s("name"),
        version: s("version"),
        state: ImageState::Unactivated,
        disabled: bool_of(obj.get("disabled")),
        public: bool_of(obj.get("public")),
        published_at: None,
        image_type: s("type"),
        os: s("os"),
        files: Vec::new(),
        description: obj
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        tags,
        channels: None,
        extra,
    })
}

/// `YYYY-MM-DDTHH:MM:SS(.SSS)Z`.
fn published_at_ok(p: &str) -> bool {
    let b = p.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let base = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    base && match b.len() {
        20 => b[19] == b'Z',
        24 => b[19] == b'.' && digits(20..23) && b[23] == b'Z',
        _ => false,
    }
}

/// Step 2 of the module docs: the owner an image gets, or the answer
/// refusing it.
fn settle_owner(
    svc: &ImgapiService,
    mode: ImgapiMode,
    creation: Creation,
    owner: Option<&Value>,
    skip_check: bool,
) -> Result<Option<String>, Response> {
    let owner = owner.map(js_str);
    if mode != ImgapiMode::Dc {
        return Ok(match creation {
            // An import into a non-dc IMGAPI resets the owner (IMGAPI-408).
            Creation::Import => Some(UNSET_OWNER.to_string()),
            Creation::Create => owner,
        });
    }
    let Some(admin) = svc.admin_uuid() else {
        return Ok(owner);
    };
    if creation == Creation::Import && owner.as_deref() == Some(UNSET_OWNER) {
        return Ok(Some(admin));
    }
    match owner {
        Some(o) if !skip_check && o != admin => Err(rest_error(
            STYLE,
            StatusCode::UNPROCESSABLE_ENTITY,
            "OwnerDoesNotExist",
            format!("owner \"{o}\" does not exist"),
        )),
        other => Ok(other),
    }
}

/// `skip_owner_check=true` (AdminImportImage only).
fn skip_owner_check(q: &[(String, String)]) -> bool {
    matches!(query_get(q, "skip_owner_check"), Some("true" | "1"))
}

/// The channel new images go into: the request's, else the default.
fn create_channels(store: &ImgapiStore, q: &[(String, String)]) -> Result<Vec<String>, Response> {
    Ok(request_channel(store, q)?.into_iter().collect())
}

pub(super) async fn create_image(
    State(svc): Svc,
    ApiVersion { major: v, .. }: Version,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let q = parse_query(rq.as_deref());
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "InvalidContent",
            "invalid JSON body",
        );
    };
    let mode = svc.lock().mode;
    let mut body = body;
    if body.get("state").is_some() {
        return state_not_allowed();
    }
    let owner = match settle_owner(&svc, mode, Creation::Create, body.get("owner"), false) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Some(b) = body.as_object_mut() {
        // No owner: the simulator's stand-in for IMGAPI's assertion (which
        // throws) is the unset owner.
        b.insert(
            "owner".into(),
            json!(owner.unwrap_or_else(|| UNSET_OWNER.to_string())),
        );
    }
    let manifest = match manifest_from_body(&body, ImageUuid::new_v4(), mode, Creation::Create) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let mut store = svc.lock();
    let channels = match create_channels(&store, &q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(img.manifest.uuid, img);
    // CreateImage answers 200, not 201 (§1.7).
    manifest_response(StatusCode::OK, &out)
}

pub(super) fn import_manifest(
    svc: &ImgapiService,
    uuid: ImageUuid,
    q: &[(String, String)],
    body: &Value,
    v: u64,
) -> Response {
    if query_get(q, "account").is_some() {
        return operator_only();
    }
    let body_uuid = body.get("uuid").and_then(Value::as_str).unwrap_or("");
    if body_uuid != uuid.to_string() {
        return invalid_param(
            format!("URL UUID, \"{uuid}\" and body UUID, \"{body_uuid}\" do not match"),
            "uuid",
        );
    }
    let mode = svc.lock().mode;
    if svc.lock().images.contains_key(&uuid) {
        return already_exists(uuid);
    }
    let mut body = body.clone();
    if let Some(o) = body.as_object_mut() {
        match settle_owner(
            svc,
            mode,
            Creation::Import,
            o.get("owner"),
            skip_owner_check(q),
        ) {
            Ok(Some(owner)) => {
                o.insert("owner".into(), json!(owner));
            }
            Ok(None) => {}
            Err(r) => return r,
        }
    }
    let mut manifest = match manifest_from_body(&body, uuid, mode, Creation::Import) {
        Ok(m) => m,
        Err(r) => return r,
    };
    manifest.published_at = body
        .get("published_at")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut store = svc.lock();
    if store.images.contains_key(&uuid) {
        return already_exists(uuid);
    }
    let channels = match create_channels(&store, q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(uuid, img);
    manifest_response(StatusCode::OK, &out)
}

/// CreateImage refuses a `state` before anything else.
fn state_not_allowed() -> Response {
    rest_error_fields(
        STYLE,
        StatusCode::UNPROCESSABLE_ENTITY,
        "ValidationFailed",
        "invalid image data: \"state\"",
        json!([{"field": "state", "code": "NotAllowed", "message": "Parameter cannot be set"}]),
    )
}

fn operator_only() -> Response {
    rest_error(
        STYLE,
        StatusCode::FORBIDDEN,
        "OperatorOnly",
        "this endpoint may only be called by an operator",
    )
}

fn already_exists(uuid: ImageUuid) -> Response {
    rest_error(
        STYLE,
        StatusCode::CONFLICT,
        "ImageUuidAlreadyExists",
        format!("image uuid \"{uuid}\" already exists"),
    )
}

/// AdminImportImage with `source=`: copy the manifest from another IMGAPI
/// (the file follows with AddImageFile `source=`, then ActivateImage).
pub(super) async fn import_from_source(
    svc: &ImgapiService,
    uuid: ImageUuid,
    q: &[(String, String)],
    v: u64,
) -> Response {
    if query_get(q, "account").is_some() {
        return operator_only();
    }
    let source = query_get(q, "source").unwrap_or("").to_string();
    let client = match svc.source_client(&source) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let remote = match client.get_image(uuid).await {
        Ok(m) => m,
        Err(e) => return remote_error("manifest", uuid, e),
    };
    let mode = {
        let store = svc.lock();
        if store.images.contains_key(&uuid) {
            return already_exists(uuid);
        }
        store.mode
    };
    let mut manifest = remote.clone();
    manifest.channels = None;
    manifest.files = Vec::new();
    let owner = Value::String(manifest.owner.clone());
    match settle_owner(
        svc,
        mode,
        Creation::Import,
        Some(&owner),
        skip_owner_check(q),
    ) {
        Ok(Some(o)) => manifest.owner = o,
        Ok(None) => {}
        Err(r) => return r,
    }
    let mut store = svc.lock();
    if store.images.contains_key(&uuid) {
        return already_exists(uuid);
    }
    let channels = match create_channels(&store, q) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let img = StoredImage {
        manifest,
        activated: false,
        channels,
        file: None,
    };
    let out = store.serialize(&img, v, false);
    store.images.insert(uuid, img);
    manifest_response(StatusCode::OK, &out)
}
