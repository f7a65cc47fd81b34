//! The component catalog (`manifests/components.json`): every component
//! agentsadm manages and the properties that drive its behaviour. Nothing about
//! a specific component is hard-coded elsewhere; code asks the catalog.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::component::{ComponentName, ComponentNameError};

/// The catalog shipped in the binary; `--catalog FILE` can replace it.
pub const BUILTIN_CATALOG: &str = include_str!("../../../manifests/components.json");

/// How a component is packaged and where it lands in the global zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentKind {
    /// An apm package under `/opt/smartdc/agents/lib/node_modules/<package>`.
    ApmAgent,
    /// `tools.tar.gz` / `cn_tools.tar.gz` unpacked into `/opt/smartdc`.
    GzTools,
    /// The docker log driver under `/opt/smartdc/docker`.
    Dockerlogger,
    /// sdcadm under `/opt/smartdc/sdcadm` (headnode only).
    Sdcadm,
    /// agentsadm itself under `/opt/smartdc/agentsadm` (every server): the
    /// binary the orchestrator runs there through CNAPI execute.
    Agentsadm,
}

impl ComponentKind {
    /// A kind's expected install time on one server: an apm agent's
    /// install-agent task (download, `apm install`, restart), a minute;
    /// the archives unpacked into `/opt/smartdc` (gz-tools, sdcadm,
    /// agentsadm), two.
    pub fn expected_install(&self) -> std::time::Duration {
        std::time::Duration::from_secs(match self {
            ComponentKind::ApmAgent | ComponentKind::Dockerlogger => 60,
            ComponentKind::GzTools | ComponentKind::Sdcadm | ComponentKind::Agentsadm => 120,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ComponentKind::ApmAgent => "apm-agent",
            ComponentKind::GzTools => "gz-tools",
            ComponentKind::Dockerlogger => "dockerlogger",
            ComponentKind::Sdcadm => "sdcadm",
            ComponentKind::Agentsadm => "agentsadm",
        }
    }
}

/// Which servers get a component by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Every server (headnode and compute nodes) gets it at setup.
    All,
    /// Only servers an operator names get it.
    OptIn,
    /// Only the headnode gets it.
    HeadnodeOnly,
}

/// Where a component runs in the per-server install order.
///
/// Variants are declared in execution order, so `Ord` sorts a server's steps:
/// agents_core provides the layout everything else installs into, config-agent
/// must be present before agents register with it, parallel-safe components
/// may install concurrently, and cn-agent goes last because it is the process
/// that reports `server.agents` and cannot replace itself in-process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderClass {
    CoreFirst,
    CoreSecond,
    ParallelSafe,
    CoreLast,
}

impl OrderClass {
    /// Core components run alone; parallel-safe ones may share a server.
    pub fn runs_alone(&self) -> bool {
        !matches!(self, OrderClass::ParallelSafe)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            OrderClass::CoreFirst => "core-first",
            OrderClass::CoreSecond => "core-second",
            OrderClass::ParallelSafe => "parallel-safe",
            OrderClass::CoreLast => "core-last",
        }
    }
}

/// One catalog entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// Component name: the IMGAPI image name and the SAPI service name.
    pub name: ComponentName,
    pub kind: ComponentKind,
    pub placement: Placement,
    pub order: OrderClass,
    /// Whether `update --all` may touch it. marlin-agent is `false`: restarting
    /// it aborts running Manta jobs, so it is only updated when named.
    pub bulk_update: bool,
    pub description: String,
    /// The apm package (and `node_modules` directory) name when it differs
    /// from the component name (marlin-agent installs as `marlin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<ComponentName>,
    /// SMF services the component delivers, for status and rollback.
    #[serde(default)]
    pub smf_services: Vec<String>,
    /// How long installing it on one server is expected to take, in
    /// seconds (default: its kind's, [`ComponentKind::expected_install`]).
    /// Slow servers of a rollout too small for a median are judged
    /// against it.
    #[serde(
        default,
        rename = "expected_install_s",
        skip_serializing_if = "Option::is_none"
    )]
    pub expected_install_secs: Option<u64>,
    /// Files of its package (relative to the package directory, e.g.
    /// `bin/helper`) that may keep a setuid or setgid bit from the image;
    /// every other file loses both when unpacked. No component needs one
    /// today.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setid_files: Vec<String>,
    /// What its postinstall does to its SAPI instance when cn-agent's
    /// install task runs it (`None`: not known, so treated as both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postinstall_sapi: Option<PostinstallSapi>,
}

