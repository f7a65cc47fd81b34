//! One `agentsadm gz` run on one server: settings, the server lock, recovery
//! of interrupted transactions, per-server ordering and concurrency, and the
//! `GzResult` / `AgentsReport` documents.
//!
//! Ordering (design.md): core components run one at a time in catalog order
//! (agents_core, config-agent, then the parallel-safe set, cn-agent last);
//! parallel-safe components of one run install concurrently. The first
//! failing group stops the run; components already done stay done.
//!
//! The session is the same for every layout ([`super::layout`]): it asks
//! the layout where things are and how to stage an image, and runs each
//! change as a transaction ([`super::txn`]).
//!
//! - `install`: `gz install` (planning, the cn-agent hand-off, groups);
//! - `remove`: `gz remove`; `rollback`: `gz rollback`;
//! - `setup`: `gz setup`; `report`: the report and posting it to CNAPI;
//! - `health`: `gz health` (the health gate of an installed component).

mod handoff;
mod health;
mod install;
mod keep_off;
pub mod platform;
mod remove;
mod report;
mod rollback;
mod setup;

use agentsadm_types::component::{ComponentName, ComponentVersion};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentsadm_api::ApiConfig;

use agentsadm_api::ApiError;

use agentsadm_api::CnapiClient;

use agentsadm_api::ImgapiClient;

use agentsadm_api::SapiClient;
use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::ComponentResult;
use agentsadm_api::remote::GzFailure;
use agentsadm_api::remote::GzResult;
use agentsadm_platform as os;
use agentsadm_platform::Platform;
use agentsadm_platform::PlatformError;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

use super::adopt::Adoption;
use super::fetch::FetchOptions;
use super::fsutil;
use super::hooks::HookEnv;
use super::kinds::CurrentError;
use super::kinds::Footprint;
use super::kinds::claims;
use super::kinds::claims::Claims;
use super::layout::Layout;
use super::layout::LayoutKind;
use super::layout::mockcloud::MockcloudGz;
use super::layout::triton::TritonGz;
use super::lock::LockError;
use super::lock::ServerLock;
use super::paths::GzPaths;
use super::step::Step;
use super::txn;
use super::txn::SapiTarget;
use super::txn::TxnEnv;
use super::txn::TxnFailure;
use agentsadm_types::error::error_chain;

pub use platform::PlatformKind;
pub use platform::for_command_line as platform_for_command_line;

/// Test knobs: settings that only tests turn, read from the run's
/// environment. They exist only with the `test-knobs` feature, which the
/// simulator's crate turns on; the server's build has neither the knobs nor
/// their names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// `AGENTSADM_TEST_CRASH_AT`: abort the process at this checkpoint, or
    /// with `wait:<name>` stop there until killed (see
    /// [`super::test_checkpoint`]).
    CrashAt,
    /// `AGENTSADM_TEST_HOST`: what host this is (`smartos` or `other`),
    /// instead of the operating system the binary was built for.
    Host,
    /// `AGENTSADM_TEST_UNPACK_LIMIT`: unpacking fails with "disk full"
    /// after this many bytes.
    UnpackLimit,
    /// `AGENTSADM_TEST_NO_SPACE_AT`: the named step fails as a full
    /// filesystem would (`ENOSPC`): `keep-previous`, keeping the version an
    /// upgrade replaced.
    NoSpaceAt,
    /// `AGENTSADM_TEST_HEADNODE_ROOT`: the rooted directory that stands for
    /// this headnode's own global zone (`/` in the server's build), read
    /// by `list` and `check` for what sdcadm changed behind agentsadm.
    HeadnodeRoot,
    /// `AGENTSADM_TEST_PLATFORM`: the platform of a command line's run
    /// (`smartos` or `rooted`), see [`platform`].
    Platform,
}

