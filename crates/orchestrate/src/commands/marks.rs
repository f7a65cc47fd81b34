//! `disable`/`enable` as a [`Planner`] for the one [`crate::run::Run`]
//! (each call gathers anew and plans through [`agentsadm_plan::plan_disable`]),
//! and `hold`/`release`: the hold marks written to SAPI (instance params
//! for servers, service params datacenter-wide). A hold changes no server,
//! so it is a record write, not a run; every later plan honours it.

use agentsadm_api::Apis;
use agentsadm_api::sapi::{Update, UpdateAction, object};
use agentsadm_plan::{HoldScope, Mark, Plan, PlanOptions, PlanningInput, Request, resolve_servers};
use agentsadm_types::catalog::Catalog;

use crate::carriers::gather;
use crate::carriers::images::{self, ImageChoice, ImageSources};
use crate::commands::session::SessionError;
use crate::runner::run::Planner;

/// `disable` (`mark`) or `enable` (`None`) as a run's planner.
pub struct SwitchPlanner<'a> {
    pub apis: &'a Apis,
    pub catalog: &'a Catalog,
    pub request: Request,
    pub mark: Option<Mark>,
    pub options: PlanOptions,
}

impl Planner for SwitchPlanner<'_> {
    type Planned = Plan;
    type Error = SessionError;

    async fn plan(&self) -> Result<Plan, SessionError> {
        let (intent, reality) = gather::gather(self.apis, self.catalog).await?;
        // No image moves, but `gz disable|enable` are newer words: the
        // agentsadm a server with an older copy gets first is resolved as
        // for every request.
        let images = images::resolve(
            self.catalog,
            &[],
            ImageChoice::Intent,
            ImageSources {
                dc: &self.apis.imgapi,
                updates: None,
            },
            &intent,
        )
        .await?;
        Ok(agentsadm_plan::plan_disable(
            &PlanningInput {
                catalog: self.catalog,
                intent: &intent,
                reality: &reality,
                request: &self.request,
                options: self.options,
                images: &images,
                durations: None,
            },
            self.mark.as_ref(),
        )?)
    }
}

/// One hold written or cleared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldWrite {
    pub scope: HoldScope,
    /// The server's hostname, for a server hold.
    pub hostname: Option<String>,
    pub component: String,
}

/// Why a hold could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(
        "{component} has no SAPI agent service, so it cannot be held: run 'agentsadm adopt' first"
    )]
    Unmanaged { component: String },
    #[error(
        "{component} on {hostname} has no SAPI instance to hold it on: run 'agentsadm adopt' (or 'agentsadm check --fix') first"
    )]
    NoInstance { component: String, hostname: String },
    #[error("cannot write the hold of {component} to SAPI")]
    Api {
        component: String,
        #[source]
        err: Box<agentsadm_api::ApiError>,
    },
}

/// Hold (`Some(mark)`) or release (`None`) `component` on `servers`, or
/// datacenter-wide when `servers` is empty. Every named server is checked
/// before anything is written.
pub async fn set_holds(
    apis: &Apis,
    catalog: &Catalog,
    component: &str,
    servers: &[String],
    mark: Option<&Mark>,
) -> Result<Vec<HoldWrite>, HoldError> {
    let c = catalog
        .require(component)
        .map_err(|e| SessionError::from(agentsadm_plan::PlanError::from(e)))?;
    let (intent, reality) = gather::gather(apis, catalog)
        .await
        .map_err(SessionError::from)?;
    let Some(service) = intent.services.get(&c.name) else {
        return Err(HoldError::Unmanaged {
            component: c.name.to_string(),
        });
    };
    let value = mark.map(Mark::to_value).unwrap_or_default();
    let update = Update {
        action: Some(if mark.is_some() {
            UpdateAction::Update
        } else {
            UpdateAction::Delete
        }),
        params: Some(object([(agentsadm_plan::marks::HOLD_PARAM, value)])),
        metadata: None,
    };
    let api_err = |err| HoldError::Api {
        component: c.name.to_string(),
        err: Box::new(err),
    };
    if servers.is_empty() {
        apis.sapi
            .update_service(service.uuid, &update)
            .await
            .map_err(api_err)?;
        return Ok(vec![HoldWrite {
            scope: HoldScope::Datacenter,
            hostname: None,
            component: c.name.to_string(),
        }]);
    }
    let uuids = resolve_servers(&reality, servers).map_err(SessionError::from)?;
    let mut targets = Vec::new();
    for uuid in uuids {
        let hostname = reality
            .get(&uuid)
            .map(|s| s.hostname.clone())
            .unwrap_or_else(|| uuid.to_string());
        let Some(instance) = intent.instance(&uuid, &c.name) else {
            return Err(HoldError::NoInstance {
                component: c.name.to_string(),
                hostname,
            });
        };
        targets.push((instance.uuid, hostname));
    }
    let mut done = Vec::new();
    for (instance, hostname) in targets {
        apis.sapi
            .update_instance(instance, &update)
            .await
            .map_err(api_err)?;
        done.push(HoldWrite {
            scope: HoldScope::Server,
            hostname: Some(hostname),
            component: c.name.to_string(),
        });
    }
    Ok(done)
}