/// What an agent's postinstall does to its SAPI instance
/// (docs/triton/agent-install.md §2.6). The executor writes an instance
/// once per step by it: after the step when the postinstall replaces it,
/// before when it keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PostinstallSapi {
    /// Re-adopts it with a create SAPI stores over the whole object (the
    /// modern pattern: vm-agent, net-agent, cmon-agent; cn-agent's sends
    /// only its server and image): every param written before the install
    /// is gone.
    Replaces,
    /// Adopts it only when SAPI has none (the legacy pattern): what was
    /// written before the install stays.
    Keeps,
}

impl Component {
    /// How long installing it on one server is expected to take.
    pub fn expected_install(&self) -> std::time::Duration {
        self.expected_install_secs
            .map(std::time::Duration::from_secs)
            .unwrap_or_else(|| self.kind.expected_install())
    }

    /// The `package.json` name and install directory name.
    pub fn package_name(&self) -> &ComponentName {
        self.package.as_ref().unwrap_or(&self.name)
    }

    /// Whether a server of this role gets the component at setup.
    pub fn in_default_set(&self, headnode: bool) -> bool {
        match self.placement {
            Placement::All => true,
            Placement::OptIn => false,
            Placement::HeadnodeOnly => headnode,
        }
    }
}

/// Errors loading or querying the catalog.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read component catalog {path}")]
    Read {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("component catalog {origin} is not valid")]
    Parse {
        origin: String,
        #[source]
        err: serde_json::Error,
    },
    #[error("component catalog {origin} lists {name:?} twice")]
    Duplicate { origin: String, name: String },
    #[error("component catalog {origin} has an invalid component or package name")]
    BadName {
        origin: String,
        #[source]
        err: ComponentNameError,
    },
    #[error("unknown component {name:?}; known components: {known}")]
    Unknown { name: String, known: String },
}

#[derive(Deserialize)]
struct CatalogFile {
    #[allow(dead_code)]
    version: u32,
    /// Read one by one, so a bad name is reported as [`CatalogError::BadName`].
    components: Vec<serde_json::Value>,
}

/// The set of managed components, keyed by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    components: BTreeMap<ComponentName, Component>,
}