impl Knob {
    /// The environment variable that sets the knob.
    #[cfg(feature = "test-knobs")]
    pub fn env_name(self) -> &'static str {
        match self {
            Knob::CrashAt => "AGENTSADM_TEST_CRASH_AT",
            Knob::Host => "AGENTSADM_TEST_HOST",
            Knob::UnpackLimit => "AGENTSADM_TEST_UNPACK_LIMIT",
            Knob::NoSpaceAt => "AGENTSADM_TEST_NO_SPACE_AT",
            Knob::HeadnodeRoot => "AGENTSADM_TEST_HEADNODE_ROOT",
            Knob::Platform => "AGENTSADM_TEST_PLATFORM",
        }
    }

    /// The knob's value in this process's environment (always `None` in a
    /// build without the knobs).
    pub fn from_process(self) -> Option<String> {
        #[cfg(feature = "test-knobs")]
        {
            std::env::var(self.env_name())
                .ok()
                .filter(|v| !v.is_empty())
        }
        #[cfg(not(feature = "test-knobs"))]
        {
            None
        }
    }

    /// Whether `name` is a knob's variable (kept from package hooks).
    fn is_knob_env(name: &str) -> bool {
        #[cfg(feature = "test-knobs")]
        {
            [
                Knob::CrashAt,
                Knob::Host,
                Knob::UnpackLimit,
                Knob::NoSpaceAt,
                Knob::HeadnodeRoot,
                Knob::Platform,
            ]
            .iter()
            .any(|k| k.env_name() == name)
        }
        #[cfg(not(feature = "test-knobs"))]
        {
            let _ = name;
            false
        }
    }
}

/// Everything a run needs, resolved from the command line or given by the
/// simulator.
#[derive(Clone, Debug)]
pub struct GzSettings {
    /// `/` on a real GZ, or another directory holding a GZ's files; the
    /// mockcloud root for [`LayoutKind::Mockcloud`].
    pub root: PathBuf,
    pub layout: LayoutKind,
    /// The operating system a smartdc-layout run drives: chosen by the
    /// caller, never implied by `root` ([`platform`]).
    pub platform_kind: PlatformKind,
    /// Overrides sysinfo's UUID (required for mockcloud).
    pub server_uuid: Option<ServerUuid>,
    /// Overrides sysinfo's `Boot Parameters.headnode`.
    pub headnode: Option<bool>,
    pub no_sapi: bool,
    pub no_cnapi: bool,
    /// Reinstall even when the image is already installed.
    pub force: bool,
    /// The caller says this run is a child of cn-agent (its
    /// command_execute): stopping cn-agent would kill it, so work that
    /// stops cn-agent is handed off (see `handoff.rs`).
    pub inside_cn_agent: bool,
    pub hook_timeout: Duration,
    pub lock_wait: Duration,
    pub imgapi_url: Option<String>,
    pub sapi_url: Option<String>,
    pub cnapi_url: Option<String>,
    pub api: ApiConfig,
    /// Ready-made API clients to use instead of building them from the
    /// URLs (and `api`): the simulator shares one connection pool across
    /// thousands of runs rather than building three HTTP clients per run.
    pub clients: Option<agentsadm_api::Apis>,
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
    /// The health gate of installs (`--min-healthy`, `--health-timeout`);
    /// `None`: no gate (the simulator's model of cn-agent's
    /// `agent_install` task, which has none).
    pub health: Option<super::health::HealthGate>,
    /// `--expect-current`: the image each installed component must have
    /// before the run (`Some(None)`: none installed), else the install is
    /// refused as changed since the plan.
    pub expect_current: Option<Option<ImageUuid>>,
    /// `--expect NAME=IMAGE|none`: the same per component, over
    /// `expect_current` (the orchestrator sends one server's components in
    /// one run, each with the image its plan saw).
    pub expect_each: BTreeMap<ComponentName, Option<ImageUuid>>,
}

impl GzSettings {
    /// Defaults for a root on `platform`: smartdc layout, SAPI and CNAPI
    /// on, 10 min hook timeout, 5 min lock wait, the health gate's
    /// defaults for the platform
    /// ([`super::health::HealthGate::for_platform`]).
    pub fn new(root: impl Into<PathBuf>, platform: PlatformKind) -> GzSettings {
        let root: PathBuf = root.into();
        GzSettings {
            root,
            layout: LayoutKind::Smartdc,
            platform_kind: platform,
            server_uuid: None,
            headnode: None,
            no_sapi: false,
            no_cnapi: false,
            force: false,
            inside_cn_agent: false,
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
            health: Some(super::health::HealthGate::for_platform(platform)),
            expect_current: None,
            expect_each: BTreeMap::new(),
        }
    }

