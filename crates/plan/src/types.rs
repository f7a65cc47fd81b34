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
use crate::marks::Mark;
use crate::reality::Installed;
use crate::rollout::Rollout;
use agentsadm_types::agents::AgentEntry;
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::catalog::PostinstallSapi;
use agentsadm_types::compat::GzUse;
use agentsadm_types::component::{ComponentName, ComponentVersion};
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// A component as installed, in a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstalledRef {
    pub version: ComponentVersion,
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
    Install {
        to: ImageRef,
    },
    Upgrade {
        from: InstalledRef,
        to: ImageRef,
    },
    Remove {
        installed: InstalledRef,
    },
    /// `agentsadm disable`: keep the component's services off on the
    /// server (`gz disable`, through execute).
    Disable {
        mark: Mark,
    },
    /// `agentsadm enable`: let them run again (`gz enable`).
    Enable,
}

impl Action {
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Install { .. } => "install",
            Action::Upgrade { .. } => "upgrade",
            Action::Remove { .. } => "remove",
            Action::Disable { .. } => "disable",
            Action::Enable => "enable",
        }
    }

    /// Whether the step moves the component (installs, upgrades or
    /// removes it): what a hold forbids.
    pub fn moves(&self) -> bool {
        matches!(
            self,
            Action::Install { .. } | Action::Upgrade { .. } | Action::Remove { .. }
        )
    }

    /// The image the step installs, if any.
    pub fn target(&self) -> Option<&ImageRef> {
        match self {
            Action::Install { to } | Action::Upgrade { to, .. } => Some(to),
            Action::Remove { .. } | Action::Disable { .. } | Action::Enable => None,
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
            (Action::Remove { .. } | Action::Disable { .. } | Action::Enable, _) => Gate::None,
            (_, TransportKind::Execute | TransportKind::Bootstrap) => Gate::Installer,
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
    pub component: ComponentName,
    pub order: OrderClass,
    #[serde(flatten)]
    pub action: Action,
    pub transport: TransportKind,
    /// How the step is confirmed healthy.
    pub gate: Gate,
    /// The component is disabled on the server (SAPI): after installing,
    /// `gz disable` runs in the same step (cn-agent's install task does
    /// not know the server's record; its postinstall enables services).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_off: Option<Mark>,
    /// The oldest agentsadm on the server that parses what the step sends
    /// it ([`agentsadm_types::compat`]); `None`: it sends agentsadm nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_agentsadm: Option<MinVersion>,
    /// For an agentsadm step the plan added because the server's copy is
    /// missing or too old: the components whose steps need it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub needed_by: Vec<ComponentName>,
    /// The SAPI instance the component already has on the server, and the
    /// marks it carries: cn-agent's install task runs the agent's
    /// postinstall, and vm-agent's and net-agent's re-adopt the instance
    /// bare (SAPI replaces the whole object), so after such a step the
    /// executor writes it whole again ([`IntentChange::Restore`]), whether
    /// or not the plan wrote it before. Not part of the plan document.
    #[serde(skip)]
    pub record: Option<KeptRecord>,
}

/// An instance's record as it must stand after a step by cn-agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptRecord {
    pub service: ServiceUuid,
    pub instance: InstanceUuid,
    /// The marks it carries (disabled, a hold on this server).
    pub marks: Vec<(MarkKey, Mark)>,
    /// What the component's postinstall does to the instance (the
    /// catalog's; `None`: not known). The executor writes the instance
    /// once per step: after it when the postinstall replaces it, before it
    /// when it keeps it, both when not known.
    pub postinstall: Option<PostinstallSapi>,
}

/// An agentsadm release a step needs at least (shown and serialized as
/// `MAJOR.MINOR.PATCH`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MinVersion(pub semver::Version);

impl std::fmt::Display for MinVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for MinVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Step {
    /// What the step sends to the server's agentsadm, if anything: an
    /// execute step's `gz install|remove`, or `gz health` after cn-agent's
    /// task. A bootstrap needs no agentsadm (its last part runs the copy it
    /// put in place).
    pub fn gz_use(&self) -> Option<GzUse> {
        match (self.transport, &self.action, self.gate) {
            (_, Action::Disable { .. } | Action::Enable, _) => Some(GzUse::Switch),
            (TransportKind::Execute, Action::Remove { .. }, _) => Some(GzUse::Remove),
            (TransportKind::Execute, _, _) => Some(GzUse::Install),
            (TransportKind::InstallAgent, _, Gate::GzHealth) => Some(GzUse::Health),
            _ => None,
        }
    }

