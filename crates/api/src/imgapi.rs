//! IMGAPI client: list, get and download images, and import an image from an
//! updates server into the datacenter IMGAPI (docs/triton/apis.md §1).

use futures::StreamExt;
use futures::stream::BoxStream;
use md5::Digest;
use reqwest::Method;
use serde_json::json;

use super::Api;

use super::ApiConfig;

use super::ApiError;

use super::Idempotent;

use super::RestClient;

use super::query;

use super::strip_query;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;

/// IMGAPI's page size and the limit sdc-clients pages with.
pub const PAGE_LIMIT: usize = 1000;

/// Filters for ListImages (`GET /images`). Unset fields are not sent.
#[derive(Clone, Debug, Default)]
pub struct ListImagesFilter {
    /// Exact name, or `~substring`.
    pub name: Option<String>,
    pub version: Option<String>,
    /// `active` (IMGAPI's default), `all`, `disabled`, `unactivated`.
    pub state: Option<String>,
    /// Exact type or `!type`.
    pub image_type: Option<String>,
    pub owner: Option<String>,
    /// `tag.<key>=<value>` pairs (AND).
    pub tags: Vec<(String, String)>,
    /// Overrides the client's channel for this call (`*` = all).
    pub channel: Option<String>,
    /// Only images published at or after this image UUID or ISO date.
    pub marker: Option<String>,
}

/// Why [`ImgapiClient::get_image_limited`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(
        "IMGAPI GET {path}: the answer is larger than {limit} bytes, so it is not an image manifest (they are a few KiB); check the IMGAPI URL"
    )]
    TooLarge { path: String, limit: u64 },
}

impl ManifestError {
    /// The API answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ManifestError::Api(e) if e.is_not_found())
    }
}

/// A started image file download: the response to stream from plus the
/// integrity headers IMGAPI sent. [`ImageFileDownload::verified_stream`]
/// checks them as the body arrives; reading `response` directly leaves the
/// checks to the caller.
#[derive(Debug)]
pub struct ImageFileDownload {
    pub response: reqwest::Response,
    /// `Content-Length`, when sent.
    pub content_length: Option<u64>,
    /// `Content-MD5` (base64 of the MD5), when sent.
    pub content_md5: Option<String>,
    path: String,
}

impl ImageFileDownload {
    /// The body as a stream of chunks that ends with an error instead of
    /// `None` when the connection breaks mid-body or the bytes do not match
    /// `Content-Length` / `Content-MD5` (IMGAPI cannot change the status
    /// once the body has started, so a storage error shows up only this
    /// way). The manifest's size and sha1 are still the caller's to check.
    pub fn verified_stream(self) -> BoxStream<'static, Result<bytes::Bytes, ApiError>> {
        struct State {
            inner: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
            md5: md5::Md5,
            received: u64,
            content_length: Option<u64>,
            content_md5: Option<String>,
            path: String,
            done: bool,
        }
        let state = State {
            inner: self.response.bytes_stream().boxed(),
            md5: md5::Md5::new(),
            received: 0,
            content_length: self.content_length,
            content_md5: self.content_md5,
            path: self.path,
            done: false,
        };
        futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            match st.inner.next().await {
                Some(Ok(chunk)) => {
                    st.md5.update(&chunk);
                    st.received += chunk.len() as u64;
                    Some((Ok(chunk), st))
                }
                Some(Err(err)) => {
                    st.done = true;
                    let e = ApiError::Transport {
                        api: Api::Imgapi,
                        method: Method::GET,
                        path: st.path.clone(),
                        err,
                    };
                    Some((Err(e), st))
                }
                None => {
                    st.done = true;
                    let integrity = |detail: String| ApiError::Integrity {
                        api: Api::Imgapi,
                        method: Method::GET,
                        path: st.path.clone(),
                        detail,
                    };
                    if let Some(want) = st.content_length.filter(|w| *w != st.received) {
                        let e = integrity(format!(
                            "received {} bytes, Content-Length says {want}",
                            st.received
                        ));
                        return Some((Err(e), st));
                    }
                    if let Some(want) = st.content_md5.clone() {
                        use base64::Engine;
                        let got = base64::engine::general_purpose::STANDARD
                            .encode(std::mem::take(&mut st.md5).finalize());
                        if got != want {
                            let e = integrity(format!(
                                "Content-MD5 is {want} but the bytes hash to {got}"
                            ));
                            return Some((Err(e), st));
                        }
                    }
                    None
                }
            }
        })
        .boxed()
    }

    /// The whole body, checked as [`ImageFileDownload::verified_stream`]
    /// does (for small files; stream big ones).
    pub async fn verified_bytes(self) -> Result<bytes::Bytes, ApiError> {
        let mut out = bytes::BytesMut::with_capacity(self.content_length.unwrap_or(0) as usize);
        let mut stream = self.verified_stream();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out.freeze())
    }
}

