//! One `agentsadm gz` run on one server: settings, the server lock, recovery
//! of interrupted transactions, per-server ordering and concurrency, and the
//! `GzResult` / `AgentsReport` documents.
//!
//! Ordering (design.md): core components run one at a time in catalog order
//! (agents_core, config-agent, then the parallel-safe set, cn-agent last);
//! parallel-safe components of one run install concurrently. The first
//! failing group stops the run; components already done stay done.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::{ApiConfig, ApiError, CnapiClient, ImgapiClient, SapiClient};
use crate::catalog::{Catalog, Component, ComponentKind, Placement};
use crate::ids::{ImageUuid, ServerUuid};
use crate::remote::{AgentsReport, ComponentAction, ComponentResult, GzFailure, GzResult};

use super::adopt::{self, Adoption};
use super::fetch::{self, FetchError, FetchOptions, ImageSource, ResolvedImage};
use super::fsutil;
use super::hooks::HookEnv;
use super::kinds::{self, Footprint, StagedVersion};
use super::lock::{LockError, ServerLock};
use super::mockcloud::MockServer;
use super::package::PackageJson;
use super::paths::GzPaths;
use super::platform::{self, Platform, PlatformError};
use super::setup::{SetupSource, setup_dir_sources};
use super::txn::{self, Op, SapiTarget, TxnEnv, TxnFailure};
use super::unpack::UnpackOptions;
use crate::error::error_chain;

/// Test knob: abort the process at this checkpoint, or with `wait:<name>`
/// stop there until killed (see [`super::test_checkpoint`]).
pub const CRASH_AT_ENV: &str = "AGENTSADM_TEST_CRASH_AT";
/// Test knob: unpacking fails with "disk full" after this many bytes.
pub const UNPACK_LIMIT_ENV: &str = "AGENTSADM_TEST_UNPACK_LIMIT";

/// How a server's global zone is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Layout {
    /// A Triton global zone (`/` or a rooted directory).
    #[default]
    Smartdc,
    /// A mockcloud tree: `<root>/servers/<uuid>/agents/<name>/...`.
    Mockcloud,
}

/// Everything a run needs, resolved from the command line or given by the
/// simulator.
#[derive(Clone, Debug)]
pub struct GzSettings {
    /// `/` on a real GZ; a directory for the rooted platform; the mockcloud
    /// root for [`Layout::Mockcloud`].
    pub root: PathBuf,
    pub layout: Layout,
    /// Overrides sysinfo's UUID (required for mockcloud).
    pub server_uuid: Option<ServerUuid>,
    /// Overrides sysinfo's `Boot Parameters.headnode`.
    pub headnode: Option<bool>,
    pub no_sapi: bool,
    pub no_cnapi: bool,
    /// Reinstall even when the image is already installed.
    pub force: bool,
    pub hook_timeout: Duration,
    pub lock_wait: Duration,
    pub imgapi_url: Option<String>,
    pub sapi_url: Option<String>,
    pub cnapi_url: Option<String>,
    pub api: ApiConfig,
    /// Ready-made API clients to use instead of building them from the
    /// URLs (and `api`): the simulator shares one connection pool across
    /// thousands of runs rather than building three HTTP clients per run.
    pub clients: Option<crate::api::Apis>,
    /// Extra environment for hooks (and the test knobs).
    pub env: BTreeMap<String, String>,
    pub catalog: Catalog,
    /// A platform to use instead of the one the root implies (tests).
    pub platform: Option<Arc<dyn Platform>>,
    /// Download retries, backoff and read timeout.
    pub fetch: FetchOptions,
    /// The command line to hand to the agentsadm-install SMF service when
    /// cn-agent asks to replace itself.
    pub job_argv: Option<Vec<String>>,
}

impl GzSettings {
    /// Defaults for a root: smartdc layout, SAPI and CNAPI on, 10 min hook
    /// timeout, 5 min lock wait.
    pub fn new(root: impl Into<PathBuf>) -> GzSettings {
        GzSettings {
            root: root.into(),
            layout: Layout::Smartdc,
            server_uuid: None,
            headnode: None,
            no_sapi: false,
            no_cnapi: false,
            force: false,
            hook_timeout: Duration::from_secs(600),
            lock_wait: Duration::from_secs(300),
            imgapi_url: None,
            sapi_url: None,
            cnapi_url: None,
            api: ApiConfig::default(),
            clients: None,
            env: BTreeMap::new(),
            catalog: Catalog::builtin(),
            platform: None,
            fetch: FetchOptions::default(),
            job_argv: None,
        }
    }

