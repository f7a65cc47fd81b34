//! HTTP clients for the Triton APIs agentsadm talks to (IMGAPI, SAPI, CNAPI),
//! with the error bodies, retry rules and header conventions of
//! docs/triton/apis.md §0.
//!
//! - Every call has a timeout.
//! - Idempotent calls retry on connect errors, timeouts and 5xx answers,
//!   under the one [`retry`] policy; other calls never retry, so a task is
//!   never started twice.
//! - Error bodies (`{code, message, errors?}`, or restify's plain `{message}`
//!   500s) become [`ApiError::Status`] with the parsed body.

pub mod adoption;
pub mod bootstrap;
pub mod cnapi;
pub mod imgapi;
pub mod remote;
pub mod retry;
pub mod sapi;

// `server.agents` entries and the command contract of `agentsadm gz` are
// wire types the planner reads, kept below it in agentsadm-types; callers
// keep naming them here.
pub use agentsadm_types::agents;
pub use agentsadm_types::compat;

use std::fmt;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use cnapi::CnapiClient;
pub use imgapi::ImgapiClient;
pub use retry::RetryPolicy;
pub use sapi::SapiClient;

/// Which API a call went to, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    Imgapi,
    Sapi,
    Cnapi,
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Api::Imgapi => "IMGAPI",
            Api::Sapi => "SAPI",
            Api::Cnapi => "CNAPI",
        })
    }
}

/// One entry of an error body's `errors` list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    #[serde(default)]
    pub field: String,
    #[serde(default)]
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A restify error body. `code` is absent for plain-`Error` 500s; CNAPI's
/// factory-reset 409 sends a bare JSON string, which lands in `message`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

impl ErrorBody {
    pub fn new(code: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: Some(code.to_string()),
            message: message.into(),
            errors: Vec::new(),
        }
    }

    /// Parse whatever an API sent back on an error status.
    pub fn parse(body: &[u8]) -> ErrorBody {
        if let Ok(parsed) = serde_json::from_slice::<ErrorBody>(body) {
            return parsed;
        }
        if let Ok(serde_json::Value::String(s)) = serde_json::from_slice(body) {
            return ErrorBody {
                code: None,
                message: s,
                errors: Vec::new(),
            };
        }
        let text = String::from_utf8_lossy(body);
        ErrorBody {
            code: None,
            message: text.chars().take(300).collect(),
            errors: Vec::new(),
        }
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message)?,
            None => f.write_str(&self.message)?,
        }
        for e in &self.errors {
            write!(f, " [{} {}", e.field, e.code)?;
            if let Some(m) = &e.message {
                write!(f, ": {m}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// An API call that failed. Each variant names the API, the method and path,
/// so the message alone says what failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{api} {method} {path} returned HTTP {status}: {body}")]
    Status {
        api: Api,
        method: Method,
        path: String,
        status: u16,
        body: ErrorBody,
    },
    #[error(
        "{api} {method} {path}: cannot connect to {base_url} (check the URL and that the service is up)"
    )]
    Connect {
        api: Api,
        method: Method,
        path: String,
        base_url: String,
        #[source]
        err: reqwest::Error,
    },
    #[error("{api} {method} {path} timed out after {timeout:?}")]
    Timeout {
        api: Api,
        method: Method,
        path: String,
        timeout: Duration,
    },
    #[error("{api} {method} {path}: the connection failed before a complete response")]
    Transport {
        api: Api,
        method: Method,
        path: String,
        #[source]
        err: reqwest::Error,
    },
    #[error("{api} {method} {path}: response is not the expected JSON (starts {excerpt:?})")]
    Decode {
        api: Api,
        method: Method,
        path: String,
        excerpt: String,
        #[source]
        err: serde_json::Error,
    },
    #[error("{api} URL {url:?} is not a valid http(s) URL")]
    BadUrl { api: Api, url: String },
    #[error(
        "{api} {method} {path}: the download is damaged: {detail} (download it again; if this persists the file is damaged on the server)"
    )]
    Integrity {
        api: Api,
        method: Method,
        path: String,
        detail: String,
    },
}

