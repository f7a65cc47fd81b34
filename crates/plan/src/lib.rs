//! The planner: a pure function of (catalog, intent, reality, request,
//! options, resolved images) that decides everything execution will do.
//!
//! - No I/O, no clock, no randomness; `BTreeMap`s everywhere, so the same
//!   input always gives the same plan (and the same printed text).
//! - Image resolution (`--image`, `--latest`, `--channel`, imports) happens
//!   before, in [`agentsadm_orchestrate::images`]; the planner only sees resolved images.
//! - Every server selected but not changed for a reason other than "already
//!   converged" gets a [`Skip`] with that reason; skips that leave the
//!   datacenter short of what was asked are `blocking` (exit status 2).
//! - Per server, steps are sorted into the catalog's order classes:
//!   agents_core, config-agent, the parallel-safe set, cn-agent last.
//! - Intent is written per server around its steps: instance targets before
//!   (so an interrupted run re-run converges to the same images), instances
//!   of new installs and deletions of removed ones after (their UUIDs are
//!   born, or die, on the server).
//!
//! The parts: [`request`] (what the planner reads), [`types`] (the plan
//! and its vocabulary: steps, SAPI writes, record changes), [`PlanBuilder`]
//! (the only way to make a [`Plan`]; its `finish` holds the rules every
//! plan obeys), [`rollout`] (waves: canaries, order, budget, concurrency),
//! [`skip`] (what is left alone and why), `select` (servers, components
//! and transports in play), [`timing`] (what servers took before, for the
//! waves' order and expected finish), and one module per operation:
//! `update`, `install`, `remove`, and [`revert`] (put back what a recorded
//! run changed). The other changing commands (`check --fix`, `adopt`,
//! `server delete|factory-reset`) plan in their own crates through the
//! same builder.

use agentsadm_types::catalog::CatalogError;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

mod agentsadm;
mod builder;
pub mod display;
#[cfg(feature = "example")]
pub mod example;
mod hold;
mod install;
pub mod intent;
pub mod marks;
pub mod reality;
mod remove;
pub mod request;
pub mod revert;
pub mod rollout;
mod select;
pub mod skip;
mod switch;
pub mod timing;
pub mod types;
mod update;

pub use builder::PlanBuilder;
pub use intent::Intent;
pub use marks::{HoldScope, Holds, Mark};
pub use request::{
    ComponentSelection, ImageRef, Operation, PlanOptions, PlanningInput, Request, ResolvedImages,
    ServerSelection, TransportKind, TransportMode,
};
pub use rollout::{
    CanaryBasis, CanaryChoice, DEFAULT_CONCURRENCY, FailureBudget, PassedOver, Rollout,
    RolloutPolicy, Wave, WaveServer, default_canary, pick_canaries,
};
pub use select::resolve_servers;
pub use skip::{AgentsadmShort, Skip, SkipReason};
pub use types::{
    Action, ExplicitYes, Gate, HealthFlags, InstalledRef, IntentChange, KeptRecord, MarkKey,
    MinVersion, Plan, PlanCounts, RecordChange, RevertOf, ServerCall, ServerPlan, ServiceChange,
    Step,
};

use select::select_servers;

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
    #[error("{operation} is not planned from a request (its own planner makes the plan)")]
    NotARequest { operation: &'static str },
    #[error("refusing to remove {component}: {reason}")]
    CannotRemove {
        component: String,
        reason: &'static str,
    },
    #[error(
        "{component} goes on the headnode only (catalog placement headnode-only), and {} {servers} {}: name the headnode with -s, or leave -s out",
        if servers.len() == 1 { "server" } else { "servers" },
        if servers.len() == 1 { "is a compute node" } else { "are compute nodes" },
        servers = servers.join(", ")
    )]
    HeadnodeOnly {
        component: String,
        servers: Vec<String>,
    },
}

/// Compute the plan. Pure: the same input gives the same plan.
pub fn plan(input: &PlanningInput) -> Result<Plan, PlanError> {
    let selected = select_servers(input)?;
    match input.request.operation {
        Operation::Update => update::plan_update(input, selected),
        Operation::Install => install::plan_install(input, selected),
        Operation::Remove => remove::plan_remove(input, selected),
        other => Err(PlanError::NotARequest {
            operation: other.as_str(),
        }),
    }
}

/// The plan of `disable` (`Some(mark)`: who, when, why) or `enable`
/// (`None`) of the request's one component on its servers. Pure.
pub fn plan_disable(input: &PlanningInput, mark: Option<&Mark>) -> Result<Plan, PlanError> {
    let selected = select_servers(input)?;
    switch::plan_switch(input, selected, mark)
}

/// The plan of `hold` (`Some(mark)`) or `release` (`None`) of the
/// request's one component: on its servers, or datacenter-wide when the
/// request names none. SAPI writes only. Pure.
pub fn plan_hold(input: &PlanningInput, mark: Option<&Mark>) -> Result<Plan, PlanError> {
    let selected = select_servers(input)?;
    hold::plan_hold(input, selected, mark)
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
