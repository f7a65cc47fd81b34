//! Shared fixtures for the GZ installer tests: rooted servers, images built
//! in the test (good and deliberately bad), tree snapshots, and a small
//! SAPI + CNAPI stand-in that records calls.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentsadm_api::cnapi::ExecuteResult;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::GzResult;
use agentsadm_platform::Sysinfo;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageManifest;
use sha1::{Digest, Sha1};

/// A rooted global zone in a temporary directory.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub uuid: ServerUuid,
    pub headnode: bool,
}

impl TestServer {
    pub fn new(headnode: bool) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        // A GZ that agentsadm itself has run on (its state directory lives
        // under the agents prefix).
        std::fs::create_dir_all(dir.path().join("opt/smartdc/agents/.agentsadm")).unwrap();
        // Its SMF repository (empty), as every GZ has one.
        std::fs::create_dir_all(dir.path().join("var/svc")).unwrap();
        std::fs::write(
            dir.path().join("var/svc/smf-state.json"),
            "{\n  \"services\": {}\n}\n",
        )
        .unwrap();
        let uuid = ServerUuid::new_v4();
        let s = Sysinfo {
            uuid,
            hostname: if headnode {
                "headnode".into()
            } else {
                "cn1".into()
            },
            headnode,
        };
        std::fs::write(
            dir.path().join("sysinfo.json"),
            serde_json::to_vec_pretty(&s.to_json()).unwrap(),
        )
        .unwrap();
        TestServer {
            dir,
            uuid,
            headnode,
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn at(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `gz <args...> --root R --json [extra]` in-process.
    pub async fn gz(&self, args: &[&str], env: &BTreeMap<String, String>) -> ExecuteResult {
        let mut argv: Vec<String> = vec!["gz".into()];
        argv.extend(args.iter().map(|s| s.to_string()));
        argv.push("--root".into());
        argv.push(self.root().to_string_lossy().into_owned());
        argv.push("--json".into());
        agentsadm_cli::gz::command::run_captured(argv, env.clone()).await
    }

    /// Like [`TestServer::gz`] without SAPI and CNAPI.
    pub async fn gz_offline(&self, args: &[&str]) -> ExecuteResult {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--no-sapi", "--no-cnapi"]);
        self.gz(&a, &BTreeMap::new()).await
    }

    pub fn smf_state(&self) -> BTreeMap<String, String> {
        let text = match std::fs::read(self.at("var/svc/smf-state.json")) {
            Ok(t) => t,
            Err(_) => return BTreeMap::new(),
        };
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        v["services"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, s)| (k.clone(), s["state"].as_str().unwrap().to_string()))
            .collect()
    }

    pub fn installed_image(&self, pkg: &str) -> Option<String> {
        std::fs::read_to_string(self.at(&format!(
            "opt/smartdc/agents/lib/node_modules/{pkg}/image_uuid"
        )))
        .ok()
        .map(|s| s.trim().to_string())
    }

    pub fn instance(&self, pkg: &str) -> Option<String> {
        std::fs::read_to_string(self.at(&format!("opt/smartdc/agents/etc/{pkg}")))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Nothing of a transaction left behind.
    pub fn assert_no_leftovers(&self) {
        let state = self.at("opt/smartdc/agents/.agentsadm");
        for d in ["journal", "staging"] {
            let p = state.join(d);
            if p.exists() {
                let n = std::fs::read_dir(&p).unwrap().count();
                assert_eq!(n, 0, "{} is not empty", p.display());
            }
        }
    }
}

pub fn result(out: &ExecuteResult) -> GzResult {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a GzResult ({e}): stdout={} stderr={}",
            out.stdout, out.stderr
        )
    })
}

pub fn report(out: &ExecuteResult) -> AgentsReport {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a report ({e}): stdout={} stderr={}",
            out.stdout, out.stderr
        )
    })
}

/// Assert a run succeeded, with its output on failure.
pub fn ok(out: &ExecuteResult) -> GzResult {
    assert_eq!(
        out.exit_status, 0,
        "stdout={} stderr={}",
        out.stdout, out.stderr
    );
    result(out)
}

