//! Everything a command needs from outside its own arguments, resolved once
//! before any command runs (issue 31): the global flags, the environment,
//! the headnode's SDC config, the catalog, the updates server's URL,
//! sdcadm's lock path, the history and log directories, the operator's
//! name and the progress mode.
//!
//! Commands read these here and nowhere else: the environment is read in
//! this file and `lib.rs` only, and nothing here blocks the async runtime
//! (files through `spawn_blocking`, the SDC config through
//! `tokio::process`). `tests/architecture/cli.rs` keeps it so.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use agentsadm_api::{ApiConfig, Apis};
use agentsadm_orchestrate::history::recorder::{MIRROR_EVERY, command_line};
use agentsadm_orchestrate::history::{HistorySettings, HistoryStore, LocalHistory, SapiHistory};
use agentsadm_orchestrate::lock::{Login, SdcadmLockOptions};
use agentsadm_types::catalog::Catalog;

use crate::GlobalOpts;
use crate::progress::ProgressMode;

/// The headnode's SDC config script (`-json` prints it).
const SDC_CONFIG: &str = "/lib/sdc/config.sh";

/// What sdcadm leaves on a headnode: where it is installed, sdcadm's lock
/// applies.
const SDCADM_BUILDSTAMP: &str = "/opt/smartdc/sdcadm/etc/buildstamp";

/// The settings of one command line, resolved.
pub struct Settings {
    /// The global flags as given (API URLs from flags or the environment).
    pub global: GlobalOpts,
    /// Bars on an interactive stderr, lines elsewhere, quiet with `-q`.
    pub progress: ProgressMode,
    /// The API clients, or why there are none (said by the commands that
    /// need them, not by those that do not).
    apis: Result<Apis, String>,
    /// The SAPI URL alone (`adopt --local`: CNAPI and IMGAPI may not
    /// exist yet).
    sapi_url: Option<String>,
    /// The component catalog (`--catalog`, else the built-in one), or why
    /// it could not be read.
    catalog: Result<Catalog, String>,
    /// `UPDATES_URL` (when set and not empty).
    pub updates_env: Option<String>,
    /// sdcadm's `updatesServerUrl` on this headnode, and its file.
    pub sdcadm_updates: Option<(String, PathBuf)>,
    /// sdcadm's lock on this host: `AGENTSADM_SDCADM_LOCK` (empty: none),
    /// else sdcadm's own path where sdcadm is installed.
    pub sdcadm_lock: Option<PathBuf>,
    /// This headnode's run journals.
    pub history_dir: Option<PathBuf>,
    /// Where runs log by default.
    pub log_dir: Option<PathBuf>,
    /// Who is asking: the operator behind sudo, else the login name.
    pub operator: String,
    /// The login name this process runs as (`USER`, else `LOGNAME`, else
    /// root), which the lock and the history name their owner by
    /// (`user@host:pid`): the orchestrator reads no environment.
    pub login: Login,
    /// The command line, for the history.
    argv: Vec<String>,
}

impl Deref for Settings {
    type Target = GlobalOpts;
    fn deref(&self) -> &GlobalOpts {
        &self.global
    }
}

