//! Moving the services of agentsadm, dockerlogger, gz-tools and sdcadm
//! ([`OWN_SERVICES`]) out of SAPI's `sdc` application, where versions of
//! agentsadm before it created them and where sdcadm 1.39.0 takes them for
//! its own (docs/triton/sdcadm.md §10), into agentsadm's
//! ([`agentsadm_api::sapi::OWN_APPLICATION`]).
//!
//! SAPI can move neither a service to another application nor an instance
//! to another service. So each old service gets a twin in agentsadm's
//! application (same name, params, metadata, manifests), and its instances
//! are moved in batches, keeping their UUIDs (the servers keep them too):
//!
//! 1. the batch's records (params and metadata) are written into the
//!    twin's params under [`MOVING_KEY`]: the journal;
//! 2. each instance is deleted from the old service and created under the
//!    twin with the same UUID, params and metadata;
//! 3. the batch leaves the journal.
//!
//! With no instance and no journal left, the old service is deleted. Every
//! batch starts from a fresh read of SAPI and does what is left, so a run
//! killed anywhere is finished by the next one: an instance deleted and not
//! yet re-created is in the journal, and one that SAPI deleted because its
//! re-create failed too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::stream::{self, TryStreamExt};
use serde_json::{Value, json};

use agentsadm_api::ApiError;
use agentsadm_api::SapiClient;
use agentsadm_api::sapi::{
    Application, CreateInstance, CreateService, Instance, OWN_SERVICES, Object, Service,
    ServiceType, Update, UpdateAction,
};
use agentsadm_types::ids::InstanceUuid;

/// The twin's params key holding the instances being moved.
pub const MOVING_KEY: &str = "agentsadm_moving";

/// Instances moved per journal write.
const BATCH: usize = 100;

/// Moves made at once within a batch.
const CONCURRENCY: usize = 8;

/// Why the move stopped. SAPI keeps what was done; the next run finishes.
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    #[error("cannot {what} while moving {service} out of the sdc application")]
    Api {
        what: String,
        service: String,
        #[source]
        err: Box<ApiError>,
    },
    #[error(
        "the journal of moved instances in SAPI service {service} ({key}) cannot be read: {why}; nothing more was moved: check that service's params"
    )]
    Journal {
        service: String,
        key: &'static str,
        why: String,
    },
    #[error("no SAPI application named \"sdc\" any more: nothing more was moved")]
    NoSdcApplication,
    #[error("stopped after {writes} SAPI writes, as asked")]
    Stopped { writes: usize },
}

/// What was moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Services whose old record in `sdc` is gone now.
    pub services: Vec<String>,
    /// Instances re-created under the twins.
    pub instances: usize,
}

impl MoveReport {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.instances == 0
    }
}

/// How to move.
#[derive(Clone, Copy, Debug)]
pub struct MoveOptions {
    pub batch: usize,
    /// Stop (as a killed run would) after this many SAPI writes: for tests
    /// that interrupt the move at every point.
    pub stop_after_writes: Option<usize>,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            batch: BATCH,
            stop_after_writes: None,
        }
    }
}

/// Whether services of [`OWN_SERVICES`] are still in `sdc` (one read).
pub async fn needs_move(sapi: &SapiClient) -> Result<Vec<Service>, ApiError> {
    let Some(sdc) = sapi.sdc_application().await? else {
        return Ok(Vec::new());
    };
    Ok(sapi
        .list_agent_services()
        .await?
        .into_iter()
        .filter(|s| s.application_uuid == sdc.uuid && OWN_SERVICES.contains(&s.name.as_str()))
        .collect())
}

/// Move every service of [`OWN_SERVICES`] left in `sdc` (module docs).
/// Nothing to move costs two reads.
pub async fn move_out_of_sdc(
    sapi: &SapiClient,
    options: MoveOptions,
) -> Result<MoveReport, ShapeError> {
    let mover = Mover {
        sapi,
        options,
        writes: AtomicUsize::new(0),
    };
    let mut report = MoveReport::default();
    for name in OWN_SERVICES {
        mover.move_service(name, &mut report).await?;
    }
    Ok(report)
}

