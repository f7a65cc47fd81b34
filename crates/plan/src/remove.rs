//! `agentsadm remove COMPONENT`: take one component off the named servers
//! and delete its SAPI instances (duplicates included); a server that no
//! longer has it only loses its instances. cn-agent is never removed.

use super::PlanError;
use super::empty_plan;
use super::finish;
use super::request::PlanningInput;
use super::select::Selected;
use super::select::runnable_transport;
use super::select::server_in_play;
use super::select::single_component;
use super::skip::SkipReason;
use super::skip::server_component_skip;
use super::types::Action;
use super::types::IntentChange;
use super::types::Plan;
use super::types::ServerPlan;
use super::types::Step;
use agentsadm_types::catalog::OrderClass;

/// The remove plan.
pub(super) fn plan_remove(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
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
                gate: crate::Gate::None,
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
                rack: state.rack.clone(),
                steps,
                intent: changes,
            },
        );
    }
    finish(input, plan)
}