    /// The image the server must have now for the step to run (`Some(None)`:
    /// nothing installed), as the plan saw it; `None` when the plan does
    /// not know it (an installed version without an image UUID) or for a
    /// removal. Execute steps pass it as `gz install --expect-current`.
    pub fn expect_current(&self) -> Option<Option<ImageUuid>> {
        match &self.action {
            Action::Install { .. } => Some(None),
            Action::Upgrade { from, .. } => from.image.map(Some),
            Action::Remove { .. } | Action::Disable { .. } | Action::Enable => None,
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
        component: ComponentName,
        service: ServiceUuid,
        instance: InstanceUuid,
        image: ImageUuid,
        /// The marks the instance lost to a bare re-adoption, which the
        /// service's ledger keeps, written back in the same write (empty:
        /// the instance's own marks stand, and a merge keeps them).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        marks: Vec<(MarkKey, Mark)>,
    },
    /// Before the steps: create the instance the server already reports
    /// (installed but never adopted), with params.
    CreateInstance {
        component: ComponentName,
        service: ServiceUuid,
        instance: InstanceUuid,
        image: ImageUuid,
    },
    /// After an install: create (or overwrite) the instance with the UUID
    /// the server reports for the new component.
    AdoptInstalled {
        component: ComponentName,
        service: ServiceUuid,
        image: ImageUuid,
    },
    /// After a removal (or when the component is already gone): delete the
    /// instance.
    DeleteInstance {
        component: ComponentName,
        instance: InstanceUuid,
    },
    /// After an install that replaces an instance (`check --fix`): delete
    /// the old instance once the server reports another one for the
    /// component; left alone while the server still reports it.
    DeleteReplaced {
        component: ComponentName,
        instance: InstanceUuid,
    },
    /// Before the steps: set (`Some`) or clear (`None`) a mark in the
    /// instance's params (`params.agentsadm_disabled`,
    /// `params.agentsadm_hold`).
    Mark {
        component: ComponentName,
        /// The component's service, which keeps the mark's second copy
        /// (the ledger, [`crate::marks`]). Not shown: the plan's JSON
        /// names the instance.
        #[serde(skip)]
        service: ServiceUuid,
        instance: InstanceUuid,
        key: MarkKey,
        #[serde(skip_serializing_if = "Option::is_none")]
        mark: Option<Mark>,
    },
    /// `server delete|factory-reset`: clear the service's second copy
    /// of a per-server mark ([`crate::marks`]): the server's instances
    /// are deleted, so nothing else would ever clear it.
    ForgetMark {
        component: ComponentName,
        #[serde(skip)]
        service: ServiceUuid,
        key: MarkKey,
    },
    /// After a step by cn-agent (never in a plan: the executor makes it
    /// from [`Step::record`]): the instance's params whole, in one write:
    /// server, the image it runs now, and its marks.
    Restore {
        component: ComponentName,
        service: ServiceUuid,
        instance: InstanceUuid,
        image: ImageUuid,
        marks: Vec<(MarkKey, Mark)>,
    },
}

/// Which mark an [`IntentChange::Mark`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkKey {
    Disabled,
    Hold,
}

impl MarkKey {
    /// The params key.
    pub fn param(&self) -> &'static str {
        match self {
            MarkKey::Disabled => crate::marks::DISABLED_PARAM,
            MarkKey::Hold => crate::marks::HOLD_PARAM,
        }
    }
}

impl IntentChange {
    /// Whether the change is written before the server's steps run.
    pub fn runs_before_steps(&self) -> bool {
        matches!(
            self,
            IntentChange::UpdateInstance { .. }
                | IntentChange::CreateInstance { .. }
                | IntentChange::Mark { .. }
        )
    }

    pub fn component(&self) -> &ComponentName {
        match self {
            IntentChange::UpdateInstance { component, .. }
            | IntentChange::CreateInstance { component, .. }
            | IntentChange::AdoptInstalled { component, .. }
            | IntentChange::DeleteInstance { component, .. }
            | IntentChange::DeleteReplaced { component, .. }
            | IntentChange::Mark { component, .. }
            | IntentChange::ForgetMark { component, .. }
            | IntentChange::Restore { component, .. } => component,
        }
    }
}

