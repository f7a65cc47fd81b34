//! [`InstallerGz`]: the real GZ installer behind [`GzOps`], run in-process
//! against each mock server's directory, changing operations of one server
//! queued on an async mutex (module docs of [`super`]).

use agentsadm_types::component::ComponentName;
use agentsadm_types::error::error_chain;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;

use agentsadm_api::cnapi::AgentEntry;

use agentsadm_api::cnapi::ExecuteResult;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::remote::ComponentAction;
use agentsadm_api::remote::ComponentResult;
use agentsadm_api::remote::GzResult;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::layout::LayoutKind;
use agentsadm_gz::layout::mockcloud::MockcloudGz;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_gz::setup::SetupSource;
use agentsadm_platform::Platform;
use agentsadm_platform::Rooted;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

use super::jobs::JobService;

use super::GzEnv;
use super::GzLayout;
use super::GzOpError;
use super::GzOps;
use super::GzTarget;
use super::ImageLookup;
use super::SeededComponent;
use super::jobs::SimPlatform;
use super::template::Template;
use super::template::TemplateKey;

/// The real GZ installer behind [`GzOps`] (module docs of [`super`]).
#[derive(Debug)]
pub struct InstallerGz {
    layout: GzLayout,
    /// Where seed templates are installed (removed once read).
    scratch: PathBuf,
    catalog: Catalog,
    hook_timeout: Duration,
    /// Built templates by role and image set; each slot is locked while
    /// its template is built.
    templates: Mutex<HashMap<TemplateKey, TemplateSlot>>,
    built: AtomicU64,
    /// Changing operations queue per server here (module docs).
    queues: Mutex<HashMap<ServerUuid, Arc<tokio::sync::Mutex<()>>>>,
}

/// A template, once built; locked while it is being built.
type TemplateSlot = Arc<Mutex<Option<Arc<Template>>>>;

/// Commands that change a server (and so queue behind each other).
const CHANGING: [&str; 5] = ["install", "remove", "setup", "rollback", "run-job"];

impl InstallerGz {
    /// An installer for servers under `state_dir/servers`, with seed
    /// templates built in `state_dir/templates`.
    pub fn new(layout: GzLayout, state_dir: &Path) -> InstallerGz {
        InstallerGz {
            layout,
            scratch: state_dir.join("templates"),
            catalog: Catalog::builtin(),
            hook_timeout: Duration::from_secs(60),
            templates: Mutex::new(HashMap::new()),
            built: AtomicU64::new(0),
            queues: Mutex::new(HashMap::new()),
        }
    }

    pub fn layout(&self) -> GzLayout {
        self.layout
    }

    fn queue(&self, server: ServerUuid) -> Arc<tokio::sync::Mutex<()>> {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(server)
            .or_default()
            .clone()
    }

    /// The mockcloud root of a server directory `<root>/servers/<uuid>`.
    fn mockcloud_root(target: &GzTarget) -> Result<PathBuf, GzOpError> {
        let bad = || GzOpError::NotMockcloud {
            server: target.server_uuid,
            root: target.root.clone(),
        };
        let root = target
            .root
            .parent()
            .and_then(Path::parent)
            .ok_or_else(bad)?;
        if MockcloudGz::new(root, target.server_uuid).dir() != target.root {
            return Err(bad());
        }
        Ok(root.to_path_buf())
    }

    /// The options that point `agentsadm gz` at the server's GZ.
    fn address(&self, target: &GzTarget) -> Result<Vec<String>, GzOpError> {
        Ok(match self.layout {
            GzLayout::Rooted => vec!["--root".into(), target.root.display().to_string()],
            GzLayout::Mockcloud => vec![
                "--layout".into(),
                "mockcloud".into(),
                "--root".into(),
                Self::mockcloud_root(target)?.display().to_string(),
                "--server-uuid".into(),
                target.server_uuid.to_string(),
            ],
        })
    }

    /// Installer settings for one operation on `target` (reporting to
    /// CNAPI is left to the caller).
    pub(super) fn settings(
        &self,
        env: Option<&GzEnv>,
        target: &GzTarget,
    ) -> Result<GzSettings, GzOpError> {
        let mut s = match self.layout {
            GzLayout::Rooted => GzSettings::new(&target.root, PlatformKind::Rooted),
            GzLayout::Mockcloud => {
                let mut s = GzSettings::new(Self::mockcloud_root(target)?, PlatformKind::Rooted);
                s.layout = LayoutKind::Mockcloud;
                s
            }
        };
        s.server_uuid = Some(target.server_uuid);
        s.no_cnapi = true;
        s.hook_timeout = self.hook_timeout;
        s.catalog = self.catalog.clone();
        // Loopback: retry a broken download quickly.
        s.fetch.backoff = Duration::from_millis(20);
        if let Some(env) = env {
            s.imgapi_url = Some(env.imgapi_url.clone());
            s.sapi_url = Some(env.sapi_url.clone());
            s.cnapi_url = Some(env.cnapi_url.clone());
            s.clients = Some(env.apis.clone());
        }
        Ok(s)
    }