/// A variable of the environment, when set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `/lib/sdc/config.sh -json` on a headnode, through `tokio::process`
/// (never blocking the runtime); `None` elsewhere or when it fails.
async fn read_sdc_config() -> Option<serde_json::Value> {
    if !tokio::fs::try_exists(SDC_CONFIG).await.unwrap_or(false) {
        return None;
    }
    let out = tokio::process::Command::new("/bin/bash")
        .arg(SDC_CONFIG)
        .arg("-json")
        .output()
        .await
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Blocking work (small file reads) off the runtime's threads.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// The API URLs: flags (or their environment variables), else the
/// headnode's SDC config.
struct Urls {
    sapi: Option<String>,
    cnapi: Option<String>,
    imgapi: Option<String>,
}

async fn urls(g: &GlobalOpts) -> Urls {
    let mut urls = Urls {
        sapi: g.sapi_url.clone(),
        cnapi: g.cnapi_url.clone(),
        imgapi: g.imgapi_url.clone(),
    };
    if (urls.sapi.is_none() || urls.cnapi.is_none() || urls.imgapi.is_none())
        && let Some(cfg) = read_sdc_config().await
    {
        let s = |k: &str| cfg.get(k).and_then(|v| v.as_str()).map(str::to_string);
        if urls.sapi.is_none() {
            urls.sapi = s("sapi_domain").map(|d| format!("http://{d}"));
        }
        if urls.imgapi.is_none() {
            urls.imgapi = s("imgapi_domain").map(|d| format!("http://{d}"));
        }
        if urls.cnapi.is_none() {
            urls.cnapi = match (s("datacenter_name"), s("dns_domain")) {
                (Some(dc), Some(dns)) => Some(format!("http://cnapi.{dc}.{dns}")),
                _ => None,
            };
        }
    }
    urls
}

fn missing(what: &str, flag: &str, env: &str) -> String {
    format!(
        "no {what} URL: pass {flag} or set {env} (on a headnode it is read from /lib/sdc/config.sh)"
    )
}

fn apis(urls: &Urls) -> Result<Apis, String> {
    let sapi = urls
        .sapi
        .as_deref()
        .ok_or_else(|| missing("SAPI", "--sapi-url", "SAPI_URL"))?;
    let cnapi = urls
        .cnapi
        .as_deref()
        .ok_or_else(|| missing("CNAPI", "--cnapi-url", "CNAPI_URL"))?;
    let imgapi = urls
        .imgapi
        .as_deref()
        .ok_or_else(|| missing("IMGAPI", "--imgapi-url", "IMGAPI_URL"))?;
    Apis::new(imgapi, sapi, cnapi, ApiConfig::default())
        .context("invalid API URL")
        .map_err(|e| format!("{e:#}"))
}

impl Settings {
    /// Resolve everything once: `argv` is the command line as typed.
    pub async fn resolve(global: GlobalOpts, argv: Vec<String>) -> Settings {
        let urls = urls(&global).await;
        let catalog = match global.catalog.clone() {
            Some(path) => off_runtime(move || Catalog::load(&path).map_err(|e| e.to_string()))
                .await
                .unwrap_or_else(|| Err("cannot read the catalog".to_string())),
            None => Ok(Catalog::builtin()),
        };
        let sdcadm_updates = off_runtime(|| agentsadm_platform::sdcadm_updates_url(Path::new("/")))
            .await
            .flatten();
        let sdcadm_lock = match std::env::var_os("AGENTSADM_SDCADM_LOCK") {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(PathBuf::from(p)),
            None => tokio::fs::try_exists(SDCADM_BUILDSTAMP)
                .await
                .unwrap_or(false)
                .then(|| SdcadmLockOptions::headnode(Duration::ZERO).path),
        };
        let (history_dir, log_dir) = off_runtime(|| {
            (
                LocalHistory::default_dir(),
                agentsadm_types::log::default_log_dir(),
            )
        })
        .await
        .unwrap_or_default();
        let operator = ["SUDO_USER", "LOGNAME", "USER"]
            .iter()
            .find_map(|v| var(v))
            .unwrap_or_else(|| "root".into());
        // The process's own login, not the operator behind sudo: the
        // lock's owner string says which process holds it, where.
        let login = Login(
            ["USER", "LOGNAME"]
                .iter()
                .find_map(|v| var(v))
                .unwrap_or_else(|| "root".into()),
        );
        let progress = ProgressMode::detect(
            global.json,
            global.quiet,
            std::env::var_os("AGENTSADM_NO_PROGRESS").is_some(),
        );
        Settings {
            progress,
            apis: apis(&urls),
            sapi_url: urls.sapi,
            catalog,
            updates_env: var("UPDATES_URL"),
            sdcadm_updates,
            sdcadm_lock,
            history_dir,
            log_dir,
            operator,
            login,
            argv,
            global,
        }
    }

    /// Settings with nothing read from outside this process (unit tests).
    #[cfg(test)]
    pub(crate) fn offline() -> Settings {
        Settings {
            global: GlobalOpts::default(),
            progress: ProgressMode::Lines,
            apis: Err("offline".to_string()),
            sapi_url: None,
            catalog: Ok(Catalog::builtin()),
            updates_env: None,
            sdcadm_updates: None,
            sdcadm_lock: None,
            history_dir: None,
            log_dir: None,
            operator: "root".to_string(),
            login: Login::default(),
            argv: Vec::new(),
        }
    }

    /// The API clients (an error naming the missing URL when there are
    /// none).
    pub fn apis(&self) -> anyhow::Result<Apis> {
        self.apis.clone().map_err(anyhow::Error::msg)
    }

    /// The command line as typed (the program's name first).
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The SAPI URL alone.
    pub fn sapi_url(&self) -> anyhow::Result<&str> {
        self.sapi_url
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!(missing("SAPI", "--sapi-url", "SAPI_URL")))
    }

    /// The component catalog.
    pub fn load_catalog(&self) -> anyhow::Result<Catalog> {
        self.catalog.clone().map_err(anyhow::Error::msg)
    }

    /// sdcadm's lock on this host, waited for up to `wait`.
    pub fn sdcadm_lock(&self, wait: Duration) -> Option<SdcadmLockOptions> {
        self.sdcadm_lock
            .clone()
            .map(|path| SdcadmLockOptions { path, wait })
    }

    /// Where a run is recorded: this headnode's journals and SAPI's copy.
    pub fn history_settings(&self) -> HistorySettings {
        HistorySettings {
            local: self.history_dir.clone().map(LocalHistory::new),
            mirror: true,
            command: command_line(&self.argv),
            mirror_every: MIRROR_EVERY,
        }
    }

    /// The history as this command line reaches it: this headnode's
    /// journals and, when its URL is known, SAPI's copy.
    pub fn history_store(&self) -> HistoryStore {
        HistoryStore {
            local: self.history_dir.clone().map(LocalHistory::new),
            sapi: self
                .apis
                .as_ref()
                .ok()
                .map(|a| SapiHistory::new(a.sapi.clone())),
        }
    }

    /// A mark (hold, disable) made now by this operator.
    pub fn mark_now(&self, reason: Option<String>) -> agentsadm_plan::Mark {
        agentsadm_plan::Mark {
            by: self.operator.clone(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            reason: reason.filter(|r| !r.trim().is_empty()),
        }
    }
}