/// What a record change does to a server's CNAPI record (`server
/// delete|factory-reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerCall {
    /// `DELETE /servers/:uuid` (404: already gone).
    Delete,
    /// `PUT /servers/:uuid/factory-reset`, then clear `server.agents`.
    FactoryReset,
}

impl ServerCall {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerCall::Delete => "delete",
            ServerCall::FactoryReset => "factory-reset",
        }
    }
}

/// A write to the datacenter's records that is not part of one server's
/// turn: made before the server waves, in the order of
/// [`RecordChange::phase`], each independent of the others (a failure is
/// reported and the rest still made), except that a [`RecordChange::Server`]
/// call is made only once every other record change succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "record", rename_all = "kebab-case")]
pub enum RecordChange {
    /// CNAPI: replace `server.agents` with the server's own report.
    PostAgents {
        server: ServerUuid,
        hostname: String,
        agents: Vec<AgentEntry>,
    },
    /// SAPI: a new `type=agent` service, created without
    /// `params.image_uuid` (SAPI would check it against IMGAPI), whose
    /// default image is set right after (as sdcadm does, TOOLS-1716).
    CreateService {
        component: ComponentName,
        #[serde(skip_serializing_if = "Option::is_none")]
        default_image: Option<ImageUuid>,
    },
    /// SAPI: a service's default image (`params.image_uuid`).
    ServiceDefault {
        #[serde(flatten)]
        change: ServiceChange,
    },
    /// SAPI: adopt what a server reports: create the instance with the
    /// UUID the server keeps, or complete the params of the one SAPI has
    /// (`exists`). `service` is `None` for a service this plan creates.
    AdoptInstance {
        server: ServerUuid,
        hostname: String,
        component: ComponentName,
        #[serde(skip_serializing_if = "Option::is_none")]
        service: Option<ServiceUuid>,
        instance: InstanceUuid,
        image: ImageUuid,
        exists: bool,
    },
    /// SAPI: an instance write. `server` is the server the instance
    /// belongs to (absent for orphans no server can be found for).
    Instance {
        #[serde(skip_serializing_if = "Option::is_none")]
        server: Option<ServerUuid>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hostname: Option<String>,
        change: IntentChange,
    },
    /// SAPI: set (`Some`) or clear (`None`) a mark in a service's params
    /// (`params.agentsadm_hold`: a datacenter-wide hold).
    ServiceMark {
        component: ComponentName,
        service: ServiceUuid,
        key: MarkKey,
        #[serde(skip_serializing_if = "Option::is_none")]
        mark: Option<Mark>,
    },
    /// CNAPI: delete or factory-reset the server, last. `in_cnapi`: CNAPI
    /// still had the record when the plan was made.
    Server {
        server: ServerUuid,
        #[serde(skip_serializing_if = "Option::is_none")]
        hostname: Option<String>,
        call: ServerCall,
        in_cnapi: bool,
    },
}

impl RecordChange {
    /// When the change is made: CNAPI reports first (nothing later may be
    /// overwritten by an older snapshot), then services, defaults,
    /// instances created or completed, instances deleted (an adoption that
    /// replaces an instance creates the new one first), and the server's
    /// CNAPI record last.
    pub fn phase(&self) -> u8 {
        match self {
            RecordChange::PostAgents { .. } => 0,
            RecordChange::CreateService { .. } => 1,
            RecordChange::ServiceDefault { .. } | RecordChange::ServiceMark { .. } => 2,
            RecordChange::AdoptInstance { .. } => 3,
            RecordChange::Instance {
                change:
                    IntentChange::DeleteInstance { .. }
                    | IntentChange::DeleteReplaced { .. }
                    | IntentChange::ForgetMark { .. },
                ..
            } => 4,
            RecordChange::Instance { .. } => 3,
            RecordChange::Server { .. } => 5,
        }
    }

    /// The component the change is about, if one.
    pub fn component(&self) -> Option<&ComponentName> {
        match self {
            RecordChange::PostAgents { .. } | RecordChange::Server { .. } => None,
            RecordChange::CreateService { component, .. }
            | RecordChange::AdoptInstance { component, .. }
            | RecordChange::ServiceMark { component, .. } => Some(component),
            RecordChange::ServiceDefault { change } => Some(&change.component),
            RecordChange::Instance { change, .. } => Some(change.component()),
        }
    }