/// Assert a run failed and return the error message (step: message).
pub fn failed(out: &ExecuteResult) -> String {
    assert_eq!(
        out.exit_status, 1,
        "stdout={} stderr={}",
        out.stdout, out.stderr
    );
    let r = result(out);
    let e = r.error.expect("an error in the result");
    format!("{}: {}", e.step, e.message)
}

pub fn spec(name: &str, semver: &str) -> ImageSpec {
    let cat = Catalog::builtin();
    ImageSpec::for_component(cat.get(name).unwrap(), semver)
}

pub fn image(name: &str, semver: &str) -> BuiltImage {
    imagebuild::build(&spec(name, semver))
}

/// Hooks that log `<version> <hook> <cwd>` lines to `$npm_config_etc/hooks.log`.
pub fn logging_hooks() -> Hooks {
    let line = |h: &str| {
        format!("echo \"$npm_package_version {h} $(pwd)\" >> \"$npm_config_etc/hooks.log\"")
    };
    Hooks {
        preinstall: Some(line("preinstall")),
        postinstall: Some(line("postinstall")),
        preuninstall: Some(line("preuninstall")),
        postuninstall: Some(line("postuninstall")),
    }
}

/// Write image + manifest as `<dir>/<uuid>.{file,manifest}`; returns the file path.
pub fn write_image(img: &BuiltImage, dir: &Path) -> PathBuf {
    imagebuild::write_to_dir(img, dir).unwrap().1
}

/// An image whose file is arbitrary tar bytes (gzip-compressed here), with a
/// manifest that matches them.
pub fn raw_image(name: &str, uuid: ImageUuid, tar: &[u8]) -> BuiltImage {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(tar).unwrap();
    let file = enc.finish().unwrap();
    let mut manifest = image("vm-agent", "1.0.0").manifest;
    manifest.uuid = uuid;
    manifest.name = name.to_string();
    manifest.files = vec![ImageFile {
        sha1: format!("{:x}", Sha1::digest(&file)),
        size: file.len() as u64,
        compression: Compression::Gzip,
        stor: None,
    }];
    BuiltImage { manifest, file }
}

/// A tar of a minimal valid vm-agent package, then `extra` entries appended
/// by the caller (raw headers, so bad paths are possible).
pub fn vm_agent_tar(uuid: ImageUuid, extra: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, p: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, p, std::io::empty()).unwrap();
    };
    let file = |b: &mut tar::Builder<Vec<u8>>, p: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, p, data).unwrap();
    };
    dir(&mut b, "vm-agent/");
    file(
        &mut b,
        "vm-agent/package.json",
        br#"{"name":"vm-agent","version":"9.9.9-bad"}"#,
        0o644,
    );
    file(
        &mut b,
        "vm-agent/image_uuid",
        format!("{uuid}\n").as_bytes(),
        0o644,
    );
    extra(&mut b);
    b.into_inner().unwrap()
}

/// Put an arbitrary path into a header (the tar crate refuses `..` and
/// absolute paths in its setters, which is what the tests need).
pub fn raw_path(h: &mut tar::Header, path: &str) {
    let name = &mut h.as_old_mut().name;
    name.fill(0);
    name[..path.len()].copy_from_slice(path.as_bytes());
    h.set_cksum();
}

/// Every path under `root` (except agentsadm's own state directory) with
/// its type, mode and content hash or link target.
pub fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        // agentsadm's own state (lock, download cache, journals) is not
        // part of what "nothing changed" means.
        if e.file_name() == ".agentsadm" {
            continue;
        }
        let md = std::fs::symlink_metadata(&p).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        let desc = if md.file_type().is_symlink() {
            format!("link -> {}", std::fs::read_link(&p).unwrap().display())
        } else if md.is_dir() {
            walk(root, &p, out);
            format!("dir {mode:o}")
        } else {
            let data = std::fs::read(&p).unwrap();
            format!("file {mode:o} {:x}", Sha1::digest(&data))
        };
        out.insert(rel, desc);
    }
}

