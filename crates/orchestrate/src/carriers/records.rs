//! Record changes: the CNAPI and SAPI writes a plan makes before its server
//! waves (`check --fix`'s reports and SAPI repairs, `adopt`, the instances
//! and CNAPI call of `server delete|factory-reset`), behind
//! [`RecordStore`] so the executor makes them against the APIs or a fake.
//!
//! The executor makes them phase by phase ([`RecordChange::phase`]), the
//! changes of one phase concurrently; each is independent (a failure is
//! reported, the others are still made), except that a server's CNAPI
//! call waits for every other change to have succeeded: CNAPI is never
//! told to forget a server whose SAPI instances are still there.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use serde_json::{Value, json};

use crate::carriers::guard::{Fence, Hold};
use crate::carriers::store::{IntentWriteError, SapiIntentStore, instance_params};
pub use crate::vocabulary::outcomes::{RecordOutcome, RecordStatus};
use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::CnapiClient;
use agentsadm_api::SapiClient;
use agentsadm_api::sapi::{CreateInstance, CreateService, ServiceType, Update, object};
use agentsadm_plan::{IntentChange, RecordChange, ServerCall};
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::{ImageUuid, JobUuid, ServerUuid, ServiceUuid};

/// A record change that was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordDone {
    Done,
    /// Nothing to do any more (deleted before: a re-run).
    AlreadyDone,
    /// A service was created (its instances in this plan use it).
    ServiceCreated(ServiceUuid),
    /// The factory-reset job started; `agents_cleared`: `server.agents` was
    /// emptied too (else `warning` says why not).
    ResetStarted {
        job_uuid: JobUuid,
        agents_cleared: bool,
        warning: Option<String>,
    },
}

/// A record change that failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordWriteError {
    #[error("cannot {what}")]
    Api {
        what: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(transparent)]
    Intent(#[from] IntentWriteError),
    #[error("no SAPI service for {component} (it was not created)")]
    NoService { component: String },
    #[error("no SAPI application named \"sdc\": SAPI is not set up yet")]
    NoSdcApplication,
    #[error("this executor makes no record changes (no record store was given)")]
    NoStore,
    #[error("no CNAPI to write to (this run has only SAPI)")]
    NoCnapi,
}

fn api(what: impl Into<String>) -> impl FnOnce(ApiError) -> RecordWriteError {
    let what = what.into();
    move |err| RecordWriteError::Api {
        what,
        err: Box::new(err),
    }
}

/// Makes record changes.
pub trait RecordStore: Send + Sync {
    /// Make one change. `created`: the services this run created so far,
    /// by component (for instances of a new service).
    fn write<'a>(
        &'a self,
        change: &'a RecordChange,
        created: &'a BTreeMap<String, ServiceUuid>,
    ) -> BoxFuture<'a, Result<RecordDone, RecordWriteError>>;
}

/// No record store: every change fails (executors that only run steps).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRecords;

impl RecordStore for NoRecords {
    fn write<'a>(
        &'a self,
        _: &'a RecordChange,
        _: &'a BTreeMap<String, ServiceUuid>,
    ) -> BoxFuture<'a, Result<RecordDone, RecordWriteError>> {
        Box::pin(async { Err(RecordWriteError::NoStore) })
    }
}

/// [`RecordStore`] on CNAPI and SAPI.
#[derive(Clone, Debug)]
pub struct ApiRecords {
    sapi: SapiClient,
    /// `None` before CNAPI exists (headnode setup's local adoption).
    cnapi: Option<CnapiClient>,
    store: SapiIntentStore,
}

impl ApiRecords {
    pub fn new(apis: &Apis) -> ApiRecords {
        ApiRecords {
            sapi: apis.sapi.clone(),
            cnapi: Some(apis.cnapi.clone()),
            store: SapiIntentStore::new(apis.sapi.clone()),
        }
    }

    pub fn new_with(sapi: &SapiClient, cnapi: &CnapiClient) -> ApiRecords {
        ApiRecords {
            sapi: sapi.clone(),
            cnapi: Some(cnapi.clone()),
            store: SapiIntentStore::new(sapi.clone()),
        }
    }

    /// SAPI only: CNAPI record changes fail.
    pub fn sapi_only(sapi: &SapiClient) -> ApiRecords {
        ApiRecords {
            sapi: sapi.clone(),
            cnapi: None,
            store: SapiIntentStore::new(sapi.clone()),
        }
    }

    fn cnapi(&self) -> Result<&CnapiClient, RecordWriteError> {
        self.cnapi.as_ref().ok_or(RecordWriteError::NoCnapi)
    }