    /// The server whose records the change is about, if one (a service's
    /// default, or an orphan instance no server is known for, has none).
    pub fn server(&self) -> Option<ServerUuid> {
        match self {
            RecordChange::PostAgents { server, .. }
            | RecordChange::AdoptInstance { server, .. }
            | RecordChange::Server { server, .. } => Some(*server),
            RecordChange::Instance { server, .. } => *server,
            RecordChange::CreateService { .. }
            | RecordChange::ServiceDefault { .. }
            | RecordChange::ServiceMark { .. } => None,
        }
    }

    /// The server and component whose instance this change writes
    /// agentsadm's params on (`server_uuid`, `image_uuid`): an adoption,
    /// a completion or a restore. What `check`'s history rule counts, with
    /// the steps, as "agentsadm recorded more for it".
    pub fn writes_params(&self) -> Option<(ServerUuid, &ComponentName)> {
        match self {
            RecordChange::AdoptInstance {
                server, component, ..
            } => Some((*server, component)),
            RecordChange::Instance {
                server: Some(server),
                change:
                    IntentChange::UpdateInstance { component, .. }
                    | IntentChange::CreateInstance { component, .. }
                    | IntentChange::AdoptInstalled { component, .. }
                    | IntentChange::Restore { component, .. },
                ..
            } => Some((*server, component)),
            _ => None,
        }
    }

    /// Whether the change writes SAPI (else CNAPI).
    pub fn is_sapi(&self) -> bool {
        !matches!(
            self,
            RecordChange::PostAgents { .. } | RecordChange::Server { .. }
        )
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
    /// The agentsadm that runs this server's execute steps parses `gz
    /// install` of several components with each one's expectation
    /// ([`agentsadm_types::compat::GzUse::InstallTogether`]): its
    /// [`ServerPlan::execute_together`] groups share one execute. Set by
    /// the agentsadm rule ([`crate::agentsadm`]), which knows the copy.
    #[serde(skip)]
    pub execute_together: bool,
}

/// Whether `step` may share one `gz install` with others of its batch: an
/// install or upgrade through execute whose image before is known (its
/// own `--expect`), gated in the installer, with nothing sent after it
/// (no `gz disable` to keep it off, not the self-replacing cn-agent).
fn shares_execute(step: &Step) -> bool {
    step.transport == TransportKind::Execute
        && step.gate == Gate::Installer
        && step.action.target().is_some()
        && step.expect_current().is_some()
        && step.keep_off.is_none()
        && step.order == OrderClass::ParallelSafe
}

impl ServerPlan {
    /// The steps (their places in [`ServerPlan::steps`]) that go to the
    /// server in one `gz install A B ...`, one CNAPI execute each group:
    /// two or more [`shares_execute`] steps of one parallel-safe batch.
    /// The installer runs a parallel-safe group at once, each component in
    /// its own transaction with its own health gate, so their gates
    /// overlap, where one execute per step queues on the server's lock
    /// and gates one after the other. Empty unless
    /// [`ServerPlan::execute_together`]. Order between batches is kept:
    /// a group never spans two.
    pub fn execute_groups(&self) -> Vec<Vec<usize>> {
        if !self.execute_together {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut at = 0;
        for batch in self.batches() {
            let group: Vec<usize> = (at..at + batch.len())
                .filter(|&i| shares_execute(&self.steps[i]))
                .collect();
            at += batch.len();
            if group.len() > 1 {
                out.push(group);
            }
        }
        out
    }

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
    pub component: ComponentName,
    pub service: ServiceUuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<ImageUuid>,
    /// The current default's version, when its manifest is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    pub to: ImageRef,
}

/// Why a plan must be confirmed with `-y` explicitly: a confirmation at
/// the prompt is not enough, and the question and the refusal say which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExplicitYes {
    /// It restarts a component that aborts running work (marlin-agent
    /// aborts the Manta jobs running on its server).
    AbortsRunningWork,
    /// It changes components held with `agentsadm hold`
    /// (`--ignore-holds`).
    OverridesHolds,
}

impl ExplicitYes {
    /// What the plan does that needs it, as a clause: "it restarts ...".
    pub fn clause(self) -> &'static str {
        match self {
            ExplicitYes::AbortsRunningWork => {
                "it restarts components that abort running work (see the warnings above)"
            }
            ExplicitYes::OverridesHolds => {
                "it changes held components (--ignore-holds; see the warnings above)"
            }
        }
    }

