//! The plan itself: per server, the steps (install, upgrade, remove of one
//! component, each with its transport) and the SAPI writes around them;
//! the service default changes, imports, skips and warnings of the whole
//! run. Every collection is ordered, so a plan prints the same every time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::request::ImageRef;

use super::request::Operation;

use super::request::TransportKind;
use super::skip::Skip;
use crate::reality::Installed;
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// A component as installed, in a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstalledRef {
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
}

impl From<&Installed> for InstalledRef {
    fn from(i: &Installed) -> InstalledRef {
        InstalledRef {
            version: i.version.clone(),
            image: i.image,
        }
    }
}

/// What one step does to one component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    Install { to: ImageRef },
    Upgrade { from: InstalledRef, to: ImageRef },
    Remove { installed: InstalledRef },
}

impl Action {
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Install { .. } => "install",
            Action::Upgrade { .. } => "upgrade",
            Action::Remove { .. } => "remove",
        }
    }

    /// The image the step installs, if any.
    pub fn target(&self) -> Option<&ImageRef> {
        match self {
            Action::Install { to } | Action::Upgrade { to, .. } => Some(to),
            Action::Remove { .. } => None,
        }
    }
}

/// How a step's result is confirmed healthy (issue 14), as the plan shows
/// it per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gate {
    /// `agentsadm gz install` gates inside its transaction: an unhealthy
    /// build is rolled back on the server before SAPI hears of it.
    Installer,
    /// After cn-agent's task (which cannot gate), `agentsadm gz health`
    /// through execute; unhealthy: the previous image is reinstalled.
    GzHealth,
    /// Only CNAPI `server.agents` (no execute in this datacenter).
    ServerAgents,
    /// Nothing to gate (a removal).
    None,
}

impl Gate {
    /// The gate for a step: `execute_available` when the transport mode
    /// lets the orchestrator run `agentsadm gz` on servers.
    pub fn for_step(action: &Action, transport: TransportKind, execute_available: bool) -> Gate {
        match (action, transport) {
            (Action::Remove { .. }, _) => Gate::None,
            (_, TransportKind::Execute) => Gate::Installer,
            (_, TransportKind::InstallAgent) if execute_available => Gate::GzHealth,
            (_, TransportKind::InstallAgent) => Gate::ServerAgents,
        }
    }

    /// How the gate checks, and what an unhealthy result leads to, as the
    /// plan's gate lines show it.
    pub fn describe(&self) -> &'static str {
        match self {
            Gate::Installer => {
                "health gate in the installer (gz install); unhealthy: rolled back on the server"
            }
            Gate::GzHealth => {
                "health gate after install-agent (gz health through execute); unhealthy: previous image reinstalled"
            }
            Gate::ServerAgents => {
                "server.agents only (install-agent, no execute): services not checked, nothing reverted"
            }
            Gate::None => "no gate (removal)",
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Gate::Installer => "installer",
            Gate::GzHealth => "gz health",
            Gate::ServerAgents => "server.agents",
            Gate::None => "none",
        }
    }
}

/// One component change on one server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub component: String,
    pub order: OrderClass,
    #[serde(flatten)]
    pub action: Action,
    pub transport: TransportKind,
    /// How the step is confirmed healthy.
    pub gate: Gate,
}

impl Step {
    /// The image the server must have now for the step to run (`Some(None)`:
    /// nothing installed), as the plan saw it; `None` when the plan does
    /// not know it (an installed version without an image UUID) or for a
    /// removal. Execute steps pass it as `gz install --expect-current`.
    pub fn expect_current(&self) -> Option<Option<ImageUuid>> {
        match &self.action {
            Action::Install { .. } => Some(None),
            Action::Upgrade { from, .. } => from.image.map(Some),
            Action::Remove { .. } => None,
        }
    }
}

/// A SAPI change tied to one server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum IntentChange {
    /// Before the steps: set `params` (server and target image) on the
    /// existing instance.
    UpdateInstance {
        component: String,
        service: ServiceUuid,
        instance: InstanceUuid,
        image: ImageUuid,
    },
    /// Before the steps: create the instance the server already reports
    /// (installed but never adopted), with params.
    CreateInstance {
        component: String,
        service: ServiceUuid,
        instance: InstanceUuid,
        image: ImageUuid,
    },
    /// After an install: create (or overwrite) the instance with the UUID
    /// the server reports for the new component.
    AdoptInstalled {
        component: String,
        service: ServiceUuid,
        image: ImageUuid,
    },
    /// After a removal (or when the component is already gone): delete the
    /// instance.
    DeleteInstance {
        component: String,
        instance: InstanceUuid,
    },
}

impl IntentChange {
    /// Whether the change is written before the server's steps run.
    pub fn runs_before_steps(&self) -> bool {
        matches!(
            self,
            IntentChange::UpdateInstance { .. } | IntentChange::CreateInstance { .. }
        )
    }