impl ApiError {
    /// The HTTP status, when the API answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The restify error code, when the API sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Status { body, .. } => body.code.as_deref(),
            _ => None,
        }
    }

    /// For an answer that is not the JSON expected: what is wrong with it,
    /// naming the field (`missing field `compression``), without the
    /// parser's position in the body.
    pub fn decode_detail(&self) -> Option<String> {
        match self {
            ApiError::Decode { err, .. } => {
                let text = err.to_string();
                Some(match text.rfind(" at line ") {
                    Some(at) => text[..at].to_string(),
                    None => text,
                })
            }
            _ => None,
        }
    }

    /// The API answered 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// The API could not be reached at all (connect error or timeout), as
    /// opposed to answering with an error.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ApiError::Connect { .. } | ApiError::Timeout { .. } | ApiError::Transport { .. }
        )
    }

    /// The API the failed call went to.
    pub fn api(&self) -> Api {
        match self {
            ApiError::Status { api, .. }
            | ApiError::Connect { api, .. }
            | ApiError::Timeout { api, .. }
            | ApiError::Transport { api, .. }
            | ApiError::Decode { api, .. }
            | ApiError::BadUrl { api, .. }
            | ApiError::Integrity { api, .. } => *api,
        }
    }

    /// The API is out, as opposed to answering about the request: not
    /// reached ([`ApiError::is_unreachable`]: refused, reset, a response
    /// cut short, a timeout), or a gateway in front of it answered for
    /// it (502, 503 or 504, whatever the body: a proxy's HTML page or
    /// restify's ServiceUnavailableError). A run pauses for an outage
    /// instead of blaming the servers.
    pub fn is_outage(&self) -> bool {
        self.is_unreachable() || matches!(self.status(), Some(502..=504))
    }

    /// Worth retrying for an idempotent call: the service may be restarting
    /// or overloaded. Not transient: CNAPI's validation failures (500s with
    /// a code), and the code-less `{"message"}` 500s SAPI sends for bad data
    /// (an update of a missing object, an unknown manifest, a bad service
    /// type), which answer the same every time. Other code-less 500s may
    /// come from a backend that is down, so they are retried.
    /// A refused connection to a loopback address is not transient either:
    /// nothing listens there (a stopped simulator, a wrong port), and
    /// retrying with backoff only delays the one line that says so.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Connect { base_url, err, .. } => {
                !(is_loopback_url(base_url) && connection_refused(err))
            }
            ApiError::Timeout { .. } | ApiError::Transport { .. } | ApiError::Integrity { .. } => {
                true
            }
            ApiError::Status { status, body, .. } => {
                let permanent_plain = *status == 500
                    && body.code.is_none()
                    && (body.message.starts_with("updateObject failed: no record")
                        || body.message.contains("no such manifest")
                        || body.message.starts_with("service type is invalid"));
                *status >= 500
                    && !permanent_plain
                    && !matches!(
                        body.code.as_deref(),
                        Some("InvalidParameters" | "InvalidArgument" | "ValidationFailed")
                    )
            }
            _ => false,
        }
    }
}

/// Timeouts and retry policy shared by the clients.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Per-request timeout (connect + response).
    pub timeout: Duration,
    /// Extra attempts for idempotent calls.
    pub retries: u32,
    /// First backoff; doubles each attempt, with jitter (see [`retry`]).
    pub backoff: Duration,
    pub user_agent: String,
}

impl ApiConfig {
    /// How an idempotent call retries.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retries, self.backoff)
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            timeout: Duration::from_secs(30),
            retries: 4,
            backoff: Duration::from_millis(200),
            user_agent: format!("agentsadm/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Whether a call may be sent again after a transient failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idempotent {
    Yes,
    No,
}

/// The HTTP plumbing shared by the three clients.
#[derive(Clone, Debug)]
pub(crate) struct RestClient {
    api: Api,
    base_url: String,
    http: reqwest::Client,
    config: ApiConfig,
    /// IMGAPI and SAPI hide `channels`, `type` and agent objects from v1
    /// clients; we always ask for v2.
    accept_version: Option<&'static str>,
}

pub(crate) struct RawResponse {
    pub body: bytes::Bytes,
}

impl RestClient {
    pub(crate) fn new(
        api: Api,
        base_url: &str,
        config: ApiConfig,
        accept_version: Option<&'static str>,
    ) -> Result<RestClient, ApiError> {
        let trimmed = base_url.trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&trimmed).map_err(|_| ApiError::BadUrl {
            api,
            url: base_url.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(ApiError::BadUrl {
                api,
                url: base_url.to_string(),
            });
        }
        let http = reqwest::Client::builder()
            .user_agent(config.user_agent.clone())
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|err| ApiError::Connect {
                api,
                method: Method::GET,
                path: String::new(),
                base_url: trimmed.clone(),
                err,
            })?;
        Ok(RestClient {
            api,
            base_url: trimmed,
            http,
            config,
            accept_version,
        })
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    pub(crate) fn config(&self) -> &ApiConfig {
        &self.config
    }