    /// A test knob or setting from the run's environment, else the process's.
    pub fn knob(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
            .filter(|v| !v.is_empty())
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum GzError {
    #[error(
        "cannot identify the server at {root} (outside a SmartOS global zone, pass --root DIR with a sysinfo.json, or --server-uuid)"
    )]
    Platform {
        root: PathBuf,
        #[source]
        err: PlatformError,
    },
    #[error("the mockcloud layout needs --server-uuid (the server directory under {root}/servers)")]
    NoServerUuid { root: PathBuf },
    #[error(transparent)]
    Lock(#[from] Box<LockError>),
    #[error(transparent)]
    Recover(#[from] txn::RecoverError),
    #[error("no {api} URL: pass {flag} or set {env}{alt}")]
    NoUrl {
        api: &'static str,
        flag: &'static str,
        env: &'static str,
        alt: &'static str,
    },
    #[error("invalid API URL")]
    BadUrl {
        #[source]
        err: Box<ApiError>,
    },
}

impl GzError {
    pub fn step(&self) -> &'static str {
        match self {
            GzError::Platform { .. } | GzError::NoServerUuid { .. } => "sysinfo",
            GzError::Lock(_) => "lock",
            GzError::Recover(_) => "recover",
            GzError::NoUrl { .. } | GzError::BadUrl { .. } => "config",
        }
    }

    pub fn to_failure(&self) -> GzFailure {
        GzFailure {
            component: None,
            step: self.step().to_string(),
            message: error_chain(self),
        }
    }
}

/// An open run on one server.
pub struct GzSession {
    settings: GzSettings,
    paths: GzPaths,
    mock: Option<MockServer>,
    platform: Arc<dyn Platform>,
    server: ServerUuid,
    headnode: bool,
    imgapi: Option<ImgapiClient>,
    sapi: Option<SapiClient>,
    cnapi: Option<CnapiClient>,
    hook_env: HookEnv,
    crash_at: Option<String>,
    _lock: Option<ServerLock>,
    /// Notes for the result (recovery).
    notes: Vec<String>,
}

impl std::fmt::Debug for GzSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GzSession")
            .field("root", &self.settings.root)
            .field("server", &self.server)
            .finish()
    }
}

impl GzSession {
    /// Identify the server, take its lock (when `lock`), recover interrupted
    /// transactions and build the API clients.
    pub async fn open(settings: GzSettings, lock: bool) -> Result<GzSession, GzError> {
        let paths = GzPaths::new(&settings.root);
        let (platform, mock): (Arc<dyn Platform>, Option<MockServer>) = match settings.layout {
            Layout::Smartdc => {
                let p: Arc<dyn Platform> = match &settings.platform {
                    Some(p) => p.clone(),
                    None if settings.root == Path::new("/") => Arc::new(platform::SmartOs),
                    None => Arc::new(platform::Rooted::new(&settings.root)),
                };
                (p, None)
            }
            Layout::Mockcloud => {
                let uuid = settings.server_uuid.ok_or_else(|| GzError::NoServerUuid {
                    root: settings.root.clone(),
                })?;
                let m = MockServer::new(&settings.root, uuid);
                let p: Arc<dyn Platform> = match &settings.platform {
                    Some(p) => p.clone(),
                    None => Arc::new(platform::Mockcloud::new(m.dir())),
                };
                (p, Some(m))
            }
        };
        let sysinfo = platform.sysinfo();
        let (server, headnode) = match (settings.server_uuid, sysinfo) {
            (Some(u), Ok(s)) => (u, settings.headnode.unwrap_or(s.headnode)),
            (Some(u), Err(_)) => (u, settings.headnode.unwrap_or(false)),
            (None, Ok(s)) => (s.uuid, settings.headnode.unwrap_or(s.headnode)),
            (None, Err(err)) => {
                return Err(GzError::Platform {
                    root: settings.root.clone(),
                    err,
                });
            }
        };
        let (imgapi, sapi, cnapi) = clients(&settings, platform.as_ref())?;
        let crash_at = settings.knob(CRASH_AT_ENV);
        let hook_env = HookEnv {
            prefix: paths.prefix(),
            extra: settings
                .env
                .iter()
                .filter(|(k, _)| !k.starts_with("AGENTSADM_TEST_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            timeout: settings.hook_timeout,
        };
        let mut session = GzSession {
            settings,
            paths,
            mock,
            platform,
            server,
            headnode,
            imgapi,
            sapi,
            cnapi,
            hook_env,
            crash_at,
            _lock: None,
            notes: Vec::new(),
        };
        if lock {
            let lock_file = match &session.mock {
                Some(m) => m.lock_file(),
                None => session.paths.lock_file(),
            };
            session._lock = Some(
                ServerLock::acquire(&lock_file, session.settings.lock_wait)
                    .await
                    .map_err(Box::new)?,
            );
            session.recover()?;
        }
        Ok(session)
    }

    /// Reinstall even when the image is already installed.
    pub fn set_force(&mut self, force: bool) {
        self.settings.force = force;
    }

    pub fn server(&self) -> ServerUuid {
        self.server
    }

    pub fn headnode(&self) -> bool {
        self.headnode
    }

    /// The server's sysinfo (UUID, hostname, headnode), as the platform
    /// reads it.
    pub fn sysinfo(&self) -> Result<platform::Sysinfo, PlatformError> {
        self.platform.sysinfo()
    }

    pub fn paths(&self) -> &GzPaths {
        &self.paths
    }

    fn recover(&mut self) -> Result<(), GzError> {
        if let Some(m) = &self.mock {
            self.notes.extend(m.recover());
            return Ok(());
        }
        let env = self.txn_env();
        let recovered = txn::recover(&env)?;
        for r in recovered {
            let what = if r.finished {
                "finished"
            } else {
                "rolled back"
            };
            let mut note = format!(
                "{}: {what} a {:?} interrupted in an earlier run",
                r.component, r.op
            )
            .replace("Install", "install")
            .replace("Remove", "removal")
            .replace("Rollback", "rollback");
            if !r.errors.is_empty() {
                note.push_str(&format!(" (with errors: {})", r.errors.join("; ")));
            }
            self.notes.push(note);
        }
        Ok(())
    }

    fn log_done(&self, r: &ComponentResult) {
        tracing::info!(
            server = %self.server,
            component = %r.name,
            action = ?r.action,
            image = r.image_uuid.map(|i| i.to_string()).unwrap_or_default(),
            from_image = r.from_image.map(|i| i.to_string()).unwrap_or_default(),
            elapsed_ms = r.elapsed_ms,
            "component done"
        );
    }

    fn log_failure(&self, f: &GzFailure) {
        // The command line prints the failure itself (one line); the log
        // file keeps the structured record.
        tracing::error!(
            target: crate::log::FILE_ONLY_TARGET,
            server = %self.server,
            component = f.component.as_deref().unwrap_or(""),
            step = %f.step,
            error = %f.message,
            "component failed"
        );
    }

    fn sapi_target(&self) -> Option<SapiTarget<'_>> {
        if self.settings.no_sapi {
            return None;
        }
        self.sapi.as_ref().map(|client| SapiTarget {
            client,
            server: self.server,
        })
    }

    fn txn_env(&self) -> TxnEnv<'_> {
        TxnEnv {
            paths: &self.paths,
            platform: self.platform.as_ref(),
            hooks: &self.hook_env,
            crash_at: self.crash_at.as_deref(),
            sapi: self.sapi_target(),
        }
    }

