//! HTTP plumbing shared by the simulated APIs: restify-style error bodies
//! and JSON formatting, the common response headers, `Accept-Version`
//! negotiation, query-string parsing, the fault layer (5xx bursts, added
//! latency, an API that stopped answering in one of the ways a client
//! meets an outage: [`OutageKind`]), and a listener whose connections a
//! handler can cut or reset.
//!
//! Cutting a connection is how the simulator reproduces SAPI's crash on
//! UpgradeInstance for agents (docs/triton/apis.md §2.6): the real process
//! dies before answering, so the client sees the connection close with no
//! response at all. A handler takes [`Conn`] from the request
//! (`ConnectInfo<Conn>`) and calls [`Conn::cut`]; the stream then refuses
//! to write, so hyper drops the connection without sending a byte.

use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::faults::Faults;

use super::faults::{OutageKind, SimApi};

/// How an API formats JSON: IMGAPI pretty-prints with two spaces, SAPI and
/// CNAPI send compact JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JsonStyle {
    Pretty,
    Compact,
}

/// A JSON response with `Content-Type: application/json`.
pub(crate) fn json_response<T: Serialize + ?Sized>(
    style: JsonStyle,
    status: StatusCode,
    value: &T,
) -> Response {
    let body = match style {
        JsonStyle::Pretty => serde_json::to_vec_pretty(value),
        JsonStyle::Compact => serde_json::to_vec(value),
    }
    .unwrap_or_else(|_| b"{}".to_vec());
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(body),
    )
        .into_response()
}

/// A restify RestError body: `{"code", "message"}`.
pub(crate) fn rest_error(
    style: JsonStyle,
    status: StatusCode,
    code: &str,
    message: impl Into<String>,
) -> Response {
    json_response(
        style,
        status,
        &json!({ "code": code, "message": message.into() }),
    )
}

/// A service error carrying `errors: [{field, code[, message]}]`.
pub(crate) fn rest_error_fields(
    style: JsonStyle,
    status: StatusCode,
    code: &str,
    message: impl Into<String>,
    errors: Value,
) -> Response {
    json_response(
        style,
        status,
        &json!({ "code": code, "message": message.into(), "errors": errors }),
    )
}

/// What restify sends when a handler passes a plain JS `Error`: a 500 with
/// only `{"message"}`.
pub(crate) fn plain_error(style: JsonStyle, message: impl Into<String>) -> Response {
    json_response(
        style,
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({ "message": message.into() }),
    )
}

/// `res.send(status)` with no body.
pub(crate) fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

/// The static description of one simulated service, for the middleware.
#[derive(Debug)]
pub(crate) struct ApiInfo {
    pub api: SimApi,
    /// `Server:` header (`imgapi/4.13.1`...).
    pub server_header: &'static str,
    pub style: JsonStyle,
    /// Whether `x-response-time` is sent (IMGAPI and CNAPI).
    pub response_time: bool,
    pub faults: Arc<Faults>,
    /// Bumped after every request that may change state (not GET/HEAD).
    pub mutations: Arc<AtomicU64>,
    /// The process "restarts" until this instant (micros since `started`)
    /// after a crash (SAPI's UpgradeInstance, CNAPI's execute with
    /// `timeout` in Ur mode...); connections are cut.
    pub down_until_us: AtomicU64,
    pub started: Instant,
    /// Requests from clients (not from the simulated servers' own
    /// installers, [`SERVER_USER_AGENT`]), for benchmarks that count what
    /// a run costs the headnode.
    pub calls: ClientCalls,
}

/// The `User-Agent` of the simulated servers' own requests (the GZ
/// installer adopting its instance, reporting to CNAPI): not counted in
/// [`ClientCalls`].
pub const SERVER_USER_AGENT: &str = "agentsadm-sim-server";

/// Requests a simulated API answered from clients, by kind, and by route
/// (method and path, identifiers masked: `GET /servers/:id`).
#[derive(Debug, Default)]
pub struct ClientCalls {
    reads: AtomicU64,
    writes: AtomicU64,
    routes: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// A snapshot of [`ClientCalls`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CallCount {
    /// GET and HEAD.
    pub reads: u64,
    /// Every other method.
    pub writes: u64,
}

