//! A minimal IMGAPI on loopback for the install benchmark and the installer
//! tests: GetImage and GetImageFile with the real status codes, error bodies
//! and file headers (docs/triton/apis.md §1.6), plus fault injection per
//! image (error statuses, delays, truncated, corrupt, stalled or trickling
//! files, another image's manifest). The full simulator is the rest of
//! `crate`; this is only what one server's installer talks to.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use futures::StreamExt;
use md5::{Digest, Md5};

use crate::imagebuild::BuiltImage;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ImageManifest;

/// What to do wrong for one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer GetImage with this status for the next `times` requests.
    ManifestStatus { status: u16, times: u32 },
    /// Answer GetImageFile with this status for the next `times` requests.
    FileStatus { status: u16, times: u32 },
    /// Wait before answering GetImage.
    ManifestDelay(Duration),
    /// Wait before answering GetImageFile.
    FileDelay(Duration),
    /// Send only this many bytes of the file (with the full Content-Length)
    /// for the next `times` requests.
    Truncate { bytes: usize, times: u32 },
    /// Flip one byte of the file (same size, wrong sha1).
    Corrupt,
    /// Send this many bytes, then nothing, forever.
    Stall { bytes: usize },
    /// Send the file one byte at a time, one every `every` (a connection
    /// that never stalls long enough to time out, and never finishes).
    Trickle { every: Duration },
    /// Answer GetImage with this other image's manifest (a confused proxy,
    /// or a hostile server).
    ManifestOf(ImageUuid),
    /// Send a wrong Content-MD5.
    WrongMd5,
    /// Answer GetImage with a manifest whose `files[0]` lacks this field
    /// (a damaged IMGAPI record).
    ManifestWithoutFileField(&'static str),
}

#[derive(Default)]
struct Inner {
    /// Manifest, file bytes and their Content-MD5 (computed once, as IMGAPI
    /// does at upload).
    images: BTreeMap<ImageUuid, (ImageManifest, bytes::Bytes, String)>,
    faults: BTreeMap<ImageUuid, Fault>,
    manifest_hits: BTreeMap<ImageUuid, u32>,
    file_hits: BTreeMap<ImageUuid, u32>,
}

type Shared = Arc<Mutex<Inner>>;

/// A running stand-in; stops when dropped.
pub struct ImgapiStandIn {
    addr: SocketAddr,
    inner: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ImgapiStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ImgapiStandIn {
    /// Serve on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<ImgapiStandIn> {
        let inner: Shared = Arc::default();
        let app = Router::new()
            .route(
                "/ping",
                get(|| async { axum::Json(serde_json::json!({"ping": "pong"})) }),
            )
            .route("/images/{uuid}", get(get_image))
            .route("/images/{uuid}/file", get(get_file))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ImgapiStandIn { addr, inner, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serve an image (manifest and file).
    pub fn publish(&self, image: &BuiltImage) {
        self.publish_raw(image.manifest.clone(), image.file.clone());
    }

    /// Serve a manifest with arbitrary file bytes (for mismatch tests).
    pub fn publish_raw(&self, manifest: ImageManifest, file: Vec<u8>) {
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&file));
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.images
            .insert(manifest.uuid, (manifest, bytes::Bytes::from(file), md5));
    }

    pub fn set_fault(&self, uuid: ImageUuid, fault: Fault) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.faults.insert(uuid, fault);
    }

    pub fn clear_fault(&self, uuid: ImageUuid) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.faults.remove(&uuid);
    }

    /// (GetImage, GetImageFile) requests seen for an image.
    pub fn hits(&self, uuid: ImageUuid) -> (u32, u32) {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (
            g.manifest_hits.get(&uuid).copied().unwrap_or(0),
            g.file_hits.get(&uuid).copied().unwrap_or(0),
        )
    }
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    let body = serde_json::json!({ "code": code, "message": message });
    (status, axum::Json(body)).into_response()
}

fn status_error(status: u16) -> Response {
    let s = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match status {
        404 => error(s, "ResourceNotFound", "image not found".into()),
        503 => error(s, "ServiceUnavailableError", "service unavailable".into()),
        _ => {
            // restify's plain-Error 500: a message and no code.
            (
                s,
                axum::Json(serde_json::json!({"message": "internal error"})),
            )
                .into_response()
        }
    }
}

