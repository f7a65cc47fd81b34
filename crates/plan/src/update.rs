//! `agentsadm update`: move installed components to their target image.
//!
//! The steps, each a function below:
//!
//! 1. [`components_in_play`]: which of the requested components take part
//!    at all (bulk-updatable with `--all`, managed, an image found).
//! 2. [`service_default_changes`]: a whole-service update also moves the
//!    service default, so that new servers get the new image.
//! 3. [`plan_server`], per selected server in play, component by
//!    component: the target ([`target_for`]: explicit, else what SAPI
//!    intends), an upgrade step when the server runs another image, and
//!    the SAPI instance write that records the target first
//!    ([`instance_target`]).
//! 4. A server with steps that is not running is skipped whole (blocking);
//!    one with SAPI writes only is still planned, as SAPI needs no server.

use super::PlanError;
use super::builder::PlanBuilder;
use super::is_newer;
use super::request::ComponentSelection;
use super::request::ImageRef;
use super::request::Operation;
use super::request::PlanningInput;
use super::request::TransportKind;
use super::select::Selected;
use super::select::execute_available;
use super::select::named_components;
use super::select::placed_on;
use super::select::refuse_misplaced;
use super::select::server_in_play;
use super::select::transport_for;
use super::skip::Skip;
use super::skip::SkipReason;
use super::skip::component_skip;
use super::skip::not_running_skip;
use super::skip::server_component_skip;
use super::types::Action;
use super::types::IntentChange;
use super::types::Plan;
use super::types::ServiceChange;
use crate::intent::InstanceLink;
use crate::reality::Installed;
use crate::reality::ServerState;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ServerUuid;

/// The update plan.
pub(super) fn plan_update(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let mut b = PlanBuilder::for_request(Operation::Update, input, selected.named);
    b.selected_servers(selected.servers.len());
    let mut skips = Vec::new();
    let (active, named_components) = components_in_play(input, &selected, &mut skips)?;
    // A headnode-only component named with a compute node refuses the plan
    // as install does; with --all it is simply not planned there.
    if named_components {
        for c in &active {
            refuse_misplaced(input, c, &selected)?;
        }
    }
    b.bulk(!named_components)
        .components(active.iter().map(|c| c.name.clone()));
    let mut targets = input.images.targets.clone();
    targets.retain(|name, _| active.iter().any(|c| c.name == *name));
    b.targets(targets);

    // The service default moves with a whole-service update, so that new
    // servers get the new image; `-s` updates only the named instances.
    if !selected.named {
        for change in service_default_changes(input, &active) {
            b.service_change(change);
        }
    }

    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let update = plan_server(input, server, state, &active, named_components);
        skips.extend(update.skips);
        if let Some(skip) =
            not_running_skip(input, server, state).filter(|_| !update.steps.is_empty())
        {
            skips.push(skip);
            continue;
        }
        if update.steps.is_empty() && update.intent.is_empty() {
            continue;
        }
        let execute = execute_available(input, server);
        b.server_changes(state, execute, update.steps, update.intent);
    }
    for skip in skips {
        b.skip(skip);
    }
    b.durations(input.durations);
    Ok(b.finish(&input.options.rollout))
}

/// The requested components that take part, in install order, and whether
/// they were named (rather than `--all`). Those left out get their skip,
/// decided once for every server.
fn components_in_play<'c>(
    input: &PlanningInput<'c>,
    selected: &Selected,
    skips: &mut Vec<Skip>,
) -> Result<(Vec<&'c Component>, bool), PlanError> {
    let catalog = input.catalog;
    let (candidates, named) = match &input.request.components {
        ComponentSelection::All => {
            let mut all: Vec<&Component> = catalog.iter().collect();
            agentsadm_types::catalog::sort_install_order(&mut all);
            (all, false)
        }
        ComponentSelection::Named(names) if names.is_empty() => {
            return Err(PlanError::NoComponents);
        }
        ComponentSelection::Named(names) => (named_components(catalog, names)?, true),
    };

    let mut active: Vec<&Component> = Vec::new();
    for c in candidates {
        if !named && !c.bulk_update {
            // Said only where it matters: a selected server runs it.
            let somewhere = selected.servers.iter().any(|s| {
                input
                    .reality
                    .get(s)
                    .is_some_and(|st| st.components.contains_key(&c.name))
            });
            if somewhere {
                skips.push(component_skip(&c.name, SkipReason::NotBulk, false));
            }
            continue;
        }
        if !input.intent.is_managed(&c.name) {
            // Never touched; only worth an exit status 2 when asked for by name.
            skips.push(component_skip(&c.name, SkipReason::Unmanaged, named));
            continue;
        }
        if let Some(looked_in) = input.images.unavailable.get(&c.name) {
            skips.push(component_skip(
                &c.name,
                SkipReason::NoImageAvailable {
                    looked_in: looked_in.clone(),
                },
                named,
            ));
            continue;
        }
        active.push(c);
    }
    Ok((active, named))
}

