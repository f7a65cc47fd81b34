//! Repair planning for `check --fix`: a pure function from findings (and
//! the survey they came from) to what will be done, in the order it is
//! done:
//!
//! 1. CNAPI: post each stale server's own report as `server.agents` (first,
//!    so that nothing later is overwritten by an older snapshot).
//! 2. SAPI only, through the orchestrator's [`IntentStore`]: service
//!    defaults, instances to create (adopt what servers keep), params to
//!    set, instances to delete (orphans, duplicates, unset-up servers).
//! 3. Server changes (install, upgrade) as an orchestrator [`Plan`], run by
//!    the orchestrator's executor (the same path as `agentsadm update`),
//!    with the SAPI instance of each install adopted after it.
//! 4. After the plan ran: the instance each install replaced is deleted
//!    once the server reports the new one ([`Replaced`]).
//!
//! Findings whose fix is manual or informational are left out and counted.
//!
//! [`IntentStore`]: agentsadm_orchestrate::store::IntentStore

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::drift::Finding;

use super::drift::Fix;

use super::drift::Survey;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::AgentsReport;
use agentsadm_plan::Action;
use agentsadm_plan::IntentChange;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::ServerPlan;
use agentsadm_plan::ServiceChange;
use agentsadm_plan::Step;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// A server whose CNAPI `server.agents` is replaced by its own report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportRepair {
    pub server: ServerUuid,
    pub hostname: String,
    pub agents: Vec<AgentEntry>,
}

/// A SAPI-only repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "target", rename_all = "kebab-case")]
pub enum SapiRepair {
    /// A service's default image.
    Service(ServiceChange),
    /// An instance change. `server` is the server the instance belongs to
    /// (absent for orphans no server can be found for).
    Instance {
        #[serde(skip_serializing_if = "Option::is_none")]
        server: Option<ServerUuid>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hostname: Option<String>,
        change: IntentChange,
    },
}

/// An instance an install replaces: deleted once the server reports the
/// instance the install created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Replaced {
    pub server: ServerUuid,
    pub component: String,
    pub instance: InstanceUuid,
}

/// Everything `check --fix` will do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepairPlan {
    pub reports: Vec<ReportRepair>,
    pub sapi: Vec<SapiRepair>,
    /// Installs and upgrades, for the orchestrator's executor.
    pub plan: Plan,
    pub replaced: Vec<Replaced>,
    /// Findings with a manual fix (not done).
    pub manual: usize,
}

impl RepairPlan {
    pub fn is_empty(&self) -> bool {
        self.reports.is_empty() && self.sapi.is_empty() && self.plan.servers.is_empty()
    }

    /// Number of repairs (reports, SAPI writes, server steps).
    pub fn len(&self) -> usize {
        self.reports.len() + self.sapi.len() + self.plan.step_count()
    }

    /// The server steps that would move a component to an older version
    /// (`hostname: component from -> to`): `check --fix` says so and needs
    /// `-y` for them.
    pub fn downgrades(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (_, sp) in self.plan.servers_in_order() {
            for st in &sp.steps {
                if let Action::Upgrade { from, to } = &st.action
                    && agentsadm_plan::is_newer(&from.version, &to.version)
                {
                    out.push(format!(
                        "{}: {} {} -> {}",
                        sp.hostname, st.component, from.version, to.version
                    ));
                }
            }
        }
        out.sort();
        out
    }

    /// The repairs as operators read them.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.is_empty() {
            out.push_str("Nothing can be repaired automatically.\n");
            return out;
        }
        out.push_str("Repairs:\n");
        if !self.reports.is_empty() {
            out.push_str("  CNAPI server.agents from the servers' own reports:\n");
            for r in &self.reports {
                let _ = writeln!(
                    out,
                    "    ~ {} ({}): {} components",
                    r.hostname,
                    r.server,
                    r.agents.len()
                );
            }
        }
        if !self.sapi.is_empty() {
            out.push_str("  SAPI:\n");
            for r in &self.sapi {
                let _ = writeln!(out, "    {}", sapi_line(r));
            }
        }
        if !self.plan.servers.is_empty() {
            out.push_str("  Servers:\n");
            for (uuid, sp) in self.plan.servers_in_order() {
                let _ = writeln!(out, "    {} ({uuid})", sp.hostname);
                for st in &sp.steps {
                    let line = match &st.action {
                        Action::Install { to } => {
                            format!("+ {} {} ({})", st.component, to.version, short(&to.uuid))
                        }
                        Action::Upgrade { from, to } => format!(
                            "~ {} {} -> {} ({}){}",
                            st.component,
                            from.version,
                            to.version,
                            short(&to.uuid),
                            if agentsadm_plan::is_newer(&from.version, &to.version) {
                                " DOWNGRADE"
                            } else {
                                ""
                            }
                        ),
                        Action::Remove { installed } => {
                            format!("- {} {}", st.component, installed.version)
                        }
                    };
                    let _ = writeln!(out, "      {line} [{}]", st.transport.as_str());
                }
            }
        }
        for r in &self.replaced {
            let _ = writeln!(
                out,
                "  then: delete SAPI instance {} of {} once the server reports the new one",
                short(&r.instance),
                r.component
            );
        }
        let _ = writeln!(
            out,
            "\n{} ({} CNAPI, {} SAPI, {} on servers); {} manual action.",
            plural(self.len(), "repair", "repairs"),
            self.reports.len(),
            self.sapi.len(),
            self.plan.step_count(),
            plural(self.manual, "finding needs", "findings need")
        );
        out
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn short(u: &impl ToString) -> String {
    u.to_string().chars().take(8).collect()
}

