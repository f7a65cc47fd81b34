//! Adoption: make SAPI intent match what servers already run, so the
//! orchestrator can manage it. Used by `agentsadm adopt` and by headnode
//! setup once SAPI is up.
//!
//! - Creates the `type=agent` service of every catalog component some
//!   server reports and SAPI lacks. Like sdcadm (TOOLS-1716) the service is
//!   created without `params.image_uuid` (SAPI would check it against the
//!   datacenter IMGAPI) and the default image is set right after: the
//!   headnode's installed image, else the one most servers run.
//! - Creates the `gz-tools` and `sdcadm` services where a headnode lacks
//!   them, reported or not (RFD 82 M5): a real headnode has neither.
//! - Sets the default image of existing services that have none.
//! - For each selected server and reported component, as the one adoption
//!   rule ([`agentsadm_api::adoption`]) says: creates the instance with the
//!   UUID the server keeps, or adds `params.server_uuid` /
//!   `params.image_uuid` to the one SAPI has under the service (a legacy
//!   instance); a UUID SAPI files under another service is left alone and
//!   listed. An instance whose params are already complete is left alone
//!   even if its image differs from what runs: that is a pending update,
//!   not drift for adoption to erase.
//! - Components reported without an instance UUID or image UUID cannot be
//!   adopted; they are listed with the reason.
//! - The result is a [`Plan`] of SAPI record changes only, run like every
//!   other plan ([`crate::run::Run`]: lock, question or `-y`, fence).

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;

use serde::Serialize;

use agentsadm_plan::intent::InstanceLink;

use crate::carriers::records::{ApiRecords, RecordStatus};
use crate::carriers::store::SapiIntentStore;
use crate::executor::execute::{ExecOptions, Executor};
use crate::runner::run::{Planned, Planner};
use crate::vocabulary::confirm::Confirmed;
use crate::vocabulary::report::{ExecReport, NullReporter};
use agentsadm_api::adoption::{Adoption, adopt_instance};
use agentsadm_api::sapi::SapiClient;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_plan::{Operation, Plan, PlanBuilder, RecordChange, RolloutPolicy, ServiceChange};
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// A service to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NewService {
    pub component: ComponentName,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_image: Option<ImageUuid>,
}

/// An existing service without a default image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceDefault {
    pub component: ComponentName,
    pub service: ServiceUuid,
    pub image: ImageUuid,
}

/// An instance to create or complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdoptInstance {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: ComponentName,
    pub instance: InstanceUuid,
    pub image: ImageUuid,
    /// Whether SAPI already has the instance (without params).
    pub exists: bool,
}

/// Something reported that cannot be adopted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdoptSkip {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
    pub reason: String,
}

/// What adoption will do: the view operators read (and `--json` shows),
/// and the [`Plan`] that carries it out. Pure output of [`plan_adoption`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdoptPlan {
    pub new_services: Vec<NewService>,
    pub service_defaults: Vec<ServiceDefault>,
    pub instances: Vec<AdoptInstance>,
    pub skips: Vec<AdoptSkip>,
    /// The record changes above, as the executor runs them.
    #[serde(skip)]
    pub plan: Plan,
}

impl Planned for AdoptPlan {
    fn plan(&self) -> &Plan {
        &self.plan
    }
}

impl AdoptPlan {
    pub fn is_empty(&self) -> bool {
        self.new_services.is_empty()
            && self.service_defaults.is_empty()
            && self.instances.is_empty()
    }

