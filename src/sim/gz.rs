//! The seam between the simulator and a mock server's global zone.
//!
//! CNAPI tasks (install-agent, uninstall-agents, server setup) and CNAPI
//! execute need to act on one server's GZ. They do it only through
//! [`GzOps`], so the GZ installer can be swapped in without touching the
//! simulator:
//!
//! - [`GzOps::prepare`]: make the server's directory a GZ (sysinfo file,
//!   components a seeded datacenter says are installed). Called once,
//!   lazily, before the first operation on that server, so 2000 idle mock
//!   servers cost no files.
//! - [`GzOps::install`] / [`GzOps::uninstall`]: what cn-agent's
//!   `agent_install` / `agents_uninstall` tasks do to the GZ (download and
//!   verify from the DC IMGAPI, unpack, keep the instance UUID, adopt into
//!   SAPI). Reporting to CNAPI is the caller's job, as cn-agent's
//!   `refreshAgents` is separate from the install.
//! - [`GzOps::report`]: the `server.agents` list, read from the GZ.
//! - [`GzOps::run`]: run an `agentsadm` command line (what CNAPI execute of
//!   [`crate::remote::gz_execute_request`] runs), with stdout, stderr and
//!   exit status captured. The caller has already appended `--root <dir>`.
//!
//! [`MockcloudGz`] is the stand-in used until the real installer lands: the
//! mockcloud layout of cn-agent's dummy backend (docs/triton/agent-install.md
//! §4), `<root>/agents/<package>/{image_uuid,package.json,instance_uuid}`,
//! with only those two files extracted from the image, SAPI adoption with
//! `params.server_uuid` and `params.image_uuid`, and a `gz` command line
//! limited to `install`, `remove` and `report`. The real implementation will
//! call the installer library for install/remove/report and
//! `crate::cli::gz::run_captured` for [`GzOps::run`].

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha1::{Digest, Sha1};

use crate::api::cnapi::{AgentEntry, ExecuteResult};
use crate::api::sapi::{CreateInstance, ServiceType, object};
use crate::api::{ApiError, Apis};
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid, ServiceUuid};
use crate::image::Compression;
use crate::imagebuild::hex;
use crate::remote::{
    AgentsReport, ComponentAction, ComponentResult, GzFailure, GzResult, ReportError,
};

/// One mock server as its GZ sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GzTarget {
    pub server_uuid: ServerUuid,
    pub hostname: String,
    pub headnode: bool,
    pub datacenter: String,
    pub admin_ip: String,
    /// The server's directory; the GZ root for the installer.
    pub root: PathBuf,
}

/// Where the server's GZ reaches the datacenter's APIs.
#[derive(Clone, Debug)]
pub struct GzEnv {
    pub imgapi_url: String,
    pub sapi_url: String,
    pub cnapi_url: String,
    /// Clients for those URLs, shared by every operation.
    pub apis: Apis,
}

impl GzEnv {
    /// The environment a `gz` command line gets (the API URLs a real GZ
    /// would read from its SDC config).
    pub fn command_env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("IMGAPI_URL".to_string(), self.imgapi_url.clone()),
            ("SAPI_URL".to_string(), self.sapi_url.clone()),
            ("CNAPI_URL".to_string(), self.cnapi_url.clone()),
        ])
    }
}

/// A component a seeded datacenter records as installed on a server, before
/// the server's directory exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeededComponent {
    /// Component (and image) name.
    pub name: String,
    /// Package / directory name (differs for marlin-agent).
    pub package: String,
    pub version: String,
    pub image_uuid: ImageUuid,
    pub instance_uuid: InstanceUuid,
}

/// Why a GZ operation failed. The message plus its source chain becomes the
/// task's error text (`AgentInstall error: ...`).
#[derive(Debug, thiserror::Error)]
pub enum GzOpError {
    #[error("Image not found at {url}/images/{image}")]
    ImageNotFound { image: ImageUuid, url: String },
    #[error("cannot download image {image} from {url}")]
    Download {
        image: ImageUuid,
        url: String,
        #[source]
        err: ApiError,
    },
    #[error("cannot read image {image} file from {url}")]
    Stream {
        image: ImageUuid,
        url: String,
        #[source]
        err: reqwest::Error,
    },
    #[error("image {image} file is not what its manifest says: {detail}")]
    Verify { image: ImageUuid, detail: String },
    #[error("image {image} is not a valid agent image: {detail}")]
    BadImage { image: ImageUuid, detail: String },
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("cannot adopt {component} instance {instance} into SAPI")]
    Adopt {
        component: String,
        instance: InstanceUuid,
        #[source]
        err: ApiError,
    },
    #[error("cannot list the agent services in SAPI to find the default images")]
    Services {
        #[source]
        err: ApiError,
    },
    /// A failure reported by the installer as text.
    #[error("{0}")]
    Failed(String),
}