fn sapi_line(r: &SapiRepair) -> String {
    match r {
        SapiRepair::Service(c) => format!(
            "~ service {}: default image {} -> {} ({})",
            c.component,
            c.from.map(|u| short(&u)).unwrap_or_else(|| "unset".into()),
            c.to.version,
            short(&c.to.uuid)
        ),
        SapiRepair::Instance {
            server,
            hostname,
            change,
        } => {
            let on = match (hostname, server) {
                (Some(h), _) => format!(" on {h}"),
                (None, Some(s)) => format!(" of server {s}"),
                (None, None) => String::new(),
            };
            match change {
                IntentChange::CreateInstance {
                    component,
                    instance,
                    image,
                    ..
                } => format!(
                    "+ instance {} of {component}{on}, image_uuid {}",
                    short(instance),
                    short(image)
                ),
                IntentChange::UpdateInstance {
                    component,
                    instance,
                    image,
                    ..
                } => format!(
                    "~ instance {} of {component}{on}: params server_uuid, image_uuid {}",
                    short(instance),
                    short(image)
                ),
                IntentChange::DeleteInstance {
                    component,
                    instance,
                } => format!("- instance {} of {component}{on}", short(instance)),
                IntentChange::AdoptInstalled { component, .. } => {
                    format!("+ instance of {component}{on}")
                }
            }
        }
    }
}

/// A check and the repairs it calls for, as `check --fix` shows and
/// confirms them (fenced: see [`agentsadm_orchestrate::fence`]). Two are the
/// same plan when their repairs are: what else was read may differ in ways
/// no repair depends on.
#[derive(Clone, Debug)]
pub struct FixPlan {
    pub run: super::check::CheckRun,
    pub repairs: RepairPlan,
}

impl FixPlan {
    /// The repairs `run` calls for (pure).
    pub fn new(run: super::check::CheckRun, catalog: &Catalog) -> FixPlan {
        let repairs = run.repair_plan(catalog);
        FixPlan { run, repairs }
    }

    /// The check, then the repairs, as operators read them.
    pub fn render(&self) -> String {
        format!(
            "{}\n\n{}",
            self.run.render().trim_end(),
            self.repairs.render().trim_end()
        )
    }
}

impl PartialEq for FixPlan {
    fn eq(&self, other: &FixPlan) -> bool {
        self.repairs == other.repairs
    }
}

/// Plan the repairs of `findings` (pure). `live` gives the reports to post
/// for `stale-cnapi-report` findings.
/// Whether `agentsadm gz` can run on `server` (not a mockcloud CN).
fn has_execute(survey: &Survey, server: ServerUuid) -> bool {
    survey.reality.get(&server).is_none_or(|s| s.has_execute())
}