    /// Build a request with our standard headers.
    pub(crate) fn request(&self, method: Method, path_and_query: &str) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .request(method, format!("{}{}", self.base_url, path_and_query))
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(v) = self.accept_version {
            rb = rb.header("accept-version", v);
        }
        rb
    }

    /// Send a request built by `build` (called again for each attempt),
    /// retrying transient failures when `idempotent`. Non-2xx answers become
    /// [`ApiError::Status`].
    pub(crate) async fn send_raw(
        &self,
        method: Method,
        path: &str,
        idempotent: Idempotent,
        timeout: Option<Duration>,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<RawResponse, ApiError> {
        let timeout = timeout.unwrap_or(self.config.timeout);
        let policy = match idempotent {
            Idempotent::Yes => self.config.retry_policy(),
            Idempotent::No => RetryPolicy::new(0, self.config.backoff),
        };
        let build = &build;
        let mut attempt = 0;
        policy
            .run(
                || self.send_once(method.clone(), path, timeout, build),
                ApiError::is_transient,
                |err, delay| {
                    attempt += 1;
                    tracing::debug!(api = %self.api, %method, path, attempt, error = %err, "retrying after {delay:?}");
                },
            )
            .await
    }

    async fn send_once(
        &self,
        method: Method,
        path: &str,
        timeout: Duration,
        build: &impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<RawResponse, ApiError> {
        let rb = build(self.request(method.clone(), path)).timeout(timeout);
        let resp = rb
            .send()
            .await
            .map_err(|err| self.map_send_error(&method, path, timeout, err))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|err| self.map_send_error(&method, path, timeout, err))?;
        if !status.is_success() && status != StatusCode::NOT_MODIFIED {
            return Err(ApiError::Status {
                api: self.api,
                method,
                path: strip_query(path),
                status: status.as_u16(),
                body: ErrorBody::parse(&body),
            });
        }
        Ok(RawResponse { body })
    }

    pub(crate) fn map_send_error(
        &self,
        method: &Method,
        path: &str,
        timeout: Duration,
        err: reqwest::Error,
    ) -> ApiError {
        let path = strip_query(path);
        if err.is_timeout() {
            ApiError::Timeout {
                api: self.api,
                method: method.clone(),
                path,
                timeout,
            }
        } else if err.is_connect() {
            ApiError::Connect {
                api: self.api,
                method: method.clone(),
                path,
                base_url: self.base_url.clone(),
                err,
            }
        } else {
            ApiError::Transport {
                api: self.api,
                method: method.clone(),
                path,
                err,
            }
        }
    }

    /// Decode a JSON body, naming the call on failure.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &[u8],
    ) -> Result<T, ApiError> {
        serde_json::from_slice(body).map_err(|err| ApiError::Decode {
            api: self.api,
            method,
            path: strip_query(path),
            excerpt: String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned(),
            err,
        })
    }

    /// Send and decode a JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        idempotent: Idempotent,
        body: Option<&serde_json::Value>,
    ) -> Result<T, ApiError> {
        let raw = self
            .send_raw(method.clone(), path, idempotent, None, |rb| match body {
                Some(b) => rb.json(b),
                None => rb,
            })
            .await?;
        self.decode(method, path, &raw.body)
    }

    /// One `GET /ping`, no retry: whether the API answers right now (an
    /// outage probe; a retry would hide an API that was away a moment
    /// ago).
    pub(crate) async fn ping_once(&self) -> Result<(), ApiError> {
        self.empty(Method::GET, "/ping", Idempotent::No, None).await
    }

    /// Send and ignore the answer's body (204s, CNAPI's empty 200s).
    pub(crate) async fn empty(
        &self,
        method: Method,
        path: &str,
        idempotent: Idempotent,
        body: Option<&serde_json::Value>,
    ) -> Result<(), ApiError> {
        self.send_raw(method, path, idempotent, None, |rb| match body {
            Some(b) => rb.json(b),
            None => rb,
        })
        .await
        .map(|_| ())
    }
}

/// The path of a request without its query, for messages.
pub(crate) fn strip_query(path: &str) -> String {
    path.split('?').next().unwrap_or(path).to_string()
}