/// `err` and its sources joined with `: `, for task error messages.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push_str(": ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

/// The per-server agent operations the simulator needs (see the module
/// docs). Implementations must be safe to call concurrently for different
/// servers; calls for one server may also overlap (parallel-safe
/// components install concurrently on a real server).
pub trait GzOps: Send + Sync + 'static {
    /// Make `target.root` a GZ with `seeded` installed. Idempotent.
    fn prepare(&self, target: &GzTarget, seeded: &[SeededComponent]) -> Result<(), GzOpError>;

    /// Install or upgrade one image from the DC IMGAPI, keep or create the
    /// instance UUID, adopt it into SAPI.
    fn install(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> BoxFuture<'static, Result<(), GzOpError>>;

    /// Remove components by name (missing ones are not an error).
    fn uninstall(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        names: Vec<String>,
    ) -> BoxFuture<'static, Result<(), GzOpError>>;

    /// The `server.agents` report read from the GZ.
    fn report(&self, target: GzTarget) -> BoxFuture<'static, Result<AgentsReport, GzOpError>>;

    /// Run `agentsadm <argv...>` against the GZ and capture its output.
    fn run(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'static, ExecuteResult>;

    /// Server setup's agent step: install each image in order (the real
    /// flow runs `agentsadm gz setup --source imgapi` through execute).
    fn setup(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        images: Vec<ImageUuid>,
    ) -> BoxFuture<'static, Result<(), GzOpError>> {
        let futs: Vec<_> = images
            .into_iter()
            .map(|i| self.install(env.clone(), target.clone(), i))
            .collect();
        Box::pin(async move {
            for f in futs {
                f.await?;
            }
            Ok(())
        })
    }
}

/// The mockcloud-layout stand-in for the GZ installer (module docs).
///
/// It is the only writer of the directories it manages, so it keeps each
/// server's `server.agents` list in memory once read or written: a report
/// after an install then costs no file reads (reading every component's
/// three files on every install was most of the simulator's per-install
/// CPU). Changing a managed directory behind its back is not supported.
#[derive(Clone, Debug, Default)]
pub struct MockcloudGz {
    index: Arc<StandinCache>,
}

impl MockcloudGz {
    pub fn new() -> MockcloudGz {
        MockcloudGz::default()
    }
}

/// What the stand-in remembers: `server.agents` per server root (by
/// component directory name), and agent service UUIDs by SAPI URL and
/// component name (dropped when SAPI no longer knows one).
#[derive(Debug, Default)]
struct StandinCache {
    roots: std::sync::Mutex<std::collections::HashMap<PathBuf, BTreeMap<String, AgentEntry>>>,
    services: std::sync::Mutex<std::collections::HashMap<(String, String), ServiceUuid>>,
}

impl StandinCache {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<PathBuf, BTreeMap<String, AgentEntry>>>
    {
        self.roots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_root(&self, root: &Path, entries: BTreeMap<String, AgentEntry>) {
        self.lock().insert(root.to_path_buf(), entries);
    }

    /// Record one directory's new state (`None`: removed), if the root is
    /// indexed.
    fn update(&self, root: &Path, dir: &str, entry: Option<AgentEntry>) {
        if let Some(m) = self.lock().get_mut(root) {
            match entry {
                Some(e) => {
                    m.insert(dir.to_string(), e);
                }
                None => {
                    m.remove(dir);
                }
            }
        }
    }

    fn get(&self, root: &Path) -> Option<Vec<AgentEntry>> {
        self.lock().get(root).map(|m| m.values().cloned().collect())
    }