pub fn assert_same(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    what: &str,
) {
    if before != after {
        let mut diff = Vec::new();
        for (k, v) in before {
            match after.get(k) {
                None => diff.push(format!("- {k} {v}")),
                Some(v2) if v2 != v => diff.push(format!("~ {k} {v} -> {v2}")),
                _ => {}
            }
        }
        for (k, v) in after {
            if !before.contains_key(k) {
                diff.push(format!("+ {k} {v}"));
            }
        }
        panic!("{what}: the server changed:\n{}", diff.join("\n"));
    }
}

// ---------------------------------------------------------------------------
// SAPI + CNAPI stand-in

#[derive(Default)]
pub struct ApiState {
    /// Agent services: name -> uuid.
    pub services: BTreeMap<String, String>,
    /// Agent services' params.image_uuid.
    pub service_images: BTreeMap<String, String>,
    pub instances: BTreeMap<String, serde_json::Value>,
    /// "METHOD path" of every call.
    pub calls: Vec<String>,
    /// Bodies POSTed to /servers/:uuid.
    pub server_posts: Vec<serde_json::Value>,
    /// Answer every SAPI instance write with 503.
    pub sapi_down: bool,
}

pub struct Apis {
    pub url: String,
    pub state: Arc<Mutex<ApiState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Apis {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Apis {
    pub async fn start() -> Apis {
        use axum::extract::{Path as P, Query, State};
        use axum::routing::{get, post};
        use axum::{Json, Router};
        type S = Arc<Mutex<ApiState>>;
        let state: S = Arc::default();
        async fn services(
            State(s): State<S>,
            Query(q): Query<BTreeMap<String, String>>,
        ) -> Json<serde_json::Value> {
            let mut g = s.lock().unwrap();
            g.calls.push(format!("GET /services {:?}", q));
            let list: Vec<serde_json::Value> = g
                .services
                .iter()
                .filter(|(n, _)| q.get("name").map(|x| x == *n).unwrap_or(true))
                .map(|(n, u)| {
                    let mut v = serde_json::json!({"uuid": u, "name": n, "application_uuid": "00000000-0000-0000-0000-0000000000aa", "type": "agent"});
                    if let Some(img) = g.service_images.get(n) {
                        v["params"] = serde_json::json!({"image_uuid": img});
                    }
                    v
                })
                .collect();
            Json(serde_json::Value::Array(list))
        }
        // ListInstances?service_uuid= (what a fresh adoption reads).
        async fn list_inst(
            State(s): State<S>,
            axum::extract::Query(q): axum::extract::Query<BTreeMap<String, String>>,
        ) -> Json<serde_json::Value> {
            let mut g = s.lock().unwrap();
            g.calls.push("GET /instances".to_string());
            let want = q.get("service_uuid");
            let list = g
                .instances
                .values()
                .filter(|i| want.is_none_or(|w| i["service_uuid"] == w.as_str()))
                .cloned()
                .collect();
            Json(serde_json::Value::Array(list))
        }
        async fn get_inst(State(s): State<S>, P(id): P<String>) -> axum::response::Response {
            use axum::response::IntoResponse;
            let mut g = s.lock().unwrap();
            g.calls.push(format!("GET /instances/{id}"));
            match g.instances.get(&id) {
                Some(v) => Json(v.clone()).into_response(),
                None => (
                    axum::http::StatusCode::NOT_FOUND,
                    Json(serde_json::json!({"code":"ResourceNotFound","message":format!("no such instance: {id}")})),
                )
                    .into_response(),
            }
        }
        async fn put_inst(
            State(s): State<S>,
            P(id): P<String>,
            Json(body): Json<serde_json::Value>,
        ) -> axum::response::Response {
            use axum::response::IntoResponse;
            let mut g = s.lock().unwrap();
            g.calls.push(format!("PUT /instances/{id}"));
            if g.sapi_down {
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({"code":"ServiceUnavailableError","message":"down"})),
                )
                    .into_response();
            }
            let inst = g.instances.get_mut(&id).unwrap();
            for (k, v) in body["params"].as_object().unwrap() {
                inst["params"][k] = v.clone();
            }
            Json(inst.clone()).into_response()
        }
        async fn del_inst(State(s): State<S>, P(id): P<String>) -> axum::http::StatusCode {
            let mut g = s.lock().unwrap();
            g.calls.push(format!("DELETE /instances/{id}"));
            if g.sapi_down {
                return axum::http::StatusCode::SERVICE_UNAVAILABLE;
            }
            match g.instances.remove(&id) {
                Some(_) => axum::http::StatusCode::NO_CONTENT,
                None => axum::http::StatusCode::NOT_FOUND,
            }
        }
        async fn post_inst(
            State(s): State<S>,
            Json(body): Json<serde_json::Value>,
        ) -> axum::response::Response {
            use axum::response::IntoResponse;
            let mut g = s.lock().unwrap();
            g.calls.push("POST /instances".to_string());
            if g.sapi_down {
                return (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({"code":"ServiceUnavailableError","message":"down"})),
                )
                    .into_response();
            }
            let id = body["uuid"].as_str().unwrap().to_string();
            let mut inst = body.clone();
            inst["type"] = "agent".into();
            g.instances.insert(id, inst.clone());
            Json(inst).into_response()
        }
        async fn upgrade(State(s): State<S>, P(id): P<String>) -> axum::http::StatusCode {
            s.lock()
                .unwrap()
                .calls
                .push(format!("PUT /instances/{id}/upgrade"));
            axum::http::StatusCode::INTERNAL_SERVER_ERROR
        }
        async fn server_post(
            State(s): State<S>,
            P(id): P<String>,
            Json(body): Json<serde_json::Value>,
        ) -> axum::http::StatusCode {
            let mut g = s.lock().unwrap();
            g.calls.push(format!("POST /servers/{id}"));
            g.server_posts.push(body);
            axum::http::StatusCode::NO_CONTENT
        }
        let app = Router::new()
            .route("/services", get(services))
            .route("/instances", post(post_inst).get(list_inst))
            .route(
                "/instances/{id}",
                get(get_inst).put(put_inst).delete(del_inst),
            )
            .route("/instances/{id}/upgrade", axum::routing::put(upgrade))
            .route("/servers/{id}", post(server_post))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Apis { url, state, task }
    }

    pub fn add_service(&self, name: &str) -> String {
        let u = uuid::Uuid::new_v4().to_string();
        self.state
            .lock()
            .unwrap()
            .services
            .insert(name.to_string(), u.clone());
        u
    }

    pub fn add_service_with_image(&self, name: &str, image: &str) -> String {
        let u = self.add_service(name);
        self.state
            .lock()
            .unwrap()
            .service_images
            .insert(name.to_string(), image.to_string());
        u
    }

    pub fn env(&self, imgapi: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("SAPI_URL".to_string(), self.url.clone()),
            ("CNAPI_URL".to_string(), self.url.clone()),
            ("IMGAPI_URL".to_string(), imgapi.to_string()),
        ])
    }
}

