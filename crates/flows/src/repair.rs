//! Repair planning for `check --fix`: a pure function from findings (and
//! the survey they came from) to one [`Plan`], made through the same
//! [`PlanBuilder`] as `update`, so the same rules hold (marlin-agent is
//! never restarted by a bulk repair, gates, waves: canary, failure budget,
//! rack limit, concurrency). In the order it runs:
//!
//! 1. CNAPI: post each stale server's own report as `server.agents` (first,
//!    so that nothing later is overwritten by an older snapshot).
//! 2. SAPI only: service defaults, instances to create (adopt what servers
//!    keep), params to set, instances to delete (orphans, duplicates,
//!    unset-up servers).
//! 3. Server changes (install, upgrade), in waves, with the SAPI instance
//!    of each install adopted after it, and the instance the install
//!    replaced deleted once the server reports the new one.
//!
//! Findings whose fix is manual or informational are left out and counted.

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::drift::Finding;
use super::drift::Fix;
use super::drift::Survey;
use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::AgentsReport;
use agentsadm_orchestrate::run::Planned;
use agentsadm_plan::Action;
use agentsadm_plan::ImageRef;
use agentsadm_plan::IntentChange;
use agentsadm_plan::MarkKey;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::PlanBuilder;
use agentsadm_plan::RecordChange;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::ServiceChange;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::output::{plural, short};

/// An instance an install replaces: deleted once the server reports the
/// instance the install created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Replaced {
    pub server: ServerUuid,
    pub component: String,
    pub instance: InstanceUuid,
}

/// Everything `check --fix` will do: one plan, and the findings left for
/// an operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepairPlan {
    pub plan: Plan,
    /// Findings with a manual fix (not done).
    pub manual: usize,
}

impl RepairPlan {
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    /// Number of repairs (reports, SAPI writes, server steps).
    pub fn len(&self) -> usize {
        self.plan.records().len() + self.plan.step_count()
    }

    /// The servers whose CNAPI `server.agents` is replaced by their own
    /// report: (server, hostname, agents).
    pub fn reports(&self) -> impl Iterator<Item = (ServerUuid, &str, &[AgentEntry])> {
        self.plan.records().iter().filter_map(|r| match r {
            RecordChange::PostAgents {
                server,
                hostname,
                agents,
            } => Some((*server, hostname.as_str(), agents.as_slice())),
            _ => None,
        })
    }

    /// The SAPI-only repairs, in the order they are made.
    pub fn sapi(&self) -> impl Iterator<Item = &RecordChange> {
        self.plan.records().iter().filter(|r| r.is_sapi())
    }

    /// The instances installs replace.
    pub fn replaced(&self) -> Vec<Replaced> {
        let mut out = Vec::new();
        for (server, sp) in self.plan.servers() {
            for change in &sp.intent {
                if let IntentChange::DeleteReplaced {
                    component,
                    instance,
                } = change
                {
                    out.push(Replaced {
                        server: *server,
                        component: component.to_string(),
                        instance: *instance,
                    });
                }
            }
        }
        out
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
        let reports: Vec<_> = self.reports().collect();
        if !reports.is_empty() {
            out.push_str("  CNAPI server.agents from the servers' own reports:\n");
            for (server, hostname, agents) in reports {
                let _ = writeln!(
                    out,
                    "    ~ {hostname} ({server}): {} components",
                    agents.len()
                );
            }
        }
        let sapi: Vec<_> = self.sapi().collect();
        if !sapi.is_empty() {
            out.push_str("  SAPI:\n");
            for r in sapi {
                let _ = writeln!(out, "    {}", sapi_line(r));
            }
        }
        self.render_servers(&mut out);
        let _ = writeln!(
            out,
            "\n{} ({} CNAPI, {} SAPI, {} on servers); {} manual action.",
            plural(self.len(), "repair", "repairs"),
            self.reports().count(),
            self.sapi().count(),
            self.plan.step_count(),
            plural(self.manual, "finding needs", "findings need")
        );
        out
    }

    /// The server steps, the instances they replace, the waves, and what
    /// a bulk repair leaves alone.
    fn render_servers(&self, out: &mut String) {
        if !self.plan.servers().is_empty() {
            out.push_str("  Servers:\n");
            for (uuid, sp) in self.plan.servers_in_order() {
                let _ = writeln!(out, "    {} ({uuid})", sp.hostname);
                for st in &sp.steps {
                    let _ = writeln!(out, "      {} [{}]", step_line(st), st.transport.as_str());
                }
            }
        }
        for r in self.replaced() {
            let _ = writeln!(
                out,
                "  then: delete SAPI instance {} of {} once the server reports the new one",
                short(&r.instance),
                r.component
            );
        }
        if !self.plan.rollout().is_empty() {
            for line in agentsadm_plan::display::rollout_lines(self.plan.rollout(), 20) {
                let _ = writeln!(out, "  {line}");
            }
        }
        for s in self.plan.skips() {
            let _ = writeln!(
                out,
                "  left alone: {} on {}: {}",
                s.component.as_deref().unwrap_or("?"),
                s.hostname.as_deref().unwrap_or("?"),
                s.reason.describe()
            );
        }
    }
}

