//! `agentsadm remove COMPONENT`: take one component off the named servers
//! and delete its SAPI instances (duplicates included); a server that no
//! longer has it only loses its instances. cn-agent is never removed.

use super::PlanError;
use super::builder::PlanBuilder;
use super::request::Operation;
use super::request::PlanningInput;
use super::select::Selected;
use super::select::execute_available;
use super::select::runnable_transport;
use super::select::server_in_play;
use super::select::single_component;
use super::skip::SkipReason;
use super::skip::server_component_skip;
use super::types::Action;
use super::types::IntentChange;
use super::types::Plan;
use agentsadm_types::catalog::OrderClass;

/// The remove plan.
pub(super) fn plan_remove(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    if c.order == OrderClass::CoreLast {
        return Err(PlanError::CannotRemove {
            component: c.name.to_string(),
            reason: "it is how CNAPI reaches the server; removing it cuts the server off",
        });
    }
    if !input.intent.is_managed(&c.name) {
        return Err(PlanError::Unmanaged {
            component: c.name.to_string(),
        });
    }
    let mut b = PlanBuilder::for_request(Operation::Remove, input, selected.named);
    b.selected_servers(selected.servers.len())
        .components([c.name.clone()])
        .targets(input.images.targets.clone());
    let mut skips = Vec::new();
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        let mut deletes: Vec<_> = input
            .intent
            .instance(&server, &c.name)
            .map(|i| i.uuid)
            .into_iter()
            .chain(input.intent.duplicates_of(&server, &c.name))
            .collect();
        deletes.sort();
        if let Some(installed) = state.components.get(&c.name) {
            let transport = match runnable_transport(input, server, state, c) {
                Ok(t) => t,
                Err(skip) => {
                    skips.push(skip);
                    continue;
                }
            };
            let action = Action::Remove {
                installed: installed.into(),
            };
            b.step(
                state,
                execute_available(input, server),
                c,
                action,
                transport,
            );
        } else if deletes.is_empty() {
            skips.push(server_component_skip(
                input,
                server,
                &c.name,
                SkipReason::NotInstalled,
                false,
            ));
            continue;
        }
        for instance in deletes {
            b.intent(
                state,
                IntentChange::DeleteInstance {
                    component: c.name.clone(),
                    instance,
                },
            );
        }
    }
    for skip in skips {
        b.skip(skip);
    }
    b.durations(input.durations);
    Ok(b.finish(&input.options.rollout))
}
