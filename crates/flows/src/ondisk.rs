//! What sdcadm changed behind agentsadm, read from this headnode's own disk
//! over CNAPI's `server.agents` (issue 29).
//!
//! `sdcadm self-update` swaps `/opt/smartdc/sdcadm` and `sdcadm
//! experimental update-gz-tools` lays new gz-tools over `/opt/smartdc`
//! (through Ur on the compute nodes: `tar xzof cn_tools.tar.gz -C
//! /opt/smartdc`). Neither tells cn-agent, and cn-agent posts
//! `server.agents` only after its own tasks and when it starts (its
//! `refreshAgents`), so CNAPI keeps agentsadm's registration of the old
//! version until the next agentsadm run on that server rewrites it.
//!
//! The commands that read `server.agents` (`list`, `check`) run on the
//! headnode, where sdcadm lives: they read the headnode's own disk for
//! the components sdcadm changes, as `gz report` does, in this process (no
//! CNAPI execute, a few small files), and take it over the registration.
//! That makes `sdcadm` exact (it lives on the headnode only) and the
//! headnode's `gz-tools`. A compute node's `gz-tools` can be told only
//! by the server itself (`check --live`); when the headnode shows that
//! sdcadm replaced gz-tools, the compute nodes that still show the
//! headnode's old image are named as unconfirmed ([`Overlay::unconfirmed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use futures::future::BoxFuture;

use agentsadm_api::Apis;
use agentsadm_api::ImgapiClient;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::cnapi::Server;
use agentsadm_api::remote::AgentsReport;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::Knob;
use agentsadm_gz::session::platform_for_command_line;
use agentsadm_orchestrate::gather::ServersOverlay;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::component::{ComponentName, ComponentVersion};
use agentsadm_types::ids::ServerUuid;

/// The component kinds sdcadm replaces without agentsadm.
pub fn changed_by_sdcadm(kind: ComponentKind) -> bool {
    matches!(kind, ComponentKind::Sdcadm | ComponentKind::GzTools)
}

/// The settings that read this headnode's own global zone: `/` (the test
/// build's `AGENTSADM_TEST_HEADNODE_ROOT` names a rooted directory).
pub fn headnode_settings(catalog: &Catalog, apis: &Apis) -> GzSettings {
    let root = Knob::HeadnodeRoot
        .from_process()
        .unwrap_or_else(|| "/".to_string());
    // Chosen where every command line's platform is: SmartOS in the
    // server's build whatever the root; the test build's rooted directory
    // is the fake.
    let platform = platform_for_command_line(Path::new(&root), &BTreeMap::new());
    let mut settings = GzSettings::new(root, platform);
    settings.catalog = catalog.clone();
    settings.no_sapi = true;
    settings.no_cnapi = true;
    // The clients at hand: nothing to read from the SDC config.
    settings.clients = Some(apis.clone());
    settings
}

/// One component whose disk differs from its registration in CNAPI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskChange {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: ComponentName,
    /// What `server.agents` said (the registration agentsadm wrote).
    pub registered: Option<AgentEntry>,
    /// What the disk holds, now in the server's entry.
    pub on_disk: AgentEntry,
}

/// What [`overlay`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlay {
    pub changes: Vec<DiskChange>,
    /// Compute nodes whose `server.agents` shows the gz-tools image that
    /// sdcadm replaced on the headnode: sdcadm's update-gz-tools may
    /// have replaced theirs too, which only they can tell.
    pub unconfirmed: BTreeSet<ServerUuid>,
    /// The headnode and the components sdcadm changes that were read from
    /// its disk (changed or not): there what runs is whatever sdcadm last
    /// put in place, whatever CNAPI or SAPI say.
    pub read: Option<(ServerUuid, BTreeSet<ComponentName>)>,
}

impl Overlay {
    /// The change of `component` on `server`, if there is one.
    pub fn change(&self, server: ServerUuid, component: &str) -> Option<&DiskChange> {
        self.changes
            .iter()
            .find(|c| c.server == server && c.component == *component)
    }
}

/// This headnode's own GZ: what its files say (SMF is not asked), or
/// `None` when this host is not a headnode's global zone (no sysinfo, a
/// compute node).
pub async fn read_headnode(settings: GzSettings) -> Option<AgentsReport> {
    let session = GzSession::open(settings, false).await.ok()?;
    if !session.headnode() {
        return None;
    }
    Some(session.files_report().await)
}