    async fn create_service(
        &self,
        component: &str,
        default_image: Option<ImageUuid>,
    ) -> Result<RecordDone, RecordWriteError> {
        let sapi = &self.sapi;
        // agentsadm, gz-tools and sdcadm go in agentsadm's own
        // application, which sdcadm never reads.
        let app = sapi
            .application_for(component)
            .await
            .map_err(api(format!("find the SAPI application for {component}")))?
            .ok_or(RecordWriteError::NoSdcApplication)?;
        let log_key = format!("{}_LOG_LEVEL", component.to_uppercase().replace('-', "_"));
        let create = CreateService {
            name: component.to_string(),
            application_uuid: app.uuid,
            service_type: Some(ServiceType::Agent),
            params: Some(object([(
                "tags",
                json!({"smartdc_role": component, "smartdc_type": "core"}),
            )])),
            metadata: Some(object([
                ("SERVICE_NAME", Value::String(component.to_string())),
                (log_key.as_str(), Value::String("info".to_string())),
            ])),
            manifests: Some(object(Vec::<(String, Value)>::new())),
            uuid: None,
        };
        let created = sapi
            .create_service(&create)
            .await
            .map_err(api(format!("create SAPI service {component}")))?;
        if let Some(image) = default_image {
            self.set_default(created.uuid, component, image).await?;
        }
        Ok(RecordDone::ServiceCreated(created.uuid))
    }

    async fn set_default(
        &self,
        service: ServiceUuid,
        component: &str,
        image: ImageUuid,
    ) -> Result<RecordDone, RecordWriteError> {
        let update = Update::params(object([("image_uuid", Value::String(image.to_string()))]));
        self.sapi
            .update_service(service, &update)
            .await
            .map_err(api(format!(
                "set the default image of SAPI service {component}"
            )))?;
        Ok(RecordDone::Done)
    }

    /// Set (`Some`) or clear (`None`) a mark in a service's params (a
    /// datacenter-wide hold): one key, the other params left as they are.
    async fn set_service_mark(
        &self,
        service: ServiceUuid,
        component: &str,
        key: agentsadm_plan::MarkKey,
        mark: Option<&agentsadm_plan::Mark>,
    ) -> Result<RecordDone, RecordWriteError> {
        let update = agentsadm_api::sapi::Update {
            action: Some(if mark.is_some() {
                agentsadm_api::sapi::UpdateAction::Update
            } else {
                agentsadm_api::sapi::UpdateAction::Delete
            }),
            params: Some(object([(
                key.param(),
                mark.map(agentsadm_plan::Mark::to_value).unwrap_or_default(),
            )])),
            metadata: None,
        };
        self.sapi
            .update_service(service, &update)
            .await
            .map_err(api(format!(
                "write params.{} of SAPI service {component}",
                key.param()
            )))?;
        Ok(RecordDone::Done)
    }

    /// Create the instance with the UUID the server keeps, or (when SAPI
    /// has it) complete its params: re-posting an existing instance would
    /// overwrite it, and a failed re-create makes SAPI delete it.
    async fn adopt(
        &self,
        server: ServerUuid,
        service: ServiceUuid,
        instance: agentsadm_types::ids::InstanceUuid,
        image: ImageUuid,
        exists: bool,
    ) -> Result<RecordDone, RecordWriteError> {
        let sapi = &self.sapi;
        let params = instance_params(server, image);
        if exists {
            sapi.update_instance(instance, &Update::params(params))
                .await
                .map_err(api(format!("set the params of SAPI instance {instance}")))?;
        } else {
            sapi.create_instance(&CreateInstance {
                uuid: Some(instance),
                service_uuid: Some(service),
                params: Some(params),
                ..Default::default()
            })
            .await
            .map_err(api(format!("create SAPI instance {instance}")))?;
        }
        Ok(RecordDone::Done)
    }

    async fn server_call(
        &self,
        server: ServerUuid,
        call: ServerCall,
    ) -> Result<RecordDone, RecordWriteError> {
        let cnapi = self.cnapi()?;
        match call {
            ServerCall::Delete => match cnapi.delete_server(server).await {
                Ok(()) => Ok(RecordDone::Done),
                Err(e) if e.is_not_found() => Ok(RecordDone::AlreadyDone),
                Err(e) => Err(api(format!("delete server {server} from CNAPI"))(e)),
            },
            ServerCall::FactoryReset => {
                // CNAPI's 409 for VMs is a bare JSON string; the client
                // puts it in the message, so it reads as CNAPI said it.
                let job_uuid = cnapi
                    .factory_reset(server)
                    .await
                    .map_err(api(format!("factory-reset server {server}")))?;
                // The next setup clears server.agents too; clearing it now
                // keeps `check` and `list` from trusting a wiped server's
                // old report in the meantime.
                let (agents_cleared, warning) = match cnapi.update_server_agents(server, &[]).await
                {
                    Ok(()) => (true, None),
                    Err(e) => (
                        false,
                        Some(format!("cannot clear server.agents: {}", error_chain(&e))),
                    ),
                };
                Ok(RecordDone::ResetStarted {
                    job_uuid,
                    agents_cleared,
                    warning,
                })
            }
        }
    }

