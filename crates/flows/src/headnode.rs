//! Headnode adoption (`agentsadm adopt --local`), the replacement for
//! headnode.sh's `adopt_agents`.
//!
//! During headnode setup the agents are installed before any API exists
//! (`agentsadm gz setup --source DIR --headnode --no-sapi`). Adoption
//! happens later, once SAPI (proto mode) and binder run but before CNAPI
//! does: so reality comes from this server's own GZ report instead of
//! CNAPI `server.agents`. The rest is the orchestrator's adoption
//! ([`agentsadm_orchestrate::adopt`]): it creates the agent services SAPI
//! lacks, sets each service's `params.image_uuid` to what the headnode
//! installed (what new servers get, replacing `/usbkey/extra/agents/latest`),
//! and creates the headnode's instances with `params.server_uuid` and
//! `params.image_uuid` (headnode.sh's carried no params). Idempotent.

use agentsadm_api::ApiError;
use agentsadm_api::cnapi::Server;
use agentsadm_api::sapi::SapiClient;
use agentsadm_gz::session::GzError;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_orchestrate::Intent;
use agentsadm_orchestrate::Reality;
use agentsadm_orchestrate::adopt;
use agentsadm_orchestrate::adopt::AdoptPlan;
use agentsadm_orchestrate::run::Planner;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ServerUuid;

/// Local adoption could not be planned or started.
#[derive(Debug, thiserror::Error)]
pub enum LocalAdoptError {
    #[error("cannot read what this server has installed")]
    Gz(#[source] Box<GzError>),
    #[error("cannot list the agent {what} in SAPI (is SAPI up?)")]
    Sapi {
        what: &'static str,
        #[source]
        err: Box<ApiError>,
    },
}

/// This server as a CNAPI record would show it, from its own GZ: set up,
/// running, with `agents` from the installer's report.
pub async fn local_server(settings: GzSettings) -> Result<Server, LocalAdoptError> {
    let session = GzSession::open(settings, false)
        .await
        .map_err(|e| LocalAdoptError::Gz(Box::new(e)))?;
    let report = session.report().await;
    let hostname = session
        .sysinfo()
        .await
        .map(|s| s.hostname)
        .unwrap_or_default();
    Ok(Server {
        uuid: report.server_uuid,
        hostname,
        headnode: session.headnode(),
        setup: true,
        setting_up: None,
        status: Some("running".to_string()),
        datacenter: None,
        agents: Some(report.agents),
        agent_problems: Vec::new(),
        sysinfo: None,
        vms: None,
        last_heartbeat: None,
        extra: Default::default(),
    })
}

/// What adoption of this server will do.
pub async fn plan(
    sapi: &SapiClient,
    catalog: &Catalog,
    server: &Server,
) -> Result<AdoptPlan, LocalAdoptError> {
    let (services, instances) =
        tokio::join!(sapi.list_agent_services(), sapi.list_agent_instances());
    let services = services.map_err(|err| LocalAdoptError::Sapi {
        what: "services",
        err: Box::new(err),
    })?;
    let instances = instances.map_err(|err| LocalAdoptError::Sapi {
        what: "instances",
        err: Box::new(err),
    })?;
    let reality = Reality::from_servers(catalog, std::slice::from_ref(server));
    let intent = Intent::build(catalog, &services, &instances, &reality);
    let only: [ServerUuid; 1] = [server.uuid];
    Ok(adopt::plan_adoption(
        catalog,
        &intent,
        &reality,
        Some(&only),
    ))
}

/// `adopt --local` as a [`Planner`] for
/// [`agentsadm_orchestrate::run::Run`]: each call reads this server's GZ
/// and SAPI anew.
pub struct LocalAdoptPlanner<'a> {
    pub sapi: &'a SapiClient,
    pub catalog: &'a Catalog,
    pub settings: GzSettings,
}

impl Planner for LocalAdoptPlanner<'_> {
    type Planned = AdoptPlan;
    type Error = LocalAdoptError;

    async fn plan(&self) -> Result<AdoptPlan, LocalAdoptError> {
        let server = local_server(self.settings.clone()).await?;
        plan(self.sapi, self.catalog, &server).await
    }
}
