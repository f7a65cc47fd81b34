//! Writing intent: the SAPI changes a plan makes, behind [`IntentStore`] so
//! the executor runs against SAPI or a fake alike.
//!
//! Every write is idempotent, so a re-run after an interruption can repeat
//! it: instances are created with an explicit UUID (SAPI overwrites on a
//! duplicate create), updates merge params, and deleting an instance that
//! is already gone counts as done. Adopting what a server reports follows
//! the one adoption rule ([`agentsadm_api::adoption`]): an instance SAPI
//! records under another service is left alone. UpgradeInstance is never
//! used: the real SAPI crashes on it for agent instances
//! (docs/triton/apis.md §2.6).

use futures::future::BoxFuture;
use serde_json::Value;

use agentsadm_plan::IntentChange;

use agentsadm_api::ApiError;
use agentsadm_api::adoption::Adoption;
use agentsadm_api::adoption::adopt_instance;
use agentsadm_api::sapi::CreateInstance;
use agentsadm_api::sapi::SapiClient;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::object;
use agentsadm_plan::ServiceChange;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// A SAPI write that failed.
#[derive(Debug, thiserror::Error)]
pub enum IntentWriteError {
    #[error("cannot {what} in SAPI")]
    Api {
        what: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "{component} was installed but the server reports no instance UUID for it, so it cannot be adopted into SAPI; run 'agentsadm adopt' once the server reports it"
    )]
    NoInstanceReported { component: String },
    #[error(
        "SAPI records instance {instance} (the one the server keeps for {component}) under another service ({recorded}); left as it is: run 'agentsadm check' and decide which component owns it"
    )]
    OtherService {
        component: String,
        instance: InstanceUuid,
        recorded: ServiceUuid,
    },
}

impl IntentWriteError {
    /// The API whose outage the write met, if it met one.
    pub fn outage(&self) -> Option<agentsadm_api::Api> {
        match self {
            IntentWriteError::Api { err, .. } if err.is_outage() => Some(err.api()),
            _ => None,
        }
    }
}

/// Applies a plan's SAPI changes.
pub trait IntentStore: Send + Sync {
    /// Apply one per-server change. `reported` is the instance UUID the
    /// server reported for a fresh install ([`IntentChange::AdoptInstalled`]).
    fn apply<'a>(
        &'a self,
        server: ServerUuid,
        change: &'a IntentChange,
        reported: Option<InstanceUuid>,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>>;

    /// Set a service's default image.
    fn set_service_image<'a>(
        &'a self,
        change: &'a ServiceChange,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>>;
}

/// The params agentsadm keeps on every agent instance (with SAPI's
/// objects in agentsadm-types, where the example datacenter reads them).
pub use agentsadm_types::sapi::instance_params;

/// The params of an instance whole: agentsadm's two and the marks
/// ([`IntentChange::Restore`]).
pub fn restored_params(
    server: ServerUuid,
    image: ImageUuid,
    marks: &[(agentsadm_plan::MarkKey, agentsadm_plan::Mark)],
) -> agentsadm_api::sapi::Object {
    let mut params = instance_params(server, image);
    for (key, mark) in marks {
        params.insert(key.param().to_string(), mark.to_value());
    }
    params
}

/// [`IntentStore`] on SAPI.
#[derive(Clone, Debug)]
pub struct SapiIntentStore {
    sapi: SapiClient,
}

impl SapiIntentStore {
    pub fn new(sapi: SapiClient) -> SapiIntentStore {
        SapiIntentStore { sapi }
    }

    async fn create(
        &self,
        service: ServiceUuid,
        instance: InstanceUuid,
        params: agentsadm_api::sapi::Object,
    ) -> Result<(), IntentWriteError> {
        let create = CreateInstance {
            uuid: Some(instance),
            service_uuid: Some(service),
            params: Some(params),
            ..Default::default()
        };
        self.sapi
            .create_instance(&create)
            .await
            .map(|_| ())
            .map_err(|err| IntentWriteError::Api {
                what: format!("create instance {instance}"),
                err: Box::new(err),
            })
    }