    async fn make(
        &self,
        change: &RecordChange,
        created: &BTreeMap<String, ServiceUuid>,
    ) -> Result<RecordDone, RecordWriteError> {
        match change {
            RecordChange::PostAgents {
                server,
                hostname,
                agents,
            } => {
                self.cnapi()?
                    .update_server_agents(*server, agents)
                    .await
                    .map_err(api(format!("post server.agents of {hostname} ({server})")))?;
                Ok(RecordDone::Done)
            }
            RecordChange::CreateService {
                component,
                default_image,
            } => self.create_service(component, *default_image).await,
            RecordChange::ServiceDefault { change } => {
                self.set_default(change.service, &change.component, change.to.uuid)
                    .await
            }
            RecordChange::ServiceMark {
                component,
                service,
                key,
                mark,
            } => {
                self.set_service_mark(*service, component, *key, mark.as_ref())
                    .await
            }
            RecordChange::AdoptInstance {
                server,
                component,
                service,
                instance,
                image,
                exists,
                ..
            } => {
                let service = service
                    .or_else(|| created.get(component.as_str()).copied())
                    .ok_or_else(|| RecordWriteError::NoService {
                        component: component.to_string(),
                    })?;
                self.adopt(*server, service, *instance, *image, *exists)
                    .await
            }
            RecordChange::Instance {
                change: IntentChange::DeleteInstance { instance, .. },
                ..
            } => Ok(match self.store.delete_instance(*instance).await? {
                true => RecordDone::Done,
                false => RecordDone::AlreadyDone,
            }),
            RecordChange::Instance { server, change, .. } => {
                // Deletes do not use the server; orphans have none.
                let server = server.unwrap_or(ServerUuid::from_u128(0));
                crate::carriers::store::IntentStore::apply(&self.store, server, change, None)
                    .await?;
                Ok(RecordDone::Done)
            }
            RecordChange::Server { server, call, .. } => self.server_call(*server, *call).await,
        }
    }
}

impl RecordStore for ApiRecords {
    fn write<'a>(
        &'a self,
        change: &'a RecordChange,
        created: &'a BTreeMap<String, ServiceUuid>,
    ) -> BoxFuture<'a, Result<RecordDone, RecordWriteError>> {
        Box::pin(self.make(change, created))
    }
}

/// Make `changes` (already in phase order) through `store`, `concurrency`
/// at a time within a phase. Before each phase `lock_lost` is asked and
/// the lock confirmed through `fence`: once lost (or not confirmed),
/// nothing more is written, and the hold that stopped it is returned.
pub(crate) async fn make_records(
    store: &dyn RecordStore,
    changes: &[RecordChange],
    concurrency: usize,
    lock_lost: &(dyn Fn() -> bool + Sync),
    fence: &dyn Fence,
) -> (Vec<RecordOutcome>, Hold) {
    let mut hold = Hold::Held;
    let mut out: Vec<RecordOutcome> = Vec::with_capacity(changes.len());
    let mut created: BTreeMap<String, ServiceUuid> = BTreeMap::new();
    let mut start = 0;
    while start < changes.len() {
        let phase = changes[start].phase();
        let end = changes[start..]
            .iter()
            .position(|c| c.phase() != phase)
            .map_or(changes.len(), |n| start + n);
        let batch = &changes[start..end];
        start = end;
        if hold == Hold::Held {
            hold = if lock_lost() {
                Hold::Lost
            } else {
                fence.confirm("the record changes").await
            };
        }
        let refused = if hold == Hold::Lost {
            Some("the datacenter lock was lost: nothing more was written".to_string())
        } else if let Hold::Unconfirmed(api) = hold {
            Some(format!(
                "{api} did not answer when the datacenter lock was confirmed: nothing more was written"
            ))
        } else if batch
            .iter()
            .any(|c| matches!(c, RecordChange::Server { .. }))
        {
            let failed = out.iter().filter(|o| !o.ok()).count();
            (failed > 0).then(|| format!("{failed} other record changes did not succeed"))
        } else {
            None
        };
        if let Some(reason) = refused {
            out.extend(batch.iter().map(|c| RecordOutcome {
                change: c.clone(),
                status: RecordStatus::NotRun {
                    reason: reason.clone(),
                },
                warning: None,
            }));
            continue;
        }
        let created_now = &created;
        let results: Vec<(usize, Result<RecordDone, RecordWriteError>)> =
            stream::iter(batch.iter().enumerate())
                .map(|(i, c)| async move { (i, store.write(c, created_now).await) })
                .buffer_unordered(concurrency.max(1))
                .collect()
                .await;
        let mut results: Vec<_> = results;
        results.sort_by_key(|(i, _)| *i);
        for (i, r) in results {
            let change = batch[i].clone();
            let (status, warning) = match r {
                Ok(RecordDone::Done) => (RecordStatus::Done, None),
                Ok(RecordDone::AlreadyDone) => (RecordStatus::AlreadyDone, None),
                Ok(RecordDone::ServiceCreated(uuid)) => {
                    if let Some(c) = change.component() {
                        created.insert(c.to_string(), uuid);
                    }
                    (RecordStatus::Done, None)
                }
                Ok(RecordDone::ResetStarted {
                    job_uuid,
                    agents_cleared,
                    warning,
                }) => (
                    RecordStatus::ResetStarted {
                        job_uuid,
                        agents_cleared,
                    },
                    warning,
                ),
                Err(e) => (
                    RecordStatus::Failed {
                        message: error_chain(&e),
                    },
                    None,
                ),
            };
            let outcome = RecordOutcome {
                change,
                status,
                warning,
            };
            log_record(&outcome);
            out.push(outcome);
        }
    }
    (out, hold)
}