    /// A rooted server's SMF, with the unhealthy builds that apply to it.
    fn rooted(&self, env: &GzEnv, target: &GzTarget) -> Rooted {
        Rooted::with_faults(
            &target.root,
            env.faults.smf_faults(target.server_uuid, &self.catalog),
        )
    }

    /// The template for a role and image set, built on first use.
    fn template(
        &self,
        headnode: bool,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<Arc<Template>, GzOpError> {
        let key = TemplateKey::new(headnode, seeded);
        let slot = self
            .templates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = slot.as_ref() {
            return Ok(t.clone());
        }
        let n = self.built.fetch_add(1, Ordering::Relaxed);
        let dir = self.scratch.join(format!("{}-{n}", self.layout.as_str()));
        let built = Template::build(self, &key, &dir, images);
        let _ = agentsadm_gz::fsutil::remove_any(&dir);
        // Nothing is kept on disk (an empty directory only if in use).
        let _ = std::fs::remove_dir(&self.scratch);
        let t = Arc::new(built?);
        *slot = Some(t.clone());
        Ok(t)
    }

    /// A prepared server's directory with nothing installed.
    pub(super) fn prepare_empty(target: &GzTarget) -> Result<(), GzOpError> {
        let root = &target.root;
        std::fs::create_dir_all(root).map_err(prepare_err(target, "create", root))?;
        write_sysinfo(target)
    }
}

pub(super) fn prepare_err<'a>(
    target: &'a GzTarget,
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> GzOpError + 'a {
    move |err| GzOpError::Prepare {
        server: target.server_uuid,
        action,
        path: path.to_path_buf(),
        err,
    }
}

/// The sysinfo file mockcloud's create-server writes (4-space JSON), with
/// what the installer reads (`UUID`, `Hostname`, `Boot Parameters.headnode`).
fn sysinfo_json(target: &GzTarget) -> Vec<u8> {
    let v = json!({
        "UUID": target.server_uuid,
        "Hostname": target.hostname,
        "System Type": "Virtual",
        "SDC Version": "7.0",
        "Setup": "true",
        "Datacenter Name": target.datacenter,
        "Boot Parameters": {"headnode": if target.headnode { "true" } else { "false" }},
        "Admin IP": target.admin_ip,
    });
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    // Serializing a JSON value into memory cannot fail.
    let _ = Serialize::serialize(&v, &mut ser);
    text.push(b'\n');
    text
}

