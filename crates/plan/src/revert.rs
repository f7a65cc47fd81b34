//! `agentsadm revert RUN`: put back what one recorded run changed.
//!
//! For every (server, component) the run changed (its step completed and
//! was not rolled back by the health gate):
//!
//! - the server still runs what the run left there: the step that puts
//!   back what it ran before (an upgrade back to the image before, the
//!   removal of what the run installed, the install of what it removed),
//!   with the SAPI instance written as for any update, install or removal
//!   (`params.image_uuid` names the image before, first);
//! - it runs something else now: skipped, naming the later run that
//!   changed it when the history knows one ("changed since by run
//!   7c1d...: now 1.2.0"), else "changed outside agentsadm";
//! - the image before is no longer in the datacenter IMGAPI: skipped
//!   (blocking: nothing can put it back).
//!
//! A step whose end the run does not know (left running at an interrupt,
//! cut by an outage, timed out) may have changed the server: it is put
//! back when the server runs what the step installed, and is nothing to
//! do when it still runs what it ran before. What the run's record cannot
//! say enough about to put back (no server UUID, no image before an
//! upgrade, an unknown component) is named with the reason
//! ([`RevertRequest::left_out`]), never left out silently.
//!
//! The service defaults the run moved go back the same way, when they
//! still name what the run set. The plan is an ordinary plan (waves,
//! canaries, budget, gates), made through the builder, and says which run
//! it reverts ([`crate::Plan::reverts`]), so that the revert is recorded
//! in the history as reverting it, and can itself be reverted.

use std::collections::BTreeMap;

use super::PlanError;
use super::builder::PlanBuilder;
use super::request::{ImageRef, Operation, PlanningInput};
use super::select::{execute_available, runnable_transport};
use super::skip::{Skip, SkipReason, component_skip, server_component_skip, server_skip};
use super::types::{Action, IntentChange, Plan, RevertOf, ServiceChange};
use super::update::instance_target;
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::{ImageUuid, ServerUuid};

/// One component on one server as the run changed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevertChange {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: ComponentName,
    /// What it ran before the run (`None`: not installed).
    pub before: Option<ImageUuid>,
    /// What the run left (`None`: removed).
    pub after: Option<ImageUuid>,
    /// The run knows the step ended (done, or installed though its gate
    /// could not run). Otherwise it may or may not have changed the
    /// server: a server still running `before` is nothing to put back.
    pub settled: bool,
}

/// Something the run changed, or may have, that the revert cannot put
/// back from the run's record, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    pub server: Option<ServerUuid>,
    pub hostname: String,
    /// The component as the record names it.
    pub component: String,
    pub why: String,
}

/// A service default the run moved (and a halt did not put back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRevert {
    pub component: ComponentName,
    pub before: ImageUuid,
    pub after: ImageUuid,
}

/// What a revert reads besides the datacenter: the run, what it changed,
/// and the later runs that touched the same things.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevertRequest {
    pub of: RevertOf,
    pub changes: Vec<RevertChange>,
    pub services: Vec<ServiceRevert>,
    /// The newest later run that changed a (server, component), as it is
    /// named in skips (`run 7c1d2e3f (update vm-agent)`).
    pub later: BTreeMap<(ServerUuid, ComponentName), String>,
    /// The same for service defaults, by component.
    pub later_services: BTreeMap<ComponentName, String>,
    /// What the record cannot say enough about to put back.
    pub left_out: Vec<LeftOut>,
}

/// The revert plan. `input.request` names the operation (revert) and
/// the components; `input.images.known` must hold the images before (the
/// ones not there are skipped).
pub fn plan_revert(input: &PlanningInput, revert: &RevertRequest) -> Result<Plan, PlanError> {
    // Holds and disables are the planner's rules: a revert honours them
    // (a held server is left out, not refused: no server was named).
    let mut b = PlanBuilder::for_request(Operation::Revert, input, false);
    let mut servers: Vec<ServerUuid> = revert.changes.iter().map(|c| c.server).collect();
    servers.sort();
    servers.dedup();
    b.selected_servers(servers.len())
        .reverts(revert.of.clone())
        .components(revert.changes.iter().map(|c| c.component.clone()))
        .components(revert.services.iter().map(|s| s.component.clone()));
    let mut skips = Vec::new();
    for s in &revert.services {
        match service_back(input, revert, s) {
            Ok(Some(change)) => {
                b.service_change(change);
            }
            Ok(None) => {}
            Err(skip) => skips.push(skip),
        }
    }
    for change in &revert.changes {
        if let Err(skip) = server_back(input, revert, change, &mut b) {
            skips.push(skip);
        }
    }
    for l in &revert.left_out {
        skips.push(Skip {
            server: l.server,
            hostname: Some(l.hostname.clone()),
            component: l.component.parse().ok(),
            reason: SkipReason::NotRecorded {
                component: l.component.as_str().into(),
                why: l.why.as_str().into(),
            },
            blocking: true,
        });
    }
    for skip in skips {
        b.skip(skip);
    }
    b.durations(input.durations);
    Ok(b.finish(&input.options.rollout))
}

