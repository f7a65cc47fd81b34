//! The planner: a pure function of (catalog, intent, reality, request,
//! options, resolved images) that decides everything execution will do.
//!
//! - No I/O, no clock, no randomness; `BTreeMap`s everywhere, so the same
//!   input always gives the same plan (and the same printed text).
//! - Image resolution (`--image`, `--latest`, `--channel`, imports) happens
//!   before, in [`super::images`]; the planner only sees resolved images.
//! - Every server selected but not changed for a reason other than "already
//!   converged" gets a [`Skip`] with that reason; skips that leave the
//!   datacenter short of what was asked are `blocking` (exit status 2).
//! - Per server, steps are sorted into the catalog's order classes:
//!   agents_core, config-agent, the parallel-safe set, cn-agent last.
//! - Intent is written per server around its steps: instance targets before
//!   (so an interrupted run re-run converges to the same images), instances
//!   of new installs and deletions of removed ones after (their UUIDs are
//!   born, or die, on the server).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::intent::{InstanceLink, Intent};
use super::reality::{Installed, Reality, ServerState};
use crate::catalog::{Catalog, CatalogError, Component, ComponentKind, OrderClass};
use crate::ids::{ImageUuid, InstanceUuid, ServerUuid, ServiceUuid};

/// What the operator asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Update,
    Install,
    Remove,
}

impl Operation {
    pub fn as_str(&self) -> &'static str {
        match self {
            Operation::Update => "update",
            Operation::Install => "install",
            Operation::Remove => "remove",
        }
    }
}

/// Which components a request names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComponentSelection {
    /// `--all`: every bulk-updatable managed component.
    All,
    Named(Vec<String>),
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
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
}

impl TransportKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TransportKind::InstallAgent => "install-agent",
            TransportKind::Execute => "execute",
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

/// Planner options that are not part of the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanOptions {
    pub transport: TransportMode,
}

/// An image as the plan refers to it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ImageRef {
    pub uuid: ImageUuid,
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
    pub targets: BTreeMap<String, ImageRef>,
    /// Components `--latest` found no image for (value: where it looked).
    pub unavailable: BTreeMap<String, String>,
    /// Images known to be in the datacenter IMGAPI (those intent refers
    /// to), by UUID, so intent targets have versions and can be checked.
    pub known: BTreeMap<ImageUuid, ImageRef>,
    /// The targets are "the newest available" (`--latest`): never move a
    /// server (or a service default) to an older version than it has.
    pub no_downgrade: bool,
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
}

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

/// One component change on one server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub component: String,
    pub order: OrderClass,
    #[serde(flatten)]
    pub action: Action,
    pub transport: TransportKind,
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

/// Why something selected is left alone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum SkipReason {
    /// Excluded with `-x`.
    Excluded,
    /// CNAPI `setup: false`.
    NotSetup,
    /// CNAPI `status` is not `running`, and the server has changes pending.
    NotRunning { status: String },
    /// `update` of a component the server does not have.
    ComponentAbsent,
    /// The component has no SAPI service.
    Unmanaged,
    /// Not updated by `--all` (marlin-agent); name it to update it.
    NotBulk,
    /// `--latest` found no image for the component.
    NoImageAvailable { looked_in: String },
    /// Neither the request nor SAPI names an image for this server.
    NoTargetImage,
    /// SAPI intends an image that is not in the datacenter IMGAPI.
    ImageNotInDc { image: ImageUuid },
    /// `install` of a component the server already has.
    AlreadyInstalled { version: String },
    /// `remove` of a component the server does not have.
    NotInstalled,
    /// `--transport install-agent` cannot carry this component kind.
    TransportUnsupported { kind: String },
    /// `--latest` found an older version than the server runs.
    NewerInstalled { version: String, latest: String },
}