    async fn apply_change(
        &self,
        server: ServerUuid,
        change: &IntentChange,
        reported: Option<InstanceUuid>,
    ) -> Result<(), IntentWriteError> {
        match change {
            IntentChange::UpdateInstance {
                service,
                instance,
                image,
                marks,
                ..
            } => {
                self.update_or_create(*service, *instance, restored_params(server, *image, marks))
                    .await
            }
            IntentChange::Restore {
                service,
                instance,
                image,
                marks,
                ..
            } => {
                self.update_or_create(*service, *instance, restored_params(server, *image, marks))
                    .await
            }
            IntentChange::CreateInstance {
                service,
                instance,
                image,
                ..
            } => {
                self.create(*service, *instance, instance_params(server, *image))
                    .await
            }
            IntentChange::AdoptInstalled {
                component,
                service,
                image,
            } => {
                let instance = reported.ok_or_else(|| IntentWriteError::NoInstanceReported {
                    component: component.to_string(),
                })?;
                // The server's kept instance may already be in SAPI (an
                // earlier run, a postinstall, cn-agent's own adoption):
                // the one adoption rule decides.
                let recorded = match self.sapi.get_instance(instance).await {
                    Ok(existing) => Some(existing.service_uuid),
                    Err(err) if err.is_not_found() => None,
                    Err(err) => {
                        return Err(IntentWriteError::Api {
                            what: format!("look up instance {instance}"),
                            err: Box::new(err),
                        });
                    }
                };
                match adopt_instance(recorded, Some(*service)) {
                    Adoption::Create => {
                        self.create(*service, instance, instance_params(server, *image))
                            .await
                    }
                    Adoption::Update => self
                        .sapi
                        .update_instance(instance, &Update::params(instance_params(server, *image)))
                        .await
                        .map(|_| ())
                        .map_err(|err| IntentWriteError::Api {
                            what: format!("update instance {instance}"),
                            err: Box::new(err),
                        }),
                    Adoption::OtherService { recorded } => Err(IntentWriteError::OtherService {
                        component: component.to_string(),
                        instance,
                        recorded,
                    }),
                }
            }
            IntentChange::DeleteReplaced { instance, .. } => {
                // Only once the server reports another instance.
                if reported.is_none_or(|r| r == *instance) {
                    return Ok(());
                }
                self.delete(*instance).await
            }
            IntentChange::DeleteInstance { instance, .. } => self.delete(*instance).await,
            // Server delete and factory reset: the instance the mark was
            // put on is gone with the server.
            IntentChange::ForgetMark {
                component,
                service,
                key,
            } => {
                self.write_ledger(component, *service, server, *key, None)
                    .await
            }
            IntentChange::Mark {
                component,
                service,
                instance,
                key,
                mark,
            } => {
                self.write_mark(component, *service, server, *instance, *key, mark.as_ref())
                    .await
            }
        }
    }

    /// Set or clear a per-server mark's two copies: the instance's, which
    /// planners and sdcadm users read, and the service's ledger, which a
    /// bare re-adoption of the instance cannot erase. A mark is set in the
    /// ledger first and cleared there last, so that a write that fails half
    /// way leaves the mark counting (a failed release is said and can be
    /// run again; a lost instance copy is a `check` finding).
    async fn write_mark(
        &self,
        component: &agentsadm_types::component::ComponentName,
        service: ServiceUuid,
        server: ServerUuid,
        instance: InstanceUuid,
        key: agentsadm_plan::MarkKey,
        mark: Option<&agentsadm_plan::Mark>,
    ) -> Result<(), IntentWriteError> {
        match mark {
            Some(m) => {
                self.write_ledger(component, service, server, key, Some((m, instance)))
                    .await?;
                self.write_instance_mark(instance, key, Some(m)).await
            }
            None => {
                self.write_instance_mark(instance, key, None).await?;
                self.write_ledger(component, service, server, key, None)
                    .await
            }
        }
    }