impl ClientCalls {
    pub(crate) fn count(&self) -> CallCount {
        CallCount {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }

    /// How many requests each route had so far.
    pub(crate) fn routes(&self) -> std::collections::BTreeMap<String, u64> {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record(&self, method: &Method, path: &str) {
        let counter = if matches!(*method, Method::GET | Method::HEAD) {
            &self.reads
        } else {
            &self.writes
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let route = format!("{method} {}", route_of(path));
        *self
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(route)
            .or_default() += 1;
    }
}

/// `path` with its identifiers (UUIDs, task ids: any segment with a digit)
/// masked as `:id`, so that one route counts once whatever it names.
fn route_of(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            if seg.bytes().any(|b| b.is_ascii_digit()) {
                ":id"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl std::ops::Sub for CallCount {
    type Output = CallCount;
    fn sub(self, earlier: CallCount) -> CallCount {
        CallCount {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
        }
    }
}

impl ApiInfo {
    pub(crate) fn new(api: SimApi, faults: Arc<Faults>, mutations: Arc<AtomicU64>) -> ApiInfo {
        let (server_header, style, response_time) = match api {
            SimApi::Imgapi | SimApi::Updates => ("imgapi/4.13.1", JsonStyle::Pretty, true),
            SimApi::Sapi => ("sapi/2.1.3", JsonStyle::Compact, false),
            SimApi::Cnapi => ("cnapi/1.26.6", JsonStyle::Compact, true),
        };
        ApiInfo {
            api,
            server_header,
            style,
            response_time,
            faults,
            mutations,
            down_until_us: AtomicU64::new(0),
            started: Instant::now(),
            calls: ClientCalls::default(),
        }
    }

    /// Simulate the process being down for `d` (connections are cut).
    pub(crate) fn crash_for(&self, d: Duration) {
        let until = self.started.elapsed() + d;
        self.down_until_us
            .store(until.as_micros() as u64, Ordering::Relaxed);
    }

    /// Whether the process is down (crashed, not yet restarted).
    pub(crate) fn is_down(&self) -> bool {
        let until = self.down_until_us.load(Ordering::Relaxed);
        until > 0 && (self.started.elapsed().as_micros() as u64) < until
    }
}

/// Middleware for every simulated API: injected latency and 5xx bursts
/// first, then the handler, then the headers restify adds.
pub(crate) async fn api_layer(
    State(info): State<Arc<ApiInfo>>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD);
    let from_server = req
        .headers()
        .get(header::USER_AGENT)
        .is_some_and(|v| v.as_bytes() == SERVER_USER_AGENT.as_bytes());
    if !from_server {
        info.calls.record(req.method(), req.uri().path());
    }
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        // A v4 UUID from the thread RNG (no getrandom call per request).
        .unwrap_or_else(|| {
            uuid::Builder::from_random_bytes(rand::random())
                .into_uuid()
                .to_string()
        });
    let conn = req
        .extensions()
        .get::<ConnectInfo<Conn>>()
        .map(|ConnectInfo(c)| c.clone());
    if info.is_down() {
        if let Some(conn) = &conn {
            conn.cut();
        }
        return empty(StatusCode::SERVICE_UNAVAILABLE);
    }
    if let Some(kind) = info.faults.api_outage(info.api) {
        return outage_answer(&info, kind, conn.as_ref()).await;
    }
    let (latency, burst) = info.faults.on_request(info.api, changes);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let mut resp = match burst {
        Some(503) => rest_error(
            info.style,
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "injected fault: service unavailable",
        ),
        Some(status) => rest_error(
            info.style,
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "InternalError",
            "injected fault: internal error",
        ),
        None => next.run(req).await,
    };
    if changes {
        info.mutations.fetch_add(1, Ordering::Relaxed);
    }
    let h = resp.headers_mut();
    h.insert(header::SERVER, HeaderValue::from_static(info.server_header));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        h.insert("x-request-id", v);
    }
    h.insert("x-server-name", HeaderValue::from_static("sim"));
    if info.response_time {
        let ms = started.elapsed().as_millis().to_string();
        if let Ok(v) = HeaderValue::from_str(&ms) {
            h.insert("x-response-time", v);
        }
    }
    resp
}

/// What a client gets from an API that stopped answering the way `kind`
/// says (see [`OutageKind`]).
async fn outage_answer(info: &ApiInfo, kind: OutageKind, conn: Option<&Conn>) -> Response {
    match kind {
        OutageKind::Cut => {
            if let Some(conn) = conn {
                conn.cut();
            }
            empty(StatusCode::SERVICE_UNAVAILABLE)
        }
        OutageKind::Reset => {
            if let Some(conn) = conn {
                conn.reset();
            }
            empty(StatusCode::SERVICE_UNAVAILABLE)
        }
        OutageKind::Truncated => {
            // Half of a JSON answer, then the connection ends: the
            // Content-Length promised more.
            let half = Bytes::from_static(br#"{"uuid":"5f1d3e64-8a0"#);
            let promised = half.len() * 4;
            let body = futures::stream::iter([
                Ok(half),
                Err(io::Error::from(io::ErrorKind::ConnectionReset)),
            ]);
            let mut resp = Response::new(Body::from_stream(body));
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(promised));
            resp
        }
        OutageKind::Gateway(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let reason = status.canonical_reason().unwrap_or("Bad Gateway");
            let page = format!(
                "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n<center><h1>{code} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
                code = status.as_u16()
            );
            (
                status,
                [
                    (header::CONTENT_TYPE, "text/html"),
                    (header::SERVER, "nginx"),
                ],
                page,
            )
                .into_response()
        }
        OutageKind::Silent => {
            // No answer while the outage lasts; once it is over, the
            // connection closes (the client has long given up on it).
            while info.faults.api_outage(info.api) == Some(OutageKind::Silent) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(conn) = conn {
                conn.cut();
            }
            empty(StatusCode::SERVICE_UNAVAILABLE)
        }
    }
}

/// restify's answer for an unknown route.
pub(crate) fn not_found_route(style: JsonStyle, path: &str) -> Response {
    rest_error(
        style,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        format!("{path} does not exist"),
    )
}

/// restify's answer for a known path with the wrong method (axum adds the
/// `Allow` header): `MethodNotAllowedError`, as the real CNAPI, SAPI and
/// IMGAPI (restify 4) answer it.
pub(crate) fn bad_method(style: JsonStyle, method: &Method) -> Response {
    rest_error(
        style,
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowedError",
        format!("{method} is not allowed"),
    )
}

/// The API version a request negotiated: IMGAPI and SAPI serve 1.0.0 and
/// 2.0.0 and force `~1` when `Accept-Version` is absent. Returns the major
/// version, or restify's 400 InvalidVersion.
pub(crate) fn negotiate_version(
    style: JsonStyle,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
) -> Result<u64, Response> {
    let Some(raw) = headers.get("accept-version").and_then(|v| v.to_str().ok()) else {
        return Ok(1);
    };
    let raw = raw.trim();
    let req =
        semver::VersionReq::parse(raw).or_else(|_| semver::VersionReq::parse(&format!("={raw}")));
    let chosen = req.ok().and_then(|r| {
        [2u64, 1]
            .into_iter()
            .find(|major| r.matches(&semver::Version::new(*major, 0, 0)))
    });
    chosen.ok_or_else(|| {
        rest_error(
            style,
            StatusCode::BAD_REQUEST,
            "InvalidVersion",
            format!("{raw} is not supported by {method} {path}"),
        )
    })
}

/// An API's JSON style, as a type, so an extractor can answer in it.
pub(crate) trait ApiStyle {
    const STYLE: JsonStyle;
}

/// The negotiated `Accept-Version` major as a handler argument: it rejects
/// the request with the API's own 400 InvalidVersion before the handler
/// runs, as restify's router does.
pub(crate) struct ApiVersion<S> {
    pub major: u64,
    style: PhantomData<S>,
}

impl<S: ApiStyle, T: Send + Sync> FromRequestParts<T> for ApiVersion<S> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &T) -> Result<Self, Response> {
        negotiate_version(S::STYLE, &parts.headers, &parts.method, parts.uri.path()).map(|major| {
            ApiVersion {
                major,
                style: PhantomData,
            }
        })
    }
}

/// A JSON-object body and the query string merged the way restify's
/// `mapParams` does: a query key wins over the same body key. A body that
/// is not a JSON object gets the API's 400 InvalidContent.
pub(crate) fn merge_params(
    style: JsonStyle,
    raw_query: Option<&str>,
    body: &[u8],
) -> Result<serde_json::Map<String, Value>, Response> {
    let mut map = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(rest_error(
                    style,
                    StatusCode::BAD_REQUEST,
                    "InvalidContent",
                    "Invalid JSON in request body",
                ));
            }
        }
    };
    for (k, v) in parse_query(raw_query) {
        map.insert(k, Value::String(v));
    }
    Ok(map)
}

