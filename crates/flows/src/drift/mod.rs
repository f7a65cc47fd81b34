//! The drift finder: a pure function of (catalog, SAPI services and
//! instances, CNAPI servers, optional live reports, images known to the
//! datacenter IMGAPI) that lists every mismatch between intent and reality,
//! each with the fix it proposes.
//!
//! - Reality is CNAPI `server.agents`; with `--live` the servers' own
//!   reports replace it where they could be read, and every difference
//!   between the two is a `stale-cnapi-report` finding.
//! - Intent is indexed by the orchestrator's own code
//!   ([`Intent::build`]), so check and update agree on what an instance
//!   means (legacy instances are tied to servers through the UUIDs servers
//!   report).
//! - A finding has a stable [`FindingKind`] (`--json` field `kind`), the
//!   server and component it is about, a sentence of details, and a [`Fix`].
//!   Fixes that change a server (install, upgrade) become orchestrator steps;
//!   the others are SAPI or CNAPI writes (see [`super::repair`]).
//! - No I/O, no clock, `BTreeMap`s only: the same input gives the same
//!   findings in the same order (datacenter-wide first, then by hostname,
//!   server UUID, component, kind).
//!
//! The parts: [`finding`] (what a finding is), `server` (findings about
//! one server), `datacenter` (datacenter-wide ones), [`render`] (text).

use std::collections::{BTreeMap, BTreeSet};

use agentsadm_api::cnapi::Server;
use agentsadm_api::remote::AgentsReport;
use agentsadm_api::sapi::Instance;
use agentsadm_api::sapi::Service;
use agentsadm_plan::ImageRef;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::ServerUuid;

mod datacenter;
pub mod finding;
pub mod render;
mod server;

pub use datacenter::default_candidate;
pub use finding::{Finding, FindingKind, Fix};
pub use render::render;
pub use server::StepBlocked;

/// Everything the finder reads. `live` is empty without `--live`;
/// `selection` limits server findings to some servers (and leaves out the
/// datacenter-wide ones).
#[derive(Clone, Copy, Debug)]
pub struct DriftInput<'a> {
    pub catalog: &'a Catalog,
    /// CNAPI ServerList with `extras=agents`.
    pub servers: &'a [Server],
    /// SAPI `type=agent` services.
    pub services: &'a [Service],
    /// SAPI `type=agent` instances.
    pub instances: &'a [Instance],
    /// `agentsadm gz report` of the servers that could be asked.
    pub live: &'a BTreeMap<ServerUuid, AgentsReport>,
    /// Images the datacenter IMGAPI has, by UUID.
    pub images: &'a BTreeMap<ImageUuid, ImageRef>,
    pub selection: Option<&'a BTreeSet<ServerUuid>>,
    /// The components sdcadm changed behind agentsadm (`sdcadm
    /// self-update`, `sdcadm experimental update-gz-tools`), by server:
    /// what runs there is what sdcadm put in place, so a wrong image is
    /// recorded in SAPI rather than SAPI's image put back over it.
    pub changed_by_sdcadm: &'a BTreeMap<ServerUuid, BTreeSet<ComponentName>>,
    /// The components whose instance agentsadm has written on each
    /// server, as its run history shows (a completed install or upgrade
    /// of it there): an instance of one of them that the server reports
    /// with no params at all lost them (`instance-params-erased`); any
    /// other such bare instance is as the agent's own postinstall made it
    /// (an agentsshar-era server), not drift.
    pub written_by_agentsadm: &'a BTreeMap<ServerUuid, BTreeSet<ComponentName>>,
}

/// Intent and reality as the finder saw them (for repair planning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survey {
    /// What CNAPI says.
    pub cnapi: Reality,
    /// What is installed: CNAPI, replaced by live reports where read.
    pub reality: Reality,
    /// SAPI, indexed against `reality`.
    pub intent: Intent,
}

impl Survey {
    /// Index the answers. Live reports replace CNAPI's view of a server.
    pub fn build(input: &DriftInput) -> Survey {
        let cnapi = Reality::from_servers(input.catalog, input.servers);
        let effective: Vec<Server> = input
            .servers
            .iter()
            .map(|s| match input.live.get(&s.uuid) {
                Some(report) => Server {
                    agents: Some(report.agents.clone()),
                    agent_problems: Vec::new(),
                    sysinfo: None,
                    ..s.clone()
                },
                None => s.clone(),
            })
            .collect();
        let reality = Reality::from_servers(input.catalog, &effective);
        let intent = Intent::build(input.catalog, input.services, input.instances, &reality);
        Survey {
            cnapi,
            reality,
            intent,
        }
    }
}

