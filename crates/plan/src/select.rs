//! What a request puts in play, before any per-server decision: the
//! servers it names (or all of them) less those excluded, the components
//! it names checked against the catalog, whether a server can take part at
//! all, and how a component reaches a server.

use agentsadm_types::component::ComponentName;
use std::collections::{BTreeMap, BTreeSet};

use super::PlanError;
use super::request::ComponentSelection;
use super::request::PlanningInput;
use super::request::ServerSelection;
use super::request::TransportKind;
use super::skip::Skip;
use super::skip::SkipReason;
use super::skip::not_running_skip;
use super::skip::server_component_skip;
use super::skip::server_skip;
use crate::reality::Reality;
use crate::reality::ServerState;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ServerUuid;

/// The servers a request selects, in UUID order, plus those excluded.
pub(super) struct Selected {
    pub(super) servers: Vec<ServerUuid>,
    pub(super) excluded: BTreeSet<ServerUuid>,
    /// Whether the servers were named (`-s`) rather than all.
    pub(super) named: bool,
}

pub(super) fn select_servers(input: &PlanningInput) -> Result<Selected, PlanError> {
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

/// A headnode-only component (catalog placement) is planned for the
/// headnode only: without `-s` the compute nodes are not in play, and a
/// compute node named with `-s` refuses the plan (the installer on it would
/// refuse the step at run time, counted against the failure budget).
pub(super) fn for_placement(
    input: &PlanningInput,
    c: &Component,
    mut selected: Selected,
) -> Result<Selected, PlanError> {
    refuse_misplaced(input, c, &selected)?;
    selected.servers.retain(|s| placed_on(input, c, *s));
    Ok(selected)
}

/// Whether the catalog lets component `c` live on `server` (a
/// headnode-only component: the headnode alone).
pub(super) fn placed_on(input: &PlanningInput, c: &Component, server: ServerUuid) -> bool {
    c.placement != agentsadm_types::catalog::Placement::HeadnodeOnly
        || input.reality.get(&server).is_some_and(|st| st.headnode)
}

/// Refuse a plan for headnode-only component `c` on a compute node named
/// with `-s` ([`for_placement`]); servers selected as all are fine.
pub(super) fn refuse_misplaced(
    input: &PlanningInput,
    c: &Component,
    selected: &Selected,
) -> Result<(), PlanError> {
    if !selected.named {
        return Ok(());
    }
    let compute: Vec<String> = selected
        .servers
        .iter()
        .filter(|s| !placed_on(input, c, **s))
        .map(|s| {
            input
                .reality
                .get(s)
                .map_or_else(|| s.to_string(), |st| st.hostname.clone())
        })
        .collect();
    if compute.is_empty() {
        return Ok(());
    }
    Err(PlanError::HeadnodeOnly {
        component: c.name.to_string(),
        servers: compute,
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
pub(super) fn named_components<'c>(
    catalog: &'c Catalog,
    names: &[ComponentName],
) -> Result<Vec<&'c Component>, PlanError> {
    let mut out: Vec<&Component> = Vec::new();
    for n in names {
        let c = catalog.require(n)?;
        if !out.iter().any(|o| o.name == c.name) {
            out.push(c);
        }
    }
    agentsadm_types::catalog::sort_install_order(&mut out);
    Ok(out)
}

/// The one component `install` / `remove` act on.
pub(super) fn single_component<'c>(input: &PlanningInput<'c>) -> Result<&'c Component, PlanError> {
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

/// Leave out excluded and not-set-up servers. Returns whether the server
/// stays in play.
pub(super) fn server_in_play(
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
    if let Some(problem) = &state.quarantine {
        skips.push(server_skip(
            input,
            server,
            SkipReason::Quarantined {
                problem: problem.clone(),
            },
            true,
        ));
        return false;
    }
    true
}

/// The transport for component `c` under the chosen mode, or the blocking
/// skip that says no transport can carry it.
pub(super) fn transport_for(
    input: &PlanningInput,
    server: ServerUuid,
    c: &Component,
) -> Result<TransportKind, Skip> {
    let transport = TransportKind::choose(c.kind, input.options.transport).ok_or_else(|| {
        server_component_skip(
            input,
            server,
            &c.name,
            SkipReason::TransportUnsupported {
                kind: c.kind.as_str().to_string(),
            },
            true,
        )
    })?;
    let reached = input.reality.get(&server).is_none_or(|s| s.has_execute());
    if transport == TransportKind::Execute && !reached {
        // Blocking only when the operator named the component: `--all`
        // cannot reach it on mockcloud servers, and never will.
        let named = matches!(input.request.components, ComponentSelection::Named(_));
        return Err(server_component_skip(
            input,
            server,
            &c.name,
            SkipReason::NoExecute,
            named,
        ));
    }
    Ok(transport)
}

/// Whether `agentsadm gz` can run on `server` for health checks: the mode
/// allows execute and the server has it.
pub(super) fn execute_available(input: &PlanningInput, server: ServerUuid) -> bool {
    input.options.transport.execute_available()
        && input.reality.get(&server).is_none_or(|s| s.has_execute())
}

/// How component `c` reaches a server that must run a step now, or the
/// blocking skip that says why it cannot (not running, no transport).
pub(super) fn runnable_transport(
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