impl SkipReason {
    /// One phrase saying why, and what to do about it.
    pub fn describe(&self) -> String {
        match self {
            SkipReason::Excluded => "excluded with -x".to_string(),
            SkipReason::NotSetup => "server is not set up".to_string(),
            SkipReason::NotRunning { status } => format!(
                "server is not running (CNAPI status {status:?}); re-run once it is back"
            ),
            SkipReason::ComponentAbsent => {
                "component is not installed (use 'agentsadm install' to add it)".to_string()
            }
            SkipReason::Unmanaged => {
                "component has no SAPI service, so it is unmanaged (run 'agentsadm adopt')"
                    .to_string()
            }
            SkipReason::NotBulk => {
                "never updated in bulk (restarting it aborts running Manta jobs); name it to update it"
                    .to_string()
            }
            SkipReason::NoImageAvailable { looked_in } => {
                format!("no image found in {looked_in}")
            }
            SkipReason::NoTargetImage => {
                "SAPI names no image for it (pass --image or --latest)".to_string()
            }
            SkipReason::ImageNotInDc { image } => format!(
                "intended image {image} is not in the datacenter IMGAPI (pass --image or --latest to import one)"
            ),
            SkipReason::AlreadyInstalled { version } => {
                format!("already installed ({version}); use 'agentsadm update' to change it")
            }
            SkipReason::NotInstalled => "not installed and no SAPI instance".to_string(),
            SkipReason::NewerInstalled { version, latest } => format!(
                "runs {version}, newer than the latest image found ({latest}); pass --image to downgrade"
            ),
            SkipReason::TransportUnsupported { kind } => format!(
                "cn-agent's install-agent task cannot install {kind} components (use --transport auto)"
            ),
        }
    }
}

/// A server and/or component left alone, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Skip {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    #[serde(flatten)]
    pub reason: SkipReason,
    /// Whether this leaves the request unfulfilled (exit status 2).
    pub blocking: bool,
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
    pub fn changed_components(&self) -> std::collections::BTreeSet<&str> {
        let mut out = std::collections::BTreeSet::new();
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

/// A request that cannot be planned. Nothing has been changed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(
        "unknown server{s} {names}: not in CNAPI (check the UUID or hostname with 'agentsadm list')",
        s = if names.len() == 1 { "" } else { "s" },
        names = names.join(", ")
    )]
    UnknownServers { names: Vec<String> },
    #[error(
        "hostname {hostname:?} matches several servers ({uuids}); name the server by UUID",
        uuids = uuids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    AmbiguousHostname {
        hostname: String,
        uuids: Vec<ServerUuid>,
    },
    #[error("no component given: name components or pass --all")]
    NoComponents,
    #[error("{operation} takes exactly one component, got {count}")]
    OneComponent {
        operation: &'static str,
        count: usize,
    },
    #[error(
        "{component} has no SAPI agent service, so agentsadm does not manage it: run 'agentsadm adopt' first"
    )]
    Unmanaged { component: String },
    #[error(
        "no image to install for {component}: its SAPI service has no params.image_uuid; pass --image UUID"
    )]
    NoInstallImage { component: String },
    #[error(
        "image {image} for {component} is not in the datacenter IMGAPI; pass --image with --channel to import it"
    )]
    InstallImageMissing { component: String, image: ImageUuid },
    #[error("refusing to remove {component}: {reason}")]
    CannotRemove {
        component: String,
        reason: &'static str,
    },
}

/// Compute the plan. Pure: the same input gives the same plan.
pub fn plan(input: &PlanningInput) -> Result<Plan, PlanError> {
    let selected = select_servers(input)?;
    match input.request.operation {
        Operation::Update => plan_update(input, selected),
        Operation::Install => plan_install(input, selected),
        Operation::Remove => plan_remove(input, selected),
    }
}

/// The servers a request selects, in UUID order, plus those excluded.
struct Selected {
    servers: Vec<ServerUuid>,
    excluded: BTreeSet<ServerUuid>,
    named: bool,
}

fn select_servers(input: &PlanningInput) -> Result<Selected, PlanError> {
    let reality = input.reality;
    let excluded: BTreeSet<ServerUuid> = resolve_servers(reality, &input.request.exclude)?
        .into_iter()
        .collect();
    let (servers, named) = match &input.request.servers {
        ServerSelection::All => (reality.servers.keys().copied().collect(), false),
        ServerSelection::Named(names) => {
            let set: BTreeSet<ServerUuid> = resolve_servers(reality, names)?.into_iter().collect();
            (set.into_iter().collect(), true)
        }
    };
    Ok(Selected {
        servers,
        excluded,
        named,
    })
}