    /// Lines for humans.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for s in &self.new_services {
            let img = s
                .default_image
                .map(|i| format!(" (default image {i})"))
                .unwrap_or_default();
            out.push_str(&format!("+ SAPI service {}{img}\n", s.component));
        }
        for s in &self.service_defaults {
            out.push_str(&format!(
                "~ SAPI service {}: default image {}\n",
                s.component, s.image
            ));
        }
        for i in &self.instances {
            let verb = if i.exists { "~ set params of" } else { "+" };
            out.push_str(&format!(
                "{verb} SAPI instance {} of {} on {} ({})\n",
                i.instance, i.component, i.hostname, i.server
            ));
        }
        for s in &self.skips {
            out.push_str(&format!(
                "  skipped {} on {} ({}): {}\n",
                s.component, s.hostname, s.server, s.reason
            ));
        }
        out.push_str(&format!(
            "{} services to create, {} defaults to set, {} instances to adopt, {} skipped.\n",
            self.new_services.len(),
            self.service_defaults.len(),
            self.instances.len(),
            self.skips.len()
        ));
        out
    }
}

/// The default image of each component: the headnode's, else the one
/// most servers run (on a tie the smallest UUID, for determinism).
fn default_images(reality: &Reality) -> BTreeMap<ComponentName, ImageUuid> {
    let mut counts: BTreeMap<&ComponentName, BTreeMap<ImageUuid, usize>> = BTreeMap::new();
    let mut out: BTreeMap<ComponentName, ImageUuid> = BTreeMap::new();
    for s in reality.servers.values().filter(|s| s.setup) {
        for (name, inst) in &s.components {
            if let Some(image) = inst.image {
                *counts.entry(name).or_default().entry(image).or_default() += 1;
                if s.headnode {
                    out.insert(name.clone(), image);
                }
            }
        }
    }
    for (name, images) in counts {
        if let Some((image, _)) = images
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        {
            out.entry(name.clone()).or_insert(*image);
        }
    }
    out
}

/// The services to create and the defaults to set.
fn services(
    catalog: &Catalog,
    intent: &Intent,
    reality: &Reality,
    defaults: &BTreeMap<ComponentName, ImageUuid>,
) -> (Vec<NewService>, Vec<ServiceDefault>) {
    let reported = |name: &str| {
        reality
            .servers
            .values()
            .any(|s| s.setup && s.components.get(name).is_some_and(|i| i.image.is_some()))
    };
    let mut new_services = Vec::new();
    let mut service_defaults = Vec::new();
    for c in catalog.iter() {
        match intent.services.get(&c.name) {
            None if reported(&c.name) => new_services.push(NewService {
                component: c.name.clone(),
                default_image: defaults.get(&c.name).copied(),
            }),
            Some(svc) if svc.default_image.is_none() => {
                if let Some(image) = defaults.get(&c.name) {
                    service_defaults.push(ServiceDefault {
                        component: c.name.clone(),
                        service: svc.uuid,
                        image: *image,
                    });
                }
            }
            _ => {}
        }
    }
    // A real headnode has no gz-tools or sdcadm service (they were never
    // SAPI agents, and cn-agent does not report them): RFD 82 M5 adds both,
    // so that they are managed like the agents from then on.
    if reality.servers.values().any(|s| s.setup && s.headnode) {
        for c in catalog
            .iter()
            .filter(|c| matches!(c.kind, ComponentKind::GzTools | ComponentKind::Sdcadm))
        {
            let planned = new_services.iter().any(|n| n.component == c.name);
            if !planned && !intent.services.contains_key(&c.name) {
                new_services.push(NewService {
                    component: c.name.clone(),
                    default_image: defaults.get(&c.name).copied(),
                });
            }
        }
    }
    (new_services, service_defaults)
}