struct Mover<'a> {
    sapi: &'a SapiClient,
    options: MoveOptions,
    writes: AtomicUsize,
}

/// One service's records as one batch reads them.
struct Found {
    old: Service,
    twin: Option<Service>,
}

fn journal_of(twin: &Service) -> Result<BTreeMap<InstanceUuid, Value>, ShapeError> {
    let Some(raw) = twin.params.as_ref().and_then(|p| p.get(MOVING_KEY)) else {
        return Ok(BTreeMap::new());
    };
    let bad = |why: String| ShapeError::Journal {
        service: twin.name.clone(),
        key: MOVING_KEY,
        why,
    };
    let map = raw
        .as_object()
        .ok_or_else(|| bad(format!("not an object but {raw}")))?;
    map.iter()
        .map(|(k, v)| {
            let uuid = k
                .parse::<InstanceUuid>()
                .map_err(|_| bad(format!("{k:?} is not an instance UUID")))?;
            if !v.is_object() {
                return Err(bad(format!("the record of {k} is not an object")));
            }
            Ok((uuid, v.clone()))
        })
        .collect()
}

/// An instance's record as the journal keeps it.
fn record_of(inst: &Instance) -> Value {
    json!({"params": inst.params.clone().unwrap_or_default(),
           "metadata": inst.metadata.clone().unwrap_or_default()})
}

fn object_at(record: &Value, key: &str) -> Option<Object> {
    record.get(key).and_then(Value::as_object).cloned()
}