/// One update channel of an updates server.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Channel {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub default: bool,
}

/// An updates-server URL may carry `?channel=x` (the sdc-clients
/// convention): the base URL without its query, and the channel (decoded).
/// A URL without a `channel` parameter is returned as given, so a bad one is
/// reported as the operator wrote it.
fn split_channel(base_url: &str) -> (String, Option<String>) {
    let Ok(mut url) = reqwest::Url::parse(base_url) else {
        return (base_url.to_string(), None);
    };
    let channel = url
        .query_pairs()
        .find(|(key, _)| key == "channel")
        .map(|(_, value)| value.into_owned());
    match channel {
        Some(channel) => {
            url.set_query(None);
            (url.to_string(), Some(channel))
        }
        None => (base_url.to_string(), None),
    }
}

/// Client for one IMGAPI (the datacenter's, or an updates server).
#[derive(Clone, Debug)]
pub struct ImgapiClient {
    rest: RestClient,
    channel: Option<String>,
}

impl ImgapiClient {
    pub fn new(base_url: &str, config: ApiConfig) -> Result<ImgapiClient, ApiError> {
        let (base, channel) = split_channel(base_url);
        Ok(ImgapiClient {
            rest: RestClient::new(Api::Imgapi, &base, config, Some("~2"))?,
            channel,
        })
    }

    /// Send `channel=` on every call (updates servers).
    pub fn with_channel(mut self, channel: Option<String>) -> ImgapiClient {
        if channel.is_some() {
            self.channel = channel;
        }
        self
    }

    pub fn base_url(&self) -> &str {
        self.rest.base_url()
    }

    pub fn channel(&self) -> Option<&str> {
        self.channel.as_deref()
    }

    /// The URL another IMGAPI imports from (AdminImportImage's `source=`):
    /// the base URL with this client's channel, if any, as `?channel=x`.
    pub fn source_url(&self) -> String {
        match &self.channel {
            Some(c) => format!("{}{}", self.base_url(), query(&[("channel", c.clone())])),
            None => self.base_url().to_string(),
        }
    }

    fn channel_pair(&self, explicit: Option<&String>) -> Option<(&'static str, String)> {
        explicit
            .or(self.channel.as_ref())
            .map(|c| ("channel", c.clone()))
    }

    /// ListImages, following `marker` pages until a short page. Results are
    /// in `published_at` order.
    pub async fn list_images(
        &self,
        filter: &ListImagesFilter,
    ) -> Result<Vec<ImageManifest>, ApiError> {
        let mut base: Vec<(&str, String)> = Vec::new();
        if let Some(v) = &filter.name {
            base.push(("name", v.clone()));
        }
        if let Some(v) = &filter.version {
            base.push(("version", v.clone()));
        }
        if let Some(v) = &filter.state {
            base.push(("state", v.clone()));
        }
        if let Some(v) = &filter.image_type {
            base.push(("type", v.clone()));
        }
        if let Some(v) = &filter.owner {
            base.push(("owner", v.clone()));
        }
        let tag_keys: Vec<String> = filter
            .tags
            .iter()
            .map(|(k, _)| format!("tag.{k}"))
            .collect();
        for ((_, v), key) in filter.tags.iter().zip(tag_keys.iter()) {
            base.push((key.as_str(), v.clone()));
        }
        if let Some(c) = self.channel_pair(filter.channel.as_ref()) {
            base.push(c);
        }
        let mut out: Vec<ImageManifest> = Vec::new();
        let mut marker = filter.marker.clone();
        loop {
            let mut pairs = base.clone();
            pairs.push(("limit", PAGE_LIMIT.to_string()));
            if let Some(m) = &marker {
                pairs.push(("marker", m.clone()));
            }
            let path = format!("/images{}", query(&pairs));
            let page: Vec<ImageManifest> = self
                .rest
                .json(Method::GET, &path, Idempotent::Yes, None)
                .await?;
            let full = page.len() >= PAGE_LIMIT;
            let mut page = page.into_iter().peekable();
            // The marker is inclusive: drop the image we paged from.
            if let (Some(m), Some(first)) = (&marker, page.peek())
                && first.uuid.to_string() == *m
                && !out.is_empty()
            {
                page.next();
            }
            let before = out.len();
            out.extend(page);
            if !full || out.len() == before {
                break;
            }
            marker = out.last().map(|i| i.uuid.to_string());
        }
        Ok(out)
    }

