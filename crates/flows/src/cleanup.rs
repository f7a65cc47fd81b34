//! `agentsadm server delete|factory-reset SERVER`: the SAPI cleanup CNAPI
//! never does (TRITON-416; docs/triton/setup-flows.md §5).
//!
//! - The server's agent instances are the SAPI `type=agent` instances whose
//!   `params.server_uuid` is the server, plus those whose UUID the server
//!   reports in `server.agents[].uuid` (legacy instances carry no params).
//!   A reported UUID whose SAPI instance names another server is left alone.
//! - Refusals come before anything is deleted: the headnode, and for a
//!   factory reset a server CNAPI would refuse (VMs present, not running,
//!   not in CNAPI).
//! - Each instance is deleted (404 counts as done), and only when all are
//!   gone is CNAPI called: `DELETE /servers/:uuid` (404: already gone), or
//!   `PUT /servers/:uuid/factory-reset` followed by clearing
//!   `server.agents` so the next setup does not inherit stale UUIDs.
//! - Re-running after a partial failure finishes the job. When the CNAPI
//!   record is already gone, `delete` still removes the instances that name
//!   the server in `params.server_uuid`: what an operator expects from
//!   re-running a delete whose CNAPI step succeeded.
//!
//! Planning ([`plan_cleanup`]) is pure and makes one [`Plan`] of record
//! changes (the instance deletions, then the CNAPI call), run like every
//! other plan: [`CleanupPlanner`] gives it to
//! [`agentsadm_orchestrate::run::Run`] (lock, question or `-y`, fence);
//! [`prepare`] reads; the run executes the plan; [`CleanupReport`] tells
//! what its report says of the instances and CNAPI.

use agentsadm_types::component::ComponentName;
use std::fmt::Write as _;

use serde::Serialize;

use agentsadm_api::cnapi::Server;

use agentsadm_api::ApiError;
use agentsadm_api::Apis;
use agentsadm_api::cnapi::ServerListFilter;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Service;
use agentsadm_orchestrate::records::RecordStatus;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::run::{Planned, Planner};
use agentsadm_plan::{
    IntentChange, MarkKey, Operation, Plan, PlanBuilder, RecordChange, RolloutPolicy, ServerCall,
};
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::JobUuid;
use agentsadm_types::ids::ServerUuid;

/// What to do to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerAction {
    Delete,
    FactoryReset,
}

impl ServerAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerAction::Delete => "delete",
            ServerAction::FactoryReset => "factory-reset",
        }
    }
}

/// One SAPI instance to delete, and how it was tied to the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleanupInstance {
    pub uuid: InstanceUuid,
    /// The service name (or its UUID when SAPI no longer has the service,
    /// or names it with something that is not a component name).
    pub service: ComponentName,
    /// `params.server_uuid` and/or `server.agents`.
    pub via: Vec<&'static str>,
}

/// A UUID the server reports that is not one of its SAPI instances.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportedElsewhere {
    pub component: String,
    pub uuid: InstanceUuid,
    /// The server the SAPI instance names instead (None: SAPI does not
    /// have the instance at all, e.g. never adopted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<ServerUuid>,
}

/// A service's copy of one of the server's marks ([`agentsadm_plan::marks`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MarkCopy {
    pub service: ComponentName,
    #[serde(skip)]
    pub service_uuid: agentsadm_types::ids::ServiceUuid,
    pub key: MarkKey,
}

/// What will be done: the view operators read (and `--json` shows), and
/// the [`Plan`] that carries it out. Pure output of [`plan_cleanup`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleanupPlan {
    pub action: ServerAction,
    pub server: ServerUuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Whether CNAPI still has the server's record.
    pub in_cnapi: bool,
    pub instances: Vec<CleanupInstance>,
    /// Reported UUIDs that are left alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_alone: Vec<ReportedElsewhere>,
    /// The services' copies of the server's marks (hold, disabled), which
    /// nothing else would clear once its instances are gone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mark_copies: Vec<MarkCopy>,
    /// The deletions and the CNAPI call, as the executor runs them.
    #[serde(skip)]
    pub plan: Plan,
}

impl Planned for CleanupPlan {
    fn plan(&self) -> &Plan {
        &self.plan
    }
}