/// Resolve server names (UUIDs or hostnames, possibly comma-separated)
/// against CNAPI's list. Every unknown name is reported at once.
pub fn resolve_servers(reality: &Reality, names: &[String]) -> Result<Vec<ServerUuid>, PlanError> {
    let mut by_hostname: BTreeMap<&str, Vec<ServerUuid>> = BTreeMap::new();
    for s in reality.servers.values() {
        by_hostname
            .entry(s.hostname.as_str())
            .or_default()
            .push(s.uuid);
    }
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for name in names.iter().flat_map(|n| n.split(',')) {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        if let Ok(uuid) = name.parse::<ServerUuid>()
            && reality.servers.contains_key(&uuid)
        {
            out.push(uuid);
            continue;
        }
        match by_hostname.get(name).map(Vec::as_slice) {
            Some([one]) => out.push(*one),
            Some(many) if many.len() > 1 => {
                return Err(PlanError::AmbiguousHostname {
                    hostname: name.to_string(),
                    uuids: many.to_vec(),
                });
            }
            _ => unknown.push(name.to_string()),
        }
    }
    if !unknown.is_empty() {
        return Err(PlanError::UnknownServers { names: unknown });
    }
    Ok(out)
}

/// The named components, checked against the catalog, deduplicated and in
/// install order.
fn named_components<'c>(
    catalog: &'c Catalog,
    names: &[String],
) -> Result<Vec<&'c Component>, PlanError> {
    let mut out: Vec<&Component> = Vec::new();
    for n in names {
        let c = catalog.require(n)?;
        if !out.iter().any(|o| o.name == c.name) {
            out.push(c);
        }
    }
    crate::catalog::sort_install_order(&mut out);
    Ok(out)
}

fn empty_plan(input: &PlanningInput, selected: &Selected) -> Plan {
    Plan {
        operation: input.request.operation,
        components: Vec::new(),
        targets: input.images.targets.clone(),
        imports: Vec::new(),
        service_changes: Vec::new(),
        servers: BTreeMap::new(),
        skips: Vec::new(),
        warnings: Vec::new(),
        needs_explicit_yes: false,
        selected_servers: selected.servers.len(),
    }
}

fn server_skip(
    input: &PlanningInput,
    server: ServerUuid,
    reason: SkipReason,
    blocking: bool,
) -> Skip {
    Skip {
        server: Some(server),
        hostname: input.reality.get(&server).map(|s| s.hostname.clone()),
        component: None,
        reason,
        blocking,
    }
}

fn component_skip(component: &str, reason: SkipReason, blocking: bool) -> Skip {
    Skip {
        server: None,
        hostname: None,
        component: Some(component.to_string()),
        reason,
        blocking,
    }
}

fn server_component_skip(
    input: &PlanningInput,
    server: ServerUuid,
    component: &str,
    reason: SkipReason,
    blocking: bool,
) -> Skip {
    Skip {
        component: Some(component.to_string()),
        ..server_skip(input, server, reason, blocking)
    }
}

/// A blocking skip for a server that is not running, so nothing can run on
/// it; `None` when it is running.
fn not_running_skip(
    input: &PlanningInput,
    server: ServerUuid,
    state: &ServerState,
) -> Option<Skip> {
    (!state.is_running()).then(|| {
        server_skip(
            input,
            server,
            SkipReason::NotRunning {
                status: state.status.clone(),
            },
            true,
        )
    })
}

/// The transport for component `c` under the chosen mode, or the blocking
/// skip that says no transport can carry it.
fn transport_for(
    input: &PlanningInput,
    server: ServerUuid,
    c: &Component,
) -> Result<TransportKind, Skip> {
    TransportKind::choose(c.kind, input.options.transport).ok_or_else(|| {
        server_component_skip(
            input,
            server,
            &c.name,
            SkipReason::TransportUnsupported {
                kind: c.kind.as_str().to_string(),
            },
            true,
        )
    })
}

/// How component `c` reaches a server that must run a step now, or the
/// blocking skip that says why it cannot (not running, no transport).
fn runnable_transport(
    input: &PlanningInput,
    server: ServerUuid,
    state: &ServerState,
    c: &Component,
) -> Result<TransportKind, Skip> {
    match not_running_skip(input, server, state) {
        Some(skip) => Err(skip),
        None => transport_for(input, server, c),
    }
}