/// The instances of one server to adopt, and what cannot be.
fn server_instances(
    intent: &Intent,
    s: &agentsadm_plan::reality::ServerState,
    instances: &mut Vec<AdoptInstance>,
    skips: &mut Vec<AdoptSkip>,
) {
    for (name, inst) in &s.components {
        let mut skip = |reason: String| {
            skips.push(AdoptSkip {
                server: s.uuid,
                hostname: s.hostname.clone(),
                component: name.to_string(),
                reason,
            })
        };
        let (Some(instance), Some(image)) = (inst.instance, inst.image) else {
            skip(if inst.instance.is_none() {
                "the server reports no instance UUID for it (reinstall it with agentsadm, which keeps one)".to_string()
            } else {
                "the server reports no image UUID for it (only sysinfo knows it; reinstall it)"
                    .to_string()
            });
            continue;
        };
        let existing = intent.instance(&s.uuid, name);
        if let Some(e) = existing.filter(|e| e.uuid != instance) {
            skip(format!(
                "SAPI has a different instance ({}) for it; 'agentsadm check' reports the duplicate",
                e.uuid
            ));
            continue;
        }
        let service = intent.services.get(name).map(|svc| svc.uuid);
        let exists = match adopt_instance(intent.recorded.get(&instance).copied(), service) {
            Adoption::OtherService { recorded } => {
                skip(format!(
                    "SAPI records instance {instance} under another service ({recorded}); left alone: run 'agentsadm check' and decide which component owns it"
                ));
                continue;
            }
            Adoption::Create => false,
            Adoption::Update => true,
        };
        let complete =
            existing.is_some_and(|e| e.link == InstanceLink::Params && e.image.is_some());
        if !complete {
            instances.push(AdoptInstance {
                server: s.uuid,
                hostname: s.hostname.clone(),
                component: name.clone(),
                instance,
                image,
                exists,
            });
        }
    }
}

/// Decide what to adopt on `servers` (all set-up servers when `None`).
pub fn plan_adoption(
    catalog: &Catalog,
    intent: &Intent,
    reality: &Reality,
    servers: Option<&[ServerUuid]>,
) -> AdoptPlan {
    let defaults = default_images(reality);
    let (new_services, service_defaults) = services(catalog, intent, reality, &defaults);
    let selected: Vec<ServerUuid> = match servers {
        Some(s) => s.to_vec(),
        None => reality.servers.keys().copied().collect(),
    };
    let mut instances = Vec::new();
    let mut skips = Vec::new();
    for uuid in selected {
        let Some(s) = reality.get(&uuid).filter(|s| s.setup) else {
            continue;
        };
        if let Some(problem) = &s.quarantine {
            skips.push(AdoptSkip {
                server: s.uuid,
                hostname: s.hostname.clone(),
                component: "-".to_string(),
                reason: format!(
                    "set aside: what CNAPI lists for it cannot be used ({problem}); 'agentsadm check' says what to do"
                ),
            });
            continue;
        }
        server_instances(intent, s, &mut instances, &mut skips);
    }
    let mut b = PlanBuilder::new(Operation::Adopt, catalog, agentsadm_plan::Intent::none());
    b.selected_servers(reality.servers.len());
    for n in &new_services {
        b.record(RecordChange::CreateService {
            component: n.component.clone(),
            default_image: n.default_image,
        });
    }
    for d in &service_defaults {
        b.record(RecordChange::ServiceDefault {
            change: ServiceChange {
                component: d.component.clone(),
                service: d.service,
                from: None,
                from_version: None,
                to: agentsadm_plan::ImageRef {
                    uuid: d.image,
                    name: d.component.to_string(),
                    version: String::new(),
                    import_from: None,
                },
            },
        });
    }
    for i in &instances {
        b.record(RecordChange::AdoptInstance {
            server: i.server,
            hostname: i.hostname.clone(),
            component: i.component.clone(),
            service: intent.services.get(&i.component).map(|s| s.uuid),
            instance: i.instance,
            image: i.image,
            exists: i.exists,
        });
    }
    AdoptPlan {
        new_services,
        service_defaults,
        instances,
        skips,
        plan: b.finish(&RolloutPolicy::default()),
    }
}

/// `agentsadm adopt` as a [`Planner`] for [`crate::run::Run`]: each call
/// reads SAPI and CNAPI anew and plans the adoption of `servers` (UUIDs or
/// hostnames as typed; all set-up servers when empty).
pub struct AdoptPlanner<'a> {
    pub apis: &'a agentsadm_api::Apis,
    pub catalog: &'a Catalog,
    pub servers: Vec<String>,
}