impl CleanupPlan {
    /// `hostname (uuid)`, or the UUID alone.
    pub fn label(&self) -> String {
        match &self.hostname {
            Some(h) => format!("{h} ({})", self.server),
            None => self.server.to_string(),
        }
    }

    /// The plan for humans.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let verb = match self.action {
            ServerAction::Delete => "Delete server",
            ServerAction::FactoryReset => "Factory-reset server",
        };
        let _ = writeln!(out, "{verb} {}:", self.label());
        if self.instances.is_empty() {
            out.push_str("  no SAPI agent instances to delete\n");
        }
        for i in &self.instances {
            let _ = writeln!(
                out,
                "  - SAPI instance {} of {} (found by {})",
                i.uuid,
                i.service,
                i.via.join(" and ")
            );
        }
        for m in &self.mark_copies {
            let _ = writeln!(
                out,
                "  - the copy of params.{} kept on SAPI service {}",
                m.key.param(),
                m.service
            );
        }
        for r in &self.left_alone {
            match r.owner {
                Some(o) => {
                    let _ = writeln!(
                        out,
                        "    left alone: instance {} of {} (its SAPI record names server {o})",
                        r.uuid, r.component
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "    nothing to delete for {} instance {} (SAPI does not have it)",
                        r.component, r.uuid
                    );
                }
            }
        }
        let tail = match (self.action, self.in_cnapi) {
            (ServerAction::Delete, true) => {
                "  then CNAPI: delete the server record (nothing changes on the server itself)"
            }
            (ServerAction::Delete, false) => {
                "  CNAPI no longer has the server record (already deleted)"
            }
            (ServerAction::FactoryReset, _) => {
                "  then CNAPI: factory reset (the server reboots and its disks are wiped), and clear server.agents"
            }
        };
        out.push_str(tail);
        out.push('\n');
        out
    }
}