impl Catalog {
    /// The catalog compiled into the binary.
    pub fn builtin() -> Catalog {
        // Parsed once: every GZ installer run starts from it (thousands of
        // runs in one simulator process).
        static BUILTIN: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                // The builtin catalog is checked by a unit test, so this
                // cannot fail in a released binary.
                Catalog::parse(BUILTIN_CATALOG, "builtin").expect("builtin catalog is valid")
            })
            .clone()
    }

    /// Load a catalog file.
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|err| CatalogError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        Catalog::parse(&text, &path.display().to_string())
    }

    /// Parse catalog JSON; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Catalog, CatalogError> {
        let file: CatalogFile = serde_json::from_str(text).map_err(|err| CatalogError::Parse {
            origin: origin.to_string(),
            err,
        })?;
        let mut components = BTreeMap::new();
        for value in file.components {
            for field in ["name", "package"] {
                if let Some(serde_json::Value::String(name)) = value.get(field) {
                    ComponentName::new(name.as_str()).map_err(|err| CatalogError::BadName {
                        origin: origin.to_string(),
                        err,
                    })?;
                }
            }
            let c: Component =
                serde_json::from_value(value).map_err(|err| CatalogError::Parse {
                    origin: origin.to_string(),
                    err,
                })?;
            if components.contains_key(&c.name) {
                return Err(CatalogError::Duplicate {
                    origin: origin.to_string(),
                    name: c.name.to_string(),
                });
            }
            components.insert(c.name.clone(), c);
        }
        Ok(Catalog { components })
    }

    /// Look a component up by name (or by its package name, e.g. `marlin`).
    pub fn get(&self, name: &str) -> Option<&Component> {
        self.components.get(name).or_else(|| {
            self.components
                .values()
                .find(|c| *c.package_name() == *name)
        })
    }

    /// Whether an image named `image_name` (its manifest's `name`: the
    /// component's or its package's name) is an image of `component`.
    pub fn is_image_of(&self, image_name: &str, component: &str) -> bool {
        self.get(image_name).is_some_and(|c| c.name == component)
    }

    /// Like [`Catalog::get`] but an error listing the known names.
    pub fn require(&self, name: &str) -> Result<&Component, CatalogError> {
        self.get(name).ok_or_else(|| CatalogError::Unknown {
            name: name.to_string(),
            known: self
                .names()
                .map(ComponentName::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Every component, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Component> {
        self.components.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &ComponentName> {
        self.components.keys()
    }

    pub fn len(&self) -> usize {
        self.components.len()
    }

    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }

    /// Components a new server of this role gets, in install order
    /// (order class, then name).
    pub fn default_set(&self, headnode: bool) -> Vec<&Component> {
        let mut set: Vec<&Component> = self.iter().filter(|c| c.in_default_set(headnode)).collect();
        sort_install_order(&mut set);
        set
    }
}

/// Sort components into per-server install order: order class, then name.
pub fn sort_install_order(components: &mut [&Component]) {
    components.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name)));
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_loads_and_orders() {
        let cat = Catalog::builtin();
        assert_eq!(cat.len(), 17);
        let hn: Vec<&str> = cat
            .default_set(true)
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(hn.first(), Some(&"agents_core"));
        // agentsadm right after the layout everything installs into: the
        // other components' steps run through it.
        assert_eq!(hn.get(1), Some(&"agentsadm"));
        assert_eq!(hn.get(2), Some(&"config-agent"));
        assert_eq!(hn.last(), Some(&"cn-agent"));
        assert!(hn.contains(&"sdcadm"));
        let cn: Vec<&str> = cat
            .default_set(false)
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert!(!cn.contains(&"sdcadm"));
        assert!(cn.contains(&"agentsadm"));
        assert_eq!(cat.get("agentsadm").unwrap().kind, ComponentKind::Agentsadm);
        assert!(!cn.contains(&"marlin-agent"));
        assert!(!cat.get("marlin-agent").unwrap().bulk_update);
        assert_eq!(cat.get("marlin").unwrap().name, "marlin-agent");
    }

    #[test]
    fn rejects_bad_and_duplicate_names() {
        let bad = r#"{"version":1,"components":[{"name":"../x","kind":"apm-agent","placement":"all","order":"parallel-safe","bulk_update":true,"description":""}]}"#;
        assert!(matches!(
            Catalog::parse(bad, "t"),
            Err(CatalogError::BadName { .. })
        ));
        let dup = r#"{"version":1,"components":[
            {"name":"a","kind":"apm-agent","placement":"all","order":"parallel-safe","bulk_update":true,"description":""},
            {"name":"a","kind":"apm-agent","placement":"all","order":"parallel-safe","bulk_update":true,"description":""}]}"#;
        assert!(matches!(
            Catalog::parse(dup, "t"),
            Err(CatalogError::Duplicate { .. })
        ));
        let err = Catalog::builtin().require("nope").unwrap_err();
        assert!(err.to_string().contains("known components: agents_core"));
    }
}