/// Decode a query string into pairs, keeping repeated keys in order.
/// Restify's query parser reads `+` as a space and keeps a `%` that starts
/// no valid escape, as `application/x-www-form-urlencoded` decoding does.
pub(crate) fn parse_query(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|raw| {
        form_urlencoded::parse(raw.as_bytes())
            .into_owned()
            .collect()
    })
    .unwrap_or_default()
}

/// The first value of `key`.
pub(crate) fn query_get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The last second an HTTP-date can carry (9999-12-31T23:59:59Z).
const LAST_HTTP_DATE: Duration = Duration::from_secs(253_402_300_799);

/// An HTTP-date (RFC 7231 IMF-fixdate), for `Last-Modified`. `httpdate`
/// formats years 1970 to 9999 only (and panics outside them), so a file
/// time before 1970 reads as the epoch and one after 9999 as its last
/// second.
pub(crate) fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t.clamp(UNIX_EPOCH, UNIX_EPOCH + LAST_HTTP_DATE))
}

/// The connection a request arrived on; a handler can cut it.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    #[allow(dead_code)]
    pub remote: SocketAddr,
    cut: Arc<AtomicBool>,
    reset: Arc<AtomicBool>,
}

impl Conn {
    /// Drop the connection without answering (a crashed process).
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
    }

    /// Reset the connection without answering (an RST, not a close).
    pub(crate) fn reset(&self) {
        self.reset.store(true, Ordering::Relaxed);
        self.cut();
    }
}