pub fn manifest_with(img: &BuiltImage, f: impl FnOnce(&mut ImageManifest)) -> BuiltImage {
    let mut out = img.clone();
    f(&mut out.manifest);
    out
}

/// Walk an unpacked tree and assert that every symbolic link, resolved
/// lexically from its own directory, stays under `base`, and that no file
/// kept a setuid or setgid bit.
pub fn assert_links_inside(base: &Path, dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        if md.file_type().is_symlink() {
            let t = std::fs::read_link(e.path()).unwrap();
            assert!(
                link_stays_inside(base, &e.path(), &t),
                "{} -> {}",
                e.path().display(),
                t.display()
            );
        } else if md.is_dir() {
            assert_links_inside(base, &e.path());
        } else {
            assert_eq!(
                md.permissions().mode() & 0o7000,
                0,
                "setuid/setgid stripped: {}",
                e.path().display()
            );
        }
    }
}

/// Whether `target`, read from the link at `link`, stays under `base`
/// (lexically, as the unpacker checks).
fn link_stays_inside(base: &Path, link: &Path, target: &Path) -> bool {
    use std::path::Component;
    if target.is_absolute() {
        return false;
    }
    let mut p: PathBuf = link.parent().unwrap().to_path_buf();
    for c in target.components() {
        match c {
            Component::ParentDir if !p.pop() => return false,
            Component::Normal(s) => p.push(s),
            _ => {}
        }
    }
    p.starts_with(base)
}