impl Mover<'_> {
    fn err(&self, what: impl Into<String>, service: &str) -> impl FnOnce(ApiError) -> ShapeError {
        let (what, service) = (what.into(), service.to_string());
        move |err| ShapeError::Api {
            what,
            service,
            err: Box::new(err),
        }
    }

    /// Count a write about to be made; refuse it past the test budget.
    fn write(&self) -> Result<(), ShapeError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        match self.options.stop_after_writes {
            Some(limit) if n >= limit => Err(ShapeError::Stopped { writes: limit }),
            _ => Ok(()),
        }
    }

    /// The old service in `sdc` and its twin in agentsadm's application.
    async fn find(&self, name: &str) -> Result<Option<(Found, Option<Application>)>, ShapeError> {
        let sapi = self.sapi;
        let Some(sdc) = sapi
            .sdc_application()
            .await
            .map_err(self.err("find the sdc application", name))?
        else {
            return Ok(None);
        };
        let services = sapi
            .list_services(Some(name), None, Some(ServiceType::Agent))
            .await
            .map_err(self.err("list the SAPI services", name))?;
        let Some(old) = services
            .iter()
            .filter(|s| s.name == name && s.application_uuid == sdc.uuid)
            .min_by_key(|s| s.uuid)
            .cloned()
        else {
            return Ok(None);
        };
        let own = sapi
            .own_application()
            .await
            .map_err(self.err("find agentsadm's SAPI application", name))?;
        let twin = own.as_ref().and_then(|a| {
            services
                .iter()
                .filter(|s| s.name == name && s.application_uuid == a.uuid)
                .min_by_key(|s| s.uuid)
                .cloned()
        });
        Ok(Some((Found { old, twin }, own)))
    }

    async fn move_service(&self, name: &str, report: &mut MoveReport) -> Result<(), ShapeError> {
        loop {
            let Some((found, own)) = self.find(name).await? else {
                return Ok(());
            };
            let twin = match found.twin {
                Some(t) => t,
                None => self.create_twin(&found.old, own).await?,
            };
            self.complete_twin(&found.old, &twin).await?;
            let mut journal = journal_of(&twin)?;
            let old_insts = self
                .sapi
                .list_service_instances(found.old.uuid)
                .await
                .map_err(self.err("list the instances of the old service", name))?;
            if journal.is_empty() {
                if old_insts.is_empty() {
                    self.write()?;
                    match self.sapi.delete_service(found.old.uuid).await {
                        Ok(()) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(self.err("delete the old service", name)(e)),
                    }
                    report.services.push(name.to_string());
                    return Ok(());
                }
                journal = old_insts
                    .iter()
                    .take(self.options.batch.max(1))
                    .map(|i| (i.uuid, record_of(i)))
                    .collect();
                self.write_journal(&twin, &journal).await?;
            }
            report.instances += self
                .move_batch(&found.old, &twin, &journal, &old_insts)
                .await?;
            self.clear_journal(&twin).await?;
        }
    }

    async fn create_twin(
        &self,
        old: &Service,
        own: Option<Application>,
    ) -> Result<Service, ShapeError> {
        let sapi = self.sapi;
        let app = match own {
            Some(a) => a,
            None => {
                self.write()?;
                sapi.application_for(&old.name)
                    .await
                    .map_err(self.err("create agentsadm's SAPI application", &old.name))?
                    .ok_or(ShapeError::NoSdcApplication)?
            }
        };
        // Without image_uuid first: SAPI checks an image against IMGAPI
        // on create (TOOLS-1716); complete_twin copies it after.
        let mut params = old.params.clone().unwrap_or_default();
        params.remove("image_uuid");
        params.remove(MOVING_KEY);
        self.write()?;
        sapi.create_service(&CreateService {
            name: old.name.clone(),
            application_uuid: app.uuid,
            service_type: Some(ServiceType::Agent),
            params: Some(params),
            metadata: old.metadata.clone(),
            manifests: old.manifests.clone(),
            uuid: None,
        })
        .await
        .map_err(self.err("create the service in agentsadm's application", &old.name))
    }

    /// Copy to the twin the params the old service has and it lacks (its
    /// default image, and whatever a killed run left out). Never
    /// overwrites: the twin is the record from its creation on.
    async fn complete_twin(&self, old: &Service, twin: &Service) -> Result<(), ShapeError> {
        let have = twin.params.clone().unwrap_or_default();
        let missing: Object = old
            .params
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k != MOVING_KEY && !have.contains_key(k))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.write()?;
        self.sapi
            .update_service(twin.uuid, &Update::params(missing))
            .await
            .map_err(self.err("copy the params of the old service", &old.name))?;
        Ok(())
    }

    async fn write_journal(
        &self,
        twin: &Service,
        journal: &BTreeMap<InstanceUuid, Value>,
    ) -> Result<(), ShapeError> {
        let value: Object = journal
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        self.write()?;
        self.sapi
            .update_service(
                twin.uuid,
                &Update::params(Object::from_iter([(
                    MOVING_KEY.to_string(),
                    Value::Object(value),
                )])),
            )
            .await
            .map_err(self.err("record the instances about to move", &twin.name))?;
        Ok(())
    }

    async fn clear_journal(&self, twin: &Service) -> Result<(), ShapeError> {
        self.write()?;
        let update = Update {
            action: Some(UpdateAction::Delete),
            params: Some(Object::from_iter([(MOVING_KEY.to_string(), Value::Null)])),
            metadata: None,
        };
        self.sapi
            .update_service(twin.uuid, &update)
            .await
            .map_err(self.err("clear the record of moved instances", &twin.name))?;
        Ok(())
    }

    /// Move the journal's instances not under the twin yet; how many.
    async fn move_batch(
        &self,
        old: &Service,
        twin: &Service,
        journal: &BTreeMap<InstanceUuid, Value>,
        old_insts: &[Instance],
    ) -> Result<usize, ShapeError> {
        let moved = self
            .sapi
            .list_service_instances(twin.uuid)
            .await
            .map_err(self.err("list the instances of the new service", &twin.name))?;
        let todo: Vec<(InstanceUuid, &Value)> = journal
            .iter()
            .filter(|(u, _)| !moved.iter().any(|m| m.uuid == **u))
            .map(|(u, v)| (*u, v))
            .collect();
        let n = todo.len();
        stream::iter(todo.into_iter().map(Ok))
            .try_for_each_concurrent(CONCURRENCY, |(uuid, record)| async move {
                let in_old = old_insts.iter().any(|i| i.uuid == uuid);
                self.move_one(old, twin, uuid, record, in_old).await
            })
            .await?;
        Ok(n)
    }

    async fn move_one(
        &self,
        old: &Service,
        twin: &Service,
        uuid: InstanceUuid,
        record: &Value,
        in_old: bool,
    ) -> Result<(), ShapeError> {
        if in_old {
            self.write()?;
            match self.sapi.delete_instance(uuid).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    return Err(self.err(
                        format!("delete instance {uuid} from the old service"),
                        &old.name,
                    )(e));
                }
            }
        }
        self.write()?;
        self.sapi
            .create_instance(&CreateInstance {
                uuid: Some(uuid),
                service_uuid: Some(twin.uuid),
                params: object_at(record, "params"),
                metadata: object_at(record, "metadata"),
                ..Default::default()
            })
            .await
            .map_err(self.err(
                format!("re-create instance {uuid} under the new service"),
                &old.name,
            ))?;
        Ok(())
    }
}

