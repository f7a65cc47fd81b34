//! Holds on agentsadm, as `agentsadm hold agentsadm` records them in SAPI
//! (the service's params datacenter-wide, the headnode's instance's params
//! for this server): a self-update that would move the installed copy is
//! refused while one is there, as `update` leaves a held component where
//! it is, unless the operator passes `--ignore-holds`. Finishing a run a
//! kill interrupted is never refused: the copy moved already.

use agentsadm_api::SapiClient;
use agentsadm_api::sapi::ServiceType;
use agentsadm_plan::marks::HOLD_PARAM;
use agentsadm_plan::{HoldScope, Mark};
use agentsadm_types::ids::ServerUuid;

use super::SelfUpdateError;

/// The hold on agentsadm for `server`: its instance's first, else the
/// service's.
pub(crate) async fn hold_on(
    sapi: &SapiClient,
    server: ServerUuid,
) -> Result<Option<(HoldScope, Mark)>, SelfUpdateError> {
    let sapi_err = |what: &str| {
        let what = what.to_string();
        move |err| SelfUpdateError::Sapi {
            what,
            err: Box::new(err),
        }
    };
    let name = agentsadm_gz::release::NAME;
    let services = sapi
        .list_services(Some(name), None, Some(ServiceType::Agent))
        .await
        .map_err(sapi_err("look up the agent service agentsadm"))?;
    let Some(service) = services.into_iter().find(|s| s.name == name) else {
        return Ok(None);
    };
    let instances = sapi
        .list_service_instances(service.uuid)
        .await
        .map_err(sapi_err(
            "list the instances of the agent service agentsadm",
        ))?;
    let here = instances
        .iter()
        .filter(|i| i.server_uuid() == Some(server))
        .find_map(|i| Mark::from_params(i.params.as_ref(), HOLD_PARAM));
    if let Some(mark) = here {
        return Ok(Some((HoldScope::Server, mark)));
    }
    Ok(Mark::from_params(service.params.as_ref(), HOLD_PARAM).map(|m| (HoldScope::Datacenter, m)))
}