/// The server cannot be cleaned up as asked; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(
        "unknown server {name}: not in CNAPI, and no SAPI agent instance names it (check the UUID or hostname with 'agentsadm list')"
    )]
    UnknownServer { name: String },
    /// A delete with nothing left to do (a re-run after it finished): not
    /// an error for the command line, which exits 0 with this sentence.
    #[error("nothing left to delete: {why}")]
    NothingLeft { name: String, why: String },
    #[error(
        "no server named {name} in CNAPI, and SAPI has agent instances of {} server(s) CNAPI does not know ({}): if one of them was {name}, delete it by UUID ('agentsadm server delete UUID'); nothing was changed",
        orphans.len(),
        orphans.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    UnknownHostname {
        name: String,
        orphans: Vec<ServerUuid>,
    },
    #[error(
        "hostname {hostname:?} matches several servers ({uuids}); name the server by UUID",
        uuids = uuids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    AmbiguousHostname {
        hostname: String,
        uuids: Vec<ServerUuid>,
    },
    #[error(
        "refusing to {action} the headnode {server}: it runs the datacenter's services; nothing was changed"
    )]
    Headnode {
        action: &'static str,
        server: String,
    },
    #[error(
        "cannot factory-reset {server}: CNAPI does not have it{leftovers}; nothing was changed",
        leftovers = if *instances > 0 {
            format!(" ('agentsadm server delete {server}' removes its {instances} leftover SAPI instances)")
        } else {
            String::new()
        }
    )]
    NotInCnapi { server: String, instances: usize },
    #[error(
        "refusing to factory-reset {server}: it has {vms} VMs, and CNAPI refuses to reset a server with VMs; delete or migrate them first (nothing was changed)"
    )]
    HasVms { server: String, vms: usize },
    #[error(
        "refusing to factory-reset {server}: it is not running (CNAPI status {status:?}), and CNAPI only resets running servers; nothing was changed"
    )]
    NotRunning { server: String, status: String },
    #[error("cannot {what}; nothing was changed")]
    Api {
        what: String,
        #[source]
        err: Box<ApiError>,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(ApiError) -> CleanupError {
    let what = what.into();
    move |err| CleanupError::Api {
        what,
        err: Box::new(err),
    }
}

/// Decide what to delete (pure). `record` is CNAPI's server record (`None`
/// when CNAPI has no record); `services` and `instances` are SAPI's
/// `type=agent` lists.
pub fn plan_cleanup(
    action: ServerAction,
    server: ServerUuid,
    record: Option<&Server>,
    services: &[Service],
    instances: &[Instance],
) -> Result<CleanupPlan, CleanupError> {
    let hostname = record.map(|r| r.hostname.clone()).filter(|h| !h.is_empty());
    let label = match &hostname {
        Some(h) => format!("{h} ({server})"),
        None => server.to_string(),
    };
    if record.is_some_and(|r| r.headnode) {
        return Err(CleanupError::Headnode {
            action: action.as_str(),
            server: label,
        });
    }
    let service_name = |i: &Instance| {
        services
            .iter()
            .find(|s| s.uuid == i.service_uuid)
            .and_then(|s| ComponentName::new(s.name.as_str()).ok())
            .unwrap_or_else(|| {
                ComponentName::new(i.service_uuid.to_string()).expect("a UUID is a component name")
            })
    };
    let mut found: Vec<CleanupInstance> = instances
        .iter()
        .filter(|i| i.server_uuid() == Some(server))
        .map(|i| CleanupInstance {
            uuid: i.uuid,
            service: service_name(i),
            via: vec!["params.server_uuid"],
        })
        .collect();
    let mut left_alone = Vec::new();
    let reported = record.map(|r| r.reported_agents().0).unwrap_or_default();
    for entry in reported {
        let Some(uuid) = entry.uuid else { continue };
        if let Some(f) = found.iter_mut().find(|f| f.uuid == uuid) {
            f.via.push("server.agents");
            continue;
        }
        match instances.iter().find(|i| i.uuid == uuid) {
            Some(i) => match i.server_uuid() {
                Some(owner) if owner != server => left_alone.push(ReportedElsewhere {
                    component: entry.name.to_string(),
                    uuid,
                    owner: Some(owner),
                }),
                _ => found.push(CleanupInstance {
                    uuid,
                    service: service_name(i),
                    via: vec!["server.agents"],
                }),
            },
            None => left_alone.push(ReportedElsewhere {
                component: entry.name.to_string(),
                uuid,
                owner: None,
            }),
        }
    }
    found.sort_by(|a, b| a.service.cmp(&b.service).then_with(|| a.uuid.cmp(&b.uuid)));
    let mark_copies = mark_copies(services, server);
    left_alone.sort_by(|a, b| a.component.cmp(&b.component));

    match (action, record) {
        (ServerAction::Delete, None) if found.is_empty() && mark_copies.is_empty() => {
            return Err(CleanupError::UnknownServer {
                name: server.to_string(),
            });
        }
        (ServerAction::FactoryReset, None) => {
            return Err(CleanupError::NotInCnapi {
                server: label,
                instances: found.len(),
            });
        }
        (ServerAction::FactoryReset, Some(r)) => {
            if r.vm_count() > 0 {
                return Err(CleanupError::HasVms {
                    server: label,
                    vms: r.vm_count(),
                });
            }
            if !r.is_running() {
                return Err(CleanupError::NotRunning {
                    server: label,
                    status: r.status.clone().unwrap_or_else(|| "unknown".to_string()),
                });
            }
        }
        _ => {}
    }
    let plan = closed_plan(
        action,
        server,
        hostname.as_deref(),
        record.is_some(),
        &found,
        &mark_copies,
    );
    Ok(CleanupPlan {
        action,
        server,
        hostname,
        in_cnapi: record.is_some(),
        instances: found,
        left_alone,
        mark_copies,
        plan,
    })
}

/// The services' copies of `server`'s marks (hostile input: what does not
/// parse is left out by [`agentsadm_plan::marks::ledger_marks`]).
fn mark_copies(services: &[Service], server: ServerUuid) -> Vec<MarkCopy> {
    let mut copies: Vec<MarkCopy> = services
        .iter()
        .flat_map(|s| {
            agentsadm_plan::marks::ledger_marks(s.params.as_ref())
                .into_iter()
                .filter(|m| m.server == server)
                .map(move |m| MarkCopy {
                    service: ComponentName::new(s.name.as_str()).unwrap_or_else(|_| {
                        ComponentName::new(s.uuid.to_string()).expect("a UUID is a component name")
                    }),
                    service_uuid: s.uuid,
                    key: if m.param == agentsadm_plan::marks::HOLD_PARAM {
                        MarkKey::Hold
                    } else {
                        MarkKey::Disabled
                    },
                })
        })
        .collect();
    copies.sort_by(|a, b| a.service.cmp(&b.service).then(a.key.cmp(&b.key)));
    copies
}

/// The record changes: every instance deleted, then (only once they all
/// are) the CNAPI call.
fn closed_plan(
    action: ServerAction,
    server: ServerUuid,
    hostname: Option<&str>,
    in_cnapi: bool,
    instances: &[CleanupInstance],
    mark_copies: &[MarkCopy],
) -> Plan {
    let catalog = agentsadm_types::catalog::Catalog::builtin();
    let (operation, call) = match action {
        ServerAction::Delete => (Operation::ServerDelete, ServerCall::Delete),
        ServerAction::FactoryReset => (Operation::FactoryReset, ServerCall::FactoryReset),
    };
    let mut b = PlanBuilder::new(operation, &catalog, agentsadm_plan::Intent::none());
    b.selected_servers(1);
    for i in instances {
        b.record(RecordChange::Instance {
            server: Some(server),
            hostname: hostname.map(str::to_string),
            change: IntentChange::DeleteInstance {
                component: i.service.clone(),
                instance: i.uuid,
            },
        });
    }
    // Cleared after the instances are deleted (a mark counts until the
    // last of its copies is gone), before the server's CNAPI call.
    for m in mark_copies {
        b.record(RecordChange::Instance {
            server: Some(server),
            hostname: hostname.map(str::to_string),
            change: IntentChange::ForgetMark {
                component: m.service.clone(),
                service: m.service_uuid,
                key: m.key,
            },
        });
    }
    b.record(RecordChange::Server {
        server,
        hostname: hostname.map(str::to_string),
        call,
        in_cnapi,
    });
    b.finish(&RolloutPolicy::default())
}

/// Find the server by UUID or hostname: its UUID and CNAPI record (`None`
/// for a UUID CNAPI does not know). Read through ServerList with the
/// extras the cleanup reads (its agents, or sysinfo's `SDC Agents`, and its
/// VMs), never ServerGet, which waits on VMAPI (15 s a call while VMAPI is
/// down).
pub async fn resolve_server(
    apis: &Apis,
    name: &str,
) -> Result<(ServerUuid, Option<Server>), CleanupError> {
    let name = name.trim();
    let extras = ["agents", "sysinfo", "vms"].map(String::from).to_vec();
    if let Ok(uuid) = name.parse::<ServerUuid>() {
        let filter = ServerListFilter {
            uuids: vec![uuid],
            extras,
            ..Default::default()
        };
        let found = apis
            .cnapi
            .list_servers(&filter)
            .await
            .map_err(api(format!("read server {uuid} from CNAPI")))?;
        return Ok((uuid, found.into_iter().find(|s| s.uuid == uuid)));
    }
    let filter = ServerListFilter {
        hostname: Some(name.to_string()),
        extras,
        ..Default::default()
    };
    let mut found = apis
        .cnapi
        .list_servers(&filter)
        .await
        .map_err(api(format!("look up hostname {name:?} in CNAPI")))?;
    match found.len() {
        0 => Err(CleanupError::UnknownServer {
            name: name.to_string(),
        }),
        1 => {
            let record = found.remove(0);
            Ok((record.uuid, Some(record)))
        }
        _ => Err(CleanupError::AmbiguousHostname {
            hostname: name.to_string(),
            uuids: found.iter().map(|s| s.uuid).collect(),
        }),
    }
}

/// Read CNAPI and SAPI and plan. Changes nothing.
pub async fn prepare(
    apis: &Apis,
    action: ServerAction,
    name: &str,
) -> Result<CleanupPlan, CleanupError> {
    let resolved = resolve_server(apis, name).await;
    let (services, instances) = tokio::join!(
        apis.sapi.list_agent_services(),
        apis.sapi.list_agent_instances()
    );
    let services = services.map_err(api("list the agent services in SAPI"))?;
    let instances = instances.map_err(api("list the agent instances in SAPI"))?;
    let (uuid, record) = match resolved {
        Err(CleanupError::UnknownServer { name }) if action == ServerAction::Delete => {
            return Err(unknown_hostname(apis, name, &instances).await?);
        }
        other => other?,
    };
    plan_cleanup(action, uuid, record.as_ref(), &services, &instances).map_err(|e| match e {
        // Deleted already (a re-run): nothing in CNAPI, no instance left.
        CleanupError::UnknownServer { .. } if action == ServerAction::Delete => {
            CleanupError::NothingLeft {
                name: name.to_string(),
                why: format!(
                    "CNAPI has no server {uuid} and no SAPI agent instance names it (deleted already?)"
                ),
            }
        }
        // A UUID CNAPI does not know was typed: say it the way it was typed.
        CleanupError::UnknownServer { .. } => CleanupError::UnknownServer {
            name: name.to_string(),
        },
        other => other,
    })
}

/// `server delete HOSTNAME` for a hostname CNAPI does not know: a typo, or
/// a server deleted already (the command line looks for an earlier run's
/// record of it). SAPI instances do not record hostnames, so when some
/// name servers CNAPI does not know, those servers are named (one of them
/// may be the one meant).
async fn unknown_hostname(
    apis: &Apis,
    name: String,
    instances: &[Instance],
) -> Result<CleanupError, CleanupError> {
    let servers = apis
        .cnapi
        .list_servers(&ServerListFilter::default())
        .await
        .map_err(api("list the servers in CNAPI"))?;
    let known: std::collections::BTreeSet<ServerUuid> = servers.iter().map(|s| s.uuid).collect();
    let mut orphans: Vec<ServerUuid> = instances
        .iter()
        .filter_map(Instance::server_uuid)
        .filter(|u| !known.contains(u))
        .collect();
    orphans.sort();
    orphans.dedup();
    Ok(if orphans.is_empty() {
        CleanupError::UnknownServer { name }
    } else {
        CleanupError::UnknownHostname { name, orphans }
    })
}

/// What happened to one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceStatus {
    Deleted,
    /// SAPI answered 404: deleted before (a re-run).
    AlreadyGone,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstanceOutcome {
    pub uuid: InstanceUuid,
    pub service: String,
    pub status: InstanceStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What happened in CNAPI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CnapiOutcome {
    /// The record is deleted.
    Deleted,
    /// The record was already gone.
    AlreadyGone,
    /// The factory-reset job started.
    ResetStarted {
        job_uuid: JobUuid,
        /// Whether `server.agents` was cleared.
        agents_cleared: bool,
    },
    /// Not called, because some instance could not be deleted.
    NotRun {
        reason: String,
    },
    Failed {
        message: String,
    },
}

/// What a run of a cleanup plan did ([`CleanupReport::from_exec`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleanupReport {
    pub instances: Vec<InstanceOutcome>,
    pub cnapi: CnapiOutcome,
    /// Warnings that did not fail the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl CleanupReport {
    /// 0 when everything was done, 2 otherwise (re-run to finish).
    pub fn exit_status(&self) -> u8 {
        let instances_ok = self
            .instances
            .iter()
            .all(|i| i.status != InstanceStatus::Failed);
        let cnapi_ok = matches!(
            self.cnapi,
            CnapiOutcome::Deleted | CnapiOutcome::AlreadyGone | CnapiOutcome::ResetStarted { .. }
        );
        if instances_ok && cnapi_ok { 0 } else { 2 }
    }

    /// The outcome for humans.
    pub fn render(&self, plan: &CleanupPlan) -> String {
        let mut out = String::new();
        let count = |s: InstanceStatus| self.instances.iter().filter(|i| i.status == s).count();
        let _ = writeln!(
            out,
            "Deleted {} SAPI instances ({} already gone, {} failed).",
            count(InstanceStatus::Deleted),
            count(InstanceStatus::AlreadyGone),
            count(InstanceStatus::Failed)
        );
        for i in self
            .instances
            .iter()
            .filter(|i| i.status == InstanceStatus::Failed)
        {
            let _ = writeln!(
                out,
                "error: cannot delete SAPI instance {} of {}: {}",
                i.uuid,
                i.service,
                i.error.as_deref().unwrap_or("unknown error")
            );
        }
        let label = plan.label();
        let _ = match &self.cnapi {
            CnapiOutcome::Deleted => writeln!(out, "Deleted {label} from CNAPI."),
            CnapiOutcome::AlreadyGone => {
                writeln!(out, "CNAPI no longer has {label}; nothing to delete there.")
            }
            CnapiOutcome::ResetStarted {
                job_uuid,
                agents_cleared,
            } => writeln!(
                out,
                "Factory reset of {label} started (CNAPI job {job_uuid}); server.agents {}.",
                if *agents_cleared {
                    "cleared"
                } else {
                    "NOT cleared (the next setup clears it)"
                }
            ),
            CnapiOutcome::NotRun { reason } => writeln!(
                out,
                "CNAPI was not called: {reason}; re-run 'agentsadm server {} {}' to finish.",
                plan.action.as_str(),
                plan.server
            ),
            CnapiOutcome::Failed { message } => writeln!(
                out,
                "error: CNAPI {} of {label} failed: {message}; re-run 'agentsadm server {} {}' to finish.",
                plan.action.as_str(),
                plan.action.as_str(),
                plan.server
            ),
        };
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }
}

impl CleanupReport {
    /// What the executor's record changes come to.
    pub fn from_exec(report: &ExecReport) -> CleanupReport {
        let mut instances = Vec::new();
        let mut warnings = Vec::new();
        let mut cnapi = CnapiOutcome::NotRun {
            reason: "not reached".to_string(),
        };
        for r in &report.records {
            warnings.extend(r.warning.clone());
            match &r.change {
                RecordChange::Instance {
                    change:
                        IntentChange::DeleteInstance {
                            component,
                            instance,
                        },
                    ..
                } => {
                    let (status, error) = match &r.status {
                        RecordStatus::AlreadyDone => (InstanceStatus::AlreadyGone, None),
                        RecordStatus::Failed { message } => {
                            (InstanceStatus::Failed, Some(message.clone()))
                        }
                        RecordStatus::NotRun { reason } => {
                            (InstanceStatus::Failed, Some(reason.clone()))
                        }
                        _ => (InstanceStatus::Deleted, None),
                    };
                    instances.push(InstanceOutcome {
                        uuid: *instance,
                        service: component.to_string(),
                        status,
                        error,
                    });
                }
                RecordChange::Server { .. } => {
                    cnapi = match &r.status {
                        RecordStatus::Done => CnapiOutcome::Deleted,
                        RecordStatus::AlreadyDone => CnapiOutcome::AlreadyGone,
                        RecordStatus::ResetStarted {
                            job_uuid,
                            agents_cleared,
                        } => CnapiOutcome::ResetStarted {
                            job_uuid: *job_uuid,
                            agents_cleared: *agents_cleared,
                        },
                        RecordStatus::Failed { message } => CnapiOutcome::Failed {
                            message: message.clone(),
                        },
                        RecordStatus::NotRun { reason } => CnapiOutcome::NotRun {
                            reason: reason.clone(),
                        },
                    };
                }
                RecordChange::Instance {
                    change: IntentChange::ForgetMark { component, key, .. },
                    ..
                } => {
                    if let RecordStatus::Failed { message } = &r.status {
                        warnings.push(format!(
                            "the copy of params.{} kept on SAPI service {component} was not deleted ({message}); run the command again",
                            key.param()
                        ));
                    }
                }
                _ => {}
            }
        }
        instances.sort_by(|a, b| a.service.cmp(&b.service).then_with(|| a.uuid.cmp(&b.uuid)));
        CleanupReport {
            instances,
            cnapi,
            warnings,
        }
    }
}

/// `server delete|factory-reset` as a [`Planner`] for
/// [`agentsadm_orchestrate::run::Run`]: each call reads CNAPI and SAPI
/// anew.
pub struct CleanupPlanner<'a> {
    pub apis: &'a Apis,
    pub action: ServerAction,
    /// The server as typed (UUID or hostname).
    pub name: String,
}