fn step_line(st: &agentsadm_plan::Step) -> String {
    match &st.action {
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
        Action::Disable { .. } => format!("! disable {} (its services off)", st.component),
        Action::Enable => format!("^ enable {} (its services on)", st.component),
    }
}

fn sapi_line(r: &RecordChange) -> String {
    let (server, hostname, change) = match r {
        RecordChange::ServiceDefault { change: c } => {
            return format!(
                "~ service {}: default image {} -> {} ({})",
                c.component,
                c.from.map(|u| short(&u)).unwrap_or_else(|| "unset".into()),
                c.to.version,
                short(&c.to.uuid)
            );
        }
        RecordChange::Instance {
            server,
            hostname,
            change,
        } => (server, hostname, change),
        other => return agentsadm_plan::display::record_line(other),
    };
    let on = match (hostname, server) {
        (Some(h), _) => format!(" on {h}"),
        (None, Some(s)) => format!(" of server {s}"),
        (None, None) => String::new(),
    };
    match change {
        IntentChange::Mark {
            component,
            instance,
            key,
            ..
        } => format!(
            "~ instance {} of {component}{on}: params.{}",
            short(instance),
            key.param()
        ),
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
        }
        | IntentChange::Restore {
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
        }
        | IntentChange::DeleteReplaced {
            component,
            instance,
        } => format!("- instance {} of {component}{on}", short(instance)),
        IntentChange::AdoptInstalled { component, .. } => {
            format!("+ instance of {component}{on}")
        }
        IntentChange::ForgetMark { component, key, .. } => {
            format!(
                "- service {component}: the copy of params.{}{on}",
                key.param()
            )
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
    /// The repairs `run` calls for (pure), rolled out under `policy`.
    pub fn new(run: super::check::CheckRun, catalog: &Catalog, policy: &RolloutPolicy) -> FixPlan {
        let repairs = run.repair_plan_with(catalog, policy);
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

impl Planned for FixPlan {
    fn plan(&self) -> &Plan {
        &self.repairs.plan
    }
}

/// What the findings' fixes come to, sorted by kind before they enter the
/// plan (the builder keeps this order within a phase).
#[derive(Default)]
struct Repairs {
    reports: BTreeMap<ServerUuid, RecordChange>,
    services: Vec<RecordChange>,
    creates: Vec<RecordChange>,
    updates: Vec<RecordChange>,
    deletes: BTreeMap<InstanceUuid, RecordChange>,
    manual: usize,
}

/// Plan the repairs of `findings` (pure) with the library's neutral
/// rollout. `live` gives the reports to post for `stale-cnapi-report`
/// findings.
pub fn plan_repairs(
    catalog: &Catalog,
    survey: &Survey,
    live: &BTreeMap<ServerUuid, AgentsReport>,
    findings: &[Finding],
) -> RepairPlan {
    plan_repairs_with(
        catalog,
        survey,
        live,
        findings,
        &RolloutPolicy::default(),
        None,
    )
}

/// [`plan_repairs`], rolled out under `policy`, giving `agentsadm` first
/// to servers whose copy cannot parse their repairs (without one, such
/// repairs are left out).
pub fn plan_repairs_with(
    catalog: &Catalog,
    survey: &Survey,
    live: &BTreeMap<ServerUuid, AgentsReport>,
    findings: &[Finding],
    policy: &RolloutPolicy,
    agentsadm: Option<&ImageRef>,
) -> RepairPlan {
    let mut b = PlanBuilder::new(Operation::Repair, catalog, &survey.intent);
    b.agentsadm(agentsadm.cloned());
    // Repairs are never named one by one: a bulk operation.
    b.bulk(true).selected_servers(survey.reality.servers.len());
    let mut r = Repairs::default();
    for f in findings {
        if !record_fix(f, survey, live, &mut r) && !server_fix(f, catalog, survey, &mut b) {
            r.manual += 1;
        }
    }
    let Repairs {
        reports,
        services,
        creates,
        updates,
        deletes,
        manual,
    } = r;
    for change in reports
        .into_values()
        .chain(services)
        .chain(creates)
        .chain(updates)
        .chain(deletes.into_values())
    {
        b.record(change);
    }
    RepairPlan {
        plan: b.finish(policy),
        manual,
    }
}

/// A fix that writes records only. Returns whether the finding was taken
/// care of (informational ones need nothing).
fn record_fix(
    f: &Finding,
    survey: &Survey,
    live: &BTreeMap<ServerUuid, AgentsReport>,
    r: &mut Repairs,
) -> bool {
    match &f.fix {
        Fix::None => return true,
        Fix::PostLiveReport => {
            if let (Some(server), Some(report)) = (f.server, f.server.and_then(|s| live.get(&s))) {
                r.reports
                    .entry(server)
                    .or_insert_with(|| RecordChange::PostAgents {
                        server,
                        hostname: f.hostname.clone().unwrap_or_default(),
                        agents: report.agents.clone(),
                    });
            }
            return true;
        }
        _ => {}
    }
    // Every other record fix writes the component's records: a finding
    // that names none (or not a component) is left to the operator.
    let Some(Ok(component)) = f.component.as_deref().map(ComponentName::new) else {
        return false;
    };
    let instance_change = |change: IntentChange| RecordChange::Instance {
        server: f.server,
        hostname: f.hostname.clone(),
        change,
    };
    let delete = |instance: InstanceUuid| {
        instance_change(IntentChange::DeleteInstance {
            component: component.clone(),
            instance,
        })
    };
    match &f.fix {
        Fix::None | Fix::PostLiveReport => {}
        Fix::DeleteInstance { instance } => {
            r.deletes
                .entry(*instance)
                .or_insert_with(|| delete(*instance));
        }
        Fix::SetParams {
            instance,
            service,
            image,
        } => r
            .updates
            .push(instance_change(IntentChange::UpdateInstance {
                component: component.clone(),
                service: *service,
                instance: *instance,
                image: *image,
                // An instance whose marks were lost is an erased one,
                // whose fix is a restore.
                marks: Vec::new(),
            })),
        Fix::Restore { .. } | Fix::KeepMark { .. } => {
            r.updates
                .extend(mark_write(&component, &f.fix).map(instance_change));
        }
        Fix::AdoptInstance {
            instance,
            service,
            image,
            replaces,
        } => {
            r.creates
                .push(instance_change(IntentChange::CreateInstance {
                    component: component.clone(),
                    service: *service,
                    instance: *instance,
                    image: *image,
                }));
            // A duplicate that is also replaced by an adoption is deleted
            // once.
            if let Some(old) = replaces {
                r.deletes.entry(*old).or_insert_with(|| delete(*old));
            }
        }
        Fix::SetServiceDefault { service, image } => {
            let from = survey
                .intent
                .services
                .get(component.as_str())
                .and_then(|s| s.default_image);
            r.services.push(RecordChange::ServiceDefault {
                change: ServiceChange {
                    component: component.clone(),
                    service: *service,
                    from,
                    from_version: None,
                    to: image.clone(),
                },
            });
        }
        Fix::Manual { .. } | Fix::Install { .. } | Fix::Upgrade { .. } | Fix::Disable { .. } => {
            return false;
        }
    }
    true
}

/// A fix that changes a server (install, upgrade). Returns whether it
/// could be planned.
fn server_fix(f: &Finding, catalog: &Catalog, survey: &Survey, b: &mut PlanBuilder<'_>) -> bool {
    let component = f.component.as_deref().unwrap_or_default();
    let (Some(state), Some(c)) = (
        f.server.and_then(|s| survey.reality.get(&s)),
        catalog.get(component),
    ) else {
        return false;
    };
    // A mockcloud server has no execute: its gates say so.
    let execute = state.has_execute();
    match &f.fix {
        Fix::Install {
            image,
            transport,
            replaces,
        } => {
            let Some(svc) = survey.intent.services.get(&c.name) else {
                return false;
            };
            b.step(
                state,
                execute,
                c,
                Action::Install { to: image.clone() },
                *transport,
            )
            .intent(
                state,
                IntentChange::AdoptInstalled {
                    component: c.name.clone(),
                    service: svc.uuid,
                    image: image.uuid,
                },
            );
            if let Some(old) = replaces {
                b.intent(
                    state,
                    IntentChange::DeleteReplaced {
                        component: c.name.clone(),
                        instance: *old,
                    },
                );
            }
            true
        }
        Fix::Upgrade { image, transport } => {
            let Some(installed) = state.components.get(&c.name) else {
                return false;
            };
            let action = Action::Upgrade {
                from: installed.into(),
                to: image.clone(),
            };
            b.step(state, execute, c, action, *transport);
            true
        }
        Fix::Disable { mark } if execute => {
            let action = Action::Disable { mark: mark.clone() };
            b.step(
                state,
                execute,
                c,
                action,
                agentsadm_plan::TransportKind::Execute,
            );
            true
        }
        _ => false,
    }
}

/// The one instance write of a [`Fix::Restore`] (the instance whole) or a
/// [`Fix::KeepMark`] (both copies of a mark).
fn mark_write(component: &ComponentName, fix: &Fix) -> Option<IntentChange> {
    match fix {
        Fix::Restore {
            instance,
            service,
            image,
            hold,
            disabled,
        } => Some(IntentChange::Restore {
            component: component.clone(),
            service: *service,
            instance: *instance,
            image: *image,
            marks: [(MarkKey::Hold, hold), (MarkKey::Disabled, disabled)]
                .into_iter()
                .filter_map(|(k, m)| m.clone().map(|m| (k, m)))
                .collect(),
        }),
        Fix::KeepMark {
            instance,
            service,
            key,
            mark,
        } => Some(IntentChange::Mark {
            component: component.clone(),
            service: *service,
            instance: *instance,
            key: *key,
            mark: Some(mark.clone()),
        }),
        _ => None,
    }
}