    /// A test knob or setting from the run's environment, else the process's.
    pub fn knob(&self, knob: Knob) -> Option<String> {
        #[cfg(feature = "test-knobs")]
        {
            let name = knob.env_name();
            self.env
                .get(name)
                .cloned()
                .or_else(|| std::env::var(name).ok())
                .filter(|v| !v.is_empty())
        }
        #[cfg(not(feature = "test-knobs"))]
        {
            let _ = knob;
            None
        }
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
    pub fn step(&self) -> Step {
        match self {
            GzError::Platform { .. } | GzError::NoServerUuid { .. } => Step::Sysinfo,
            GzError::Lock(_) => Step::Lock,
            GzError::Recover(_) => Step::Recover,
            GzError::NoUrl { .. } | GzError::BadUrl { .. } => Step::Config,
        }
    }

    pub fn to_failure(&self) -> GzFailure {
        GzFailure {
            component: None,
            step: self.step(),
            message: error_chain(self),
        }
    }
}

/// An open run on one server.
pub struct GzSession {
    settings: GzSettings,
    layout: Arc<dyn Layout>,
    platform: Arc<dyn Platform>,
    server: ServerUuid,
    headnode: bool,
    imgapi: Option<ImgapiClient>,
    sapi: Option<SapiClient>,
    cnapi: Option<CnapiClient>,
    hook_env: HookEnv,
    crash_at: Option<String>,
    /// `AGENTSADM_TEST_NO_SPACE_AT`.
    no_space_at: Option<String>,
    _lock: Option<ServerLock>,
    /// Notes for the result (recovery).
    notes: Vec<String>,
}

impl std::fmt::Debug for GzSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GzSession")
            .field("root", &self.settings.root)
            .field("layout", &self.layout.kind())
            .field("server", &self.server)
            .finish()
    }
}