impl Planner for CleanupPlanner<'_> {
    type Planned = CleanupPlan;
    type Error = CleanupError;

    async fn plan(&self) -> Result<CleanupPlan, CleanupError> {
        prepare(self.apis, self.action, &self.name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CN: &str = "44454c4c-4800-1034-804a-b2c04f354d31";
    const OTHER: &str = "44454c4c-4800-1034-804a-b2c04f354d32";
    const SVC: &str = "2e52bcfe-c61e-482f-a072-f3c79018a3db";

    fn server(vms: usize, status: &str, agents: serde_json::Value) -> Server {
        let vms: serde_json::Map<String, serde_json::Value> = (0..vms)
            .map(|i| (format!("vm{i}"), json!({"state": "running"})))
            .collect();
        serde_json::from_value(json!({
            "uuid": CN, "hostname": "cn1", "setup": true, "status": status,
            "agents": agents, "vms": vms
        }))
        .unwrap()
    }

    fn inst(uuid: &str, params: serde_json::Value) -> Instance {
        serde_json::from_value(json!({
            "uuid": uuid, "service_uuid": SVC, "params": params, "type": "agent"
        }))
        .unwrap()
    }

    fn services() -> Vec<Service> {
        vec![
            serde_json::from_value(json!({
                "uuid": SVC, "name": "vm-agent",
                "application_uuid": "26cc7f2b-77ed-427f-8f09-d43d32a7331b", "type": "agent"
            }))
            .unwrap(),
        ]
    }

    #[test]
    fn collects_by_params_and_by_report() {
        let a = "00000000-0000-4000-8000-00000000000a";
        let b = "00000000-0000-4000-8000-00000000000b";
        let c = "00000000-0000-4000-8000-00000000000c";
        let d = "00000000-0000-4000-8000-00000000000d";
        let e = "00000000-0000-4000-8000-00000000000e";
        let rec = server(
            0,
            "running",
            json!([
                {"name": "vm-agent", "version": "1", "uuid": a},
                {"name": "net-agent", "version": "1", "uuid": b},
                {"name": "cmon-agent", "version": "1", "uuid": c},
                {"name": "smartlogin", "version": "1", "uuid": d},
            ]),
        );
        let instances = vec![
            inst(a, json!({"server_uuid": CN})),
            inst(b, json!({})),
            inst(c, json!({"server_uuid": OTHER})),
            inst(e, json!({"server_uuid": CN})),
            inst(
                "00000000-0000-4000-8000-00000000000f",
                json!({"server_uuid": OTHER}),
            ),
        ];
        let cn: ServerUuid = CN.parse().unwrap();
        let plan = plan_cleanup(
            ServerAction::Delete,
            cn,
            Some(&rec),
            &services(),
            &instances,
        )
        .unwrap();
        let got: Vec<(String, Vec<&str>)> = plan
            .instances
            .iter()
            .map(|i| (i.uuid.to_string(), i.via.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (a.to_string(), vec!["params.server_uuid", "server.agents"]),
                (b.to_string(), vec!["server.agents"]),
                (e.to_string(), vec!["params.server_uuid"]),
            ]
        );
        assert_eq!(plan.left_alone.len(), 2, "{plan:?}");
        assert!(plan.render().contains("left alone"));

        // The CNAPI record is gone: params still find the leftovers.
        let plan = plan_cleanup(ServerAction::Delete, cn, None, &services(), &instances).unwrap();
        assert_eq!(plan.instances.len(), 2);
        assert!(!plan.in_cnapi);
        // Nothing anywhere: an unknown server.
        let none = plan_cleanup(ServerAction::Delete, cn, None, &services(), &[]);
        assert!(matches!(none, Err(CleanupError::UnknownServer { .. })));
    }

    #[test]
    fn factory_reset_refusals() {
        let cn: ServerUuid = CN.parse().unwrap();
        let refuse = |rec: Option<&Server>| {
            plan_cleanup(ServerAction::FactoryReset, cn, rec, &services(), &[]).unwrap_err()
        };
        assert!(matches!(
            refuse(Some(&server(3, "running", json!([])))),
            CleanupError::HasVms { vms: 3, .. }
        ));
        assert!(matches!(
            refuse(Some(&server(0, "unknown", json!([])))),
            CleanupError::NotRunning { .. }
        ));
        let e = refuse(None);
        assert!(e.to_string().contains("nothing was changed"), "{e}");
        let mut hn = server(0, "running", json!([]));
        hn.headnode = true;
        assert!(matches!(refuse(Some(&hn)), CleanupError::Headnode { .. }));
        assert!(
            plan_cleanup(
                ServerAction::FactoryReset,
                cn,
                Some(&server(0, "running", json!([]))),
                &services(),
                &[]
            )
            .is_ok()
        );
    }
}