impl Connected<IncomingStream<'_, SimListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, SimListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// A TCP listener whose streams stop on shutdown or when cut.
pub(crate) struct SimListener {
    tcp: TcpListener,
    shutdown: CancellationToken,
}

impl SimListener {
    pub(crate) fn new(tcp: TcpListener, shutdown: CancellationToken) -> SimListener {
        SimListener { tcp, shutdown }
    }
}

impl axum::serve::Listener for SimListener {
    type Io = SimStream;
    type Addr = Conn;

    async fn accept(&mut self) -> (SimStream, Conn) {
        loop {
            match self.tcp.accept().await {
                Ok((tcp, remote)) => {
                    let _ = tcp.set_nodelay(true);
                    let cut = Arc::new(AtomicBool::new(false));
                    let reset = Arc::new(AtomicBool::new(false));
                    let stream = SimStream {
                        tcp,
                        cut: cut.clone(),
                        reset: reset.clone(),
                        shutdown: Box::pin(self.shutdown.clone().cancelled_owned()),
                    };
                    return (stream, Conn { remote, cut, reset });
                }
                // Out of file descriptors and the like: back off, as axum's
                // own TcpListener does.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Conn> {
        Ok(Conn {
            remote: self.tcp.local_addr()?,
            cut: Arc::new(AtomicBool::new(false)),
            reset: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// A TCP stream that reads EOF and fails writes once cut or shut down;
/// once reset, it closes with an RST.
pub(crate) struct SimStream {
    tcp: TcpStream,
    cut: Arc<AtomicBool>,
    reset: Arc<AtomicBool>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl SimStream {
    fn dead(&mut self, cx: &mut Context<'_>) -> bool {
        if self.reset.swap(false, Ordering::Relaxed) {
            // A zero linger makes the close that follows an RST.
            let _ = self.tcp.set_zero_linger();
        }
        self.cut.load(Ordering::Relaxed) || self.shutdown.as_mut().poll(cx).is_ready()
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.dead(cx) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.dead(cx) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.dead(cx) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding_keeps_repeats() {
        let q = parse_query(Some("name=~agent&tag.k=a%20b&b=1&b=2&x&plus=a+b"));
        assert_eq!(query_get(&q, "name"), Some("~agent"));
        assert_eq!(query_get(&q, "tag.k"), Some("a b"));
        assert_eq!(q.iter().filter(|(k, _)| k == "b").count(), 2);
        assert_eq!(query_get(&q, "x"), Some(""));
        assert_eq!(query_get(&q, "plus"), Some("a b"));
        assert_eq!(parse_query(Some("a=%4")), vec![("a".into(), "%4".into())]);
        assert_eq!(parse_query(Some("a=%41")), vec![("a".into(), "A".into())]);
    }

    #[test]
    fn http_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_348_122);
        assert_eq!(http_date(t), "Sun, 22 Nov 2026 11:48:42 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn http_dates_outside_what_httpdate_formats() {
        let before = UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(http_date(before), "Thu, 01 Jan 1970 00:00:00 GMT");
        let after = UNIX_EPOCH + LAST_HTTP_DATE + Duration::from_secs(86_400);
        assert_eq!(http_date(after), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn query_decoding_keeps_bad_escapes() {
        let q = parse_query(Some("a=%zz&b=100%&c=%2B&&=v"));
        assert_eq!(query_get(&q, "a"), Some("%zz"));
        assert_eq!(query_get(&q, "b"), Some("100%"));
        assert_eq!(query_get(&q, "c"), Some("+"));
        assert_eq!(query_get(&q, ""), Some("v"));
        assert!(parse_query(None).is_empty());
    }

    #[test]
    fn version_negotiation() {
        let mut h = HeaderMap::new();
        let v = |h: &HeaderMap| negotiate_version(JsonStyle::Compact, h, &Method::GET, "/x");
        assert_eq!(v(&h).ok(), Some(1));
        for (raw, want) in [("~2", 2), ("*", 2), ("~1", 1), ("2.0.0", 2), (">=1", 2)] {
            h.insert("accept-version", HeaderValue::from_static(raw));
            assert_eq!(v(&h).ok(), Some(want), "{raw}");
        }
        h.insert("accept-version", HeaderValue::from_static("~3"));
        assert!(v(&h).is_err());
    }
}