    fn services(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, String), ServiceUuid>> {
        self.services.lock().unwrap_or_else(|e| e.into_inner())
    }
}

const SYSINFO_FILE: &str = "sysinfo.json";
const AGENTS_DIR: &str = "agents";

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> GzOpError + 'a {
    move |err| GzOpError::Io {
        action,
        path: path.to_path_buf(),
        err,
    }
}

/// Write a file through a temporary name, so a reader never sees half of it.
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), GzOpError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).map_err(io_err("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err("rename into", path))
}

impl MockcloudGz {
    /// The sysinfo file mockcloud's create-server writes (4-space JSON).
    fn sysinfo(target: &GzTarget) -> serde_json::Value {
        json!({
            "UUID": target.server_uuid,
            "Hostname": target.hostname,
            "System Type": "Virtual",
            "SDC Version": "7.0",
            "Setup": "true",
            "Datacenter Name": target.datacenter,
            "Boot Parameters": {"headnode": if target.headnode { "true" } else { "false" }},
            "Admin IP": target.admin_ip,
        })
    }

    /// Write one component's directory. `fresh`: the server directory is
    /// being created and nobody reads it yet, so plain writes will do.
    fn write_component(
        dir: &Path,
        package: &str,
        version: &str,
        image: ImageUuid,
        instance: Option<InstanceUuid>,
        fresh: bool,
    ) -> Result<InstanceUuid, GzOpError> {
        let pdir = dir.join(AGENTS_DIR).join(package);
        let pj = serde_json::to_vec_pretty(&json!({"name": package, "version": version}))
            .unwrap_or_default();
        let image_line = format!("{image}\n");
        if fresh {
            std::fs::create_dir(&pdir).map_err(io_err("create", &pdir))?;
            let inst = instance.unwrap_or_else(InstanceUuid::new_v4);
            for (name, data) in [
                ("package.json", pj.as_slice()),
                ("image_uuid", image_line.as_bytes()),
                ("instance_uuid", format!("{inst}\n").as_bytes()),
            ] {
                let path = pdir.join(name);
                std::fs::write(&path, data).map_err(io_err("write", &path))?;
            }
            return Ok(inst);
        }
        std::fs::create_dir_all(&pdir).map_err(io_err("create", &pdir))?;
        write_atomic(&pdir.join("package.json"), &pj)?;
        write_atomic(&pdir.join("image_uuid"), image_line.as_bytes())?;
        // The instance UUID is kept across upgrades, created on first install.
        let ipath = pdir.join("instance_uuid");
        let existing = std::fs::read_to_string(&ipath)
            .ok()
            .and_then(|s| s.trim().parse::<InstanceUuid>().ok());
        let inst = match (existing, instance) {
            (Some(e), _) => e,
            (None, Some(i)) => i,
            (None, None) => InstanceUuid::new_v4(),
        };
        if existing.is_none() {
            write_atomic(&ipath, format!("{inst}\n").as_bytes())?;
        }
        Ok(inst)
    }

    /// Download and verify an image file (size, sha1, and `Content-MD5` when
    /// sent), as cn-agent's `getAgentImage` does.
    async fn fetch(
        env: &GzEnv,
        image: ImageUuid,
    ) -> Result<(crate::image::ImageManifest, Vec<u8>), GzOpError> {
        let url = env.imgapi_url.clone();
        let manifest = match env.apis.imgapi.get_image(image).await {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Err(GzOpError::ImageNotFound { image, url }),
            Err(err) => return Err(GzOpError::Download { image, url, err }),
        };
        let want = manifest
            .file()
            .cloned()
            .ok_or_else(|| GzOpError::BadImage {
                image,
                detail: "the manifest lists no file".into(),
            })?;
        let download =
            env.apis
                .imgapi
                .get_image_file(image)
                .await
                .map_err(|err| GzOpError::Download {
                    image,
                    url: url.clone(),
                    err,
                })?;
        // The client checks Content-Length and Content-MD5 as it streams;
        // size and sha1 against the manifest are checked here, as cn-agent's
        // getAgentImage does.
        let mut sha1 = Sha1::new();
        let mut bytes = Vec::with_capacity(want.size as usize);
        let mut stream = download.verified_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| GzOpError::Download {
                image,
                url: url.clone(),
                err,
            })?;
            sha1.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
        if bytes.len() as u64 != want.size {
            return Err(GzOpError::Verify {
                image,
                detail: format!("Unexpected file size ({} vs {})", want.size, bytes.len()),
            });
        }
        let got = hex(&sha1.finalize());
        if got != want.sha1 {
            return Err(GzOpError::Verify {
                image,
                detail: format!("sha1 {got} does not match the manifest's {}", want.sha1),
            });
        }
        Ok((manifest, bytes))
    }

    /// Extract `<top>/image_uuid` and `<top>/package.json` (all mockcloud
    /// keeps) and check the image UUID inside matches.
    fn unpack_metadata(
        image: ImageUuid,
        compression: Compression,
        bytes: &[u8],
    ) -> Result<(String, String), GzOpError> {
        let bad = |detail: String| GzOpError::BadImage { image, detail };
        let reader: Box<dyn Read + '_> = match compression {
            Compression::Gzip => Box::new(flate2::read::GzDecoder::new(bytes)),
            Compression::Bzip2 => Box::new(bzip2::read::BzDecoder::new(bytes)),
            Compression::None => Box::new(bytes),
            Compression::Xz => return Err(bad("xz images are not supported".into())),
        };
        let mut archive = tar::Archive::new(reader);
        let mut top: Option<String> = None;
        let mut image_uuid = None;
        let mut package_json = None;
        let entries = archive
            .entries()
            .map_err(|e| bad(format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| bad(format!("corrupt tar archive: {e}")))?;
            let path = entry
                .path()
                .map_err(|e| bad(format!("bad path in archive: {e}")))?
                .to_string_lossy()
                .into_owned();
            let first = path.split('/').next().unwrap_or("").to_string();
            let top = top.get_or_insert_with(|| first.clone());
            let rel = path.strip_prefix(&format!("{top}/")).unwrap_or("");
            if rel == "image_uuid" || rel == "package.json" {
                let mut s = String::new();
                entry
                    .read_to_string(&mut s)
                    .map_err(|e| bad(format!("cannot read {path}: {e}")))?;
                if rel == "image_uuid" {
                    image_uuid = Some(s);
                } else {
                    package_json = Some(s);
                }
            }
        }
        let top = top.ok_or_else(|| bad("tarball missing agentName/ directory".into()))?;
        let inside =
            image_uuid.ok_or_else(|| bad(format!("no {top}/image_uuid in the tarball")))?;
        if inside.trim() != image.to_string() {
            return Err(bad(format!(
                "{top}/image_uuid says {}, not {image}",
                inside.trim()
            )));
        }
        // gz-tools images carry no package.json: the top directory names
        // the component and the manifest has the version.
        let Some(pj) = package_json else {
            return Ok((top, String::new()));
        };
        let pj: serde_json::Value =
            serde_json::from_str(&pj).map_err(|e| bad(format!("{top}/package.json: {e}")))?;
        let name = pj["name"]
            .as_str()
            .ok_or_else(|| bad(format!("{top}/package.json has no name")))?
            .to_string();
        let version = pj["version"].as_str().unwrap_or("").to_string();
        Ok((name, version))
    }

    /// Adopt the instance into SAPI the way the dummy cn-agent does: find
    /// the agent service by name (none: not managed, nothing to do), then
    /// create the instance (an overwrite when it exists) with
    /// `params.server_uuid` and `params.image_uuid`.
    async fn adopt(
        cache: &StandinCache,
        env: &GzEnv,
        target: &GzTarget,
        component: &str,
        instance: InstanceUuid,
        image: ImageUuid,
    ) -> Result<(), GzOpError> {
        let adopt_err = |err| GzOpError::Adopt {
            component: component.to_string(),
            instance,
            err,
        };
        let key = (env.sapi_url.clone(), component.to_string());
        for attempt in 0..2 {
            let cached = cache.services().get(&key).copied();
            let service = match cached {
                Some(s) => s,
                None => {
                    let services = env
                        .apis
                        .sapi
                        .list_services(Some(component), None, Some(ServiceType::Agent))
                        .await
                        .map_err(adopt_err)?;
                    match services.first() {
                        Some(s) => {
                            cache.services().insert(key.clone(), s.uuid);
                            s.uuid
                        }
                        None => return Ok(()),
                    }
                }
            };
            let create = CreateInstance {
                uuid: Some(instance),
                service_uuid: Some(service),
                params: Some(object([
                    ("server_uuid", json!(target.server_uuid)),
                    ("image_uuid", json!(image)),
                ])),
                metadata: None,
                exists: Some(true),
            };
            match env.apis.sapi.create_instance(&create).await {
                Ok(_) => return Ok(()),
                // The service went away since it was looked up: look again.
                Err(e) if e.is_not_found() && cached.is_some() && attempt == 0 => {
                    cache.services().remove(&key);
                }
                Err(e) => return Err(adopt_err(e)),
            }
        }
        Ok(())
    }

    async fn install_one(
        index: Arc<StandinCache>,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> Result<ComponentResult, GzOpError> {
        let started = std::time::Instant::now();
        let (manifest, bytes) = Self::fetch(&env, image).await?;
        let compression = manifest
            .file()
            .map(|f| f.compression)
            .unwrap_or(Compression::Gzip);
        let (package, version) = Self::unpack_metadata(image, compression, &bytes)?;
        let version = if version.is_empty() {
            manifest.version.clone()
        } else {
            version
        };
        let before = read_component(&target.root.join(AGENTS_DIR).join(&package));
        let instance = Self::write_component(&target.root, &package, &version, image, None, false)?;
        index.update(
            &target.root,
            &package,
            Some(AgentEntry {
                name: package.clone(),
                version: version.clone(),
                image_uuid: Some(image),
                uuid: Some(instance),
            }),
        );
        Self::adopt(&index, &env, &target, &manifest.name, instance, image).await?;
        let action = match &before {
            None => ComponentAction::Installed,
            Some(b) if b.image_uuid == Some(image) => ComponentAction::Unchanged,
            Some(_) => ComponentAction::Upgraded,
        };
        Ok(ComponentResult {
            name: manifest.name.clone(),
            action,
            from_image: before.and_then(|b| b.image_uuid),
            image_uuid: Some(image),
            version: Some(version),
            instance_uuid: Some(instance),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    fn remove_one(
        index: &StandinCache,
        root: &Path,
        name: &str,
    ) -> Result<Option<ComponentResult>, GzOpError> {
        let base = root.join(AGENTS_DIR);
        // By directory (package) name, or by a package.json name.
        let dir = base.join(name);
        let dir = if dir.is_dir() {
            Some(dir)
        } else {
            std::fs::read_dir(&base).ok().and_then(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .find(|p| read_component(p).is_some_and(|c| c.name == name))
            })
        };
        let Some(dir) = dir else { return Ok(None) };
        let before = read_component(&dir);
        std::fs::remove_dir_all(&dir).map_err(io_err("remove", &dir))?;
        if let Some(d) = dir.file_name() {
            index.update(root, &d.to_string_lossy(), None);
        }
        Ok(Some(ComponentResult {
            name: name.to_string(),
            action: ComponentAction::Removed,
            from_image: before.as_ref().and_then(|b| b.image_uuid),
            image_uuid: None,
            version: before.map(|b| b.version),
            instance_uuid: None,
            elapsed_ms: 0,
        }))
    }

    /// The report from memory when this root is indexed, else from disk
    /// (indexing it when every component read cleanly).
    fn report_cached(index: &StandinCache, target: &GzTarget) -> AgentsReport {
        if let Some(agents) = index.get(&target.root) {
            return AgentsReport {
                server_uuid: target.server_uuid,
                agents,
                errors: Vec::new(),
            };
        }
        let report = Self::report_sync(target);
        if report.errors.is_empty() {
            index.set_root(
                &target.root,
                report
                    .agents
                    .iter()
                    .map(|a| (a.name.clone(), a.clone()))
                    .collect(),
            );
        }
        report
    }

    fn report_sync(target: &GzTarget) -> AgentsReport {
        let base = target.root.join(AGENTS_DIR);
        let mut agents = Vec::new();
        let mut errors = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&base) {
            let mut dirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            dirs.sort();
            for d in dirs {
                let dir_name = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match read_component(&d) {
                    Some(c) if c.image_uuid.is_some() => agents.push(c),
                    _ => errors.push(ReportError {
                        name: dir_name,
                        message: "missing or unreadable image_uuid or package.json".into(),
                    }),
                }
            }
        }
        AgentsReport {
            server_uuid: target.server_uuid,
            agents,
            errors,
        }
    }

    /// The stand-in `agentsadm` command line (see the module docs).
    async fn run_cli(
        index: Arc<StandinCache>,
        env: Arc<GzEnv>,
        target: GzTarget,
        argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> ExecuteResult {
        let usage = |msg: &str| ExecuteResult {
            exit_status: 1,
            stdout: String::new(),
            stderr: format!(
                "agentsadm: error: {msg} (the simulator's stand-in installer supports gz install IMAGE_UUID..., gz remove NAME..., gz setup --source imgapi, gz report)\n"
            ),
        };
        // Flags the stand-in accepts and ignores: the real installer's
        // options that make no difference to the mockcloud layout.
        let mut positional = Vec::new();
        let mut no_sapi = false;
        let mut no_cnapi = false;
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--root" | "--layout" | "--server-uuid" | "--hook-timeout" | "--lock-wait"
                | "--source" | "--channel" | "--sapi-url" | "--cnapi-url" | "--imgapi-url"
                | "--log-file" => {
                    it.next();
                }
                "--no-sapi" => no_sapi = true,
                "--no-cnapi" => no_cnapi = true,
                s if s.starts_with("--") || s == "-v" || s == "-q" => {}
                s => positional.push(s.to_string()),
            }
        }
        let _ = vars;
        let (Some(gz), Some(cmd)) = (positional.first(), positional.get(1)) else {
            return usage("expected 'gz <command>'");
        };
        if gz != "gz" {
            return usage(&format!("unknown command {gz:?}"));
        }
        let args = &positional[2..];
        let result = match cmd.as_str() {
            "report" => {
                let report = Self::report_cached(&index, &target);
                return ExecuteResult {
                    exit_status: 0,
                    stdout: serde_json::to_string(&report).unwrap_or_default() + "\n",
                    stderr: String::new(),
                };
            }
            "install" => {
                let mut out = GzResult {
                    server_uuid: target.server_uuid,
                    components: Vec::new(),
                    error: None,
                    warnings: Vec::new(),
                };
                for a in args {
                    let Ok(image) = a.parse::<ImageUuid>() else {
                        return usage(&format!("{a:?} is not an image UUID"));
                    };
                    let r = if no_sapi {
                        Self::install_no_sapi(index.clone(), env.clone(), target.clone(), image)
                            .await
                    } else {
                        Self::install_one(index.clone(), env.clone(), target.clone(), image).await
                    };
                    match r {
                        Ok(c) => out.components.push(c),
                        Err(e) => {
                            out.error = Some(GzFailure {
                                component: None,
                                step: "install".into(),
                                message: error_chain(&e),
                            });
                            break;
                        }
                    }
                }
                out
            }
            "setup" => {
                let mut out = GzResult {
                    server_uuid: target.server_uuid,
                    components: Vec::new(),
                    error: None,
                    warnings: Vec::new(),
                };
                // The default set, each at its SAPI service's image.
                match Self::setup_images(&env, target.headnode).await {
                    Ok(images) => {
                        for (name, image) in images {
                            match Self::install_one(
                                index.clone(),
                                env.clone(),
                                target.clone(),
                                image,
                            )
                            .await
                            {
                                Ok(c) => out.components.push(c),
                                Err(e) => {
                                    out.error = Some(GzFailure {
                                        component: Some(name),
                                        step: "install".into(),
                                        message: error_chain(&e),
                                    });
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        out.error = Some(GzFailure {
                            component: None,
                            step: "sapi".into(),
                            message: error_chain(&e),
                        })
                    }
                }
                out
            }
            "remove" => {
                let mut out = GzResult {
                    server_uuid: target.server_uuid,
                    components: Vec::new(),
                    error: None,
                    warnings: Vec::new(),
                };
                for name in args {
                    match Self::remove_one(&index, &target.root, name) {
                        Ok(Some(c)) => out.components.push(c),
                        Ok(None) => out.components.push(ComponentResult {
                            name: name.clone(),
                            action: ComponentAction::Absent,
                            from_image: None,
                            image_uuid: None,
                            version: None,
                            instance_uuid: None,
                            elapsed_ms: 0,
                        }),
                        Err(e) => {
                            out.error = Some(GzFailure {
                                component: Some(name.clone()),
                                step: "remove".into(),
                                message: error_chain(&e),
                            });
                            break;
                        }
                    }
                }
                out
            }
            other => return usage(&format!("unknown gz command {other:?}")),
        };
        // Report to CNAPI like the real installer (unless --no-cnapi).
        if !no_cnapi {
            let report = Self::report_cached(&index, &target);
            if let Err(e) = env
                .apis
                .cnapi
                .update_server_agents(target.server_uuid, &report.agents)
                .await
            {
                tracing::debug!(server = %target.server_uuid, error = %e, "stand-in gz: CNAPI report failed");
            }
        }
        let failed = result.error.is_some();
        ExecuteResult {
            exit_status: i32::from(failed),
            stdout: serde_json::to_string(&result).unwrap_or_default() + "\n",
            stderr: result
                .error
                .as_ref()
                .map(|e| format!("agentsadm: error: {}\n", e.message))
                .unwrap_or_default(),
        }
    }

    /// `gz setup --source imgapi`: every default component for this role
    /// with its agent service's `params.image_uuid` (components without a
    /// service or image are skipped, as unmanaged).
    async fn setup_images(
        env: &GzEnv,
        headnode: bool,
    ) -> Result<Vec<(String, ImageUuid)>, GzOpError> {
        let services = env
            .apis
            .sapi
            .list_agent_services()
            .await
            .map_err(|err| GzOpError::Services { err })?;
        let catalog = crate::catalog::Catalog::builtin();
        Ok(catalog
            .default_set(headnode)
            .into_iter()
            .filter_map(|c| {
                services
                    .iter()
                    .find(|s| s.name == c.name)
                    .and_then(|s| s.image_uuid())
                    .map(|i| (c.name.clone(), i))
            })
            .collect())
    }

    async fn install_no_sapi(
        index: Arc<StandinCache>,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> Result<ComponentResult, GzOpError> {
        let (manifest, bytes) = Self::fetch(&env, image).await?;
        let compression = manifest
            .file()
            .map(|f| f.compression)
            .unwrap_or(Compression::Gzip);
        let (package, version) = Self::unpack_metadata(image, compression, &bytes)?;
        let version = if version.is_empty() {
            manifest.version.clone()
        } else {
            version
        };
        let before = read_component(&target.root.join(AGENTS_DIR).join(&package));
        let instance = Self::write_component(&target.root, &package, &version, image, None, false)?;
        index.update(
            &target.root,
            &package,
            Some(AgentEntry {
                name: package.clone(),
                version: version.clone(),
                image_uuid: Some(image),
                uuid: Some(instance),
            }),
        );
        Ok(ComponentResult {
            name: manifest.name,
            action: if before.is_some() {
                ComponentAction::Upgraded
            } else {
                ComponentAction::Installed
            },
            from_image: before.and_then(|b| b.image_uuid),
            image_uuid: Some(image),
            version: Some(version),
            instance_uuid: Some(instance),
            elapsed_ms: 0,
        })
    }
}

/// Read one mockcloud agent directory into a `server.agents` entry: name
/// from `package.json` (else the directory), version, image and instance.
fn read_component(dir: &Path) -> Option<AgentEntry> {
    let pj: serde_json::Value = std::fs::read(dir.join("package.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())?;
    let dir_name = dir.file_name()?.to_string_lossy().into_owned();
    let image_uuid = std::fs::read_to_string(dir.join("image_uuid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let uuid = std::fs::read_to_string(dir.join("instance_uuid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some(AgentEntry {
        name: pj["name"].as_str().map(str::to_string).unwrap_or(dir_name),
        version: pj["version"].as_str().unwrap_or("").to_string(),
        image_uuid,
        uuid,
    })
}

impl GzOps for MockcloudGz {
    fn prepare(&self, target: &GzTarget, seeded: &[SeededComponent]) -> Result<(), GzOpError> {
        let sysinfo_path = target.root.join(SYSINFO_FILE);
        if sysinfo_path.exists() {
            return Ok(());
        }
        let agents = target.root.join(AGENTS_DIR);
        // No sysinfo yet: anything here is from an interrupted prepare.
        if agents.exists() {
            std::fs::remove_dir_all(&agents).map_err(io_err("remove", &agents))?;
        }
        std::fs::create_dir_all(&agents).map_err(io_err("create", &agents))?;
        for c in seeded {
            Self::write_component(
                &target.root,
                &c.package,
                &c.version,
                c.image_uuid,
                Some(c.instance_uuid),
                true,
            )?;
        }
        let mut text = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
        serde::Serialize::serialize(&Self::sysinfo(target), &mut ser)
            .map_err(|e| GzOpError::Failed(format!("cannot encode sysinfo: {e}")))?;
        // Written last: its presence marks a prepared server.
        write_atomic(&sysinfo_path, &text)?;
        self.index.set_root(
            &target.root,
            seeded
                .iter()
                .map(|c| {
                    let entry = AgentEntry {
                        name: c.package.clone(),
                        version: c.version.clone(),
                        image_uuid: Some(c.image_uuid),
                        uuid: Some(c.instance_uuid),
                    };
                    (c.package.clone(), entry)
                })
                .collect(),
        );
        Ok(())
    }

    fn install(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> BoxFuture<'static, Result<(), GzOpError>> {
        let index = self.index.clone();
        Box::pin(async move {
            Self::install_one(index, env, target, image)
                .await
                .map(|_| ())
        })
    }

    fn uninstall(
        &self,
        _env: Arc<GzEnv>,
        target: GzTarget,
        names: Vec<String>,
    ) -> BoxFuture<'static, Result<(), GzOpError>> {
        let index = self.index.clone();
        Box::pin(async move {
            for n in &names {
                Self::remove_one(&index, &target.root, n)?;
            }
            Ok(())
        })
    }

    fn report(&self, target: GzTarget) -> BoxFuture<'static, Result<AgentsReport, GzOpError>> {
        let index = self.index.clone();
        Box::pin(async move { Ok(Self::report_cached(&index, &target)) })
    }

    fn run(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'static, ExecuteResult> {
        Box::pin(Self::run_cli(self.index.clone(), env, target, argv, vars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::imagebuild::{ImageSpec, build};

    #[test]
    fn unpacks_only_metadata_and_checks_uuid() {
        let cat = Catalog::builtin();
        for c in cat.iter() {
            let img = build(&ImageSpec::for_component(c, "1.0.0"));
            let comp = img.manifest.files[0].compression;
            let (name, version) =
                MockcloudGz::unpack_metadata(img.manifest.uuid, comp, &img.file).unwrap();
            assert_eq!(name, c.package_name());
            assert!(
                version.starts_with("1.0.0") || c.name == "gz-tools",
                "{c}: {version}"
            );
            let other = ImageUuid::from_u128(7);
            let err = MockcloudGz::unpack_metadata(other, comp, &img.file).unwrap_err();
            assert!(err.to_string().contains("not a valid agent image"), "{err}");
        }
    }

    #[test]
    fn prepare_writes_seeded_layout_and_report_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = GzTarget {
            server_uuid: ServerUuid::from_u128(1),
            hostname: "cn0001".into(),
            headnode: false,
            datacenter: "coal".into(),
            admin_ip: "10.99.99.10".into(),
            root: dir.path().join("s"),
        };
        let seeded = vec![SeededComponent {
            name: "marlin-agent".into(),
            package: "marlin".into(),
            version: "1.0.0".into(),
            image_uuid: ImageUuid::from_u128(2),
            instance_uuid: InstanceUuid::from_u128(3),
        }];
        let gz = MockcloudGz::new();
        gz.prepare(&target, &seeded).unwrap();
        // Idempotent: a second prepare does not rewrite anything.
        gz.prepare(&target, &[]).unwrap();
        assert_eq!(
            MockcloudGz::report_cached(&gz.index, &target),
            MockcloudGz::report_sync(&target)
        );
        let report = MockcloudGz::report_sync(&target);
        assert_eq!(report.agents.len(), 1);
        assert_eq!(report.agents[0].name, "marlin");
        assert_eq!(report.agents[0].uuid, Some(InstanceUuid::from_u128(3)));
        std::fs::create_dir_all(target.root.join("agents/broken")).unwrap();
        let report = MockcloudGz::report_sync(&target);
        assert_eq!(report.errors.len(), 1);
        assert_eq!(report.errors[0].name, "broken");
    }
}
