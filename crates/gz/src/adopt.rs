//! SAPI adoption of a component's instance (docs/triton/apis.md §2.4-2.6).
//!
//! The agent service is found by name (`GET /services?type=agent&name=`). No
//! service means the component is not managed through SAPI here: adoption is
//! skipped, which is not an error. Otherwise the instance (the kept instance
//! UUID) gets `params.server_uuid` and `params.image_uuid`, as the one
//! adoption rule ([`agentsadm_api::adoption`]) says: UpdateInstance when it
//! exists under the service, CreateInstance with the UUID when it does not,
//! and nothing (an error naming both services) when SAPI records it under
//! another service. UpgradeInstance is never used: the real SAPI crashes
//! on it for agents.

use agentsadm_api::sapi::CreateInstance;

use agentsadm_api::sapi::ServiceType;

use agentsadm_api::sapi::Update;

use agentsadm_api::ApiError;
use agentsadm_api::SapiClient;
use agentsadm_api::adoption::Adoption as Rule;
use agentsadm_api::adoption::adopt_instance;
use agentsadm_api::sapi::object;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// What adoption did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    Created,
    Updated,
    /// No SAPI agent service of that name: not managed, nothing done.
    NoService,
}

/// A SAPI call that failed during adoption or removal.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("cannot look up the SAPI agent service {service:?}")]
    Service {
        service: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "SAPI records instance {instance} of {service} under another service ({recorded}); left as it is: run 'agentsadm check' on the headnode"
    )]
    OtherService {
        service: String,
        instance: InstanceUuid,
        recorded: String,
    },
    #[error("cannot record instance {instance} of {service} in SAPI")]
    Instance {
        service: String,
        instance: InstanceUuid,
        #[source]
        err: Box<ApiError>,
    },
}

/// Create or update the instance of `service` with this server and image.
pub async fn adopt(
    sapi: &SapiClient,
    service: &str,
    instance: InstanceUuid,
    server: ServerUuid,
    image: ImageUuid,
) -> Result<Adoption, AdoptError> {
    let services = sapi
        .list_services(Some(service), None, Some(ServiceType::Agent))
        .await
        .map_err(|err| AdoptError::Service {
            service: service.to_string(),
            err: Box::new(err),
        })?;
    // SAPI filters by name already; stay strict in case a fake does not.
    let Some(svc) = services.into_iter().find(|s| s.name == service) else {
        return Ok(Adoption::NoService);
    };
    let params = object([
        ("server_uuid", server.to_string()),
        ("image_uuid", image.to_string()),
    ]);
    let inst_err = |err| AdoptError::Instance {
        service: service.to_string(),
        instance,
        err: Box::new(err),
    };
    let recorded = match sapi.get_instance(instance).await {
        Ok(existing) => Some(existing.service_uuid),
        Err(ApiError::Status { status: 404, .. }) => None,
        Err(err) => return Err(inst_err(err)),
    };
    match adopt_instance(recorded, Some(svc.uuid)) {
        Rule::Update => {
            sapi.update_instance(instance, &Update::params(params))
                .await
                .map_err(inst_err)?;
            Ok(Adoption::Updated)
        }
        Rule::OtherService { recorded } => Err(AdoptError::OtherService {
            service: service.to_string(),
            instance,
            recorded: recorded.to_string(),
        }),
        Rule::Create => {
            // A new record for this server: an instance of the service that
            // already names this server under another UUID is what an
            // install cut short left (a reboot after its SAPI write: the
            // rollback took its instance file, so the next install kept a
            // new UUID). One agent per server: it goes first, so a crash
            // between the two leaves no record (the next run creates it)
            // rather than two.
            for stale in left_behind(sapi, svc.uuid, server, instance)
                .await
                .map_err(inst_err)?
            {
                match sapi.delete_instance(stale).await {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(err) => return Err(inst_err(err)),
                }
            }
            sapi.create_instance(&CreateInstance {
                uuid: Some(instance),
                service_uuid: Some(svc.uuid),
                params: Some(params),
                metadata: None,
                exists: Some(true),
            })
            .await
            .map_err(inst_err)?;
            Ok(Adoption::Created)
        }
    }
}

/// The instances of `service` other than `instance` whose
/// `params.server_uuid` names `server` (SAPI filters by service only).
async fn left_behind(
    sapi: &SapiClient,
    service: ServiceUuid,
    server: ServerUuid,
    instance: InstanceUuid,
) -> Result<Vec<InstanceUuid>, ApiError> {
    Ok(sapi
        .list_service_instances(service)
        .await?
        .into_iter()
        .filter(|i| i.service_uuid == service && i.uuid != instance)
        .filter(|i| i.server_uuid() == Some(server))
        .map(|i| i.uuid)
        .collect())
}

/// Delete the instance (after `gz remove`); a missing one is fine.
pub async fn forget(
    sapi: &SapiClient,
    service: &str,
    instance: InstanceUuid,
) -> Result<(), AdoptError> {
    match sapi.delete_instance(instance).await {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(err) => Err(AdoptError::Instance {
            service: service.to_string(),
            instance,
            err: Box::new(err),
        }),
    }
}