/// Adoption could not be planned; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error(transparent)]
    Gather(#[from] crate::carriers::gather::GatherError),
    #[error(transparent)]
    Servers(#[from] agentsadm_plan::PlanError),
}

impl Planner for AdoptPlanner<'_> {
    type Planned = AdoptPlan;
    type Error = AdoptError;

    async fn plan(&self) -> Result<AdoptPlan, AdoptError> {
        let (intent, reality) = crate::carriers::gather::gather(self.apis, self.catalog).await?;
        let servers = if self.servers.is_empty() {
            None
        } else {
            Some(agentsadm_plan::resolve_servers(&reality, &self.servers)?)
        };
        Ok(plan_adoption(
            self.catalog,
            &intent,
            &reality,
            servers.as_deref(),
        ))
    }
}

/// What adoption did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AdoptReport {
    pub services_created: usize,
    pub defaults_set: usize,
    pub instances_adopted: usize,
    /// Instances that failed: (server, component, error).
    pub failures: Vec<(ServerUuid, String, String)>,
    /// Services that could not be created or given a default: (component,
    /// error).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub service_failures: Vec<(String, String)>,
}

impl AdoptReport {
    /// What the executor's record changes come to.
    pub fn from_exec(report: &ExecReport) -> AdoptReport {
        let mut out = AdoptReport::default();
        for r in &report.records {
            let error = match &r.status {
                RecordStatus::Failed { message } => Some(message.clone()),
                RecordStatus::NotRun { reason } => Some(reason.clone()),
                _ => None,
            };
            match (&r.change, error) {
                (RecordChange::CreateService { default_image, .. }, None) => {
                    out.services_created += 1;
                    out.defaults_set += usize::from(default_image.is_some());
                }
                (RecordChange::ServiceDefault { .. }, None) => out.defaults_set += 1,
                (RecordChange::AdoptInstance { .. }, None) => out.instances_adopted += 1,
                (
                    RecordChange::AdoptInstance {
                        server, component, ..
                    },
                    Some(e),
                ) => out.failures.push((*server, component.to_string(), e)),
                (change, Some(e)) => out.service_failures.push((
                    change
                        .component()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    e,
                )),
                (_, None) => {}
            }
        }
        out.failures.sort();
        out
    }

    /// 0 when everything was adopted, 2 otherwise.
    pub fn exit_status(&self) -> u8 {
        if self.failures.is_empty() && self.service_failures.is_empty() {
            0
        } else {
            2
        }
    }
}

/// Carry out a confirmed adoption through SAPI alone (services first, then
/// instances 20 at a time; failures are collected).
pub async fn adopt(sapi: &SapiClient, confirmed: Confirmed<'_>) -> AdoptReport {
    let store = SapiIntentStore::new(sapi.clone());
    let records = ApiRecords::sapi_only(sapi);
    let options = ExecOptions::default();
    let executor =
        Executor::new(&NoServers, &store, &NullReporter, &options).with_records(&records);
    match executor.execute(confirmed, std::future::pending()).await {
        Ok(report) => AdoptReport::from_exec(&report),
        // Only service default changes of a rollout fail this way, and an
        // adoption plan has none.
        Err(e) => AdoptReport {
            service_failures: vec![(String::new(), agentsadm_types::error::error_chain(&e))],
            ..AdoptReport::default()
        },
    }
}

/// Adoption reaches no server.
struct NoServers;

impl crate::carriers::transport::Transport for NoServers {
    fn run<'a>(
        &'a self,
        _: ServerUuid,
        _: &'a agentsadm_plan::Step,
    ) -> futures::future::BoxFuture<
        'a,
        Result<crate::carriers::transport::StepDone, crate::carriers::transport::StepFailure>,
    > {
        Box::pin(async {
            Err(crate::carriers::transport::StepFailure::new(
                crate::vocabulary::report::FailureStage::Execute,
                "adoption runs no step on servers".to_string(),
            ))
        })
    }
}