/// The record move every run makes under the lock: move (module docs),
/// then copy the per-server marks an earlier agentsadm kept only on
/// instances to their services ([`crate::runner::ledger`]), and say
/// through `note` what was done, or why not: the run goes on either way
/// (the old shape troubles sdcadm, not agentsadm, which reads agent
/// services of every application; a mark kept once still holds). The
/// copies come after the move, so that they land on the services where
/// they stay.
pub async fn move_and_note(
    sapi: &SapiClient,
    cnapi: Option<&agentsadm_api::CnapiClient>,
    note: impl Fn(&str),
) -> Option<MoveReport> {
    let moved = move_only(sapi, &note).await;
    crate::runner::ledger::copy_and_note(sapi, cnapi, &note).await;
    moved
}

async fn move_only(sapi: &SapiClient, note: impl Fn(&str)) -> Option<MoveReport> {
    match move_out_of_sdc(sapi, MoveOptions::default()).await {
        Ok(r) if r.is_empty() => Some(r),
        Ok(r) => {
            note(&format!(
                "moved the SAPI services {} out of the sdc application into {:?} ({} instances re-created with their UUIDs): sdcadm no longer takes them for its own agents",
                r.services.join(", "),
                agentsadm_api::sapi::OWN_APPLICATION,
                r.instances
            ));
            Some(r)
        }
        Err(e) => {
            note(&format!(
                "warning: {}; the next changing run finishes the move",
                agentsadm_types::error::error_chain(&e)
            ));
            None
        }
    }
}

/// For a run with nothing to change: when records need moving or marks
/// need their second copy (a few reads), do it holding the datacenter
/// lock (and sdcadm's, on a headnode) as a changing run would. Failing
/// to is a warning.
pub async fn move_when_idle(
    store: &dyn crate::runner::lock::LockStore,
    sapi: &SapiClient,
    cnapi: Option<&agentsadm_api::CnapiClient>,
    options: &crate::runner::lock::LockOptions,
    note: impl Fn(&str),
) {
    let chain = agentsadm_types::error::error_chain;
    let to_move = match needs_move(sapi).await {
        Ok(left) => !left.is_empty(),
        Err(e) => {
            note(&format!(
                "warning: cannot tell whether SAPI services need moving out of the sdc application: {}",
                chain(&e)
            ));
            false
        }
    };
    // Marks of servers CNAPI no longer knows are never copied: they take
    // no lock either.
    let to_copy = match cnapi {
        None => Ok(false),
        Some(cnapi) => async {
            let copies = crate::runner::ledger::missing(sapi).await?;
            crate::runner::ledger::of_known_servers(cnapi, copies).await
        }
        .await
        .map(|copies| !copies.is_empty()),
    };
    let to_copy = to_copy.unwrap_or_else(|e| {
        note(&format!("warning: {}", chain(&e)));
        false
    });
    if !to_move && !to_copy {
        return;
    }
    let lost = std::sync::atomic::AtomicBool::new(false);
    let work = move_and_note(sapi, cnapi, &note);
    if let Err(e) = crate::runner::lock::hold(
        store,
        "move records of earlier agentsadm versions",
        options,
        &lost,
        &note,
        work,
    )
    .await
    {
        note(&format!(
            "warning: agentsadm's records of earlier versions were not moved (services left in the sdc application, marks kept once): {}; the next changing run moves them",
            chain(&e)
        ));
    }
}