/// The API call a record change makes, as the run's log names it.
fn record_call(change: &RecordChange) -> String {
    match change {
        RecordChange::PostAgents { server, .. } => {
            format!("CNAPI POST /servers/{server} (server.agents)")
        }
        RecordChange::CreateService { component, .. } => {
            format!("SAPI POST /services (create {component})")
        }
        RecordChange::ServiceDefault { change } => format!(
            "SAPI PUT /services/{} (params.image_uuid {})",
            change.service, change.to.uuid
        ),
        RecordChange::ServiceMark { service, key, .. } => {
            format!("SAPI PUT /services/{service} (params.{})", key.param())
        }
        RecordChange::AdoptInstance {
            instance, exists, ..
        } => match exists {
            true => format!("SAPI PUT /instances/{instance} (params)"),
            false => format!("SAPI POST /instances ({instance})"),
        },
        RecordChange::Instance {
            change: IntentChange::DeleteInstance { instance, .. },
            ..
        } => format!("SAPI DELETE /instances/{instance}"),
        RecordChange::Instance { change, .. } => {
            format!("SAPI write of {} instance", change.component())
        }
        RecordChange::Server {
            server,
            call: ServerCall::Delete,
            ..
        } => format!("CNAPI DELETE /servers/{server}"),
        RecordChange::Server {
            server,
            call: ServerCall::FactoryReset,
            ..
        } => format!("CNAPI PUT /servers/{server}/factory-reset"),
    }
}

/// One record change in the run's log: the call, what it changed and how
/// it ended (the factory reset's CNAPI job included).
fn log_record(outcome: &RecordOutcome) {
    let call = record_call(&outcome.change);
    let change = serde_json::to_string(&outcome.change).unwrap_or_default();
    let status = serde_json::to_string(&outcome.status).unwrap_or_default();
    let how = match &outcome.status {
        RecordStatus::Done => "done".to_string(),
        RecordStatus::AlreadyDone => "already done (nothing to change)".to_string(),
        RecordStatus::ResetStarted {
            job_uuid,
            agents_cleared,
        } => format!(
            "CNAPI job {job_uuid} started; server.agents {}",
            if *agents_cleared {
                "cleared"
            } else {
                "not cleared"
            }
        ),
        RecordStatus::Failed { message } => format!("failed: {message}"),
        RecordStatus::NotRun { reason } => format!("not made: {reason}"),
    };
    let job = match &outcome.status {
        RecordStatus::ResetStarted { job_uuid, .. } => Some(job_uuid.to_string()),
        _ => None,
    };
    if outcome.ok() {
        tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "records", call = call.as_str(), change = change.as_str(),
            result = status.as_str(), job = job, warning = outcome.warning.as_deref(),
            "{call}: {how}");
    } else {
        tracing::error!(target: agentsadm_types::log::FILE_ONLY_TARGET,
            component = "records", call = call.as_str(), change = change.as_str(),
            result = status.as_str(), "{call}: {how}");
    }
}