/// Walk an unpacked tree and assert that every symbolic link, resolved by
/// the kernel (following the tree's other links), lands under `base` or
/// nowhere (dangling, or a loop): the lexical check above misses chains.
pub fn assert_links_resolve_inside(base: &Path, dir: &Path) {
    let base = std::fs::canonicalize(base).unwrap();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                if let Ok(real) = std::fs::canonicalize(&p) {
                    assert!(
                        real.starts_with(&base),
                        "{} resolves to {}",
                        p.display(),
                        real.display()
                    );
                }
            } else if md.is_dir() {
                stack.push(p);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A guarded server: what a hostile package must leave as it was

/// A server with IMGAPI, SAPI and CNAPI stand-ins and a sentinel file
/// outside its root.
pub struct Guarded {
    pub imgapi: agentsadm_sim::standin::ImgapiStandIn,
    pub apis: Apis,
    pub srv: TestServer,
    pub outside: tempfile::TempDir,
    pub sentinel: PathBuf,
}

/// What a refused or rolled-back install must not change: the whole root,
/// the SMF state, the sentinel outside the root, SAPI's instances and the
/// agents last reported to CNAPI.
#[derive(Debug, PartialEq)]
pub struct Guard {
    pub root: BTreeMap<String, String>,
    pub smf: BTreeMap<String, String>,
    pub sentinel: (u32, Vec<u8>),
    pub sapi: BTreeMap<String, serde_json::Value>,
    pub cnapi: Option<serde_json::Value>,
}

impl Guarded {
    /// A server with `installed` installed in order (SAPI services made
    /// for each component).
    pub async fn new(installed: &[BuiltImage]) -> Guarded {
        let imgapi = agentsadm_sim::standin::ImgapiStandIn::start()
            .await
            .unwrap();
        let apis = Apis::start().await;
        let srv = TestServer::new(false);
        let outside = tempfile::tempdir().unwrap();
        let sentinel = outside.path().join("secret");
        std::fs::write(&sentinel, b"top secret\n").unwrap();
        std::fs::set_permissions(&sentinel, std::fs::Permissions::from_mode(0o600)).unwrap();
        let g = Guarded {
            imgapi,
            apis,
            srv,
            outside,
            sentinel,
        };
        for img in installed {
            if !g
                .apis
                .state
                .lock()
                .unwrap()
                .services
                .contains_key(&img.manifest.name)
            {
                g.apis.add_service(&img.manifest.name);
            }
            let uuid = g.publish(img);
            ok(&g.gz(&["install", &uuid]).await);
        }
        g
    }

    pub fn publish(&self, img: &BuiltImage) -> String {
        self.imgapi.publish(img);
        img.manifest.uuid.to_string()
    }

    /// IMGAPI, SAPI and CNAPI URLs for a run.
    pub fn env(&self) -> BTreeMap<String, String> {
        self.apis.env(&self.imgapi.url())
    }

    /// `gz <args> --root R --json` in-process with the stand-ins.
    pub async fn gz(&self, args: &[&str]) -> ExecuteResult {
        self.srv.gz(args, &self.env()).await
    }

    /// A path in the directory outside the root.
    pub fn outside(&self, name: &str) -> PathBuf {
        self.outside.path().join(name)
    }

    pub fn state(&self) -> Guard {
        let md = std::fs::metadata(&self.sentinel).unwrap();
        let api = self.apis.state.lock().unwrap();
        Guard {
            root: snapshot(self.srv.root()),
            smf: self.srv.smf_state(),
            sentinel: (
                md.permissions().mode() & 0o7777,
                std::fs::read(&self.sentinel).unwrap(),
            ),
            sapi: api.instances.clone(),
            cnapi: api.server_posts.last().map(|p| p["agents"].clone()),
        }
    }

    /// The server is as `before` (the root's differences listed first).
    pub fn assert_unchanged(&self, before: &Guard, what: &str) {
        let now = self.state();
        assert_same(&before.root, &now.root, what);
        assert_eq!(before, &now, "{what}");
        self.srv.assert_no_leftovers();
    }
}