    /// The newest active image with this name (by `published_at`), if any.
    pub async fn latest_image(&self, name: &str) -> Result<Option<ImageManifest>, ApiError> {
        let images = self
            .list_images(&ListImagesFilter {
                name: Some(name.to_string()),
                ..Default::default()
            })
            .await?;
        Ok(images
            .into_iter()
            .filter(|i| i.name == name)
            .max_by(|a, b| a.published_at.cmp(&b.published_at)))
    }

    /// GetImage.
    pub async fn get_image(&self, uuid: ImageUuid) -> Result<ImageManifest, ApiError> {
        let pairs: Vec<(&str, String)> = self.channel_pair(None).into_iter().collect();
        let path = format!("/images/{uuid}{}", query(&pairs));
        self.rest
            .json(Method::GET, &path, Idempotent::Yes, None)
            .await
    }

    /// GetImage for an installer: the answer is refused, unread, when it
    /// is larger than `max_bytes` (by its `Content-Length`, or as soon as
    /// that many bytes have arrived), before anything parses it. Retries
    /// transient failures like every JSON call.
    pub async fn get_image_limited(
        &self,
        uuid: ImageUuid,
        max_bytes: u64,
    ) -> Result<ImageManifest, ManifestError> {
        let pairs: Vec<(&str, String)> = self.channel_pair(None).into_iter().collect();
        let path = format!("/images/{uuid}{}", query(&pairs));
        let mut attempt = 0;
        let body = self
            .rest
            .config()
            .retry_policy()
            .run(
                || self.get_limited_once(&path, max_bytes),
                |e: &ManifestError| matches!(e, ManifestError::Api(a) if a.is_transient()),
                |err, delay| {
                    attempt += 1;
                    tracing::debug!(image = %uuid, attempt, error = %err, "GetImage failed; retrying after {delay:?}");
                },
            )
            .await?;
        Ok(self.rest.decode(Method::GET, &path, &body)?)
    }