    fn result(&mut self) -> GzResult {
        GzResult {
            server_uuid: self.server,
            components: Vec::new(),
            error: None,
            warnings: std::mem::take(&mut self.notes),
        }
    }

    /// SAPI and CNAPI must be known unless turned off.
    fn require_apis(&self) -> Result<(), GzFailure> {
        if !self.settings.no_sapi && self.sapi.is_none() {
            return Err(GzError::NoUrl {
                api: "SAPI",
                flag: "--sapi-url",
                env: "SAPI_URL",
                alt: ", or pass --no-sapi before SAPI exists",
            }
            .to_failure());
        }
        if !self.settings.no_cnapi && self.cnapi.is_none() {
            return Err(GzError::NoUrl {
                api: "CNAPI",
                flag: "--cnapi-url",
                env: "CNAPI_URL",
                alt: ", or pass --no-cnapi before CNAPI exists",
            }
            .to_failure());
        }
        Ok(())
    }

    /// Drop the cached download of a replaced image.
    fn forget_download(&self, old: Option<ImageUuid>, keep: Option<ImageUuid>) {
        if let Some(old) = old.filter(|o| Some(*o) != keep) {
            let _ = std::fs::remove_file(self.paths.downloads_dir().join(format!("{old}.file")));
        }
    }

    fn fetch_options(&self, component: &Component) -> FetchOptions {
        let mut o = self.settings.fetch.clone();
        o.downloads = Some(self.paths.downloads_dir());
        o.unpack = UnpackOptions {
            single_top: true,
            expected_top: Some(component.package_name().to_string()),
            write_limit: self
                .settings
                .knob(UNPACK_LIMIT_ENV)
                .and_then(|v| v.parse().ok()),
            crash_at: self.crash_at.clone(),
        };
        o
    }

    // -----------------------------------------------------------------------
    // install