/// Write `sysinfo.json`, last: its presence marks a prepared server.
pub(super) fn write_sysinfo(target: &GzTarget) -> Result<(), GzOpError> {
    let path = target
        .root
        .join(agentsadm_gz::paths::SYSINFO_FILE)
        .to_path_buf();
    let tmp = target.root.join(".sysinfo.json.tmp");
    std::fs::write(&tmp, sysinfo_json(target)).map_err(prepare_err(target, "write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(prepare_err(target, "rename into", &path))
}

/// The GzResult's components, or its error as an operation error.
fn outcome(result: GzResult) -> Result<Vec<ComponentResult>, GzOpError> {
    match result.error {
        None => Ok(result.components),
        Some(f) => Err(GzOpError::Installer {
            component: f.component.map(String::from),
            step: f.step,
            message: f.message,
        }),
    }
}

/// `server.agents` after an installer run that did `results`, from the
/// list before it: the run's result document carries, for each component
/// it touched, exactly what the installer's report reads back (entry name
/// the package's, version, image, instance UUID), so the changed entries
/// are replaced and the rest kept, without reading the whole GZ again
/// (that read was most of a mock install's CPU).
pub fn apply_results(catalog: &Catalog, agents: &mut Vec<AgentEntry>, results: &[ComponentResult]) {
    for r in results {
        let name = catalog
            .get(&r.name)
            .map_or(&r.name, |c| c.package_name())
            .clone();
        agents.retain(|a| a.name != name);
        match r.action {
            ComponentAction::Removed | ComponentAction::Absent => {}
            ComponentAction::Installed
            | ComponentAction::Upgraded
            | ComponentAction::Unchanged
            | ComponentAction::RolledBack => agents.push(AgentEntry {
                name,
                version: r.version.clone().unwrap_or_default(),
                image_uuid: r.image_uuid,
                uuid: r.instance_uuid,
            }),
        }
    }
    agents.sort();
}

impl GzOps for InstallerGz {
    fn seeded_agents(
        &self,
        headnode: bool,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<Vec<AgentEntry>, GzOpError> {
        if seeded.is_empty() {
            return Ok(Vec::new());
        }
        let t = self.template(headnode, seeded, images)?;
        let instances = t.instance_map(seeded);
        Ok(t.report
            .agents
            .iter()
            .map(|a| {
                let mut a = a.clone();
                if let Some(u) = a.uuid.and_then(|u| instances.get(&u.to_string())) {
                    a.uuid = u.parse().ok();
                }
                a
            })
            .collect())
    }

    fn prepare(
        &self,
        target: &GzTarget,
        seeded: &[SeededComponent],
        images: ImageLookup<'_>,
    ) -> Result<(), GzOpError> {
        let sysinfo = target.root.join(agentsadm_gz::paths::SYSINFO_FILE);
        if sysinfo.exists() {
            return Ok(());
        }
        // No sysinfo yet: anything here is from an interrupted prepare.
        agentsadm_gz::fsutil::remove_any(&target.root).map_err(prepare_err(
            target,
            "clear",
            &target.root,
        ))?;
        if seeded.is_empty() {
            return Self::prepare_empty(target);
        }
        let t = self.template(target.headnode, seeded, images)?;
        t.write(target, seeded)
    }

    fn install(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        image: ImageUuid,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>> {
        // cn-agent's agent_install task: no health gate (the orchestrator
        // checks with `gz health` afterwards), the servers' SMF as it is.
        let settings = self.settings(Some(&env), &target).map(|mut s| {
            s.health = None;
            if self.layout == GzLayout::Rooted {
                s.platform = Some(Arc::new(self.rooted(&env, &target)));
            }
            s
        });
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            let _turn = queue.lock().await;
            outcome(agentsadm_gz::install(settings, &[ImageSource::Imgapi(image)]).await)
        })
    }

    fn uninstall(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        names: Vec<String>,
    ) -> BoxFuture<'static, Result<Vec<ComponentResult>, GzOpError>> {
        // cn-agent names agents by package; the installer by component.
        // Names of nothing agentsadm manages have nothing to remove.
        let components: Vec<ComponentName> = names
            .iter()
            .filter_map(|n| {
                self.catalog
                    .iter()
                    .find(|c| c.name == *n || c.package_name() == n)
                    .map(|c| c.name.clone())
            })
            .collect();
        // cn-agent's agents_uninstall leaves SAPI alone.
        let settings = self.settings(Some(&env), &target).map(|mut s| {
            s.no_sapi = true;
            s
        });
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            if components.is_empty() {
                return Ok(Vec::new());
            }
            let _turn = queue.lock().await;
            outcome(agentsadm_gz::uninstall(settings, &components).await)
        })
    }

    fn setup(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
    ) -> BoxFuture<'static, Result<(), GzOpError>> {
        let settings = self.settings(Some(&env), &target);
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            let settings = settings?;
            let _turn = queue.lock().await;
            outcome(agentsadm_gz::setup(settings, &SetupSource::Imgapi).await).map(|_| ())
        })
    }

    fn report(&self, target: GzTarget) -> BoxFuture<'static, Result<AgentsReport, GzOpError>> {
        let settings = self.settings(None, &target);
        Box::pin(async move {
            agentsadm_gz::report(settings?)
                .await
                .map_err(|err| GzOpError::Report {
                    server: target.server_uuid,
                    err,
                })
        })
    }

    fn cn_agent_view(
        &self,
        target: GzTarget,
    ) -> BoxFuture<'static, Result<Vec<AgentEntry>, GzOpError>> {
        if self.layout == GzLayout::Mockcloud {
            // The dummy backend reads `agents/*`, where every component of
            // a mockcloud server sits: what the installer reports.
            let report = self.report(target);
            return Box::pin(async move { Ok(report.await?.agents) });
        }
        Box::pin(async move {
            let root = target.root.clone();
            agentsadm_platform::blocking(move || super::cn_agent_view::read(&root))
                .await
                .map_err(|(path, err)| GzOpError::Refresh {
                    server: target.server_uuid,
                    path,
                    err,
                })
        })
    }

    fn settle(&self, target: &GzTarget) -> BoxFuture<'static, ()> {
        let queue = self.queue(target.server_uuid);
        Box::pin(async move {
            drop(queue.lock().await);
        })
    }

    fn agentsadm(&self, target: &GzTarget) -> Option<String> {
        let c = self
            .catalog
            .iter()
            .find(|c| c.kind == agentsadm_types::catalog::ComponentKind::Agentsadm)?;
        match self.layout {
            GzLayout::Rooted => {
                if !target
                    .root
                    .join(agentsadm_gz::kinds::AGENTSADM_BIN)
                    .is_file()
                {
                    return None;
                }
                let paths = agentsadm_gz::paths::GzPaths::new(&target.root);
                let current = agentsadm_gz::kinds::current(&paths, c).ok().flatten();
                Some(current.map(|f| f.version).unwrap_or_default())
            }
            GzLayout::Mockcloud => {
                let dir = target.root.join("agents").join(c.package_name());
                let package = std::fs::read(dir.join("package.json")).ok()?;
                let version = serde_json::from_slice::<serde_json::Value>(&package)
                    .ok()
                    .and_then(|v| v.get("version")?.as_str().map(str::to_string));
                Some(version.unwrap_or_default())
            }
        }
    }

    fn run(
        &self,
        env: Arc<GzEnv>,
        target: GzTarget,
        mut argv: Vec<String>,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'static, ExecuteResult> {
        let address = match self.address(&target) {
            Ok(a) => a,
            Err(e) => {
                let result = ExecuteResult {
                    exit_status: 1,
                    stdout: String::new(),
                    stderr: format!("agentsadm: error: {}\n", error_chain(&e)),
                };
                return Box::pin(async move { result });
            }
        };
        argv.extend(address);
        let changing = argv.first().map(String::as_str) == Some("gz")
            && argv.get(1).is_some_and(|c| CHANGING.contains(&c.as_str()));
        let queue = self.queue(target.server_uuid);
        // A rooted server hands cn-agent's own replacement to the simulated
        // agentsadm-install service; mockcloud has no SMF (no handoff).
        let platform: Option<Arc<dyn Platform>> = match self.layout {
            GzLayout::Rooted => Some(Arc::new(SimPlatform {
                rooted: self.rooted(&env, &target),
                jobs: JobService {
                    queue: queue.clone(),
                    vars: vars.clone(),
                    delay: env.cn_agent_restart,
                    shutdown: env.shutdown.clone(),
                },
            })),
            GzLayout::Mockcloud => None,
        };
        Box::pin(async move {
            let _turn = match changing {
                true => Some(queue.lock_owned().await),
                false => None,
            };
            agentsadm_cli::gz::command::run_captured_on(argv, vars, platform).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::ids::InstanceUuid;

    #[test]
    fn results_replace_the_entries_they_touched() {
        let cat = Catalog::builtin();
        let entry = |name: &str, img: u128| AgentEntry {
            name: name.parse().unwrap(),
            version: "1.0.0".parse().unwrap(),
            image_uuid: Some(ImageUuid::from_u128(img)),
            uuid: Some(InstanceUuid::from_u128(img + 100)),
        };
        let mut agents = vec![
            entry("marlin", 1),
            entry("vm-agent", 2),
            entry("net-agent", 3),
        ];
        let result = |name: &str, action, img: Option<u128>| ComponentResult {
            name: name.parse().unwrap(),
            action,
            from_image: None,
            image_uuid: img.map(ImageUuid::from_u128),
            version: img.map(|_| "2.0.0".parse().unwrap()),
            instance_uuid: img.map(|i| InstanceUuid::from_u128(i + 100)),
            elapsed_ms: 1,
        };
        apply_results(
            &cat,
            &mut agents,
            &[
                result("marlin-agent", ComponentAction::Upgraded, Some(7)),
                result("net-agent", ComponentAction::Removed, None),
                result("cmon-agent", ComponentAction::Installed, Some(8)),
            ],
        );
        let mut want = vec![
            entry("cmon-agent", 8),
            entry("marlin", 7),
            entry("vm-agent", 2),
        ];
        want[0].version = "2.0.0".parse().unwrap();
        want[1].version = "2.0.0".parse().unwrap();
        want.sort();
        assert_eq!(agents, want);
    }

    #[test]
    fn mockcloud_root_is_two_levels_up() {
        let uuid = ServerUuid::from_u128(5);
        let mut target = GzTarget {
            server_uuid: uuid,
            hostname: "cn0001".into(),
            headnode: false,
            datacenter: "coal".into(),
            admin_ip: "10.99.99.10".into(),
            root: PathBuf::from(format!("/state/servers/{uuid}")),
        };
        assert_eq!(
            InstallerGz::mockcloud_root(&target).unwrap(),
            PathBuf::from("/state")
        );
        target.root = PathBuf::from("/state/elsewhere");
        assert!(InstallerGz::mockcloud_root(&target).is_err());
    }
}
