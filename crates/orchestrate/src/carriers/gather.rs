//! Reading intent and reality: one ServerList (`extras=agents`, paged by
//! the client), one ListServices and one ListInstances (`type=agent`),
//! concurrently. Nothing per server: a 2000-server datacenter costs three
//! to five requests.

use futures::future::BoxFuture;

use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::cnapi::Server;
use agentsadm_api::cnapi::ServerListFilter;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Service;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_types::catalog::Catalog;

/// Intent and reality could not be read; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("cannot list servers from CNAPI (reality)")]
    Servers {
        #[source]
        err: ApiError,
    },
    #[error("cannot list agent services from SAPI (intent)")]
    Services {
        #[source]
        err: ApiError,
    },
    #[error("cannot list agent instances from SAPI (intent)")]
    Instances {
        #[source]
        err: ApiError,
    },
}

/// The raw answers, for callers that need more than the indexes.
#[derive(Clone, Debug)]
pub struct Answers {
    pub servers: Vec<Server>,
    pub services: Vec<Service>,
    pub instances: Vec<Instance>,
}

/// Fetch the three lists concurrently.
pub async fn fetch(apis: &Apis) -> Result<Answers, GatherError> {
    let filter = ServerListFilter {
        extras: vec!["agents".to_string()],
        ..Default::default()
    };
    let (servers, services, instances) = tokio::join!(
        apis.cnapi.list_servers(&filter),
        apis.sapi.list_agent_services(),
        apis.sapi.list_agent_instances(),
    );
    Ok(Answers {
        servers: servers.map_err(|err| GatherError::Servers { err })?,
        services: services.map_err(|err| GatherError::Services { err })?,
        instances: instances.map_err(|err| GatherError::Instances { err })?,
    })
}

/// What a server shows better than CNAPI's registrations, taken over
/// them before reality is indexed: on a headnode, sdcadm and gz-tools as
/// `sdcadm self-update` and `sdcadm experimental update-gz-tools` left
/// them on its disk (neither tells CNAPI). Reading a global zone is the
/// gz layer's, above this crate, so the caller hands one in (the command
/// line: agentsadm-flows' `ondisk::HeadnodeDisk`); the planner stays pure
/// and sees only the reality it makes.
pub trait ServersOverlay: Send + Sync {
    /// Take what it reads over `servers` (CNAPI's records with `agents`).
    fn overlay<'a>(&'a self, servers: &'a mut [Server]) -> BoxFuture<'a, ()>;
}

/// Fetch and index intent and reality.
pub async fn gather(apis: &Apis, catalog: &Catalog) -> Result<(Intent, Reality), GatherError> {
    gather_over(apis, catalog, None).await
}

/// [`gather`], with `overlay` taken over CNAPI's records first.
pub async fn gather_over(
    apis: &Apis,
    catalog: &Catalog,
    overlay: Option<&dyn ServersOverlay>,
) -> Result<(Intent, Reality), GatherError> {
    let mut answers = fetch(apis).await?;
    if let Some(o) = overlay {
        o.overlay(&mut answers.servers).await;
    }
    let reality = Reality::from_servers(catalog, &answers.servers);
    let intent = Intent::build(catalog, &answers.services, &answers.instances, &reality);
    Ok((intent, reality))
}