    /// Install or upgrade the images in `sources`.
    pub async fn install(&mut self, sources: &[ImageSource]) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let mut resolved = Vec::new();
        for s in sources {
            match fetch::resolve(s, self.imgapi.as_ref()).await {
                Ok(r) => resolved.push(r),
                Err(e) => {
                    result.error = Some(failure(None, e.step(), &e, None));
                    return result;
                }
            }
        }
        let plan = match self.plan(resolved) {
            Ok(p) => p,
            Err(f) => {
                result.error = Some(f);
                return result;
            }
        };
        if let Some(handoff) = self.handoff(&plan) {
            match handoff {
                Ok(note) => result.warnings.push(note),
                Err(f) => result.error = Some(f),
            }
            return result;
        }
        self.run_groups(plan, &mut result).await;
        self.post_report(&mut result).await;
        result
    }

    /// Check manifests against the catalog and this server, refuse
    /// duplicates, and order the work.
    fn plan(
        &self,
        resolved: Vec<ResolvedImage>,
    ) -> Result<Vec<(Component, ResolvedImage)>, GzFailure> {
        let mut seen = BTreeSet::new();
        let mut plan = Vec::new();
        for r in resolved {
            let c = fetch::check_manifest(&r.manifest, &self.settings.catalog)
                .map_err(|e| failure(None, e.step(), &e, None))?
                .clone();
            if !seen.insert(c.name.clone()) {
                return Err(GzFailure {
                    component: Some(c.name.clone()),
                    step: "resolve".into(),
                    message: format!(
                        "{} is named twice; install one image per component per run",
                        c.name
                    ),
                });
            }
            if c.placement == Placement::HeadnodeOnly && !self.headnode {
                return Err(GzFailure {
                    component: Some(c.name.clone()),
                    step: "resolve".into(),
                    message: format!(
                        "{} is headnode-only and server {} is not a headnode (pass --headnode if it is)",
                        c.name, self.server
                    ),
                });
            }
            plan.push((c, r));
        }
        plan.sort_by(|a, b| a.0.order.cmp(&b.0.order).then(a.0.name.cmp(&b.0.name)));
        Ok(plan)
    }

    /// cn-agent cannot replace itself from inside its own SMF contract
    /// (stopping it kills us): hand the whole job to the agentsadm-install
    /// transient service and return.
    fn handoff(&self, plan: &[(Component, ResolvedImage)]) -> Option<Result<String, GzFailure>> {
        let fmri = self.settings.knob("SMF_FMRI")?;
        let own = plan
            .iter()
            .map(|(c, _)| c)
            .find(|c| c.smf_services.contains(&fmri))?;
        if self.mock.is_some() {
            return None;
        }
        let Some(argv) = &self.settings.job_argv else {
            return Some(Err(GzFailure {
                component: Some(own.name.clone()),
                step: "handoff".into(),
                message: format!(
                    "cannot replace {} from inside its own SMF service {fmri}",
                    own.name
                ),
            }));
        };
        let job = self.paths.state_dir().join("job.json");
        let text =
            serde_json::to_vec_pretty(&serde_json::json!({ "argv": argv })).unwrap_or_default();
        let launched = fsutil::write_atomic(&job, &text)
            .map_err(|e| e.to_string())
            .and_then(|_| {
                self.platform
                    .launch_transient_job(&job)
                    .map_err(|e| error_chain(&e))
            });
        Some(match launched {
            Ok(()) => Ok(format!(
                "{} cannot be replaced from inside its own SMF service ({fmri}); the job was handed to {}; wait for CNAPI server.agents to show the new image",
                own.name,
                platform::INSTALL_SERVICE_FMRI
            )),
            Err(message) => Err(GzFailure {
                component: Some(own.name.clone()),
                step: "handoff".into(),
                message: format!(
                    "cannot hand the job to {}: {message}",
                    platform::INSTALL_SERVICE_FMRI
                ),
            }),
        })
    }

    /// Run `plan` in groups: each core component alone, all parallel-safe
    /// ones together. Stops after the first group with a failure.
    async fn run_groups(&self, plan: Vec<(Component, ResolvedImage)>, result: &mut GzResult) {
        let mut groups: Vec<Vec<(Component, ResolvedImage)>> = Vec::new();
        for item in plan {
            let alone = item.0.order.runs_alone();
            match groups.last_mut() {
                Some(g) if !alone && !g[0].0.order.runs_alone() => g.push(item),
                _ => groups.push(vec![item]),
            }
        }
        for group in groups {
            let outcomes =
                futures::future::join_all(group.iter().map(|(c, img)| self.install_one(c, img)))
                    .await;
            let mut failed = false;
            for outcome in outcomes {
                match outcome {
                    Ok(done) => {
                        self.log_done(&done.result);
                        result.warnings.extend(done.notes);
                        result.components.push(done.result);
                    }
                    Err(f) => {
                        self.log_failure(&f);
                        if result.error.is_none() {
                            result.error = Some(f);
                        } else {
                            result.warnings.push(format!(
                                "{} also failed at {}: {}",
                                f.component.as_deref().unwrap_or("?"),
                                f.step,
                                f.message
                            ));
                        }
                        failed = true;
                    }
                }
            }
            if failed {
                break;
            }
        }
    }

    async fn install_one(&self, c: &Component, image: &ResolvedImage) -> Result<Done, GzFailure> {
        let start = Instant::now();
        if let Some(m) = &self.mock {
            let out = m
                .install(
                    c,
                    image,
                    self.imgapi.as_ref(),
                    &self.settings.fetch,
                    self.sapi_target(),
                    self.settings.force,
                )
                .await
                .map_err(|e| failure(Some(&c.name), e.step(), &e, None))?;
            return Ok(mock_done(c, out, start));
        }
        let uuid = image.uuid();
        let current = kinds::current(&self.paths, c)
            .map_err(|e| failure(Some(&c.name), "resolve", &e, None))?;
        let from = current.as_ref().and_then(|f| f.image_uuid);
        if from == Some(uuid) && !self.settings.force {
            return self.unchanged(c, image, current.as_ref(), start).await;
        }
        let txn_dir = self.paths.staging_dir().join(txn::new_txn_name(&c.name));
        let options = self.fetch_options(c);
        let cached = self.paths.downloads_dir().join(format!("{uuid}.file"));
        let fetched =
            fetch::fetch_and_unpack(image, self.imgapi.as_ref(), &txn_dir.join("new"), &options)
                .await;
        let fetched = match fetched {
            Ok(f) => {
                // The image is downloaded and verified (and, from IMGAPI,
                // kept in the download cache); nothing is swapped yet.
                self.txn_env().checkpoint("downloaded");
                f
            }
            Err(e) => {
                let _ = fsutil::remove_any(&txn_dir);
                if matches!(&e, FetchError::Unpack { err, .. } if err.is_bad_archive()) {
                    // A verified file of an unacceptable image: do not keep it.
                    let _ = std::fs::remove_file(&cached);
                }
                return Err(failure(
                    Some(&c.name),
                    e.step(),
                    &e,
                    nothing_changed(&current),
                ));
            }
        };
        let staged = match kinds::stage(
            c,
            &image.manifest,
            &txn_dir,
            self.headnode,
            &fetched.digests.sha256,
        ) {
            Ok(s) => s,
            Err(e) => {
                let _ = fsutil::remove_any(&txn_dir);
                let _ = std::fs::remove_file(&cached);
                return Err(failure(
                    Some(&c.name),
                    "validate",
                    &e,
                    nothing_changed(&current),
                ));
            }
        };
        let env = self.txn_env();
        env.checkpoint("staged");
        let outcome = txn::install(&env, c, Op::Install, &txn_dir, &staged, current.clone()).await;
        let outcome = outcome.map_err(|f| {
            let _ = fsutil::remove_any(&txn_dir);
            txn_failure(c, &f, &current)
        })?;
        // The cache keeps the installed image's file (a retry or reinstall
        // needs no download), not the replaced one's.
        self.forget_download(from, Some(uuid));
        let mut notes = Vec::new();
        adoption_note(c, outcome.adoption.as_ref(), &mut notes);
        if c.kind == ComponentKind::Sdcadm {
            let conf = self.paths.at(kinds::SDCADM_CONF);
            if let Err(e) = kinds::record_sdcadm_server(&conf, self.server()) {
                // sdcadm works without it (it asks sysinfo); say so, keep
                // the install.
                notes.push(format!(
                    "sdcadm: serverUuid not recorded: {}; sdcadm will look it up itself",
                    crate::error::error_chain(&e)
                ));
            }
        }
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: if from.is_some() || current.is_some() {
                    ComponentAction::Upgraded
                } else {
                    ComponentAction::Installed
                },
                from_image: from,
                image_uuid: Some(uuid),
                version: Some(staged.footprint.version.clone()),
                instance_uuid: outcome.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }

    /// The image is already installed: make sure the instance UUID exists
    /// and SAPI knows it, change nothing else.
    async fn unchanged(
        &self,
        c: &Component,
        image: &ResolvedImage,
        current: Option<&Footprint>,
        start: Instant,
    ) -> Result<Done, GzFailure> {
        let path = self.paths.at(kinds::instance_rel(c));
        let instance = match fsutil::read_trimmed(&path) {
            Ok(Some(s)) if !s.is_empty() => s.parse().map_err(|_| GzFailure {
                component: Some(c.name.clone()),
                step: "instance".into(),
                message: format!(
                    "instance UUID file {} holds {s:?}, which is not a UUID; fix or remove it",
                    path.display()
                ),
            })?,
            _ => {
                let u = crate::ids::InstanceUuid::new_v4();
                fsutil::write_atomic(&path, format!("{u}\n").as_bytes())
                    .map_err(|e| failure(Some(&c.name), "instance", &e, None))?;
                u
            }
        };
        let mut notes = Vec::new();
        if let Some(s) = self.sapi_target() {
            let a = adopt::adopt(s.client, &c.name, instance, s.server, image.uuid())
                .await
                .map_err(|e| failure(Some(&c.name), "sapi", &e, None))?;
            adoption_note(c, Some(&a), &mut notes);
        }
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::Unchanged,
                from_image: Some(image.uuid()),
                image_uuid: Some(image.uuid()),
                version: current.map(|f| f.version.clone()).filter(|v| !v.is_empty()),
                instance_uuid: Some(instance),
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }

    // -----------------------------------------------------------------------
    // remove

    /// Remove components by name.
    pub async fn remove(&mut self, names: &[String]) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let mut plan = Vec::new();
        let mut seen = BTreeSet::new();
        for n in names {
            match self.settings.catalog.require(n) {
                Ok(c) => {
                    if seen.insert(c.name.clone()) {
                        plan.push(c.clone());
                    }
                }
                Err(e) => {
                    result.error = Some(failure(Some(n), "resolve", &e, None));
                    return result;
                }
            }
        }
        // Reverse install order: cn-agent first, agents_core last.
        plan.sort_by(|a, b| b.order.cmp(&a.order).then(a.name.cmp(&b.name)));
        for c in plan {
            match self.remove_one(&c).await {
                Ok(done) => {
                    self.log_done(&done.result);
                    result.warnings.extend(done.notes);
                    result.components.push(done.result);
                }
                Err(f) => {
                    self.log_failure(&f);
                    result.error = Some(f);
                    break;
                }
            }
        }
        self.post_report(&mut result).await;
        result
    }

    async fn remove_one(&self, c: &Component) -> Result<Done, GzFailure> {
        let start = Instant::now();
        if let Some(m) = &self.mock {
            let out = m
                .remove(c, self.sapi_target())
                .await
                .map_err(|e| failure(Some(&c.name), e.step(), &e, None))?;
            return Ok(mock_done(c, out, start));
        }
        let current = kinds::current(&self.paths, c)
            .map_err(|e| failure(Some(&c.name), "resolve", &e, None))?;
        let Some(fp) = current else {
            return Ok(Done {
                result: ComponentResult {
                    name: c.name.clone(),
                    action: ComponentAction::Absent,
                    from_image: None,
                    image_uuid: None,
                    version: None,
                    instance_uuid: None,
                    elapsed_ms: start.elapsed().as_millis() as u64,
                },
                notes: Vec::new(),
            });
        };
        if !fp.apm && fp.tree.is_none() && fp.overlay.is_empty() {
            return Err(GzFailure {
                component: Some(c.name.clone()),
                step: "resolve".into(),
                message: format!(
                    "{} was installed without agentsadm (no record in {}), so which files are its is unknown; nothing was removed",
                    c.name,
                    kinds::record_rel(&c.name)
                ),
            });
        }
        let txn_dir = self.paths.staging_dir().join(txn::new_txn_name(&c.name));
        let env = self.txn_env();
        let from = fp.image_uuid;
        let version = fp.version.clone();
        let out = txn::remove(&env, c, &txn_dir, fp.clone())
            .await
            .map_err(|f| {
                let _ = fsutil::remove_any(&txn_dir);
                txn_failure(c, &f, &Some(fp))
            })?;
        self.forget_download(from, None);
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::Removed,
                from_image: from,
                image_uuid: None,
                version: Some(version).filter(|v| !v.is_empty()),
                instance_uuid: out.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes: Vec::new(),
        })
    }

    // -----------------------------------------------------------------------
    // rollback

    /// Put back the version kept from the last upgrade of `name`.
    pub async fn rollback(&mut self, name: &str) -> GzResult {
        let mut result = self.result();
        if let Err(f) = self.require_apis() {
            result.error = Some(f);
            return result;
        }
        let c = match self.settings.catalog.require(name) {
            Ok(c) => c.clone(),
            Err(e) => {
                result.error = Some(failure(Some(name), "resolve", &e, None));
                return result;
            }
        };
        match self.rollback_one(&c).await {
            Ok(done) => {
                self.log_done(&done.result);
                result.warnings.extend(done.notes);
                result.components.push(done.result);
            }
            Err(f) => {
                self.log_failure(&f);
                result.error = Some(f);
            }
        }
        self.post_report(&mut result).await;
        result
    }

    async fn rollback_one(&self, c: &Component) -> Result<Done, GzFailure> {
        let start = Instant::now();
        if let Some(m) = &self.mock {
            let out = m
                .rollback(c, self.sapi_target())
                .await
                .map_err(|e| failure(Some(&c.name), e.step(), &e, None))?;
            return Ok(mock_done(c, out, start));
        }
        let prev = self.paths.previous_dir().join(&c.name);
        let no_previous = || GzFailure {
            component: Some(c.name.clone()),
            step: "rollback".into(),
            message: format!(
                "{} has no previous version kept on server {} (one is kept by each upgrade until the next one)",
                c.name, self.server
            ),
        };
        let fp: Footprint = std::fs::read(prev.join("footprint.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(no_previous)?;
        let current = kinds::current(&self.paths, c)
            .map_err(|e| failure(Some(&c.name), "resolve", &e, None))?;
        let txn_dir = self.paths.staging_dir().join(txn::new_txn_name(&c.name));
        let staged = self.stage_previous(c, &prev, &txn_dir, fp).map_err(|e| {
            let _ = fsutil::remove_any(&txn_dir);
            failure(Some(&c.name), "rollback", &e, nothing_changed(&current))
        })?;
        let env = self.txn_env();
        let from = current.as_ref().and_then(|f| f.image_uuid);
        let outcome = txn::install(&env, c, Op::Rollback, &txn_dir, &staged, current.clone())
            .await
            .map_err(|f| {
                let _ = fsutil::remove_any(&txn_dir);
                txn_failure(c, &f, &current)
            })?;
        let mut notes = Vec::new();
        adoption_note(c, outcome.adoption.as_ref(), &mut notes);
        Ok(Done {
            result: ComponentResult {
                name: c.name.clone(),
                action: ComponentAction::RolledBack,
                from_image: from,
                image_uuid: staged.footprint.image_uuid,
                version: Some(staged.footprint.version.clone()).filter(|v| !v.is_empty()),
                instance_uuid: outcome.instance,
                elapsed_ms: start.elapsed().as_millis() as u64,
            },
            notes,
        })
    }

    /// Copy the kept previous version into a transaction directory.
    fn stage_previous(
        &self,
        c: &Component,
        prev: &Path,
        txn_dir: &Path,
        mut fp: Footprint,
    ) -> std::io::Result<StagedVersion> {
        std::fs::create_dir_all(txn_dir)?;
        let mut tree_src = None;
        let mut package = None;
        if fp.tree.is_some() {
            let src = prev.join("tree");
            if !src.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} is missing", src.display()),
                ));
            }
            let dst = txn_dir.join("new").join(c.package_name());
            std::fs::create_dir_all(txn_dir.join("new"))?;
            fsutil::copy_tree(&src, &dst)?;
            if fp.apm {
                package = PackageJson::read(&dst).ok().flatten();
                fp.smf_manifests = kinds::template_outputs(&dst)?
                    .into_iter()
                    .map(|(_, o)| o)
                    .collect();
            }
            tree_src = Some(dst);
        }
        let mut overlay_src = None;
        let root_src = prev.join("root");
        if root_src.is_dir() {
            let dst = txn_dir.join("root");
            fsutil::copy_tree(&root_src, &dst)?;
            fp.overlay = kinds::overlay_files(&dst)?;
            overlay_src = Some(dst);
        } else {
            fp.overlay.clear();
        }
        Ok(StagedVersion {
            footprint: fp,
            tree_src,
            overlay_src,
            package,
        })
    }

    // -----------------------------------------------------------------------
    // setup

    /// Install the default set of this server's role.
    pub async fn setup(&mut self, source: &SetupSource) -> GzResult {
        let set: Vec<Component> = self
            .settings
            .catalog
            .default_set(self.headnode)
            .into_iter()
            .cloned()
            .collect();
        let mut sources = Vec::new();
        let mut skipped = Vec::new();
        match source {
            SetupSource::Dir(dir) => match setup_dir_sources(dir, &set) {
                Ok((found, missing)) => {
                    sources = found;
                    skipped = missing
                        .into_iter()
                        .map(|n| format!("{n}: no image in {}", dir.display()))
                        .collect();
                }
                Err(message) => {
                    let mut r = self.result();
                    r.error = Some(GzFailure {
                        component: None,
                        step: "resolve".into(),
                        message,
                    });
                    return r;
                }
            },
            SetupSource::Imgapi => {
                let Some(sapi) = self.sapi.as_ref().filter(|_| !self.settings.no_sapi) else {
                    let mut r = self.result();
                    r.error = Some(GzFailure {
                        component: None,
                        step: "resolve".into(),
                        message: "gz setup --source imgapi reads each agent service's params.image_uuid from SAPI: pass --sapi-url (and not --no-sapi), or use --source DIR".into(),
                    });
                    return r;
                };
                match sapi.list_agent_services().await {
                    Ok(services) => {
                        for c in &set {
                            match services
                                .iter()
                                .find(|s| s.name == c.name)
                                .and_then(|s| s.image_uuid())
                            {
                                Some(img) => sources.push(ImageSource::Imgapi(img)),
                                None => skipped.push(format!(
                                    "{}: no SAPI agent service with params.image_uuid",
                                    c.name
                                )),
                            }
                        }
                    }
                    Err(e) => {
                        let mut r = self.result();
                        r.error = Some(failure(None, "resolve", &e, None));
                        return r;
                    }
                }
            }
        }
        if sources.is_empty() {
            let mut r = self.result();
            r.error = Some(GzFailure {
                component: None,
                step: "resolve".into(),
                message: format!(
                    "no images found for the default set: {}",
                    skipped.join("; ")
                ),
            });
            return r;
        }
        let mut r = self.install(&sources).await;
        r.warnings
            .extend(skipped.into_iter().map(|s| format!("not installed: {s}")));
        r
    }

    // -----------------------------------------------------------------------
    // report

    /// What is installed on this server.
    pub fn report(&self) -> AgentsReport {
        match &self.mock {
            Some(m) => m.report(self.server),
            None => super::report::report(&self.paths, &self.settings.catalog, self.server),
        }
    }

    /// POST the report to CNAPI (`server.agents`).
    pub async fn post(&self, report: &AgentsReport) -> Result<(), ApiError> {
        match &self.cnapi {
            Some(c) => c.update_server_agents(self.server, &report.agents).await,
            None => Ok(()),
        }
    }

    /// Whether a CNAPI client is configured.
    pub fn has_cnapi(&self) -> bool {
        self.cnapi.is_some()
    }

    async fn post_report(&self, result: &mut GzResult) {
        if self.settings.no_cnapi {
            return;
        }
        let report = self.report();
        if let Err(e) = self.post(&report).await {
            result.warnings.push(format!(
                "the installed set was not reported to CNAPI ({}); run `agentsadm gz report --post` later",
                error_chain(&e)
            ));
        }
    }
}