impl GzSession {
    /// Identify the server, take its lock (when `lock`), recover interrupted
    /// transactions and build the API clients.
    pub async fn open(mut settings: GzSettings, lock: bool) -> Result<GzSession, GzError> {
        // A relative root works like the absolute one it names: hooks run
        // with another working directory and get paths under the root.
        if settings.root.is_relative()
            && let Ok(abs) = std::path::absolute(&settings.root)
        {
            settings.root = abs;
        }
        let (layout, platform): (Arc<dyn Layout>, Arc<dyn Platform>) = match settings.layout {
            LayoutKind::Smartdc => {
                let p: Arc<dyn Platform> = match settings.platform_kind {
                    PlatformKind::SmartOs => Arc::new(os::SmartOs),
                    PlatformKind::Rooted => Arc::new(os::Rooted::new(&settings.root)),
                };
                (Arc::new(TritonGz::new(&settings.root)), p)
            }
            LayoutKind::Mockcloud => {
                let uuid = settings.server_uuid.ok_or_else(|| GzError::NoServerUuid {
                    root: settings.root.clone(),
                })?;
                let m = MockcloudGz::new(&settings.root, uuid);
                let p = Arc::new(os::Mockcloud::new(m.dir()));
                (Arc::new(m), p)
            }
        };
        let platform = settings.platform.clone().unwrap_or(platform);
        let sysinfo = platform.sysinfo().await;
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
        let (imgapi, sapi, cnapi) = clients(&settings, platform.as_ref()).await?;
        let crash_at = settings.knob(Knob::CrashAt);
        let no_space_at = settings.knob(Knob::NoSpaceAt);
        let hook_env = HookEnv {
            prefix: layout.paths().prefix(),
            extra: settings
                .env
                .iter()
                .filter(|(k, _)| !Knob::is_knob_env(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            timeout: settings.hook_timeout,
            skip: hooks_skipped(&settings),
        };
        let mut notes = Vec::new();
        if let Some(why) = &hook_env.skip {
            notes.push(why.clone());
        }
        let mut session = GzSession {
            settings,
            layout,
            platform,
            server,
            headnode,
            imgapi,
            sapi,
            cnapi,
            hook_env,
            crash_at,
            no_space_at,
            _lock: None,
            notes,
        };
        if lock {
            session._lock = Some(
                ServerLock::acquire(&session.paths().lock_file(), session.settings.lock_wait)
                    .await
                    .map_err(Box::new)?,
            );
            session.recover().await?;
            session.finish_keep_off().await;
        }
        Ok(session)
    }

    /// Reinstall even when the image is already installed.
    pub fn set_force(&mut self, force: bool) {
        self.settings.force = force;
    }

    /// `--expect-current` for this run's installs.
    pub fn set_expect_current(&mut self, expect: Option<Option<ImageUuid>>) {
        self.settings.expect_current = expect;
    }

    /// `--expect NAME=IMAGE|none` for this run's installs, per component.
    pub fn set_expect_each(&mut self, each: BTreeMap<ComponentName, Option<ImageUuid>>) {
        self.settings.expect_each = each;
    }

    pub fn server(&self) -> ServerUuid {
        self.server
    }

    pub fn headnode(&self) -> bool {
        self.headnode
    }

    /// The server's sysinfo (UUID, hostname, headnode), as the platform
    /// reads it.
    pub async fn sysinfo(&self) -> Result<os::Sysinfo, PlatformError> {
        self.platform.sysinfo().await
    }

    pub fn paths(&self) -> &GzPaths {
        self.layout.paths()
    }

    /// A crash point outside a transaction (the test knob; nothing in a
    /// build without it set).
    fn checkpoint(&self, name: &str) {
        super::test_checkpoint(self.crash_at.as_deref(), name);
    }

    async fn recover(&mut self) -> Result<(), GzError> {
        let recovered = txn::recover(&self.txn_env()).await?;
        for r in recovered {
            let what = if r.finished {
                "finished"
            } else {
                "rolled back"
            };
            let mut note = format!(
                "{}: {what} a {} interrupted in an earlier run",
                r.component,
                r.op.noun()
            );
            if !r.errors.is_empty() {
                note.push_str(&format!(" (with errors: {})", r.errors.join("; ")));
            }
            self.notes.push(note);
        }
        Ok(())
    }

    /// What every other installed component claims (bins, SMF manifests
    /// and services), by component name. Blocking work on the pool.
    async fn others_claims(&self, c: &Component) -> BTreeMap<String, Claims> {
        if !self.layout.runs_services() {
            return BTreeMap::new();
        }
        let (layout, catalog, me) = (
            self.layout.clone(),
            self.settings.catalog.clone(),
            c.name.clone(),
        );
        blocking(move || {
            let paths = layout.paths().clone();
            catalog
                .iter()
                .filter(|o| o.name != me)
                .filter_map(|o| {
                    let fp = layout.current(o).ok().flatten()?;
                    Some((o.name.to_string(), claims::installed_claims(&paths, &fp)))
                })
                .collect()
        })
        .await
    }

    /// A failed transaction as the result carries it. When its rollback
    /// could not complete, the message says what is installed now and the
    /// one command that repairs it, and `broken/<component>.json` keeps
    /// that for `gz report` until a later transaction of `c` succeeds.
    async fn txn_failed(
        &self,
        c: &Component,
        f: &TxnFailure,
        before: &Option<Footprint>,
    ) -> GzFailure {
        if !f.rolled_back || f.rollback_errors.is_empty() {
            return txn_failure(c, f, before);
        }
        let now = self.current(c).await.ok().flatten();
        let installed = match &now {
            Some(fp) => format!("{} is in place, possibly incomplete", describe(fp)),
            None => "nothing of it is installed".to_string(),
        };
        let repair = match before.as_ref().and_then(|fp| fp.image_uuid) {
            Some(image) => format!("agentsadm gz install {image} --force"),
            None => format!("agentsadm gz remove {}", c.name),
        };
        let state = format!(
            "ROLLBACK INCOMPLETE ({}); now {installed}; repair with `{repair}`",
            f.rollback_errors.join("; ")
        );
        let marker = BrokenMarker {
            component: c.name.to_string(),
            message: state.clone(),
            repair,
        };
        let path = self.paths().broken_file(&c.name);
        let text = serde_json::to_vec_pretty(&marker).unwrap_or_default();
        if let Err(e) = blocking(move || fsutil::write_atomic(&path, &text)).await {
            tracing::error!(component = %c.name, error = %e, "cannot record the incomplete rollback");
        }
        failure(Some(&c.name), f.error.step(), &f.error, Some(state))
    }

    /// What is installed now for `c`, read off the runtime.
    async fn current(&self, c: &Component) -> Result<Option<Footprint>, CurrentError> {
        let (layout, c) = (self.layout.clone(), c.clone());
        blocking(move || layout.current(&c)).await
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
            target: agentsadm_types::log::FILE_ONLY_TARGET,
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
            layout: self.layout.as_ref(),
            platform: self.platform.as_ref(),
            hooks: &self.hook_env,
            crash_at: self.crash_at.as_deref(),
            no_space_at: self.no_space_at.as_deref(),
            sapi: self.sapi_target(),
            catalog: &self.settings.catalog,
            gate: None,
            others: None,
            concurrent: &[],
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
    async fn forget_download(&self, old: Option<ImageUuid>, keep: Option<ImageUuid>) {
        if let Some(old) = old.filter(|o| Some(*o) != keep) {
            let file = self.paths().downloads_dir().join(format!("{old}.file"));
            blocking(move || {
                let _ = std::fs::remove_file(file);
            })
            .await;
        }
    }
}

/// Whether the host is SmartOS (an illumos global zone), as built or as
/// the [`Knob::Host`] test knob says.
fn host_is_smartos(settings: &GzSettings) -> bool {
    match settings.knob(Knob::Host).as_deref() {
        Some("smartos") => true,
        Some(_) => false,
        None => cfg!(any(target_os = "illumos", target_os = "solaris")),
    }
}

/// Why hooks must not run for this run, if they must not: on a SmartOS
/// host the rooted platform is a copy of a GZ with a fake SMF (the
/// simulator's, a test's), but a package's hooks call `svcadm`, `svccfg`
/// and the like, which act on the real host's SMF whatever the root.
/// Elsewhere there is no SMF for them to reach, and they run with the
/// root's paths. On the SmartOS platform they run: the root's files and
/// the host's SMF are what the run drives.
fn hooks_skipped(settings: &GzSettings) -> Option<String> {
    if settings.layout != LayoutKind::Smartdc
        || settings.platform_kind != PlatformKind::Rooted
        || !host_is_smartos(settings)
    {
        return None;
    }
    Some(format!(
        "package hooks are not run: this is a SmartOS host and the root {} is a rooted copy with its own SMF, and hooks would act on this host's SMF, not the root's",
        settings.root.display()
    ))
}

/// Remove a transaction directory that never got a journal (a failure
/// before the swap), and its aside directory (`<state>/aside/<txn>`, next
/// to `<state>/staging`), which may hold the SMF manifests copied before.
async fn remove_txn_dir(txn_dir: &Path) {
    let dir = txn_dir.to_path_buf();
    blocking(move || {
        if let (Some(state), Some(name)) = (dir.parent().and_then(Path::parent), dir.file_name()) {
            let _ = super::fsutil::remove_any(&state.join("aside").join(name));
        }
        let _ = super::fsutil::remove_any(&dir);
    })
    .await;
}

/// `broken/<component>.json`: a rollback that could not complete.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct BrokenMarker {
    pub component: String,
    /// What failed and what is installed now.
    pub message: String,
    /// The one command that repairs it.
    pub repair: String,
}

/// A finished component and notes for the result.
pub struct Done {
    pub result: ComponentResult,
    pub notes: Vec<String>,
}

fn adoption_note(c: &Component, a: Option<&Adoption>, notes: &mut Vec<String>) {
    if a == Some(&Adoption::NoService) {
        notes.push(format!(
            "{}: not adopted into SAPI: there is no agent service named {:?}, so it is not managed through SAPI here (a headnode has none for gz-tools and sdcadm until 'agentsadm adopt' creates them); run 'agentsadm adopt' on the headnode to create the service and adopt this instance",
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
    component: Option<&ComponentName>,
    step: Step,
    err: &dyn std::error::Error,
    after: Option<String>,
) -> GzFailure {
    let mut message = error_chain(err);
    if let Some(a) = after {
        message.push_str("; ");
        message.push_str(&a);
    }
    GzFailure {
        component: component.cloned(),
        step,
        message,
    }
}

/// A component a command looked at and left as it is (`gz health`,
/// `gz disable|enable`): what is installed, unchanged.
fn unchanged(name: &ComponentName, current: &Footprint) -> ComponentResult {
    ComponentResult {
        name: name.clone(),
        action: ComponentAction::Unchanged,
        from_image: current.image_uuid,
        image_uuid: current.image_uuid,
        version: ComponentVersion::reported(&current.version),
        instance_uuid: None,
        elapsed_ms: 0,
    }
}

/// A failure with its own message (no error value behind it).
fn refusal(component: Option<&ComponentName>, step: Step, message: String) -> GzFailure {
    GzFailure {
        component: component.cloned(),
        step,
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
    failure(Some(&c.name), f.error.step(), &f.error, after)
}

/// The API clients a run may use (each absent when its URL is unknown).
type Clients = (
    Option<ImgapiClient>,
    Option<SapiClient>,
    Option<CnapiClient>,
);

async fn clients(settings: &GzSettings, platform: &dyn Platform) -> Result<Clients, GzError> {
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
        && let Some(cfg) = platform.sdc_config().await
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
            .map(|u| ImgapiClient::new(&u, settings.api.clone()).map_err(bad))
            .transpose()?,
        sapi.map(|u| SapiClient::new(&u, settings.api.clone()).map_err(bad))
            .transpose()?,
        cnapi
            .map(|u| CnapiClient::new(&u, settings.api.clone()).map_err(bad))
            .transpose()?,
    ))
}
