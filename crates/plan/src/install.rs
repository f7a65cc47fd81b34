//! `agentsadm install COMPONENT`: put one managed component on the
//! selected servers that lack it, at the explicit target or the service's
//! default image, and adopt the instance each server reports afterwards.

use std::collections::BTreeMap;

use super::PlanError;
use super::builder::PlanBuilder;
use super::request::Operation;
use super::request::PlanningInput;
use super::select::Selected;
use super::select::execute_available;
use super::select::for_placement;
use super::select::runnable_transport;
use super::select::server_in_play;
use super::select::single_component;
use super::skip::SkipReason;
use super::skip::server_component_skip;
use super::types::Action;
use super::types::IntentChange;
use super::types::Plan;

/// The install plan.
pub(super) fn plan_install(input: &PlanningInput, selected: Selected) -> Result<Plan, PlanError> {
    let c = single_component(input)?;
    let selected = for_placement(input, c, selected)?;
    let Some(service) = input.intent.services.get(&c.name) else {
        return Err(PlanError::Unmanaged {
            component: c.name.to_string(),
        });
    };
    let target =
        match input.images.targets.get(&c.name) {
            Some(t) => t.clone(),
            None => {
                let image = service
                    .default_image
                    .ok_or_else(|| PlanError::NoInstallImage {
                        component: c.name.to_string(),
                    })?;
                input.images.lookup(&image).cloned().ok_or_else(|| {
                    PlanError::InstallImageMissing {
                        component: c.name.to_string(),
                        image,
                    }
                })?
            }
        };
    let mut b = PlanBuilder::for_request(Operation::Install, input, selected.named);
    b.selected_servers(selected.servers.len())
        .components([c.name.clone()])
        .targets(BTreeMap::from([(c.name.clone(), target.clone())]));
    let mut skips = Vec::new();
    for &server in &selected.servers {
        if !server_in_play(input, &selected, server, &mut skips) {
            continue;
        }
        let Some(state) = input.reality.get(&server) else {
            continue;
        };
        if let Some(installed) = state.components.get(&c.name) {
            skips.push(server_component_skip(
                input,
                server,
                &c.name,
                SkipReason::AlreadyInstalled {
                    version: installed.version.to_string(),
                },
                false,
            ));
            continue;
        }
        let transport = match runnable_transport(input, server, state, c) {
            Ok(t) => t,
            Err(skip) => {
                skips.push(skip);
                continue;
            }
        };
        let execute = execute_available(input, server);
        b.step(
            state,
            execute,
            c,
            Action::Install { to: target.clone() },
            transport,
        )
        .intent(
            state,
            IntentChange::AdoptInstalled {
                component: c.name.clone(),
                service: service.uuid,
                image: target.uuid,
            },
        );
    }
    for skip in skips {
        b.skip(skip);
    }
    b.durations(input.durations);
    Ok(b.finish(&input.options.rollout))
}