/// What a query key or value may carry unencoded: RFC 3986's unreserved
/// characters. Everything else, `+` and spaces included, is percent-encoded,
/// which restify and the Triton APIs decode alike.
const QUERY_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Build `?k=v&...` from pairs (empty string when there are none).
pub(crate) fn query(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, QUERY_COMPONENT),
                utf8_percent_encode(v, QUERY_COMPONENT)
            )
        })
        .collect();
    format!("?{}", parts.join("&"))
}

/// The three clients for one datacenter.
#[derive(Clone, Debug)]
pub struct Apis {
    pub imgapi: ImgapiClient,
    pub sapi: SapiClient,
    pub cnapi: CnapiClient,
}

impl Apis {
    pub fn new(
        imgapi_url: &str,
        sapi_url: &str,
        cnapi_url: &str,
        config: ApiConfig,
    ) -> Result<Apis, ApiError> {
        Ok(Apis {
            imgapi: ImgapiClient::new(imgapi_url, config.clone())?,
            sapi: SapiClient::new(sapi_url, config.clone())?,
            cnapi: CnapiClient::new(cnapi_url, config)?,
        })
    }
}

/// Whether `url` names this host (127.0.0.0/8, ::1, `localhost`).
fn is_loopback_url(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = u.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether the connection was refused (an `ECONNREFUSED` somewhere in
/// the error's causes).
fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused loopback connection fails at once (no retry), with one
    /// line naming the URL; the same error elsewhere is worth retrying.
    #[tokio::test]
    async fn a_refused_loopback_connection_is_not_retried() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}");
        let config = ApiConfig {
            retries: 50,
            backoff: Duration::from_secs(3600),
            ..ApiConfig::default()
        };
        // With fifty retries an hour apart, only no retry ends this test.
        let err = sapi::SapiClient::new(&url, config)
            .unwrap()
            .list_services(None, None, None)
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Connect { .. }), "{err:?}");
        assert!(!err.is_transient());
        let text = err.to_string();
        assert!(text.contains(&url) && !text.contains('\n'), "{text}");
        assert!(is_loopback_url("http://localhost:80"));
        assert!(is_loopback_url("http://[::1]:80"));
        // A name that is not loopback (`.invalid` never resolves).
        assert!(!is_loopback_url("http://sapi.invalid:80"));
    }

    #[test]
    fn parses_error_bodies() {
        let b = ErrorBody::parse(br#"{"code":"ResourceNotFound","message":"no such instance: x"}"#);
        assert_eq!(b.code.as_deref(), Some("ResourceNotFound"));
        let b = ErrorBody::parse(br#"{"message":"updateObject failed: no record"}"#);
        assert_eq!(b.code, None);
        assert_eq!(b.message, "updateObject failed: no record");
        let b = ErrorBody::parse(br#""Server may not be reset because it has 2 vms""#);
        assert!(b.message.contains("2 vms"));
        let b = ErrorBody::parse(
            br#"{"code":"InvalidParameters","message":"Request parameters failed validation","errors":[{"field":"limit","code":"Invalid","message":"limit must be in the range 1-1000 (inclusive)"}]}"#,
        );
        assert_eq!(b.errors.len(), 1);
        assert!(b.to_string().contains("[limit Invalid: limit must be"));
    }

    #[test]
    fn transient_statuses() {
        let err = |status: u16, body: &str| ApiError::Status {
            api: Api::Sapi,
            method: Method::PUT,
            path: "/x".into(),
            status,
            body: ErrorBody::parse(body.as_bytes()),
        };
        assert!(err(503, r#"{"code":"ServiceUnavailableError","message":"x"}"#).is_transient());
        assert!(err(500, r#"{"message":"internal error"}"#).is_transient());
        assert!(
            !err(
                500,
                r#"{"message":"updateObject failed: no record for bucket sapi_instances object x"}"#
            )
            .is_transient()
        );
        assert!(!err(500, r#"{"code":"InvalidParameters","message":"x"}"#).is_transient());
        assert!(!err(404, r#"{"code":"ResourceNotFound","message":"x"}"#).is_transient());
    }

    #[test]
    fn query_encoding() {
        assert_eq!(query(&[]), "");
        assert_eq!(
            query(&[("name", "~agent".into()), ("tag.k", "a b".into())]),
            "?name=~agent&tag.k=a%20b"
        );
        assert_eq!(
            query(&[("source", "https://u.example.com?channel=dev&x=1+2".into())]),
            "?source=https%3A%2F%2Fu.example.com%3Fchannel%3Ddev%26x%3D1%2B2"
        );
    }
}