/// Take the per-request fault decision: `Some(status)` to fail this request.
fn counted_status(inner: &Shared, uuid: ImageUuid, file: bool) -> (Option<u16>, Option<Fault>) {
    let mut g = inner.lock().unwrap_or_else(|p| p.into_inner());
    let hits = if file {
        g.file_hits.entry(uuid).or_default()
    } else {
        g.manifest_hits.entry(uuid).or_default()
    };
    *hits += 1;
    let fault = g.faults.get(&uuid).cloned();
    match fault {
        Some(Fault::ManifestStatus { status, times }) if !file && times > 0 => {
            g.faults.insert(
                uuid,
                Fault::ManifestStatus {
                    status,
                    times: times - 1,
                },
            );
            (Some(status), None)
        }
        Some(Fault::FileStatus { status, times }) if file && times > 0 => {
            g.faults.insert(
                uuid,
                Fault::FileStatus {
                    status,
                    times: times - 1,
                },
            );
            (Some(status), None)
        }
        Some(Fault::Truncate { bytes, times }) if file && times > 0 => {
            g.faults.insert(
                uuid,
                Fault::Truncate {
                    bytes,
                    times: times - 1,
                },
            );
            (None, Some(Fault::Truncate { bytes, times }))
        }
        Some(Fault::Truncate { .. }) => (None, None),
        other => (None, other),
    }
}

async fn get_image(State(inner): State<Shared>, Path(uuid): Path<String>) -> Response {
    let Ok(uuid) = uuid.parse::<ImageUuid>() else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("image {uuid} not found"),
        );
    };
    let (status, fault) = counted_status(&inner, uuid, false);
    if let Some(s) = status {
        return status_error(s);
    }
    if let Some(Fault::ManifestDelay(d)) = fault {
        tokio::time::sleep(d).await;
    }
    let found = {
        let g = inner.lock().unwrap_or_else(|p| p.into_inner());
        let answer = match fault {
            Some(Fault::ManifestOf(other)) => other,
            _ => uuid,
        };
        g.images.get(&answer).map(|(m, _, _)| m.clone())
    };
    match found {
        Some(m) => {
            let mut doc = serde_json::to_value(&m).unwrap_or_default();
            if let Some(Fault::ManifestWithoutFileField(field)) = fault
                && let Some(file) = doc["files"][0].as_object_mut()
            {
                file.remove(field);
            }
            let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
            ([(header::CONTENT_TYPE, "application/json")], text).into_response()
        }
        None => error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("image {uuid} not found"),
        ),
    }
}

async fn get_file(State(inner): State<Shared>, Path(uuid): Path<String>) -> Response {
    let Ok(uuid) = uuid.parse::<ImageUuid>() else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("image {uuid} not found"),
        );
    };
    let (status, fault) = counted_status(&inner, uuid, true);
    if let Some(s) = status {
        return status_error(s);
    }
    let found = {
        let g = inner.lock().unwrap_or_else(|p| p.into_inner());
        g.images.get(&uuid).cloned()
    };
    let Some((manifest, data, md5)) = found else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("image {uuid} not found"),
        );
    };
    if let Some(Fault::FileDelay(d)) = fault {
        tokio::time::sleep(d).await;
    }
    let md5 = if fault == Some(Fault::WrongMd5) {
        base64::engine::general_purpose::STANDARD.encode(Md5::digest(b"wrong"))
    } else {
        md5
    };
    let data = if fault == Some(Fault::Corrupt) && !data.is_empty() {
        let mut v = data.to_vec();
        let mid = v.len() / 2;
        v[mid] ^= 0x5a;
        bytes::Bytes::from(v)
    } else {
        data
    };
    let len = data.len();
    let sha1 = manifest.file().map(|f| f.sha1.clone()).unwrap_or_default();
    let body = match fault {
        Some(Fault::Truncate { bytes, .. }) => {
            // Headers and part of the body go out, then the connection drops.
            let part = data.slice(..bytes.min(len));
            let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(part) }).chain(
                futures::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err(std::io::Error::other("connection reset"))
                }),
            );
            Body::from_stream(stream)
        }
        Some(Fault::Trickle { every }) => {
            let stream = futures::stream::unfold(0usize, move |i| {
                let data = data.clone();
                async move {
                    if i >= data.len() {
                        return None;
                    }
                    if i > 0 {
                        tokio::time::sleep(every).await;
                    }
                    Some((Ok::<_, std::io::Error>(data.slice(i..i + 1)), i + 1))
                }
            });
            Body::from_stream(stream)
        }
        Some(Fault::Stall { bytes }) => {
            let part = data.slice(..bytes.min(len));
            let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(part) })
                .chain(futures::stream::pending());
            Body::from_stream(stream)
        }
        _ => {
            // Chunks, as a real server streams a large file (zero-copy slices).
            const CHUNK: usize = 256 * 1024;
            let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = (0..len)
                .step_by(CHUNK)
                .map(|i| Ok(data.slice(i..(i + CHUNK).min(len))))
                .collect();
            Body::from_stream(futures::stream::iter(chunks))
        }
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&len.to_string()) {
        h.insert(header::CONTENT_LENGTH, v);
    }
    if let Ok(v) = HeaderValue::from_str(&md5) {
        h.insert("content-md5", v);
    }
    if let Ok(v) = HeaderValue::from_str(&sha1) {
        h.insert(header::ETAG, v);
    }
    resp
}