    /// The reasons of a plan as one sentence's middle: "it restarts ...
    /// and it changes ...".
    pub fn clauses(reasons: &BTreeSet<ExplicitYes>) -> String {
        reasons
            .iter()
            .map(|r| r.clause())
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// The complete plan: what one run of any changing command does. Closed:
/// its fields are private and it is made only by [`crate::PlanBuilder`],
/// whose `finish` holds every rule (components never touched in bulk,
/// health gates, skips, imports, waves), so no caller can build a plan
/// that skips them. Read it through the accessors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub(crate) operation: Operation,
    /// The components in play, in install order.
    pub(crate) components: Vec<ComponentName>,
    /// Explicit target images, by component.
    pub(crate) targets: BTreeMap<ComponentName, ImageRef>,
    /// Images to import into the datacenter IMGAPI before executing.
    pub(crate) imports: Vec<ImageRef>,
    /// Service default images to set before executing.
    pub(crate) service_changes: Vec<ServiceChange>,
    /// Record changes made before the server waves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) records: Vec<RecordChange>,
    pub(crate) servers: BTreeMap<ServerUuid, ServerPlan>,
    pub(crate) skips: Vec<Skip>,
    /// Things the operator must read before confirming.
    pub(crate) warnings: Vec<String>,
    /// Why the plan must be confirmed with `-y` explicitly, if it must.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) explicit_yes: BTreeSet<ExplicitYes>,
    /// How many servers the request selected (before skips).
    pub(crate) selected_servers: usize,
    /// The waves the servers run in.
    pub(crate) rollout: Rollout,
    /// The run this plan puts back (`agentsadm revert RUN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reverts: Option<RevertOf>,
}

/// The run a revert plan puts back, as the plan names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RevertOf {
    pub run: agentsadm_types::ids::RunId,
    /// What it did (`update vm-agent`).
    pub operation: String,
    /// When it started (RFC 3339).
    pub started: String,
}

/// Counts for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    pub servers: usize,
    pub installs: usize,
    pub upgrades: usize,
    pub removals: usize,
    /// Disables and enables.
    pub switches: usize,
    pub intent_only_servers: usize,
    pub blocking_skips: usize,
    pub other_skips: usize,
}

impl Plan {
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The components in play, in install order.
    pub fn components(&self) -> &[ComponentName] {
        &self.components
    }

    /// Explicit target images, by component.
    pub fn targets(&self) -> &BTreeMap<ComponentName, ImageRef> {
        &self.targets
    }

    /// Images imported into the datacenter IMGAPI before anything else.
    pub fn imports(&self) -> &[ImageRef] {
        &self.imports
    }

    /// Service default images set before the servers (put back when a
    /// canary fails or the failure budget halts the rollout).
    pub fn service_changes(&self) -> &[ServiceChange] {
        &self.service_changes
    }

    /// Record changes made before the server waves, in order.
    pub fn records(&self) -> &[RecordChange] {
        &self.records
    }

    /// Per server: its steps and SAPI writes.
    pub fn servers(&self) -> &BTreeMap<ServerUuid, ServerPlan> {
        &self.servers
    }

    pub fn skips(&self) -> &[Skip] {
        &self.skips
    }

    /// Things the operator must read before confirming.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether the plan must be confirmed with `-y` explicitly.
    pub fn needs_explicit_yes(&self) -> bool {
        !self.explicit_yes.is_empty()
    }

    /// Why the plan must be confirmed with `-y` explicitly (empty: it need
    /// not be).
    pub fn explicit_yes(&self) -> &BTreeSet<ExplicitYes> {
        &self.explicit_yes
    }

    /// How many servers the request selected (before skips).
    pub fn selected_servers(&self) -> usize {
        self.selected_servers
    }

    /// The waves, concurrency and failure budget the servers run under.
    pub fn rollout(&self) -> &Rollout {
        &self.rollout
    }

    /// The run this plan puts back, for a revert.
    pub fn reverts(&self) -> Option<&RevertOf> {
        self.reverts.as_ref()
    }

    /// Nothing to do at all: no steps, no SAPI or CNAPI writes, no imports.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
            && self.service_changes.is_empty()
            && self.imports.is_empty()
            && self.records.is_empty()
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
            out.extend(s.intent.iter().map(|c| c.component().as_str()));
        }
        out.extend(self.service_changes.iter().map(|c| c.component.as_str()));
        out.extend(
            self.records
                .iter()
                .filter_map(|r| r.component().map(ComponentName::as_str)),
        );
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
                    Action::Disable { .. } | Action::Enable => c.switches += 1,
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