/// The service defaults to move to the explicit targets. With `--latest`,
/// a default newer than the latest image found stays.
fn service_default_changes(input: &PlanningInput, active: &[&Component]) -> Vec<ServiceChange> {
    let mut out = Vec::new();
    for c in active {
        let (Some(target), Some(svc)) = (
            input.images.targets.get(&c.name),
            input.intent.services.get(&c.name),
        ) else {
            continue;
        };
        let current = svc.default_image.and_then(|i| input.images.lookup(&i));
        if svc.default_image == Some(target.uuid)
            || (input.images.no_downgrade
                && current.is_some_and(|r| is_newer(&r.version, &target.version)))
        {
            continue;
        }
        out.push(ServiceChange {
            component: c.name.clone(),
            service: svc.uuid,
            from: svc.default_image,
            from_version: current.map(|r| r.version.clone()),
            to: target.clone(),
        });
    }
    out
}

/// What updating one server comes to.
#[derive(Default)]
struct ServerUpdate<'c> {
    steps: Vec<(&'c Component, Action, TransportKind)>,
    intent: Vec<IntentChange>,
    skips: Vec<Skip>,
}

/// One server's steps, SAPI writes and skips, component by component.
fn plan_server<'c>(
    input: &PlanningInput,
    server: ServerUuid,
    state: &ServerState,
    active: &[&'c Component],
    named_components: bool,
) -> ServerUpdate<'c> {
    let mut out = ServerUpdate::default();
    for c in active {
        if !placed_on(input, c, server) {
            continue;
        }
        let Some(installed) = state.components.get(&c.name) else {
            // With --all, opt-in components missing on most servers are
            // the normal state, not a skip.
            if named_components {
                out.skips.push(server_component_skip(
                    input,
                    server,
                    &c.name,
                    SkipReason::ComponentAbsent,
                    false,
                ));
            }
            continue;
        };
        let target = match target_for(input, server, c, installed, named_components) {
            Ok(Some(target)) => target,
            Ok(None) => continue,
            Err(skip) => {
                out.skips.push(skip);
                continue;
            }
        };
        if installed.image != Some(target.uuid) {
            let transport = match transport_for(input, server, c) {
                Ok(t) => t,
                Err(skip) => {
                    out.skips.push(skip);
                    continue;
                }
            };
            let action = Action::Upgrade {
                from: installed.into(),
                to: target.clone(),
            };
            out.steps.push((c, action, transport));
        }
        out.intent
            .extend(instance_target(input, server, c, installed, target));
    }
    out
}

/// The image component `c` should run on the server: the explicit target,
/// else the one SAPI intends. `Ok(None)`: nothing to do (the server runs
/// what SAPI intends, even if IMGAPI no longer has it). `Err`: the skip
/// that says why the component stays as it is.
fn target_for<'i>(
    input: &PlanningInput<'i>,
    server: ServerUuid,
    c: &Component,
    installed: &Installed,
    named_components: bool,
) -> Result<Option<&'i ImageRef>, Skip> {
    let skip = |reason, blocking| server_component_skip(input, server, &c.name, reason, blocking);
    let target = match input.images.targets.get(&c.name) {
        Some(t) => t,
        None => match input.intent.intended_image(&server, &c.name) {
            None => return Err(skip(SkipReason::NoTargetImage, named_components)),
            Some(image) => match input.images.lookup(&image) {
                Some(t) => t,
                // Already running what SAPI intends; the image being
                // absent from IMGAPI does not matter.
                None if installed.image == Some(image) => return Ok(None),
                None => return Err(skip(SkipReason::ImageNotInDc { image }, true)),
            },
        },
    };
    if input.images.no_downgrade && is_newer(&installed.version, &target.version) {
        return Err(skip(
            SkipReason::NewerInstalled {
                version: installed.version.to_string(),
                latest: target.version.to_string(),
            },
            false,
        ));
    }
    Ok(Some(target))
}

/// The SAPI write that makes the server's instance name `target` before
/// the steps run, so that an interrupted run, re-run, converges to the same
/// images; `None` when the instance already does.
pub(super) fn instance_target(
    input: &PlanningInput,
    server: ServerUuid,
    c: &Component,
    installed: &Installed,
    target: &ImageRef,
) -> Option<IntentChange> {
    let service_default = input
        .intent
        .services
        .get(&c.name)
        .and_then(|s| s.default_image);
    match input.intent.instance(&server, &c.name) {
        Some(i) if i.link == InstanceLink::Params && i.image == Some(target.uuid) => None,
        // A params-less instance the server lists in server.agents (as the
        // vm-agent and net-agent postinstalls leave them) follows the
        // service default: while the server runs that, nothing to write.
        Some(i)
            if i.link == InstanceLink::Reported
                && i.image.is_none()
                && installed.image == Some(target.uuid)
                && service_default == Some(target.uuid) =>
        {
            None
        }
        Some(i) => Some(IntentChange::UpdateInstance {
            component: c.name.clone(),
            service: i.service,
            instance: i.uuid,
            image: target.uuid,
            // Whatever carries the step (cn-agent's write after it is
            // whole already), the one write names the marks the instance
            // lost, so that the step leaves no work to `check --fix`.
            marks: input.intent.lost_mark_values(&server, &c.name),
        }),
        None => {
            // Installed but never adopted: adopt the UUID the server keeps.
            // Without one, the installer adopts on its next run.
            let (instance, svc) = (installed.instance?, input.intent.services.get(&c.name)?);
            Some(IntentChange::CreateInstance {
                component: c.name.clone(),
                service: svc.uuid,
                instance,
                image: target.uuid,
            })
        }
    }
}