/// Leave out excluded and not-set-up servers. Returns whether the server
/// stays in play.
fn server_in_play(
    input: &PlanningInput,
    selected: &Selected,
    server: ServerUuid,
    skips: &mut Vec<Skip>,
) -> bool {
    if selected.excluded.contains(&server) {
        skips.push(server_skip(input, server, SkipReason::Excluded, false));
        return false;
    }
    let Some(state) = input.reality.get(&server) else {
        return false;
    };
    if !state.setup {
        // With `--all`, servers that are not set up are expected (sdcadm
        // counting them as failures is one of the quirks operators hate).
        skips.push(server_skip(
            input,
            server,
            SkipReason::NotSetup,
            selected.named,
        ));
        return false;
    }
    true
}

/// The marlin-agent warning: named explicitly and about to be changed.
fn non_bulk_warning(plan: &mut Plan, catalog: &Catalog) {
    let mut touched: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for sp in plan.servers.values() {
        for st in &sp.steps {
            if catalog.get(&st.component).is_some_and(|c| !c.bulk_update) {
                touched.entry(&st.component).or_default().push(&sp.hostname);
            }
        }
    }
    let mut warnings = Vec::new();
    for (component, hosts) in touched {
        let mut shown: Vec<&str> = hosts.iter().copied().take(10).collect();
        if hosts.len() > 10 {
            shown.push("...");
        }
        warnings.push(format!(
            "{component}: restarting it aborts running Manta jobs on {} server{} ({}); -y is required",
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" },
            shown.join(", ")
        ));
    }
    if !warnings.is_empty() {
        plan.needs_explicit_yes = true;
        plan.warnings.extend(warnings);
    }
}

