//! What the planner reads: the operator's [`Request`], the planner's
//! options, the images resolved before planning, and all of it bundled as
//! one [`PlanningInput`].

use std::collections::BTreeMap;

use serde::Serialize;

use agentsadm_types::catalog::Catalog;
use agentsadm_types::component::ComponentName;

use crate::intent::Intent;
use crate::reality::Reality;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;

/// What the operator asked for: the command that made the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Update,
    Install,
    Remove,
    /// `check --fix`.
    Repair,
    /// `adopt`.
    Adopt,
    /// `server delete`.
    ServerDelete,
    /// `server factory-reset`.
    FactoryReset,
    /// `disable`.
    Disable,
    /// `enable`.
    Enable,
    /// `revert RUN`.
    Revert,
    /// `hold`.
    Hold,
    /// `release`.
    Release,
}

impl Operation {
    pub fn as_str(&self) -> &'static str {
        match self {
            Operation::Update => "update",
            Operation::Install => "install",
            Operation::Remove => "remove",
            Operation::Repair => "repair",
            Operation::Adopt => "adopt",
            Operation::ServerDelete => "server delete",
            Operation::FactoryReset => "server factory-reset",
            Operation::Disable => "disable",
            Operation::Enable => "enable",
            Operation::Revert => "revert",
            Operation::Hold => "hold",
            Operation::Release => "release",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which components a request names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComponentSelection {
    /// `--all`: every bulk-updatable managed component.
    All,
    Named(Vec<ComponentName>),
}

/// Which servers a request names (UUIDs or hostnames, as typed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerSelection {
    All,
    Named(Vec<String>),
}

/// A request, as parsed from the command line but not yet checked against
/// the datacenter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub operation: Operation,
    pub components: ComponentSelection,
    pub servers: ServerSelection,
    /// `-x`: servers to leave alone (with `--all` and with `-s`).
    pub exclude: Vec<String>,
}

/// How steps reach servers (`--transport`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportMode {
    /// apm agents through CNAPI install-agent (works with any Triton),
    /// gz-tools, dockerlogger and sdcadm through `agentsadm gz` via execute.
    #[default]
    Auto,
    /// `agentsadm gz` on the server for everything (atomic installs).
    Execute,
    /// CNAPI install-agent / uninstall-agents only; other kinds are skipped.
    InstallAgent,
}

/// The transport the plan chose for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// CNAPI `install-agent` / `uninstall-agents` (cn-agent tasks).
    InstallAgent,
    /// CNAPI execute of `agentsadm gz ...` on the server.
    Execute,
    /// CNAPI execute of the bootstrap script (no agentsadm needed), then
    /// of the copy it put in place (`agentsadm_api::bootstrap`): only for
    /// agentsadm itself, on a server whose copy is missing or cannot parse
    /// an ordinary execute step.
    Bootstrap,
}

impl TransportKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TransportKind::InstallAgent => "install-agent",
            TransportKind::Execute => "execute",
            TransportKind::Bootstrap => "bootstrap",
        }
    }

    /// The transport for a component kind, or `None` when the mode cannot
    /// carry it (cn-agent's tasks only know apm packages).
    pub fn choose(kind: ComponentKind, mode: TransportMode) -> Option<TransportKind> {
        match (mode, kind) {
            (TransportMode::Execute, _) => Some(TransportKind::Execute),
            (_, ComponentKind::ApmAgent) => Some(TransportKind::InstallAgent),
            (TransportMode::Auto, _) => Some(TransportKind::Execute),
            (TransportMode::InstallAgent, _) => None,
        }
    }
}

impl TransportMode {
    /// Whether this mode may run `agentsadm gz` on servers (CNAPI
    /// execute), and so check health after cn-agent's tasks.
    pub fn execute_available(&self) -> bool {
        !matches!(self, TransportMode::InstallAgent)
    }
}

/// Planner options that are not part of the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanOptions {
    pub transport: TransportMode,
    /// How the servers are rolled out (waves, budget, concurrency).
    pub rollout: crate::rollout::RolloutPolicy,
    /// `--ignore-holds`: change held components anyway (explicit yes).
    pub ignore_holds: bool,
}

impl From<TransportMode> for PlanOptions {
    /// The transport mode, with the library's neutral rollout.
    fn from(transport: TransportMode) -> PlanOptions {
        PlanOptions {
            transport,
            ..PlanOptions::default()
        }
    }
}

/// An image as the plan refers to it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ImageRef {
    pub uuid: ImageUuid,
    /// The manifest's `name` and `version`, as IMGAPI has them (any
    /// image's; [`agentsadm_types::catalog::Catalog::is_image_of`] tells
    /// whether it is a component's).
    pub name: String,
    pub version: String,
    /// The updates server (URL with `?channel=`) to import it from before
    /// executing, when the datacenter IMGAPI does not have it yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub import_from: Option<String>,
}

/// What image resolution (I/O, before planning) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedImages {
    /// Explicit targets from `--image` or `--latest`, by component.
    pub targets: BTreeMap<ComponentName, ImageRef>,
    /// Components `--latest` found no image for (value: where it looked).
    pub unavailable: BTreeMap<ComponentName, String>,
    /// Images known to be in the datacenter IMGAPI (those intent refers
    /// to), by UUID, so intent targets have versions and can be checked.
    pub known: BTreeMap<ImageUuid, ImageRef>,
    /// The targets are "the newest available" (`--latest`): never move a
    /// server (or a service default) to an older version than it has.
    pub no_downgrade: bool,
    /// The agentsadm a server gets first when its copy is missing or too
    /// old for the plan's steps (the SAPI `agentsadm` service's default
    /// image, else the newest in the datacenter IMGAPI); `None`: the
    /// datacenter has none, and such steps are left out.
    pub agentsadm: Option<ImageRef>,
}

impl ResolvedImages {
    pub fn lookup(&self, uuid: &ImageUuid) -> Option<&ImageRef> {
        self.known
            .get(uuid)
            .or_else(|| self.targets.values().find(|t| t.uuid == *uuid))
    }
}

/// Everything the planner reads.
#[derive(Clone, Copy, Debug)]
pub struct PlanningInput<'a> {
    pub catalog: &'a Catalog,
    pub intent: &'a Intent,
    pub reality: &'a Reality,
    pub request: &'a Request,
    pub options: PlanOptions,
    pub images: &'a ResolvedImages,
    /// What servers took in earlier runs (the run history, read before
    /// planning): the waves start the longest expected first and the plan
    /// shows the expected finish. `None`: no history (servers start by
    /// hostname).
    pub durations: Option<&'a crate::timing::Durations>,
}