    /// Set or clear one mark in the instance's params.
    async fn write_instance_mark(
        &self,
        instance: InstanceUuid,
        key: agentsadm_plan::MarkKey,
        mark: Option<&agentsadm_plan::Mark>,
    ) -> Result<(), IntentWriteError> {
        let value = mark.map(|m| m.to_value()).unwrap_or_default();
        let mut update = Update::params(agentsadm_api::sapi::object([(key.param(), value)]));
        if mark.is_none() {
            update.action = Some(agentsadm_api::sapi::UpdateAction::Delete);
        }
        self.sapi
            .update_instance(instance, &update)
            .await
            .map(|_| ())
            .map_err(|err| IntentWriteError::Api {
                what: format!("set params.{} on instance {instance}", key.param()),
                err: Box::new(err),
            })
    }

    /// Set (with the instance it is put on) or clear the service's copy of
    /// a per-server mark (one key: a merge or a delete, the service's
    /// other params left as they are).
    async fn write_ledger(
        &self,
        component: &agentsadm_types::component::ComponentName,
        service: ServiceUuid,
        server: ServerUuid,
        key: agentsadm_plan::MarkKey,
        mark: Option<(&agentsadm_plan::Mark, InstanceUuid)>,
    ) -> Result<(), IntentWriteError> {
        let ledger_key = agentsadm_plan::marks::ledger_key(key.param(), server);
        let value = mark
            .map(|(m, instance)| agentsadm_plan::marks::ledger_value(m, instance))
            .unwrap_or_default();
        let mut update = Update::params(object([(ledger_key.as_str(), value)]));
        if mark.is_none() {
            update.action = Some(agentsadm_api::sapi::UpdateAction::Delete);
        }
        let verb = if mark.is_some() { "set" } else { "delete" };
        self.sapi
            .update_service(service, &update)
            .await
            .map(|_| ())
            .map_err(|err| IntentWriteError::Api {
                what: format!("{verb} params.{ledger_key} on service {component}"),
                err: Box::new(err),
            })
    }

    /// Merge `params` into the instance (a merge keeps what others wrote;
    /// after a bare re-adoption there is nothing else), or create it with
    /// them when it was deleted since it was listed (SAPI answers a plain
    /// 500 "no record" for updates of missing objects).
    async fn update_or_create(
        &self,
        service: ServiceUuid,
        instance: InstanceUuid,
        params: agentsadm_api::sapi::Object,
    ) -> Result<(), IntentWriteError> {
        match self
            .sapi
            .update_instance(instance, &Update::params(params.clone()))
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if err.is_not_found() || err.status() == Some(500) && err.code().is_none() => {
                self.create(service, instance, params).await
            }
            Err(err) => Err(IntentWriteError::Api {
                what: format!("update instance {instance}"),
                err: Box::new(err),
            }),
        }
    }

    /// Delete an instance; `Ok(false)`: it was already gone.
    pub(crate) async fn delete_instance(
        &self,
        instance: InstanceUuid,
    ) -> Result<bool, IntentWriteError> {
        match self.sapi.delete_instance(instance).await {
            Ok(()) => Ok(true),
            Err(err) if err.is_not_found() => Ok(false),
            Err(err) => Err(IntentWriteError::Api {
                what: format!("delete instance {instance}"),
                err: Box::new(err),
            }),
        }
    }

    async fn delete(&self, instance: InstanceUuid) -> Result<(), IntentWriteError> {
        self.delete_instance(instance).await.map(|_| ())
    }
}

impl IntentStore for SapiIntentStore {
    fn apply<'a>(
        &'a self,
        server: ServerUuid,
        change: &'a IntentChange,
        reported: Option<InstanceUuid>,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>> {
        Box::pin(self.apply_change(server, change, reported))
    }

    fn set_service_image<'a>(
        &'a self,
        change: &'a ServiceChange,
    ) -> BoxFuture<'a, Result<(), IntentWriteError>> {
        Box::pin(async move {
            let update = Update::params(object([(
                "image_uuid",
                Value::String(change.to.uuid.to_string()),
            )]));
            self.sapi
                .update_service(change.service, &update)
                .await
                .map(|_| ())
                .map_err(|err| IntentWriteError::Api {
                    what: format!("set the default image of service {}", change.component),
                    err: Box::new(err),
                })
        })
    }
}
