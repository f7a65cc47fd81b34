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
//! - For each selected server and reported component: creates the instance
//!   with the UUID the server keeps (idempotent: SAPI overwrites), or adds
//!   `params.server_uuid` / `params.image_uuid` to a legacy instance. An
//!   instance whose params are already complete is left alone even if its
//!   image differs from what runs: that is a pending update, not drift for
//!   adoption to erase.
//! - Components reported without an instance UUID or image UUID cannot be
//!   adopted; they are listed with the reason.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};

use agentsadm_plan::intent::InstanceLink;

use super::store::instance_params;
use agentsadm_api::ApiError;
use agentsadm_api::sapi::CreateInstance;
use agentsadm_api::sapi::CreateService;
use agentsadm_api::sapi::SapiClient;
use agentsadm_api::sapi::ServiceType;
use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::object;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// A service to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NewService {
    pub component: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_image: Option<ImageUuid>,
}

/// An existing service without a default image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceDefault {
    pub component: String,
    pub service: ServiceUuid,
    pub image: ImageUuid,
}

/// An instance to create or complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdoptInstance {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
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

/// What adoption will do. Pure output of [`plan_adoption`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AdoptPlan {
    pub new_services: Vec<NewService>,
    pub service_defaults: Vec<ServiceDefault>,
    pub instances: Vec<AdoptInstance>,
    pub skips: Vec<AdoptSkip>,
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

