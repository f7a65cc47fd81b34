//! Image files: GetImageFile (the file headers IMGAPI sends, corrupt and
//! truncated downloads on request), HEAD's 405, and AddImageFile from the
//! request body or pulled from another IMGAPI with `source=`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;

use crate::faults::FileFault;
use crate::http::ApiVersion;
use crate::http::bad_method;
use crate::http::http_date;
use crate::http::parse_query;
use crate::http::query_get;
use crate::http::rest_error;
use crate::http::rest_error_fields;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;

use super::store::ImgapiService;

use super::STYLE;
use super::Svc;
use super::Version;
use super::find_image;
use super::image_uuid;
use super::invalid_param;
use super::manifest_response;
use super::not_found;
use super::remote_error;
use super::store::StoredFile;

pub(super) async fn head_file() -> Response {
    // HEAD is not routed in IMGAPI: restify answers 405 with the methods
    // that are.
    let mut resp = bad_method(STYLE, &Method::HEAD);
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("PUT, GET"));
    resp
}

pub(super) async fn get_file(
    State(svc): Svc,
    Path(raw): Path<String>,
    uri: Uri,
    RawQuery(rq): RawQuery,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    let (file, name) = {
        let store = svc.lock();
        let img = match find_image(&store, uuid, &q) {
            Ok(i) => i,
            Err(r) => return r,
        };
        let index = query_get(&q, "index").unwrap_or("0");
        let file = match (&img.file, index) {
            (Some(f), "0") => f.clone(),
            (None, _) => {
                return rest_error(
                    STYLE,
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    format!("image \"{uuid}\" has no file"),
                );
            }
            (Some(_), n) => {
                return rest_error(
                    STYLE,
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    format!("image \"{uuid}\" has no file at index {n}"),
                );
            }
        };
        (file, img.manifest.name.clone())
    };
    let fault = svc.info.faults.file_fault(uuid, &name);
    let size = file.bytes.len();
    let body = match fault {
        None => Body::from(file.bytes.clone()),
        Some(FileFault::Corrupt) => {
            let mut b = file.bytes.to_vec();
            if let Some(x) = b.get_mut(size / 2) {
                *x ^= 0xff;
            }
            Body::from(b)
        }
        Some(FileFault::Truncated) => {
            // Send half the bytes under the full Content-Length, then fail
            // the stream: hyper closes the connection mid-body, as when
            // IMGAPI's storage errors after the headers went out.
            let half = file.bytes.slice(..size / 2);
            let first = futures::stream::iter([Ok::<Bytes, std::io::Error>(half)]);
            // A pause lets hyper flush the headers and the first half before
            // the stream fails.
            let fail = futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(std::io::Error::other("injected truncation"))
            });
            Body::from_stream(first.chain(fail).boxed())
        }
    };
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    set(h, header::ETAG, file.sha1.clone());
    set(h, header::LAST_MODIFIED, http_date(file.mtime));
    set(h, header::CONTENT_LENGTH, size.to_string());
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    // `res.header('Content-MD5', undefined)` sets nothing.
    if let Some(md5) = &file.md5_b64 {
        set(
            h,
            header::HeaderName::from_static("content-md5"),
            md5.clone(),
        );
    }
    resp
}

pub(super) async fn add_file(
    State(svc): Svc,
    Path(raw): Path<String>,
    ApiVersion { major: v, .. }: Version,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(rq): RawQuery,
    body: Bytes,
) -> Response {
    let uuid = match image_uuid(&raw, uri.path()) {
        Ok(u) => u,
        Err(r) => return r,
    };
    let q = parse_query(rq.as_deref());
    {
        let store = svc.lock();
        let img = match find_image(&store, uuid, &q) {
            Ok(i) => i,
            Err(r) => return r,
        };
        if img.activated {
            return rest_error(
                STYLE,
                StatusCode::UNPROCESSABLE_ENTITY,
                "ImageFilesImmutable",
                format!("cannot modify files on activated image {uuid}"),
            );
        }
    }
    let file = if let Some(source) = query_get(&q, "source") {
        match file_from_source(&svc, uuid, source).await {
            Ok(f) => f,
            Err(r) => return r,
        }
    } else {
        let compression = match query_get(&q, "compression") {
            None | Some("") => {
                return rest_error_fields(
                    STYLE,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "InvalidParameter",
                    "missing \"compression\"",
                    json!([{"field": "compression", "code": "Missing"}]),
                );
            }
            Some(c) => match serde_json::from_value::<Compression>(json!(c)) {
                Ok(c) => c,
                Err(_) => {
                    return invalid_param(
                        format!(
                            "invalid compression \"{c}\" (must be one of bzip2, gzip, xz, none)"
                        ),
                        "compression",
                    );
                }
            },
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if let Some(n) = declared.filter(|n| *n != body.len()) {
            return rest_error(
                STYLE,
                StatusCode::BAD_REQUEST,
                "Download",
                format!(
                    "\"Content-Length\" header, {n}, does not match uploaded size, {}",
                    body.len()
                ),
            );
        }
        let file = StoredFile::new(body, compression);
        if let Some(want) = query_get(&q, "sha1").filter(|s| *s != file.sha1) {
            return rest_error(
                STYLE,
                StatusCode::BAD_REQUEST,
                "Download",
                format!(
                    "\"sha1\" hash, {want}, does not match the uploaded file sha1 hash, {}",
                    file.sha1
                ),
            );
        }
        file
    };
    let mut store = svc.lock();
    let Some(img) = store.images.get_mut(&uuid) else {
        return not_found(uuid);
    };
    img.file = Some(file);
    let img = img.clone();
    let out = store.serialize(&img, v, false);
    manifest_response(StatusCode::OK, &out)
}

/// AddImageFile `source=`: fetch the file from another IMGAPI and check it
/// against that IMGAPI's manifest.
async fn file_from_source(
    svc: &ImgapiService,
    uuid: ImageUuid,
    source: &str,
) -> Result<StoredFile, Response> {
    let client = svc.source_client(source)?;
    let manifest = client
        .get_image(uuid)
        .await
        .map_err(|e| remote_error("manifest", uuid, e))?;
    let want = manifest
        .file()
        .cloned()
        .ok_or_else(|| remote_error("stream", uuid, "image has no file"))?;
    let download = client
        .get_image_file(uuid)
        .await
        .map_err(|e| remote_error("stream", uuid, e))?;
    let bytes = download
        .response
        .bytes()
        .await
        .map_err(|e| remote_error("stream", uuid, e))?;
    if bytes.len() as u64 != want.size {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "Download",
            format!(
                "\"Content-Length\" header, {}, does not match uploaded size, {}",
                want.size,
                bytes.len()
            ),
        ));
    }
    let file = StoredFile::new(bytes, want.compression);
    if file.sha1 != want.sha1 {
        return Err(rest_error(
            STYLE,
            StatusCode::BAD_REQUEST,
            "Download",
            format!(
                "\"sha1\" hash, {}, does not match the uploaded file sha1 hash, {}",
                want.sha1, file.sha1
            ),
        ));
    }
    Ok(file)
}
