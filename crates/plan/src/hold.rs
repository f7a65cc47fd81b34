//! `agentsadm hold` and `release` (issues 25, 31): the hold written to
//! SAPI, planned like every change so that it runs through the one run
//! (`-n`, `-y`, the lock, the history). Nothing but SAPI is written: a
//! per-server hold is `params.agentsadm_hold` on the component's instance
//! there, a datacenter-wide one (no `-s`) the same param on its service.
//! Converged (nothing planned) when SAPI already says so.

use super::PlanError;
use super::builder::PlanBuilder;
use super::request::{PlanningInput, ServerSelection};
use super::select::{Selected, server_in_play, single_component};
use super::skip::{SkipReason, server_component_skip};
use super::types::{IntentChange, MarkKey, Plan, RecordChange};
use crate::marks::Mark;

/// The plan of `hold` (`mark`: who, when, why) or `release` (`None`).
pub(super) fn plan_hold(
    input: &PlanningInput,
    selected: Selected,
    mark: Option<&Mark>,
) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    let Some(service) = input.intent.services.get(&c.name) else {
        return Err(PlanError::Unmanaged {
            component: c.name.to_string(),
        });
    };
    let mut b = PlanBuilder::for_request(input.request.operation, input, true);
    b.components([c.name.clone()]);
    if input.request.servers == ServerSelection::All {
        let now = input.intent.holds.services.get(&c.name);
        if now.is_some() != mark.is_some() {
            b.record(RecordChange::ServiceMark {
                component: c.name.clone(),
                service: service.uuid,
                key: MarkKey::Hold,
                mark: mark.cloned(),
            });
        }
        return Ok(b.finish(&input.options.rollout));
    }
    b.selected_servers(selected.servers.len());
    let mut skips = Vec::new();
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let Some(instance) = input.intent.instance(&server, &c.name) else {
            skips.push(server_component_skip(
                input,
                server,
                &c.name,
                SkipReason::Unmanaged,
                true,
            ));
            continue;
        };
        let now = input
            .intent
            .holds
            .servers
            .get(&server)
            .and_then(|h| h.get(&c.name));
        if now.is_some() == mark.is_some() {
            continue;
        }
        b.record(RecordChange::Instance {
            server: Some(server),
            hostname: Some(state.hostname.clone()),
            change: IntentChange::Mark {
                component: c.name.clone(),
                service: instance.service,
                instance: instance.uuid,
                key: MarkKey::Hold,
                mark: mark.cloned(),
            },
        });
    }
    for s in skips {
        b.skip(s);
    }
    Ok(b.finish(&input.options.rollout))
}