/// Decide what to adopt on `servers` (all set-up servers when `None`).
pub fn plan_adoption(
    catalog: &Catalog,
    intent: &Intent,
    reality: &Reality,
    servers: Option<&[ServerUuid]>,
) -> AdoptPlan {
    let mut plan = AdoptPlan::default();

    // Default image per component: the headnode's, else the most common.
    let mut counts: BTreeMap<&str, BTreeMap<ImageUuid, usize>> = BTreeMap::new();
    let mut headnode: BTreeMap<&str, ImageUuid> = BTreeMap::new();
    for s in reality.servers.values().filter(|s| s.setup) {
        for (name, inst) in &s.components {
            if let Some(image) = inst.image {
                *counts.entry(name).or_default().entry(image).or_default() += 1;
                if s.headnode {
                    headnode.insert(name, image);
                }
            }
        }
    }
    let default_for = |name: &str| -> Option<ImageUuid> {
        headnode.get(name).copied().or_else(|| {
            counts
                .get(name)?
                .iter()
                // Most servers; on a tie the smallest UUID, for determinism.
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                .map(|(i, _)| *i)
        })
    };
    for c in catalog.iter() {
        match intent.services.get(&c.name) {
            None if counts.contains_key(c.name.as_str()) => plan.new_services.push(NewService {
                component: c.name.clone(),
                default_image: default_for(&c.name),
            }),
            Some(svc) if svc.default_image.is_none() => {
                if let Some(image) = default_for(&c.name) {
                    plan.service_defaults.push(ServiceDefault {
                        component: c.name.clone(),
                        service: svc.uuid,
                        image,
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
            let planned = plan.new_services.iter().any(|n| n.component == c.name);
            if !planned && !intent.services.contains_key(&c.name) {
                plan.new_services.push(NewService {
                    component: c.name.clone(),
                    default_image: default_for(&c.name),
                });
            }
        }
    }

    let selected: Vec<ServerUuid> = match servers {
        Some(s) => s.to_vec(),
        None => reality.servers.keys().copied().collect(),
    };
    for uuid in selected {
        let Some(s) = reality.get(&uuid) else {
            continue;
        };
        if !s.setup {
            continue;
        }
        for (name, inst) in &s.components {
            let skip = |reason: &str| AdoptSkip {
                server: uuid,
                hostname: s.hostname.clone(),
                component: name.clone(),
                reason: reason.to_string(),
            };
            let (Some(instance), Some(image)) = (inst.instance, inst.image) else {
                plan.skips.push(skip(if inst.instance.is_none() {
                    "the server reports no instance UUID for it (reinstall it with agentsadm, which keeps one)"
                } else {
                    "the server reports no image UUID for it (only sysinfo knows it; reinstall it)"
                }));
                continue;
            };
            let existing = intent.instance(&uuid, name);
            let needs = match existing {
                None => true,
                Some(e) if e.uuid != instance => {
                    plan.skips.push(skip(&format!(
                        "SAPI has a different instance ({}) for it; 'agentsadm check' reports the duplicate",
                        e.uuid
                    )));
                    false
                }
                Some(e) => e.link == InstanceLink::Reported || e.image.is_none(),
            };
            if needs {
                plan.instances.push(AdoptInstance {
                    server: uuid,
                    hostname: s.hostname.clone(),
                    component: name.clone(),
                    instance,
                    image,
                    // Also one SAPI has but could not tie to a server.
                    exists: existing.is_some()
                        || intent.unlinked.iter().any(|u| u.uuid == instance),
                });
            }
        }
    }
    plan
}

/// Adoption failed before any instance was written.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("no SAPI application named \"sdc\": SAPI is not set up yet")]
    NoSdcApplication,
    #[error("cannot {what} in SAPI")]
    Api {
        what: String,
        #[source]
        err: ApiError,
    },
}

/// One instance that could not be adopted; the others still are. The
/// report keeps its text (the server and component are beside it).
#[derive(Debug, thiserror::Error)]
enum InstanceAdoptError {
    #[error("no SAPI service for {component}")]
    NoService { component: String },
    /// SAPI refused the instance; its message says why.
    #[error(transparent)]
    Api(ApiError),
}

/// What adoption did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AdoptReport {
    pub services_created: usize,
    pub defaults_set: usize,
    pub instances_adopted: usize,
    /// Instances that failed: (server, component, error).
    pub failures: Vec<(ServerUuid, String, String)>,
}

/// Carry out an adoption plan: services first (an error stops everything),
/// then instances 20 at a time (errors are collected).
pub async fn adopt(
    sapi: &SapiClient,
    plan: &AdoptPlan,
    intent: &Intent,
) -> Result<AdoptReport, AdoptError> {
    let mut report = AdoptReport::default();
    let mut services: BTreeMap<String, ServiceUuid> = intent
        .services
        .iter()
        .map(|(n, s)| (n.clone(), s.uuid))
        .collect();
    if !plan.new_services.is_empty() {
        let app = sapi
            .sdc_application()
            .await
            .map_err(|err| AdoptError::Api {
                what: "find the sdc application".to_string(),
                err,
            })?
            .ok_or(AdoptError::NoSdcApplication)?;
        for s in &plan.new_services {
            let log_key = format!("{}_LOG_LEVEL", s.component.to_uppercase().replace('-', "_"));
            let create = CreateService {
                name: s.component.clone(),
                application_uuid: app.uuid,
                service_type: Some(ServiceType::Agent),
                params: Some(object([(
                    "tags",
                    json!({"smartdc_role": s.component, "smartdc_type": "core"}),
                )])),
                metadata: Some(object([
                    ("SERVICE_NAME", Value::String(s.component.clone())),
                    (log_key.as_str(), Value::String("info".to_string())),
                ])),
                manifests: Some(object(Vec::<(String, Value)>::new())),
                uuid: None,
            };
            let created = sapi
                .create_service(&create)
                .await
                .map_err(|err| AdoptError::Api {
                    what: format!("create service {}", s.component),
                    err,
                })?;
            report.services_created += 1;
            services.insert(s.component.clone(), created.uuid);
            if let Some(image) = s.default_image {
                set_default(sapi, created.uuid, &s.component, image).await?;
                report.defaults_set += 1;
            }
        }
    }
    for d in &plan.service_defaults {
        set_default(sapi, d.service, &d.component, d.image).await?;
        report.defaults_set += 1;
    }

    let results: Vec<(ServerUuid, String, Result<(), InstanceAdoptError>)> =
        stream::iter(plan.instances.iter())
            .map(|i| {
                let service = services.get(&i.component).copied();
                async move {
                    let result = match service {
                        None => Err(InstanceAdoptError::NoService {
                            component: i.component.clone(),
                        }),
                        // An instance SAPI has is completed with
                        // UpdateInstance: re-posting it would overwrite it,
                        // and a failed re-create makes SAPI delete it.
                        Some(_) if i.exists => sapi
                            .update_instance(
                                i.instance,
                                &Update::params(instance_params(i.server, i.image)),
                            )
                            .await
                            .map(|_| ())
                            .map_err(InstanceAdoptError::Api),
                        Some(service) => sapi
                            .create_instance(&CreateInstance {
                                uuid: Some(i.instance),
                                service_uuid: Some(service),
                                params: Some(instance_params(i.server, i.image)),
                                ..Default::default()
                            })
                            .await
                            .map(|_| ())
                            .map_err(InstanceAdoptError::Api),
                    };
                    (i.server, i.component.clone(), result)
                }
            })
            .buffer_unordered(super::execute::DEFAULT_CONCURRENCY)
            .collect()
            .await;
    for (server, component, r) in results {
        match r {
            Ok(()) => report.instances_adopted += 1,
            Err(e) => report.failures.push((server, component, error_chain(&e))),
        }
    }
    report.failures.sort();
    Ok(report)
}

async fn set_default(
    sapi: &SapiClient,
    service: ServiceUuid,
    component: &str,
    image: ImageUuid,
) -> Result<(), AdoptError> {
    let update = Update::params(object([("image_uuid", Value::String(image.to_string()))]));
    sapi.update_service(service, &update)
        .await
        .map(|_| ())
        .map_err(|err| AdoptError::Api {
            what: format!("set the default image of service {component}"),
            err,
        })
}