/// A finished component and notes for the result.
pub struct Done {
    pub result: ComponentResult,
    pub notes: Vec<String>,
}

fn mock_done(c: &Component, out: super::mockcloud::MockOutcome, start: Instant) -> Done {
    let mut notes = Vec::new();
    adoption_note(c, out.adoption.as_ref(), &mut notes);
    Done {
        result: ComponentResult {
            name: c.name.clone(),
            action: out.action,
            from_image: out.from_image,
            image_uuid: out.image_uuid,
            version: out.version,
            instance_uuid: out.instance,
            elapsed_ms: start.elapsed().as_millis() as u64,
        },
        notes,
    }
}

fn adoption_note(c: &Component, a: Option<&Adoption>, notes: &mut Vec<String>) {
    if a == Some(&Adoption::NoService) {
        notes.push(format!(
            "{}: not adopted into SAPI: there is no agent service named {:?} (not managed through SAPI here)",
            c.name, c.name
        ));
    }
}

/// The "what is left" part of a failure message.
fn nothing_changed(current: &Option<Footprint>) -> Option<String> {
    Some(match current {
        Some(fp) => format!("nothing changed; {} is still installed", describe(fp)),
        None => "nothing changed; it was not installed before and is not now".to_string(),
    })
}

fn describe(fp: &Footprint) -> String {
    match (fp.version.is_empty(), fp.image_uuid) {
        (false, Some(i)) => format!("version {} (image {i})", fp.version),
        (true, Some(i)) => format!("image {i}"),
        (false, None) => format!("version {}", fp.version),
        (true, None) => "the previous version".to_string(),
    }
}