fn plan_update(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let catalog = input.catalog;
    let intent = input.intent;
    let mut plan = empty_plan(input, &selected);
    let (candidates, named_components) = match &input.request.components {
        ComponentSelection::All => {
            let mut all: Vec<&Component> = catalog.iter().collect();
            crate::catalog::sort_install_order(&mut all);
            (all, false)
        }
        ComponentSelection::Named(names) if names.is_empty() => {
            return Err(PlanError::NoComponents);
        }
        ComponentSelection::Named(names) => (named_components(catalog, names)?, true),
    };

    // Decide once per component whether it is in play at all.
    let mut active: Vec<&Component> = Vec::new();
    for c in candidates {
        if !named_components && !c.bulk_update {
            plan.skips
                .push(component_skip(&c.name, SkipReason::NotBulk, false));
            continue;
        }
        if !intent.is_managed(&c.name) {
            // Never touched; only worth an exit status 2 when asked for by name.
            plan.skips.push(component_skip(
                &c.name,
                SkipReason::Unmanaged,
                named_components,
            ));
            continue;
        }
        if let Some(looked_in) = input.images.unavailable.get(&c.name) {
            plan.skips.push(component_skip(
                &c.name,
                SkipReason::NoImageAvailable {
                    looked_in: looked_in.clone(),
                },
                named_components,
            ));
            continue;
        }
        active.push(c);
    }
    plan.components = active.iter().map(|c| c.name.clone()).collect();
    plan.targets
        .retain(|name, _| plan.components.contains(name));

    // The service default moves with a whole-service update, so that new
    // servers get the new image; `-s` updates only the named instances.
    if !selected.named {
        for c in &active {
            if let (Some(target), Some(svc)) = (
                input.images.targets.get(&c.name),
                intent.services.get(&c.name),
            ) && svc.default_image != Some(target.uuid)
                && !(input.images.no_downgrade
                    && svc
                        .default_image
                        .and_then(|i| input.images.lookup(&i))
                        .is_some_and(|r| is_newer(&r.version, &target.version)))
            {
                plan.service_changes.push(ServiceChange {
                    component: c.name.clone(),
                    service: svc.uuid,
                    from: svc.default_image,
                    from_version: svc
                        .default_image
                        .and_then(|i| input.images.lookup(&i))
                        .map(|r| r.version.clone()),
                    to: target.clone(),
                });
            }
        }
    }

    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut plan.skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let mut steps = Vec::new();
        let mut changes = Vec::new();
        let mut skips = Vec::new();
        for c in &active {
            let Some(installed) = state.components.get(&c.name) else {
                // With --all, opt-in components missing on most servers are
                // the normal state, not a skip.
                if named_components {
                    skips.push(server_component_skip(
                        input,
                        server,
                        &c.name,
                        SkipReason::ComponentAbsent,
                        false,
                    ));
                }
                continue;
            };
            let target = match input.images.targets.get(&c.name) {
                Some(t) => t,
                None => match intent.intended_image(&server, &c.name) {
                    None => {
                        skips.push(server_component_skip(
                            input,
                            server,
                            &c.name,
                            SkipReason::NoTargetImage,
                            named_components,
                        ));
                        continue;
                    }
                    Some(image) => match input.images.lookup(&image) {
                        Some(t) => t,
                        None if installed.image == Some(image) => {
                            // Already running what SAPI intends; the image
                            // being absent from IMGAPI does not matter.
                            continue;
                        }
                        None => {
                            skips.push(server_component_skip(
                                input,
                                server,
                                &c.name,
                                SkipReason::ImageNotInDc { image },
                                true,
                            ));
                            continue;
                        }
                    },
                },
            };
            if input.images.no_downgrade && is_newer(&installed.version, &target.version) {
                skips.push(server_component_skip(
                    input,
                    server,
                    &c.name,
                    SkipReason::NewerInstalled {
                        version: installed.version.clone(),
                        latest: target.version.clone(),
                    },
                    false,
                ));
                continue;
            }
            if installed.image != Some(target.uuid) {
                let transport = match transport_for(input, server, c) {
                    Ok(t) => t,
                    Err(skip) => {
                        skips.push(skip);
                        continue;
                    }
                };
                steps.push(Step {
                    component: c.name.clone(),
                    order: c.order,
                    action: Action::Upgrade {
                        from: installed.into(),
                        to: target.clone(),
                    },
                    transport,
                });
            }
            match intent.instance(&server, &c.name) {
                Some(i) if i.link == InstanceLink::Params && i.image == Some(target.uuid) => {}
                Some(i) => changes.push(IntentChange::UpdateInstance {
                    component: c.name.clone(),
                    service: i.service,
                    instance: i.uuid,
                    image: target.uuid,
                }),
                None => {
                    // Installed but never adopted: adopt the UUID the server
                    // keeps. Without one, the installer adopts on its next run.
                    if let (Some(instance), Some(svc)) =
                        (installed.instance, intent.services.get(&c.name))
                    {
                        changes.push(IntentChange::CreateInstance {
                            component: c.name.clone(),
                            service: svc.uuid,
                            instance,
                            image: target.uuid,
                        });
                    }
                }
            }
        }
        plan.skips.extend(skips);
        if let Some(skip) = not_running_skip(input, server, state).filter(|_| !steps.is_empty()) {
            plan.skips.push(skip);
            continue;
        }
        if !steps.is_empty() || !changes.is_empty() {
            plan.servers.insert(
                server,
                ServerPlan {
                    hostname: state.hostname.clone(),
                    headnode: state.headnode,
                    steps,
                    intent: changes,
                },
            );
        }
    }
    finish(input, plan)
}

/// The one component `install` / `remove` act on.
fn single_component<'c>(input: &PlanningInput<'c>) -> Result<&'c Component, PlanError> {
    match &input.request.components {
        ComponentSelection::Named(names) if names.len() == 1 => {
            Ok(input.catalog.require(&names[0])?)
        }
        ComponentSelection::Named(names) => Err(PlanError::OneComponent {
            operation: input.request.operation.as_str(),
            count: names.len(),
        }),
        ComponentSelection::All => Err(PlanError::OneComponent {
            operation: input.request.operation.as_str(),
            count: input.catalog.len(),
        }),
    }
}