/// Find every mismatch. Pure.
pub fn find(input: &DriftInput) -> (Survey, Vec<Finding>) {
    let survey = Survey::build(input);
    let mut out = Vec::new();
    let selected = |s: &ServerUuid| input.selection.is_none_or(|set| set.contains(s));
    let setting_up: BTreeSet<ServerUuid> = input
        .servers
        .iter()
        .filter(|s| s.setting_up == Some(true))
        .map(|s| s.uuid)
        .collect();

    for state in survey.reality.servers.values() {
        if !selected(&state.uuid) {
            continue;
        }
        if input.live.contains_key(&state.uuid)
            && let Some(cn) = survey.cnapi.get(&state.uuid)
        {
            server::stale_report(cn, state, &mut out);
        }
        if server::quarantine_finding(state, &mut out) {
            continue;
        }
        if let Some(report) = input.live.get(&state.uuid)
            && state.setup
        {
            server::switch_findings(&survey, state, report, &mut out);
        }
        if state.setup {
            server::server_findings(input, &survey, state, &mut out);
        } else if !setting_up.contains(&state.uuid) {
            // A server being set up gets its instances before CNAPI marks
            // it set up: they are not leftovers.
            server::unsetup_findings(&survey, state, &mut out);
        }
    }

    if input.selection.is_none() {
        datacenter::unlinked_findings(&survey, &mut out);
        datacenter::service_findings(input, &survey, &mut out);
    }

    protect_reported(&survey, &mut out);
    sort_findings(&survey, &mut out);
    (survey, out)
}

/// No fix ever deletes an instance UUID a server reports: that server's
/// config-agent asks SAPI for it. A delete (or the deletion after an
/// adoption or install) of one becomes a manual finding with the command
/// that files it under the server reporting it.
fn protect_reported(survey: &Survey, findings: &mut [Finding]) {
    let reporters = survey.reality.reporters();
    let reported_by = |instance: &agentsadm_types::ids::InstanceUuid| -> Option<String> {
        let servers = reporters.get(instance)?;
        let names: Vec<String> = servers
            .iter()
            .filter_map(|(s, _)| survey.reality.get(s))
            .map(|s| s.label())
            .collect();
        Some(names.join(" and "))
    };
    for f in findings.iter_mut() {
        match &mut f.fix {
            Fix::DeleteInstance { instance } => {
                let instance = *instance;
                if let Some(by) = reported_by(&instance) {
                    let owner = reporters[&instance]
                        .first()
                        .map(|(s, _)| s.to_string())
                        .unwrap_or_default();
                    f.fix = Fix::Manual {
                        hint: format!(
                            "not deleted: {by} report{} it in server.agents; if it is {}'s, file it there: sdc-sapi /instances/{instance} -X PUT -d '{{\"params\":{{\"server_uuid\":\"{owner}\"}}}}'",
                            if reporters[&instance].len() == 1 {
                                "s"
                            } else {
                                ""
                            },
                            if reporters[&instance].len() == 1 {
                                "that server"
                            } else {
                                "one server"
                            },
                        ),
                    };
                }
            }
            Fix::AdoptInstance { instance, .. } | Fix::SetParams { instance, .. }
                if reporters.get(instance).is_some_and(|r| r.len() > 1) =>
            {
                let instance = *instance;
                let by = reported_by(&instance).unwrap_or_default();
                f.fix = Fix::Manual {
                    hint: format!(
                        "{by} report instance {instance}: decide which server owns it, then reinstall {} on the other ('agentsadm update {} -s SERVER --image UUID') so that it keeps an instance of its own",
                        f.component.as_deref().unwrap_or("the component"),
                        f.component.as_deref().unwrap_or("COMPONENT"),
                    ),
                };
            }
            Fix::AdoptInstance { replaces, .. } | Fix::Install { replaces, .. }
                if replaces.as_ref().is_some_and(|r| reporters.contains_key(r)) =>
            {
                *replaces = None;
            }
            _ => {}
        }
    }
}

/// Datacenter-wide first, then by hostname, server, component, kind.
fn sort_findings(survey: &Survey, findings: &mut [Finding]) {
    let key = |f: &Finding| {
        let host = f
            .server
            .and_then(|s| survey.reality.get(&s))
            .map(|s| s.hostname.clone());
        (
            f.server.is_some(),
            // Known servers before servers CNAPI does not know.
            host.is_none(),
            host,
            f.server,
            f.component.clone(),
            f.kind,
            f.instance,
        )
    };
    findings.sort_by_key(key);
}

/// Counts by kind, for summaries.
pub fn counts(findings: &[Finding]) -> BTreeMap<FindingKind, usize> {
    let mut out = BTreeMap::new();
    for f in findings {
        *out.entry(f.kind).or_default() += 1;
    }
    out
}

/// Whether any finding is drift (not informational).
pub fn has_drift(findings: &[Finding]) -> bool {
    findings.iter().any(|f| !f.informational)
}
