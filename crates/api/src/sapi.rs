//! SAPI client: applications, services and instances, including `type=agent`
//! objects (docs/triton/apis.md §2). SAPI cannot filter instances by server,
//! so callers list `?type=agent` once and index client-side
//! ([`SapiClient::list_agent_instances`]). UpgradeInstance is deliberately
//! absent: the real SAPI crashes on it for agent instances (§2.6).

use reqwest::Method;

use super::Api;

use super::ApiConfig;

use super::ApiError;

use super::Idempotent;

use super::RestClient;

use super::query;
use agentsadm_types::ids::ApplicationUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServiceUuid;

// The SAPI objects are wire types the planner reads too (intent is built
// from them), so they live below it in agentsadm-types; callers keep
// naming them here.
pub use agentsadm_types::sapi::{
    Application, CreateInstance, CreateService, Instance, OWN_APPLICATION, OWN_SERVICES, Object,
    Service, ServiceType, Update, UpdateAction, in_own_application, instance_params, object,
};

/// Client for SAPI.
#[derive(Clone, Debug)]
pub struct SapiClient {
    rest: RestClient,
}

impl SapiClient {
    pub fn new(base_url: &str, config: ApiConfig) -> Result<SapiClient, ApiError> {
        Ok(SapiClient {
            rest: RestClient::new(Api::Sapi, base_url, config, Some("~2"))?,
        })
    }

    pub fn base_url(&self) -> &str {
        self.rest.base_url()
    }

    pub async fn ping(&self) -> Result<serde_json::Value, ApiError> {
        self.rest
            .json(Method::GET, "/ping", Idempotent::Yes, None)
            .await
    }

    /// One ping, no retry: whether the API answers right now.
    pub async fn ping_once(&self) -> Result<(), ApiError> {
        self.rest.ping_once().await
    }