    pub fn component(&self) -> &str {
        match self {
            IntentChange::UpdateInstance { component, .. }
            | IntentChange::CreateInstance { component, .. }
            | IntentChange::AdoptInstalled { component, .. }
            | IntentChange::DeleteInstance { component, .. } => component,
        }
    }
}

/// Everything that happens on one server, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerPlan {
    pub hostname: String,
    pub headnode: bool,
    /// CNAPI `rack_identifier`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Sorted by order class, then component name.
    pub steps: Vec<Step>,
    pub intent: Vec<IntentChange>,
}

impl ServerPlan {
    /// Steps grouped into batches that run one after the other: each core
    /// component alone, all parallel-safe components together.
    pub fn batches(&self) -> Vec<&[Step]> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < self.steps.len() {
            let mut end = start + 1;
            if !self.steps[start].order.runs_alone() {
                while end < self.steps.len() && !self.steps[end].order.runs_alone() {
                    end += 1;
                }
            }
            out.push(&self.steps[start..end]);
            start = end;
        }
        out
    }
}

/// A change to a service's default image (`params.image_uuid`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceChange {
    pub component: String,
    pub service: ServiceUuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<ImageUuid>,
    /// The current default's version, when its manifest is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    pub to: ImageRef,
}

/// The complete plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub operation: Operation,
    /// The components in play, in install order.
    pub components: Vec<String>,
    /// Explicit target images, by component.
    pub targets: BTreeMap<String, ImageRef>,
    /// Images to import into the datacenter IMGAPI before executing.
    pub imports: Vec<ImageRef>,
    /// Service default images to set before executing.
    pub service_changes: Vec<ServiceChange>,
    pub servers: BTreeMap<ServerUuid, ServerPlan>,
    pub skips: Vec<Skip>,
    /// Things the operator must read before confirming.
    pub warnings: Vec<String>,
    /// Set when the plan touches a component that must be confirmed with
    /// `-y` explicitly (marlin-agent).
    pub needs_explicit_yes: bool,
    /// How many servers the request selected (before skips).
    pub selected_servers: usize,
}

/// Counts for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    pub servers: usize,
    pub installs: usize,
    pub upgrades: usize,
    pub removals: usize,
    pub intent_only_servers: usize,
    pub blocking_skips: usize,
    pub other_skips: usize,
}

impl Plan {
    /// Nothing to do at all: no steps, no SAPI writes, no imports.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.service_changes.is_empty() && self.imports.is_empty()
    }

    /// Whether any skip leaves the request unfulfilled.
    pub fn has_blocking_skips(&self) -> bool {
        self.skips.iter().any(|s| s.blocking)
    }

    /// The components something in the plan changes: a step, a SAPI
    /// instance or service write, or an image import.
    pub fn changed_components(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        for s in self.servers.values() {
            out.extend(s.steps.iter().map(|st| st.component.as_str()));
            out.extend(s.intent.iter().map(IntentChange::component));
        }
        out.extend(self.service_changes.iter().map(|c| c.component.as_str()));
        out.extend(self.imports.iter().map(|i| i.name.as_str()));
        out
    }

    /// Total number of steps.
    pub fn step_count(&self) -> usize {
        self.servers.values().map(|s| s.steps.len()).sum()
    }

    /// Servers in the order they are shown and run: by hostname, then
    /// UUID (hostnames are what operators read; UUIDs break ties).
    pub fn servers_in_order(&self) -> Vec<(&ServerUuid, &ServerPlan)> {
        let mut v: Vec<(&ServerUuid, &ServerPlan)> = self.servers.iter().collect();
        v.sort_by(|a, b| a.1.hostname.cmp(&b.1.hostname).then_with(|| a.0.cmp(b.0)));
        v
    }

    pub fn counts(&self) -> PlanCounts {
        let mut c = PlanCounts {
            servers: self.servers.len(),
            ..Default::default()
        };
        for sp in self.servers.values() {
            if sp.steps.is_empty() {
                c.intent_only_servers += 1;
            }
            for st in &sp.steps {
                match st.action {
                    Action::Install { .. } => c.installs += 1,
                    Action::Upgrade { .. } => c.upgrades += 1,
                    Action::Remove { .. } => c.removals += 1,
                }
            }
        }
        for s in &self.skips {
            if s.blocking {
                c.blocking_skips += 1;
            } else {
                c.other_skips += 1;
            }
        }
        c
    }
}

/// The health gate's settings, passed to `agentsadm gz install` and `gz
/// health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthFlags {
    pub min_healthy: Duration,
    pub timeout: Duration,
}

impl HealthFlags {
    /// The flags that carry these settings to `agentsadm gz`.
    pub fn gz_args(&self) -> Vec<String> {
        let secs = |d: Duration| format!("{}", d.as_secs_f64());
        vec![
            "--min-healthy".into(),
            secs(self.min_healthy),
            "--health-timeout".into(),
            secs(self.timeout),
        ]
    }
}