    async fn get_limited_once(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ManifestError> {
        let timeout = self.rest.config().timeout;
        let too_large = || ManifestError::TooLarge {
            path: strip_query(path),
            limit: max_bytes,
        };
        let send_error =
            |err| ManifestError::Api(self.rest.map_send_error(&Method::GET, path, timeout, err));
        let mut resp = self
            .rest
            .request(Method::GET, path)
            .timeout(timeout)
            .send()
            .await
            .map_err(send_error)?;
        let status = resp.status();
        if resp.content_length().is_some_and(|n| n > max_bytes) {
            return Err(if status.is_success() {
                too_large()
            } else {
                ManifestError::Api(ApiError::Status {
                    api: Api::Imgapi,
                    method: Method::GET,
                    path: strip_query(path),
                    status: status.as_u16(),
                    body: super::ErrorBody::parse(b""),
                })
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(send_error)? {
            if body.len() as u64 + chunk.len() as u64 > max_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(ManifestError::Api(ApiError::Status {
                api: Api::Imgapi,
                method: Method::GET,
                path: strip_query(path),
                status: status.as_u16(),
                body: super::ErrorBody::parse(&body),
            }));
        }
        Ok(body)
    }

    /// GetImageFile: start the download and hand back the response for the
    /// caller to stream and verify (size and sha1 against the manifest,
    /// `Content-MD5` when present). Retries only the connection, never a
    /// body that has started.
    pub async fn get_image_file(&self, uuid: ImageUuid) -> Result<ImageFileDownload, ApiError> {
        let pairs: Vec<(&str, String)> = self.channel_pair(None).into_iter().collect();
        let path = format!("/images/{uuid}/file{}", query(&pairs));
        let mut attempt = 0;
        self.rest
            .config()
            .retry_policy()
            .run(
                || self.start_file(&path),
                ApiError::is_transient,
                |err, delay| {
                    attempt += 1;
                    tracing::debug!(image = %uuid, attempt, error = %err, "image file download did not start; retrying after {delay:?}");
                },
            )
            .await
    }

    async fn start_file(&self, path: &str) -> Result<ImageFileDownload, ApiError> {
        // The body can take far longer than a JSON call: time out on the
        // headers here and leave the body to the caller's read timeouts.
        let timeout = self.rest.config().timeout;
        let fut = self.rest.request(Method::GET, path).send();
        let resp = match tokio::time::timeout(timeout, fut).await {
            Err(_) => {
                return Err(ApiError::Timeout {
                    api: Api::Imgapi,
                    method: Method::GET,
                    path: strip_query(path),
                    timeout,
                });
            }
            Ok(r) => r.map_err(|err| self.rest.map_send_error(&Method::GET, path, timeout, err))?,
        };
        let status = resp.status();
        if !status.is_success() {
            let body = resp.bytes().await.unwrap_or_default();
            return Err(ApiError::Status {
                api: Api::Imgapi,
                method: Method::GET,
                path: strip_query(path),
                status: status.as_u16(),
                body: super::ErrorBody::parse(&body),
            });
        }
        let content_length = resp
            .headers()
            .get(reqwest::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let content_md5 = resp
            .headers()
            .get("content-md5")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(ImageFileDownload {
            response: resp,
            content_length,
            content_md5,
            path: strip_query(path),
        })
    }

    /// Bring an image from another IMGAPI (an updates server, with
    /// `?channel=x` on its URL if needed) into this one, the way IMGAPI
    /// itself splits it (docs/triton/apis.md §1.7): AdminImportImage with
    /// `source=` copies the manifest (UUID and `published_at` kept),
    /// AddImageFile with `source=` pulls and checks the file, ActivateImage
    /// publishes it. Resumable: an image already here and active is
    /// returned as is; one left unactivated by an interrupted import is
    /// finished.
    pub async fn import_from_source(
        &self,
        uuid: ImageUuid,
        source_url: &str,
    ) -> Result<ImageManifest, ApiError> {
        let existing = match self.get_image_any_channel(uuid).await {
            Ok(m) => Some(m),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let manifest = match existing {
            Some(m) if m.state == ImageState::Active => return Ok(m),
            Some(m) => m,
            None => {
                let path = format!(
                    "/images/{uuid}{}",
                    self.query_with_channel(&[
                        ("action", "import".to_string()),
                        ("source", source_url.to_string())
                    ])
                );
                self.rest
                    .json(Method::POST, &path, Idempotent::No, None)
                    .await?
            }
        };
        if manifest.files.is_empty() {
            let path = format!(
                "/images/{uuid}/file{}",
                self.query_with_channel(&[("source", source_url.to_string())])
            );
            let _: ImageManifest = self
                .rest
                .json(Method::PUT, &path, Idempotent::Yes, None)
                .await?;
        }
        self.activate_image(uuid).await
    }

    /// GetImage across every channel (`channel=*`) on a channel server.
    async fn get_image_any_channel(&self, uuid: ImageUuid) -> Result<ImageManifest, ApiError> {
        let pairs: Vec<(&str, String)> = match &self.channel {
            Some(_) => vec![("channel", "*".to_string())],
            None => Vec::new(),
        };
        let path = format!("/images/{uuid}{}", query(&pairs));
        self.rest
            .json(Method::GET, &path, Idempotent::Yes, None)
            .await
    }

    /// `pairs` plus this client's channel, as a query string.
    fn query_with_channel(&self, pairs: &[(&str, String)]) -> String {
        let mut all: Vec<(&str, String)> = pairs.to_vec();
        if let Some(c) = self.channel_pair(None) {
            all.push(c);
        }
        query(&all)
    }

    /// AdminImportImage with a manifest body (keeps uuid and published_at);
    /// on a channel server the image lands in this client's channel.
    pub async fn import_manifest(
        &self,
        manifest: &ImageManifest,
    ) -> Result<ImageManifest, ApiError> {
        let path = format!(
            "/images/{}{}",
            manifest.uuid,
            self.query_with_channel(&[("action", "import".to_string())])
        );
        let body = serde_json::to_value(manifest).unwrap_or(json!({}));
        self.rest
            .json(Method::POST, &path, Idempotent::No, Some(&body))
            .await
    }

    /// AddImageFile (`PUT /images/:uuid/file`). Replacing the file of an
    /// unactivated image is harmless, so it retries.
    pub async fn add_image_file(
        &self,
        uuid: ImageUuid,
        compression: Compression,
        sha1: &str,
        bytes: bytes::Bytes,
    ) -> Result<ImageManifest, ApiError> {
        let path = format!(
            "/images/{uuid}/file{}",
            self.query_with_channel(&[
                ("compression", compression.to_string()),
                ("sha1", sha1.to_string())
            ])
        );
        let raw = self
            .rest
            .send_raw(Method::PUT, &path, Idempotent::Yes, None, |rb| {
                rb.header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(bytes.clone())
            })
            .await?;
        self.rest.decode(Method::PUT, &path, &raw.body)
    }

    /// ActivateImage.
    pub async fn activate_image(&self, uuid: ImageUuid) -> Result<ImageManifest, ApiError> {
        let path = format!(
            "/images/{uuid}{}",
            self.query_with_channel(&[("action", "activate".to_string())])
        );
        self.rest
            .json(Method::POST, &path, Idempotent::No, None)
            .await
    }

    /// ChannelAddImage: also list the image in `channel`.
    pub async fn channel_add(
        &self,
        uuid: ImageUuid,
        channel: &str,
    ) -> Result<ImageManifest, ApiError> {
        let path = format!(
            "/images/{uuid}{}",
            self.query_with_channel(&[("action", "channel-add".to_string())])
        );
        let body = json!({ "channel": channel });
        self.rest
            .json(Method::POST, &path, Idempotent::Yes, Some(&body))
            .await
    }

    /// DeleteImage (from this client's channel only, on a channel server).
    pub async fn delete_image(&self, uuid: ImageUuid) -> Result<(), ApiError> {
        let path = format!("/images/{uuid}{}", self.query_with_channel(&[]));
        self.rest
            .empty(Method::DELETE, &path, Idempotent::Yes, None)
            .await
    }

    /// ListChannels (`GET /channels`; 404 on a server without channels).
    pub async fn list_channels(&self) -> Result<Vec<Channel>, ApiError> {
        self.rest
            .json(Method::GET, "/channels", Idempotent::Yes, None)
            .await
    }

    /// Ping (`GET /ping`).
    pub async fn ping(&self) -> Result<serde_json::Value, ApiError> {
        self.rest
            .json(Method::GET, "/ping", Idempotent::Yes, None)
            .await
    }

    /// One ping, no retry: whether the API answers right now.
    pub async fn ping_once(&self) -> Result<(), ApiError> {
        self.rest.ping_once().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_comes_off_the_base_url() {
        let client =
            ImgapiClient::new("https://127.0.0.1:8443?channel=dev", ApiConfig::default()).unwrap();
        assert_eq!(client.base_url(), "https://127.0.0.1:8443");
        assert_eq!(client.channel(), Some("dev"));
        let client = ImgapiClient::new(
            "http://127.0.0.1:8080/imgapi/?channel=release%2Dcandidate",
            ApiConfig::default(),
        )
        .unwrap();
        assert_eq!(client.base_url(), "http://127.0.0.1:8080/imgapi");
        assert_eq!(client.channel(), Some("release-candidate"));
        assert_eq!(
            client.source_url(),
            "http://127.0.0.1:8080/imgapi?channel=release-candidate"
        );
        let odd = client.with_channel(Some("a b&c".into()));
        let again = ImgapiClient::new(&odd.source_url(), ApiConfig::default()).unwrap();
        assert_eq!(again.channel(), Some("a b&c"));
        let client = ImgapiClient::new("http://127.0.0.1/", ApiConfig::default()).unwrap();
        assert_eq!(client.base_url(), "http://127.0.0.1");
        assert_eq!(client.channel(), None);
        assert_eq!(client.source_url(), "http://127.0.0.1");
    }
}