/// Why a (server, component) is no longer what the run left.
fn changed_since(now: String, by: Option<&String>) -> SkipReason {
    SkipReason::ChangedSince {
        now,
        by: by
            .map_or(
                "outside agentsadm (no later run in the history)",
                String::as_str,
            )
            .into(),
    }
}

fn version_of(input: &PlanningInput, image: Option<ImageUuid>) -> String {
    match image {
        None => "unset".into(),
        Some(i) => input
            .images
            .lookup(&i)
            .map(|r| r.version.to_string())
            .unwrap_or_else(|| i.to_string()),
    }
}

/// The service default back to what it was, if it still names what the
/// run set; `Ok(None)` when it already names the image before.
fn service_back(
    input: &PlanningInput,
    revert: &RevertRequest,
    s: &ServiceRevert,
) -> Result<Option<ServiceChange>, Skip> {
    let Some(svc) = input.intent.services.get(&s.component) else {
        return Err(component_skip(&s.component, SkipReason::Unmanaged, false));
    };
    if svc.default_image == Some(s.before) {
        return Ok(None);
    }
    if svc.default_image != Some(s.after) {
        let now = format!("service default {}", version_of(input, svc.default_image));
        return Err(component_skip(
            &s.component,
            changed_since(now, revert.later_services.get(&s.component)),
            false,
        ));
    }
    let Some(to) = input.images.lookup(&s.before) else {
        return Err(component_skip(
            &s.component,
            SkipReason::ImageNotInDc { image: s.before },
            true,
        ));
    };
    Ok(Some(ServiceChange {
        component: s.component.clone(),
        service: svc.uuid,
        from: Some(s.after),
        from_version: input.images.lookup(&s.after).map(|r| r.version.clone()),
        to: to.clone(),
    }))
}

/// One (server, component) back to what it ran before, through the
/// builder; the skip that says why not.
fn server_back(
    input: &PlanningInput,
    revert: &RevertRequest,
    change: &RevertChange,
    b: &mut PlanBuilder,
) -> Result<(), Skip> {
    let skip = |reason, blocking| {
        server_component_skip(input, change.server, &change.component, reason, blocking)
    };
    let Some(c) = input.catalog.get(&change.component) else {
        return Err(skip(SkipReason::Unmanaged, false));
    };
    let Some(state) = input.reality.get(&change.server) else {
        return Err(Skip {
            hostname: Some(change.hostname.clone()),
            ..server_skip(input, change.server, SkipReason::ServerGone, false)
        });
    };
    let installed = state.components.get(&change.component);
    if !change.settled && installed.and_then(|i| i.image) == change.before {
        // The step never took: nothing to put back.
        return Ok(());
    }
    if installed.and_then(|i| i.image) != change.after
        || installed.is_some() != change.after.is_some()
    {
        let now = installed
            .map(|i| format!("runs {}", i.version))
            .unwrap_or_else(|| "not installed".into());
        let by = revert.later.get(&(change.server, change.component.clone()));
        return Err(skip(changed_since(now, by), false));
    }
    let before: Option<&ImageRef> = match change.before {
        Some(image) => Some(
            input
                .images
                .lookup(&image)
                .ok_or_else(|| skip(SkipReason::ImageNotInDc { image }, true))?,
        ),
        None => None,
    };
    let transport = runnable_transport(input, change.server, state, c)?;
    let execute = execute_available(input, change.server);
    let service = input.intent.services.get(&change.component);
    let (action, intent): (Action, Vec<IntentChange>) = match (installed, before) {
        // An upgrade (or downgrade) back; the instance names it first.
        (Some(installed), Some(to)) => (
            Action::Upgrade {
                from: installed.into(),
                to: to.clone(),
            },
            instance_target(input, change.server, c, installed, to)
                .into_iter()
                .collect(),
        ),
        // The run installed it: remove it, and its instances.
        (Some(installed), None) => (
            Action::Remove {
                installed: installed.into(),
            },
            input
                .intent
                .instance(&change.server, &c.name)
                .map(|i| i.uuid)
                .into_iter()
                .chain(input.intent.duplicates_of(&change.server, &c.name))
                .map(|instance| IntentChange::DeleteInstance {
                    component: c.name.clone(),
                    instance,
                })
                .collect(),
        ),
        // The run removed it: install it again, and adopt what it reports.
        (None, Some(to)) => (
            Action::Install { to: to.clone() },
            service
                .map(|svc| IntentChange::AdoptInstalled {
                    component: c.name.clone(),
                    service: svc.uuid,
                    image: to.uuid,
                })
                .into_iter()
                .collect(),
        ),
        (None, None) => return Ok(()),
    };
    b.server_changes(state, execute, [(c, action, transport)], intent);
    Ok(())
}
