//! Where everything lives in a global zone, relative to a root (`/` on a real
//! GZ, a directory for tests and the simulator), so the same code serves both.
//!
//! Triton's paths (docs/triton/agent-install.md §0):
//! - apm agents: `opt/smartdc/agents/lib/node_modules/<package>/` (real
//!   directories), bins in `opt/smartdc/agents/bin`, instance UUIDs in
//!   `opt/smartdc/agents/etc/<package>`, generated SMF manifests in
//!   `opt/smartdc/agents/smf` (a lofs mount of `/var/svc/manifest/site`).
//! - gz-tools: unpacked over `opt/smartdc`, version in
//!   `opt/smartdc/etc/gz-tools.image`.
//! - dockerlogger: `opt/smartdc/docker/{bin,etc}`, instance UUID in
//!   `opt/smartdc/docker/etc/dockerlogger.uuid`.
//! - sdcadm: `opt/smartdc/sdcadm/`, linked from `opt/smartdc/bin/sdcadm`.
//!
//! agentsadm's own state sits in `opt/smartdc/agents/.agentsadm/` (outside
//! `node_modules`, where a directory would show up as an agent, but on the
//! same filesystem so renames are atomic):
//! - `lock`: the per-server lock (holds the owner's pid);
//! - `journal/<component>.json`: the transaction in progress;
//! - `staging/<txn>/new`: the unpacked new version during a transaction;
//! - `aside/<txn>/`: the moved-out old version during a transaction (not
//!   under `staging/`, which the new package's hooks are closest to);
//! - `broken/<component>.json`: a rollback that could not complete (what
//!   is installed now and the command that repairs it), until a later
//!   transaction of the component succeeds;
//! - `previous/<component>/`: the version replaced by the last upgrade, for
//!   `gz rollback`;
//! - `downloads/<image uuid>.file`: verified image files (reused);
//! - `installed/<component>.json`: version records of the non-apm kinds.
//!
//! The rooted platform keeps its sysinfo in `<root>/sysinfo.json` (the same
//! place mockcloud keeps each server's) and its SMF state in
//! `<root>/var/svc/smf-state.json` (see [`agentsadm_platform::rooted`]).
//!
//! The mockcloud layout roots its paths at the server's directory and keeps
//! the same state directories in `.agentsadm/` there
//! ([`GzPaths::with_state_dir`]).

use agentsadm_types::component::ComponentName;
use std::path::{Path, PathBuf};

/// The apm prefix, relative to the root.
pub const AGENTS_PREFIX: &str = "opt/smartdc/agents";
/// agentsadm's state directory, relative to the root.
pub const STATE_DIR: &str = "opt/smartdc/agents/.agentsadm";
/// Where non-agent packages put SMF manifests (survives reboots on SmartOS).
pub const SITE_MANIFESTS: &str = "var/svc/manifest/site";
pub use agentsadm_platform::rooted::NODE_CONFIG;
pub use agentsadm_platform::rooted::SMF_STATE_FILE;
pub use agentsadm_platform::rooted::SYSINFO_FILE;

/// Paths of one server's global zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GzPaths {
    root: PathBuf,
    /// agentsadm's state directory, relative to the root.
    state: PathBuf,
}

impl GzPaths {
    /// A Triton global zone at `root` (state in [`STATE_DIR`]).
    pub fn new(root: impl Into<PathBuf>) -> GzPaths {
        GzPaths::with_state_dir(root, STATE_DIR)
    }

    /// A root whose agentsadm state lives in `state` (root-relative).
    pub fn with_state_dir(root: impl Into<PathBuf>, state: impl Into<PathBuf>) -> GzPaths {
        GzPaths {
            root: root.into(),
            state: state.into(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (a root-relative path such as `opt/smartdc/bin`) under the root.
    pub fn at(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        self.root.join(rel)
    }

    /// A path under the root back to its root-relative form.
    pub fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    pub fn prefix(&self) -> PathBuf {
        self.at(AGENTS_PREFIX)
    }
    pub fn node_modules(&self) -> PathBuf {
        self.at("opt/smartdc/agents/lib/node_modules")
    }
    pub fn bin_dir(&self) -> PathBuf {
        self.at("opt/smartdc/agents/bin")
    }
    pub fn etc_dir(&self) -> PathBuf {
        self.at("opt/smartdc/agents/etc")
    }
    pub fn smf_dir(&self) -> PathBuf {
        self.at("opt/smartdc/agents/smf")
    }
    pub fn db_dir(&self) -> PathBuf {
        self.at("opt/smartdc/agents/db")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.at(&self.state)
    }
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir().join("lock")
    }
    pub fn journal_dir(&self) -> PathBuf {
        self.state_dir().join("journal")
    }
    pub fn journal_file(&self, component: &ComponentName) -> PathBuf {
        self.journal_dir().join(format!("{component}.json"))
    }
    pub fn staging_dir(&self) -> PathBuf {
        self.state_dir().join("staging")
    }
    pub fn previous_dir(&self) -> PathBuf {
        self.state_dir().join("previous")
    }
    pub fn downloads_dir(&self) -> PathBuf {
        self.state_dir().join("downloads")
    }
    pub fn records_dir(&self) -> PathBuf {
        self.state_dir().join("installed")
    }
    /// `broken/<component>.json`: see the module docs.
    pub fn broken_file(&self, component: &ComponentName) -> PathBuf {
        self.state_dir()
            .join("broken")
            .join(format!("{component}.json"))
    }
    pub fn trash_dir(&self) -> PathBuf {
        self.state_dir().join("trash")
    }
    pub fn site_manifests(&self) -> PathBuf {
        self.at(SITE_MANIFESTS)
    }
    pub fn sysinfo_file(&self) -> PathBuf {
        self.at(SYSINFO_FILE)
    }
    pub fn smf_state_file(&self) -> PathBuf {
        self.at(SMF_STATE_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_root() {
        let p = GzPaths::new("/tmp/r");
        assert_eq!(p.at("/opt/smartdc"), PathBuf::from("/tmp/r/opt/smartdc"));
        assert_eq!(
            p.journal_file(&"vm-agent".parse().unwrap()),
            PathBuf::from("/tmp/r/opt/smartdc/agents/.agentsadm/journal/vm-agent.json")
        );
        assert_eq!(
            p.rel(&p.node_modules()),
            "opt/smartdc/agents/lib/node_modules"
        );
        let real = GzPaths::new("/");
        assert_eq!(real.prefix(), PathBuf::from("/opt/smartdc/agents"));
        let mock = GzPaths::with_state_dir("/mc/servers/x", ".agentsadm");
        assert_eq!(
            mock.lock_file(),
            PathBuf::from("/mc/servers/x/.agentsadm/lock")
        );
    }
}