pub fn plan_repairs(
    catalog: &Catalog,
    survey: &Survey,
    live: &BTreeMap<ServerUuid, AgentsReport>,
    findings: &[Finding],
) -> RepairPlan {
    let mut reports: BTreeMap<ServerUuid, ReportRepair> = BTreeMap::new();
    let mut services: Vec<SapiRepair> = Vec::new();
    let mut creates: Vec<SapiRepair> = Vec::new();
    let mut updates: Vec<SapiRepair> = Vec::new();
    let mut deletes: BTreeMap<InstanceUuid, SapiRepair> = BTreeMap::new();
    let mut steps: BTreeMap<ServerUuid, (Vec<Step>, Vec<IntentChange>)> = BTreeMap::new();
    let mut replaced = Vec::new();
    let mut manual = 0;

    for f in findings {
        let component = f.component.clone().unwrap_or_default();
        let hostname = f.hostname.clone();
        let delete = |instance: InstanceUuid| SapiRepair::Instance {
            server: f.server,
            hostname: hostname.clone(),
            change: IntentChange::DeleteInstance {
                component: component.clone(),
                instance,
            },
        };
        match &f.fix {
            Fix::None => {}
            Fix::Manual { .. } => manual += 1,
            Fix::PostLiveReport => {
                if let (Some(server), Some(report)) =
                    (f.server, f.server.and_then(|s| live.get(&s)))
                {
                    reports.entry(server).or_insert_with(|| ReportRepair {
                        server,
                        hostname: hostname.clone().unwrap_or_default(),
                        agents: report.agents.clone(),
                    });
                }
            }
            Fix::DeleteInstance { instance } => {
                deletes
                    .entry(*instance)
                    .or_insert_with(|| delete(*instance));
            }
            Fix::SetParams {
                instance,
                service,
                image,
            } => updates.push(SapiRepair::Instance {
                server: f.server,
                hostname: hostname.clone(),
                change: IntentChange::UpdateInstance {
                    component: component.clone(),
                    service: *service,
                    instance: *instance,
                    image: *image,
                },
            }),
            Fix::AdoptInstance {
                instance,
                service,
                image,
                replaces,
            } => {
                creates.push(SapiRepair::Instance {
                    server: f.server,
                    hostname: hostname.clone(),
                    change: IntentChange::CreateInstance {
                        component: component.clone(),
                        service: *service,
                        instance: *instance,
                        image: *image,
                    },
                });
                if let Some(old) = replaces {
                    deletes.entry(*old).or_insert_with(|| delete(*old));
                }
            }
            Fix::SetServiceDefault { service, image } => {
                let from = survey
                    .intent
                    .services
                    .get(&component)
                    .and_then(|s| s.default_image);
                services.push(SapiRepair::Service(ServiceChange {
                    component: component.clone(),
                    service: *service,
                    from,
                    from_version: None,
                    to: image.clone(),
                }));
            }
            Fix::Install {
                image,
                transport,
                replaces,
            } => {
                let (Some(server), Some(c), Some(svc)) = (
                    f.server,
                    catalog.get(&component),
                    survey.intent.services.get(&component),
                ) else {
                    manual += 1;
                    continue;
                };
                let entry = steps.entry(server).or_default();
                let action = Action::Install { to: image.clone() };
                entry.0.push(Step {
                    component: c.name.clone(),
                    order: c.order,
                    // Repairs run where execute is available unless the
                    // fix itself chose install-agent for want of it; a
                    // mockcloud server has none.
                    gate: agentsadm_plan::Gate::for_step(
                        &action,
                        *transport,
                        has_execute(survey, server),
                    ),
                    action,
                    transport: *transport,
                });
                entry.1.push(IntentChange::AdoptInstalled {
                    component: c.name.clone(),
                    service: svc.uuid,
                    image: image.uuid,
                });
                if let Some(old) = replaces {
                    replaced.push(Replaced {
                        server,
                        component: c.name.clone(),
                        instance: *old,
                    });
                }
            }
            Fix::Upgrade { image, transport } => {
                let (Some(server), Some(c)) = (f.server, catalog.get(&component)) else {
                    manual += 1;
                    continue;
                };
                let Some(installed) = survey
                    .reality
                    .get(&server)
                    .and_then(|s| s.components.get(&c.name))
                else {
                    manual += 1;
                    continue;
                };
                let installed_has_execute = has_execute(survey, server);
                let action = Action::Upgrade {
                    from: installed.into(),
                    to: image.clone(),
                };
                steps.entry(server).or_default().0.push(Step {
                    component: c.name.clone(),
                    order: c.order,
                    gate: agentsadm_plan::Gate::for_step(
                        &action,
                        *transport,
                        installed_has_execute,
                    ),
                    action,
                    transport: *transport,
                });
            }
        }
    }

    // A duplicate that is also replaced by an adoption is deleted once.
    let mut sapi = services;
    sapi.extend(creates);
    sapi.extend(updates);
    sapi.extend(deletes.into_values());

    let mut servers = BTreeMap::new();
    let mut components: BTreeSet<String> = BTreeSet::new();
    for (uuid, (mut steps, intent)) in steps {
        steps.sort_by(|a, b| {
            a.order
                .cmp(&b.order)
                .then_with(|| a.component.cmp(&b.component))
        });
        components.extend(steps.iter().map(|s| s.component.clone()));
        let (hostname, headnode) = survey
            .reality
            .get(&uuid)
            .map(|s| (s.hostname.clone(), s.headnode))
            .unwrap_or_default();
        servers.insert(
            uuid,
            ServerPlan {
                hostname,
                headnode,
                rack: None,
                steps,
                intent,
            },
        );
    }
    let mut ordered: Vec<&agentsadm_types::catalog::Component> =
        components.iter().filter_map(|c| catalog.get(c)).collect();
    agentsadm_types::catalog::sort_install_order(&mut ordered);
    let plan = Plan {
        operation: Operation::Update,
        components: ordered.iter().map(|c| c.name.clone()).collect(),
        targets: BTreeMap::new(),
        imports: Vec::new(),
        service_changes: Vec::new(),
        selected_servers: servers.len(),
        servers,
        skips: Vec::new(),
        warnings: Vec::new(),
        needs_explicit_yes: false,
    };
    RepairPlan {
        reports: reports.into_values().collect(),
        sapi,
        plan,
        replaced,
        manual,
    }
}