fn plan_install(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    let Some(service) = input.intent.services.get(&c.name) else {
        return Err(PlanError::Unmanaged {
            component: c.name.clone(),
        });
    };
    let target =
        match input.images.targets.get(&c.name) {
            Some(t) => t.clone(),
            None => {
                let image = service
                    .default_image
                    .ok_or_else(|| PlanError::NoInstallImage {
                        component: c.name.clone(),
                    })?;
                input.images.lookup(&image).cloned().ok_or_else(|| {
                    PlanError::InstallImageMissing {
                        component: c.name.clone(),
                        image,
                    }
                })?
            }
        };
    let mut plan = empty_plan(input, &selected);
    plan.components = vec![c.name.clone()];
    plan.targets = BTreeMap::from([(c.name.clone(), target.clone())]);
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut plan.skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        if let Some(installed) = state.components.get(&c.name) {
            plan.skips.push(server_component_skip(
                input,
                server,
                &c.name,
                SkipReason::AlreadyInstalled {
                    version: installed.version.clone(),
                },
                false,
            ));
            continue;
        }
        let transport = match runnable_transport(input, server, state, c) {
            Ok(t) => t,
            Err(skip) => {
                plan.skips.push(skip);
                continue;
            }
        };
        plan.servers.insert(
            server,
            ServerPlan {
                hostname: state.hostname.clone(),
                headnode: state.headnode,
                steps: vec![Step {
                    component: c.name.clone(),
                    order: c.order,
                    action: Action::Install { to: target.clone() },
                    transport,
                }],
                intent: vec![IntentChange::AdoptInstalled {
                    component: c.name.clone(),
                    service: service.uuid,
                    image: target.uuid,
                }],
            },
        );
    }
    finish(input, plan)
}

fn plan_remove(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    if c.order == OrderClass::CoreLast {
        return Err(PlanError::CannotRemove {
            component: c.name.clone(),
            reason: "it is how CNAPI reaches the server; removing it cuts the server off",
        });
    }
    if !input.intent.is_managed(&c.name) {
        return Err(PlanError::Unmanaged {
            component: c.name.clone(),
        });
    }
    let mut plan = empty_plan(input, &selected);
    plan.components = vec![c.name.clone()];
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut plan.skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let mut changes: Vec<IntentChange> = input
            .intent
            .instance(&server, &c.name)
            .map(|i| i.uuid)
            .into_iter()
            .chain(input.intent.duplicates_of(&server, &c.name))
            .map(|instance| IntentChange::DeleteInstance {
                component: c.name.clone(),
                instance,
            })
            .collect();
        changes.sort_by_key(|ch| match ch {
            IntentChange::DeleteInstance { instance, .. } => Some(*instance),
            _ => None,
        });
        let mut steps = Vec::new();
        if let Some(installed) = state.components.get(&c.name) {
            let transport = match runnable_transport(input, server, state, c) {
                Ok(t) => t,
                Err(skip) => {
                    plan.skips.push(skip);
                    continue;
                }
            };
            steps.push(Step {
                component: c.name.clone(),
                order: c.order,
                action: Action::Remove {
                    installed: installed.into(),
                },
                transport,
            });
        } else if changes.is_empty() {
            plan.skips.push(server_component_skip(
                input,
                server,
                &c.name,
                SkipReason::NotInstalled,
                false,
            ));
            continue;
        }
        plan.servers.insert(
            server,
            ServerPlan {
                hostname: state.hostname.clone(),
                headnode: state.headnode,
                steps,
                intent: changes,
            },
        );
    }
    finish(input, plan)
}

/// Whether version `a` is strictly newer than `b`. Agent versions are
/// semver with the build in the prerelease part
/// (`1.2.0-master-20260301T000000Z-g96cbc65`), so semver order is release
/// order for one branch. Unparsable versions are never called newer.
pub fn is_newer(a: &str, b: &str) -> bool {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

/// Common tail: imports for targets that some step or service change uses,
/// the non-bulk warning, and a stable skip order.
fn finish(input: &PlanningInput, mut plan: Plan) -> Result<Plan, PlanError> {
    let used: BTreeSet<ImageUuid> = plan
        .servers
        .values()
        .flat_map(|s| {
            s.steps
                .iter()
                .filter_map(|st| st.action.target().map(|t| t.uuid))
        })
        .chain(plan.service_changes.iter().map(|c| c.to.uuid))
        .collect();
    let mut imports: Vec<ImageRef> = plan
        .targets
        .values()
        .filter(|t| t.import_from.is_some() && used.contains(&t.uuid))
        .cloned()
        .collect();
    imports.sort();
    imports.dedup();
    plan.imports = imports;
    non_bulk_warning(&mut plan, input.catalog);
    plan.skips.sort();
    Ok(plan)
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
