//! `agentsadm disable` and `enable` (issue 25): per selected server, the
//! mark in SAPI (`params.agentsadm_disabled` on the component's instance,
//! written before the step, so an interrupted run re-run converges) and a
//! step that runs `gz disable` / `gz enable` on the server through
//! execute (the installer's record keeps it off across later installs).
//!
//! Converged when SAPI already says so: whether the server's services
//! match is `check`'s finding (and `check --fix`'s repair), not a second
//! disable.

use super::PlanError;
use super::builder::PlanBuilder;
use super::request::{PlanningInput, TransportKind};
use super::select::{Selected, execute_available, server_in_play, single_component};
use super::skip::{SkipReason, not_running_skip, server_component_skip};
use super::types::{Action, IntentChange, MarkKey, Plan};
use crate::marks::Mark;

/// The plan of `disable` (`mark`: who, when, why) or `enable` (`None`).
pub(super) fn plan_switch(
    input: &PlanningInput,
    selected: Selected,
    mark: Option<&Mark>,
) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    if !input.intent.is_managed(&c.name) {
        return Err(PlanError::Unmanaged {
            component: c.name.to_string(),
        });
    }
    // Servers are always named here; holds stop only steps that move an
    // image, so a held component can still be disabled.
    let mut b = PlanBuilder::for_request(input.request.operation, input, true);
    b.selected_servers(selected.servers.len())
        .components([c.name.clone()]);
    let mut skips = Vec::new();
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let skip =
            |reason, blocking| server_component_skip(input, server, &c.name, reason, blocking);
        if !state.components.contains_key(&c.name) {
            skips.push(skip(SkipReason::ComponentAbsent, selected.named));
            continue;
        }
        let Some(instance) = input.intent.instance(&server, &c.name) else {
            skips.push(skip(SkipReason::Unmanaged, true));
            continue;
        };
        let now = input.intent.disabled(&server, &c.name);
        if now.is_some() == mark.is_some() {
            continue;
        }
        if let Some(s) = not_running_skip(input, server, state) {
            skips.push(s);
            continue;
        }
        if !execute_available(input, server) {
            skips.push(skip(SkipReason::NoExecute, true));
            continue;
        }
        let action = match mark {
            Some(m) => Action::Disable { mark: m.clone() },
            None => Action::Enable,
        };
        let change = IntentChange::Mark {
            component: c.name.clone(),
            service: instance.service,
            instance: instance.uuid,
            key: MarkKey::Disabled,
            mark: mark.cloned(),
        };
        b.server_changes(state, true, [(c, action, TransportKind::Execute)], [change]);
    }
    for s in skips {
        b.skip(s);
    }
    Ok(b.finish(&input.options.rollout))
}