/// A failure as the result document carries it.
fn failure(
    component: Option<&str>,
    step: &str,
    err: &dyn std::error::Error,
    after: Option<String>,
) -> GzFailure {
    let mut message = error_chain(err);
    if let Some(a) = after {
        message.push_str("; ");
        message.push_str(&a);
    }
    GzFailure {
        component: component.map(str::to_string),
        step: step.to_string(),
        message,
    }
}

fn txn_failure(c: &Component, f: &TxnFailure, current: &Option<Footprint>) -> GzFailure {
    let after = if !f.rolled_back {
        nothing_changed(current)
    } else if f.rollback_errors.is_empty() {
        Some(match current {
            Some(fp) => format!("rolled back; {} is installed as before", describe(fp)),
            None => "rolled back; it is not installed".to_string(),
        })
    } else {
        Some(format!(
            "ROLLBACK INCOMPLETE, check the server by hand: {}",
            f.rollback_errors.join("; ")
        ))
    };
    failure(Some(&c.name), &f.error.step(), &f.error, after)
}

/// The API clients a run may use (each absent when its URL is unknown).
type Clients = (
    Option<ImgapiClient>,
    Option<SapiClient>,
    Option<CnapiClient>,
);

fn clients(settings: &GzSettings, platform: &dyn Platform) -> Result<Clients, GzError> {
    if let Some(a) = &settings.clients {
        return Ok((
            Some(a.imgapi.clone()),
            Some(a.sapi.clone()),
            Some(a.cnapi.clone()),
        ));
    }
    let mut imgapi = settings.imgapi_url.clone();
    let mut sapi = settings.sapi_url.clone();
    let mut cnapi = settings.cnapi_url.clone();
    if (imgapi.is_none() || sapi.is_none() || cnapi.is_none())
        && let Some(cfg) = platform.sdc_config()
    {
        let s = |k: &str| cfg.get(k).and_then(|v| v.as_str()).map(str::to_string);
        if imgapi.is_none() {
            imgapi = s("imgapi_domain").map(|d| format!("http://{d}"));
        }
        if sapi.is_none() {
            sapi = s("sapi_domain").map(|d| format!("http://{d}"));
        }
        if cnapi.is_none()
            && let (Some(dc), Some(dns)) = (s("datacenter_name"), s("dns_domain"))
        {
            cnapi = Some(format!("http://cnapi.{dc}.{dns}"));
        }
    }
    let bad = |err| GzError::BadUrl { err: Box::new(err) };
    Ok((
        imgapi
            .map(|u| ImgapiClient::new(&u, settings.api.clone()))
            .transpose()
            .map_err(bad)?,
        sapi.map(|u| SapiClient::new(&u, settings.api.clone()))
            .transpose()
            .map_err(bad)?,
        cnapi
            .map(|u| CnapiClient::new(&u, settings.api.clone()))
            .transpose()
            .map_err(bad)?,
    ))
}