/// Take `local` (this headnode's own files report) over its record in `servers`
/// for the components sdcadm changes. A gz-tools whose version the disk
/// does not say gets the image's version from IMGAPI (one GetImage),
/// else stays unknown.
pub async fn overlay(
    servers: &mut [Server],
    local: &AgentsReport,
    catalog: &Catalog,
    imgapi: &ImgapiClient,
) -> Overlay {
    let mut out = Overlay::default();
    let Some(record) = servers.iter_mut().find(|s| s.uuid == local.server_uuid) else {
        return out;
    };
    let disk = &local.agents;
    let agents = record.agents.get_or_insert_with(Vec::new);
    let mut read = BTreeSet::new();
    for c in catalog.iter().filter(|c| changed_by_sdcadm(c.kind)) {
        let Some(mut on_disk) = disk.iter().find(|a| a.name == c.name).cloned() else {
            continue;
        };
        read.insert(c.name.clone());
        let registered = agents.iter().find(|a| a.name == c.name).cloned();
        if registered
            .as_ref()
            .is_some_and(|r| r.image_uuid == on_disk.image_uuid)
        {
            continue;
        }
        if on_disk.version.is_empty()
            && let Some(image) = on_disk.image_uuid
            && let Ok(m) = imgapi.get_image(image).await
            && let Ok(v) = ComponentVersion::new(m.version.clone())
        {
            on_disk.version = v;
        }
        if on_disk.uuid.is_none() {
            on_disk.uuid = registered.as_ref().and_then(|r| r.uuid);
        }
        agents.retain(|a| a.name != c.name);
        agents.push(on_disk.clone());
        out.changes.push(DiskChange {
            server: record.uuid,
            hostname: record.hostname.clone(),
            component: c.name.clone(),
            registered,
            on_disk,
        });
    }
    agents.sort();
    out.read = Some((record.uuid, read));
    let replaced_tools = out
        .changes
        .iter()
        .find(|c| catalog.get(&c.component).map(|x| x.kind) == Some(ComponentKind::GzTools))
        .and_then(|c| {
            c.registered
                .as_ref()?
                .image_uuid
                .map(|i| (c.component.clone(), i))
        });
    if let Some((name, old)) = replaced_tools {
        out.unconfirmed = servers
            .iter()
            .filter(|s| s.uuid != local.server_uuid)
            .filter(|s| {
                s.agents
                    .iter()
                    .flatten()
                    .any(|a| a.name == name && a.image_uuid == Some(old))
            })
            .map(|s| s.uuid)
            .collect();
    }
    out
}

/// The components sdcadm changes that sdcadm may have replaced behind
/// agentsadm on `server`, as its own report (`check --live`) shows: on
/// the headnode every one it reports (its report is its disk, as
/// [`Overlay::read`]); on a compute node those whose image differs from
/// the registration CNAPI has for it in `servers`.
pub fn changed_behind(
    servers: &[Server],
    server: ServerUuid,
    report: &AgentsReport,
    catalog: &Catalog,
) -> BTreeSet<ComponentName> {
    let Some(registered) = servers.iter().find(|s| s.uuid == server) else {
        return BTreeSet::new();
    };
    let image = |list: &[AgentEntry], name: &ComponentName| {
        list.iter()
            .find(|a| a.name == *name)
            .and_then(|a| a.image_uuid)
    };
    let headnode = registered.headnode;
    let registered = registered.agents.as_deref().unwrap_or_default();
    catalog
        .iter()
        .filter(|c| changed_by_sdcadm(c.kind))
        .filter(|c| {
            let (was, runs) = (image(registered, &c.name), image(&report.agents, &c.name));
            runs.is_some() && (headnode || (was.is_some() && was != runs))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// [`read_headnode`] and [`overlay`] together: nothing when this is not
/// a headnode.
pub async fn overlay_headnode(servers: &mut [Server], catalog: &Catalog, apis: &Apis) -> Overlay {
    match read_headnode(headnode_settings(catalog, apis)).await {
        Some(local) => overlay(servers, &local, catalog, &apis.imgapi).await,
        None => Overlay::default(),
    }
}

/// This headnode's disk as the planner's overlay
/// ([`agentsadm_orchestrate::gather::ServersOverlay`]): `update`,
/// `install` and `remove` plan sdcadm and gz-tools from what the disk
/// holds, as `list` and `check` show them, so that `update sdcadm
/// --image OLDER` after a `sdcadm self-update` reinstalls the older one
/// instead of taking CNAPI's stale registration for it. Nothing when this
/// is not a headnode.
pub struct HeadnodeDisk<'a> {
    pub catalog: &'a Catalog,
    pub apis: &'a Apis,
}

impl ServersOverlay for HeadnodeDisk<'_> {
    fn overlay<'b>(&'b self, servers: &'b mut [Server]) -> BoxFuture<'b, ()> {
        Box::pin(async move {
            let disk = overlay_headnode(servers, self.catalog, self.apis).await;
            for c in &disk.changes {
                tracing::info!(
                    server = %c.server,
                    component = %c.component,
                    "planning from this headnode's disk: sdcadm changed it after agentsadm registered it"
                );
            }
        })
    }
}