    pub async fn list_applications(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<Application>, ApiError> {
        let pairs: Vec<(&str, String)> =
            name.map(|n| ("name", n.to_string())).into_iter().collect();
        let path = format!("/applications{}", query(&pairs));
        self.rest
            .json(Method::GET, &path, Idempotent::Yes, None)
            .await
    }

    /// The `sdc` application, which owns every agent service.
    pub async fn sdc_application(&self) -> Result<Option<Application>, ApiError> {
        Ok(self
            .list_applications(Some("sdc"))
            .await?
            .into_iter()
            .next())
    }

    /// agentsadm's own application ([`OWN_APPLICATION`]); of two (two
    /// runs created it at once), the one with the smallest UUID.
    pub async fn own_application(&self) -> Result<Option<Application>, ApiError> {
        Ok(self
            .list_applications(Some(OWN_APPLICATION))
            .await?
            .into_iter()
            .filter(|a| a.name == OWN_APPLICATION)
            .min_by_key(|a| a.uuid))
    }

    /// The application a component's service belongs in: `sdc`, or
    /// agentsadm's own, created (owned as `sdc` is) when missing. `None`:
    /// SAPI has no `sdc` application.
    pub async fn application_for(&self, component: &str) -> Result<Option<Application>, ApiError> {
        let Some(sdc) = self.sdc_application().await? else {
            return Ok(None);
        };
        if !in_own_application(component) {
            return Ok(Some(sdc));
        }
        if let Some(own) = self.own_application().await? {
            return Ok(Some(own));
        }
        self.create_application(OWN_APPLICATION, &sdc.owner_uuid, Object::new())
            .await
            .map(Some)
    }

    /// CreateApplication (SAPI answers 200 with the object). Not retried:
    /// without a UUID a repeat would create a second application.
    pub async fn create_application(
        &self,
        name: &str,
        owner_uuid: &str,
        metadata: Object,
    ) -> Result<Application, ApiError> {
        let body = serde_json::json!({
            "name": name, "owner_uuid": owner_uuid, "metadata": metadata
        });
        self.rest
            .json(Method::POST, "/applications", Idempotent::No, Some(&body))
            .await
    }

    /// DeleteApplication (404 with an empty body when missing).
    pub async fn delete_application(&self, uuid: ApplicationUuid) -> Result<(), ApiError> {
        self.rest
            .empty(
                Method::DELETE,
                &format!("/applications/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    pub async fn get_application(&self, uuid: ApplicationUuid) -> Result<Application, ApiError> {
        self.rest
            .json(
                Method::GET,
                &format!("/applications/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    pub async fn update_application(
        &self,
        uuid: ApplicationUuid,
        update: &Update,
    ) -> Result<Application, ApiError> {
        let body = serde_json::to_value(update).unwrap_or_default();
        self.rest
            .json(
                Method::PUT,
                &format!("/applications/{uuid}"),
                Idempotent::Yes,
                Some(&body),
            )
            .await
    }

    /// ListServices with any of `name`, `application_uuid`, `type` (AND).
    pub async fn list_services(
        &self,
        name: Option<&str>,
        application_uuid: Option<ApplicationUuid>,
        service_type: Option<ServiceType>,
    ) -> Result<Vec<Service>, ApiError> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(n) = name {
            pairs.push(("name", n.to_string()));
        }
        if let Some(a) = application_uuid {
            pairs.push(("application_uuid", a.to_string()));
        }
        if let Some(t) = service_type {
            pairs.push((
                "type",
                match t {
                    ServiceType::Vm => "vm",
                    ServiceType::Agent => "agent",
                }
                .to_string(),
            ));
        }
        let path = format!("/services{}", query(&pairs));
        self.rest
            .json(Method::GET, &path, Idempotent::Yes, None)
            .await
    }

    /// Every `type=agent` service.
    pub async fn list_agent_services(&self) -> Result<Vec<Service>, ApiError> {
        self.list_services(None, None, Some(ServiceType::Agent))
            .await
    }

    pub async fn get_service(&self, uuid: ServiceUuid) -> Result<Service, ApiError> {
        self.rest
            .json(
                Method::GET,
                &format!("/services/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    pub async fn create_service(&self, create: &CreateService) -> Result<Service, ApiError> {
        let body = serde_json::to_value(create).unwrap_or_default();
        self.rest
            .json(Method::POST, "/services", Idempotent::No, Some(&body))
            .await
    }

    pub async fn update_service(
        &self,
        uuid: ServiceUuid,
        update: &Update,
    ) -> Result<Service, ApiError> {
        let body = serde_json::to_value(update).unwrap_or_default();
        self.rest
            .json(
                Method::PUT,
                &format!("/services/{uuid}"),
                Idempotent::Yes,
                Some(&body),
            )
            .await
    }

    pub async fn delete_service(&self, uuid: ServiceUuid) -> Result<(), ApiError> {
        self.rest
            .empty(
                Method::DELETE,
                &format!("/services/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    /// Every `type=agent` instance. SAPI has no server filter and no paging.
    pub async fn list_agent_instances(&self) -> Result<Vec<Instance>, ApiError> {
        self.rest
            .json(Method::GET, "/instances?type=agent", Idempotent::Yes, None)
            .await
    }

    /// The instances of one service.
    pub async fn list_service_instances(
        &self,
        service: ServiceUuid,
    ) -> Result<Vec<Instance>, ApiError> {
        let path = format!(
            "/instances{}",
            query(&[("service_uuid", service.to_string())])
        );
        self.rest
            .json(Method::GET, &path, Idempotent::Yes, None)
            .await
    }

    pub async fn get_instance(&self, uuid: InstanceUuid) -> Result<Instance, ApiError> {
        self.rest
            .json(
                Method::GET,
                &format!("/instances/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }

    /// CreateInstance, never retried blindly: re-posting an instance that
    /// exists overwrites it, and when such a re-create fails real SAPI
    /// deletes the instance. After a failure that may have happened after
    /// SAPI stored it (connect error, timeout, 5xx), an explicit `uuid` is
    /// looked up first: an instance that exists now was created, and gets
    /// the requested params and metadata through UpdateInstance; a missing
    /// one is created again. Callers updating an instance they know exists
    /// use [`SapiClient::update_instance`].
    pub async fn create_instance(&self, create: &CreateInstance) -> Result<Instance, ApiError> {
        let body = serde_json::to_value(create).unwrap_or_default();
        let post = || {
            self.rest
                .json::<Instance>(Method::POST, "/instances", Idempotent::No, Some(&body))
        };
        let mut last = match (post().await, create.uuid) {
            (Ok(i), _) => return Ok(i),
            (Err(e), Some(_)) if e.is_transient() => e,
            (Err(e), _) => return Err(e),
        };
        let Some(uuid) = create.uuid else {
            return Err(last);
        };
        for delay in self.rest.config().retry_policy().delays() {
            tokio::time::sleep(delay).await;
            match self.get_instance(uuid).await {
                Ok(_) => {
                    let update = Update {
                        action: Some(UpdateAction::Update),
                        params: create.params.clone(),
                        metadata: create.metadata.clone(),
                    };
                    return self.update_instance(uuid, &update).await;
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            match post().await {
                Ok(i) => return Ok(i),
                Err(e) if e.is_transient() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// UpdateInstance (never UpgradeInstance: see the module docs).
    pub async fn update_instance(
        &self,
        uuid: InstanceUuid,
        update: &Update,
    ) -> Result<Instance, ApiError> {
        let body = serde_json::to_value(update).unwrap_or_default();
        self.rest
            .json(
                Method::PUT,
                &format!("/instances/{uuid}"),
                Idempotent::Yes,
                Some(&body),
            )
            .await
    }

    /// DeleteInstance. A 404 is returned as an error; cleanup callers treat
    /// it as success.
    pub async fn delete_instance(&self, uuid: InstanceUuid) -> Result<(), ApiError> {
        self.rest
            .empty(
                Method::DELETE,
                &format!("/instances/{uuid}"),
                Idempotent::Yes,
                None,
            )
            .await
    }
}
