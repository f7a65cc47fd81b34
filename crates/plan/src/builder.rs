//! The one way to make a [`Plan`]: every planner (update, install, remove,
//! `check --fix`'s repairs, adoption, server cleanup) adds what it decided
//! to a [`PlanBuilder`], and [`PlanBuilder::finish`] applies the rules no
//! plan may skip:
//!
//! - components that are never changed in bulk (marlin-agent: restarting
//!   it aborts running Manta jobs) lose their steps in a bulk plan (`--all`,
//!   `check --fix`), with a skip that says to name them; named explicitly,
//!   the plan warns and needs an explicit yes;
//! - each step's health gate follows from its action, its transport and
//!   whether `agentsadm gz` reaches the server (callers cannot choose it);
//! - every step states the oldest agentsadm that parses what it sends, and
//!   a server whose copy is older (or missing) gets an agentsadm step
//!   first, or loses the steps it cannot run ([`super::agentsadm`]);
//! - a server's steps run in the catalog's order classes, agentsadm's
//!   before all; servers with nothing to do are dropped;
//! - images are imported only when a step or service change uses them;
//! - skips and record changes come in a stable order;
//! - the waves (canaries, start order, budget, concurrency) are decided
//!   from the operator's [`RolloutPolicy`].

use std::collections::{BTreeMap, BTreeSet};

use super::Operation;
use super::rollout::{Rollout, RolloutPolicy, waves};
use super::skip::{Skip, SkipReason};
use super::timing::Durations;
use super::types::{
    Action, ExplicitYes, Gate, IntentChange, KeptRecord, MarkKey, Plan, RecordChange, RevertOf,
    ServerPlan, ServiceChange, Step,
};
use super::{ImageRef, PlanningInput, TransportKind};
use crate::intent::Intent;
use crate::marks::HoldScope;
use crate::reality::{Installed, ServerState};
use agentsadm_types::catalog::{Catalog, Component, ComponentKind};
use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::{ImageUuid, InstanceUuid, ServerUuid, ServiceUuid};

/// A plan being made. See the module documentation for what
/// [`PlanBuilder::finish`] decides.
#[derive(Debug)]
pub struct PlanBuilder<'c> {
    catalog: &'c Catalog,
    plan: Plan,
    /// The components were selected in bulk, not named.
    bulk: bool,
    /// Whether `agentsadm gz` reaches each server (for its health gates).
    execute: BTreeMap<ServerUuid, bool>,
    /// SAPI's holds and disables (and how this request treats holds).
    intent: &'c Intent,
    named_servers: bool,
    ignore_holds: bool,
    /// The agentsadm servers get first when theirs cannot parse a step.
    agentsadm: Option<ImageRef>,
    /// Each server's agentsadm, as it reports it.
    copies: BTreeMap<ServerUuid, Option<Installed>>,
    /// What servers took before, for the waves' order and expected finish.
    durations: Option<&'c Durations>,
}

impl<'c> PlanBuilder<'c> {
    /// A plan of `operation`. `intent`: SAPI's intent, whose holds and
    /// disables every plan that moves components honours ([`Intent::none`]
    /// for one that moves none).
    pub fn new(operation: Operation, catalog: &'c Catalog, intent: &'c Intent) -> PlanBuilder<'c> {
        PlanBuilder {
            catalog,
            plan: Plan {
                operation,
                components: Vec::new(),
                targets: BTreeMap::new(),
                imports: Vec::new(),
                service_changes: Vec::new(),
                records: Vec::new(),
                servers: BTreeMap::new(),
                skips: Vec::new(),
                warnings: Vec::new(),
                explicit_yes: BTreeSet::new(),
                selected_servers: 0,
                rollout: Rollout::default(),
                reverts: None,
            },
            bulk: false,
            execute: BTreeMap::new(),
            intent,
            named_servers: false,
            ignore_holds: false,
            agentsadm: None,
            copies: BTreeMap::new(),
            durations: None,
        }
    }

    /// The operator named the servers (`-s`): a hold there refuses the
    /// change (a blocking skip) instead of quietly leaving it out.
    pub fn named_servers(&mut self, named: bool) -> &mut Self {
        self.named_servers = named;
        self
    }

    /// `--ignore-holds`: held components are changed anyway, with a
    /// warning and an explicit yes.
    pub fn ignore_holds(&mut self, ignore: bool) -> &mut Self {
        self.ignore_holds = ignore;
        self
    }

    /// A plan of a request: SAPI's holds, honoured as the request and
    /// its options say (`named`: the request named its servers), and the
    /// agentsadm servers get first when theirs cannot parse a step (the
    /// request's resolved [`crate::ResolvedImages::agentsadm`]).
    pub fn for_request(
        operation: Operation,
        input: &PlanningInput<'c>,
        named: bool,
    ) -> PlanBuilder<'c> {
        let mut b = PlanBuilder::new(operation, input.catalog, input.intent);
        b.named_servers(named)
            .ignore_holds(input.options.ignore_holds)
            .agentsadm(input.images.agentsadm.clone());
        b
    }

    /// The agentsadm a server gets first when its own is missing or too
    /// old for its steps ([`crate::ResolvedImages::agentsadm`]); without
    /// one, such steps are left out.
    pub fn agentsadm(&mut self, target: Option<ImageRef>) -> &mut Self {
        self.agentsadm = target;
        self
    }

    /// What servers took in earlier runs (read before planning): the
    /// waves start the longest expected first and show the expected
    /// finish. Without it, servers start by hostname.
    pub fn durations(&mut self, durations: Option<&'c Durations>) -> &mut Self {
        self.durations = durations;
        self
    }

    /// The components were selected in bulk (`--all`, every repair), not
    /// named by the operator.
    pub fn bulk(&mut self, bulk: bool) -> &mut Self {
        self.bulk = bulk;
        self
    }

    /// How many servers the request selected (before skips).
    pub fn selected_servers(&mut self, n: usize) -> &mut Self {
        self.plan.selected_servers = n;
        self
    }

    /// The components in play (put in install order by `finish`).
    pub fn components(&mut self, names: impl IntoIterator<Item = ComponentName>) -> &mut Self {
        for n in names {
            if !self.plan.components.contains(&n) {
                self.plan.components.push(n);
            }
        }
        self
    }

    /// The explicit target images, by component.
    pub fn targets(&mut self, targets: BTreeMap<ComponentName, ImageRef>) -> &mut Self {
        self.plan.targets = targets;
        self
    }

    pub fn service_change(&mut self, change: ServiceChange) -> &mut Self {
        self.plan.service_changes.push(change);
        self
    }

    pub fn record(&mut self, change: RecordChange) -> &mut Self {
        self.plan.records.push(change);
        self
    }

    /// The plan puts back run `of` (`agentsadm revert`).
    pub fn reverts(&mut self, of: RevertOf) -> &mut Self {
        self.plan.reverts = Some(of);
        self
    }

    pub fn skip(&mut self, skip: Skip) -> &mut Self {
        self.plan.skips.push(skip);
        self
    }

    pub fn warn(&mut self, warning: String) -> &mut Self {
        self.plan.warnings.push(warning);
        self
    }

    /// The server's plan, made on first use. `execute_available`: the
    /// transport mode lets the orchestrator run `agentsadm gz` there.
    fn server(&mut self, state: &ServerState, execute_available: bool) -> &mut ServerPlan {
        if let Some(c) = super::agentsadm::component(self.catalog) {
            self.copies
                .entry(state.uuid)
                .or_insert_with(|| state.components.get(&c.name).cloned());
        }
        self.execute
            .entry(state.uuid)
            .and_modify(|e| *e &= execute_available)
            .or_insert(execute_available);
        self.plan
            .servers
            .entry(state.uuid)
            .or_insert_with(|| ServerPlan {
                hostname: state.hostname.clone(),
                headnode: state.headnode,
                rack: state.rack.clone(),
                steps: Vec::new(),
                intent: Vec::new(),
                execute_together: false,
            })
    }

    /// A step of `component` on the server; its gate is decided by
    /// `finish`.
    pub fn step(
        &mut self,
        state: &ServerState,
        execute_available: bool,
        component: &Component,
        action: Action,
        transport: TransportKind,
    ) -> &mut Self {
        self.server(state, execute_available).steps.push(Step {
            component: component.name.clone(),
            order: component.order,
            gate: Gate::None,
            needs_agentsadm: None,
            needed_by: Vec::new(),
            action,
            transport,
            keep_off: None,
            record: None,
        });
        self
    }

    /// All of one server's steps and SAPI writes at once (a planner that
    /// decided a server whole; one lookup instead of one per change).
    pub fn server_changes<'a>(
        &mut self,
        state: &ServerState,
        execute_available: bool,
        steps: impl IntoIterator<Item = (&'a Component, Action, TransportKind)>,
        intent: impl IntoIterator<Item = IntentChange>,
    ) -> &mut Self {
        let sp = self.server(state, execute_available && state.has_execute());
        sp.steps
            .extend(steps.into_iter().map(|(c, action, transport)| Step {
                component: c.name.clone(),
                order: c.order,
                gate: Gate::None,
                needs_agentsadm: None,
                needed_by: Vec::new(),
                action,
                transport,
                keep_off: None,
                record: None,
            }));
        sp.intent.extend(intent);
        self
    }

    /// A SAPI write of the server's turn (before or after its steps, as
    /// [`IntentChange::runs_before_steps`] says).
    pub fn intent(&mut self, state: &ServerState, change: IntentChange) -> &mut Self {
        let execute = state.has_execute();
        self.server(state, execute).intent.push(change);
        self
    }

    /// Apply the rules and decide the waves.
    pub fn finish(mut self, policy: &RolloutPolicy) -> Plan {
        self.hold_rule();
        self.non_bulk_rule();
        self.keep_off_rule();
        self.record_rule();
        self.gates();
        self.agentsadm_first();
        let catalog = self.catalog;
        let plan = &mut self.plan;
        plan.servers
            .retain(|_, sp| !sp.steps.is_empty() || !sp.intent.is_empty());
        // agentsadm before everything: the other steps may run through it.
        let later = |st: &Step| {
            catalog
                .get(&st.component)
                .is_none_or(|c| c.kind != ComponentKind::Agentsadm)
        };
        for sp in plan.servers.values_mut() {
            sp.steps.sort_by(|a, b| {
                later(a)
                    .cmp(&later(b))
                    .then_with(|| a.order.cmp(&b.order))
                    .then_with(|| a.component.cmp(&b.component))
            });
        }
        let mut ordered: Vec<&Component> = plan
            .components
            .iter()
            .filter_map(|c| self.catalog.get(c))
            .collect();
        agentsadm_types::catalog::sort_install_order(&mut ordered);
        let known: Vec<ComponentName> = ordered.iter().map(|c| c.name.clone()).collect();
        plan.components.retain(|c| self.catalog.get(c).is_none());
        plan.components.splice(0..0, known);
        plan.imports = imports(plan);
        plan.skips.sort();
        plan.skips.dedup();
        plan.records.sort_by_key(RecordChange::phase);
        plan.rollout = waves(&plan.servers, policy, self.durations);
        self.plan
    }

    /// Held components stay where they are: their steps (and the SAPI
    /// writes that go with them) leave the plan with a skip saying who
    /// held them, when and why; a datacenter-wide hold keeps the service
    /// default too. With `--ignore-holds` they stay, with a warning and an
    /// explicit yes.
    fn hold_rule(&mut self) {
        let holds = &self.intent.holds;
        if holds.is_empty() {
            return;
        }
        let mut skips: Vec<Skip> = Vec::new();
        let mut overridden: Vec<String> = Vec::new();
        let held_skip =
            |server: Option<(ServerUuid, &str)>, component: &ComponentName, named: bool| {
                let (scope, mark) = match server {
                    Some((uuid, _)) => holds.get(&uuid, component)?,
                    None => (HoldScope::Datacenter, holds.services.get(component)?),
                };
                Some(Skip {
                    server: server.map(|s| s.0),
                    hostname: server.map(|s| s.1.to_string()),
                    component: Some(component.clone()),
                    reason: SkipReason::Held {
                        scope,
                        hold: Box::new(mark.clone()),
                        named,
                    },
                    blocking: named,
                })
            };
        for (uuid, sp) in self.plan.servers.iter_mut() {
            let (held, keep): (Vec<Step>, Vec<Step>) = std::mem::take(&mut sp.steps)
                .into_iter()
                .partition(|st| st.action.moves() && holds.get(uuid, &st.component).is_some());
            sp.steps = keep;
            for st in held {
                if self.ignore_holds {
                    overridden.push(format!("{} on {}", st.component, sp.hostname));
                    sp.steps.push(st);
                    continue;
                }
                sp.intent.retain(|c| c.component() != st.component);
                skips.extend(held_skip(
                    Some((*uuid, &sp.hostname)),
                    &st.component,
                    self.named_servers,
                ));
            }
        }
        if !self.ignore_holds {
            let services = &holds.services;
            self.plan.service_changes.retain(|c| {
                let held = services.contains_key(&c.component);
                if held {
                    skips.extend(held_skip(None, &c.component, false));
                }
                !held
            });
        }
        self.plan.skips.extend(skips);
        if !overridden.is_empty() {
            self.plan.warnings.push(format!(
                "held, changed anyway (--ignore-holds): {}; -y is required",
                overridden.join(", ")
            ));
            self.plan.explicit_yes.insert(ExplicitYes::OverridesHolds);
        }
    }

    /// A component disabled on a server stays off: each install or
    /// upgrade of it there runs `gz disable` in the same step (the
    /// installer keeps it off by itself; cn-agent's install task does not).
    fn keep_off_rule(&mut self) {
        let disabled = &self.intent.disabled;
        if disabled.is_empty() {
            return;
        }
        for (uuid, sp) in self.plan.servers.iter_mut() {
            for st in &mut sp.steps {
                if matches!(st.action, Action::Install { .. } | Action::Upgrade { .. }) {
                    st.keep_off = disabled
                        .get(uuid)
                        .and_then(|m| m.get(&st.component))
                        .cloned();
                }
            }
        }
    }

    /// What each install or upgrade by cn-agent must leave in the
    /// component's SAPI instance, whatever the agent's postinstall does to
    /// it: the instance the server has (in SAPI, or adopted by this plan)
    /// with its marks (disabled, a hold on this server, which
    /// `--ignore-holds` overrides for this run only).
    fn record_rule(&mut self) {
        let intent = self.intent;
        let catalog = self.catalog;
        for (uuid, sp) in self.plan.servers.iter_mut() {
            let adopted: BTreeMap<&ComponentName, (ServiceUuid, InstanceUuid)> = sp
                .intent
                .iter()
                .filter_map(|c| match c {
                    IntentChange::UpdateInstance {
                        component,
                        service,
                        instance,
                        ..
                    }
                    | IntentChange::CreateInstance {
                        component,
                        service,
                        instance,
                        ..
                    } => Some((component, (*service, *instance))),
                    _ => None,
                })
                .collect();
            for st in &mut sp.steps {
                if st.transport != TransportKind::InstallAgent
                    || !matches!(st.action, Action::Install { .. } | Action::Upgrade { .. })
                {
                    continue;
                }
                let Some((service, instance)) = adopted.get(&st.component).copied().or_else(|| {
                    intent
                        .instance(uuid, &st.component)
                        .map(|i| (i.service, i.uuid))
                }) else {
                    continue;
                };
                let mut marks = Vec::new();
                if let Some(m) = intent.disabled(uuid, &st.component) {
                    marks.push((MarkKey::Disabled, m.clone()));
                }
                if let Some(m) = intent
                    .holds
                    .servers
                    .get(uuid)
                    .and_then(|h| h.get(&st.component))
                {
                    marks.push((MarkKey::Hold, m.clone()));
                }
                st.record = Some(KeptRecord {
                    service,
                    instance,
                    marks,
                    postinstall: catalog.get(&st.component).and_then(|c| c.postinstall_sapi),
                });
            }
        }
    }

    /// marlin-agent and its kind: never in a bulk plan; named, a warning
    /// and an explicit yes.
    fn non_bulk_rule(&mut self) {
        let catalog = self.catalog;
        let non_bulk = |name: &str| catalog.get(name).is_some_and(|c| !c.bulk_update);
        let mut touched: BTreeMap<ComponentName, Vec<String>> = BTreeMap::new();
        let mut dropped: Vec<Skip> = Vec::new();
        let bulk = self.bulk;
        for (uuid, sp) in self.plan.servers.iter_mut() {
            let (keep, held): (Vec<Step>, Vec<Step>) = std::mem::take(&mut sp.steps)
                .into_iter()
                .partition(|st| !bulk || !non_bulk(&st.component));
            sp.steps = keep;
            for st in &sp.steps {
                if non_bulk(&st.component) {
                    touched
                        .entry(st.component.clone())
                        .or_default()
                        .push(sp.hostname.clone());
                }
            }
            for st in held {
                // Its SAPI writes go with it: intent must not claim a
                // build the server never got.
                sp.intent.retain(|c| c.component() != st.component);
                dropped.push(Skip {
                    server: Some(*uuid),
                    hostname: Some(sp.hostname.clone()),
                    component: Some(st.component.clone()),
                    reason: SkipReason::NotBulk,
                    blocking: false,
                });
            }
        }
        self.plan.skips.extend(dropped);
        for (component, hosts) in touched {
            let mut shown: Vec<&str> = hosts.iter().map(String::as_str).take(10).collect();
            if hosts.len() > 10 {
                shown.push("...");
            }
            self.plan.warnings.push(format!(
                "{component}: restarting it aborts running Manta jobs on {} server{} ({}); -y is required",
                hosts.len(),
                if hosts.len() == 1 { "" } else { "s" },
                shown.join(", ")
            ));
            self.plan
                .explicit_yes
                .insert(ExplicitYes::AbortsRunningWork);
        }
    }

    /// Every step's agentsadm need; agentsadm first where a server's copy
    /// cannot parse its steps (see [`super::agentsadm`]).
    fn agentsadm_first(&mut self) {
        let Some(component) = super::agentsadm::component(self.catalog) else {
            return;
        };
        let supply = super::agentsadm::Supply {
            component,
            target: self.agentsadm.as_ref(),
            copies: &self.copies,
            execute: &self.execute,
        };
        let (skips, ungated) = super::agentsadm::first(&mut self.plan, &supply);
        self.plan.skips.extend(skips);
        if !ungated.is_empty() {
            let mut shown: Vec<&str> = ungated.iter().map(String::as_str).take(10).collect();
            if ungated.len() > 10 {
                shown.push("...");
            }
            self.plan.warnings.push(format!(
                "{} ({}): agentsadm is missing or too old for 'gz health' and the datacenter IMGAPI has no agentsadm image to give {}; only server.agents confirms their cn-agent installs (run 'agentsadm self-update' on the headnode to publish one)",
                if ungated.len() == 1 { "1 server".to_string() } else { format!("{} servers", ungated.len()) },
                shown.join(", "),
                if ungated.len() == 1 { "it" } else { "them" },
            ));
        }
    }

    /// Each step's gate, from its action, transport and the server.
    fn gates(&mut self) {
        for (uuid, sp) in self.plan.servers.iter_mut() {
            let execute = self.execute.get(uuid).copied().unwrap_or(false);
            for st in &mut sp.steps {
                st.gate = Gate::for_step(&st.action, st.transport, execute);
            }
        }
    }
}

/// Imports for the targets that some step or service change uses.
fn imports(plan: &Plan) -> Vec<ImageRef> {
    let used: BTreeSet<ImageUuid> = plan
        .servers
        .values()
        .flat_map(|s| {
            s.steps
                .iter()
                .filter_map(|st| st.action.target().map(|t| t.uuid))
        })
        .chain(plan.service_changes.iter().map(|c| c.to.uuid))
        .collect();
    let mut imports: Vec<ImageRef> = plan
        .targets
        .values()
        .filter(|t| t.import_from.is_some() && used.contains(&t.uuid))
        .cloned()
        .collect();
    imports.sort();
    imports.dedup();
    imports
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reality::{Installed, Reality};
    use agentsadm_types::cnapi::Server;
    use serde_json::json;

    fn reality(n: usize) -> Reality {
        let servers: Vec<Server> = (0..n)
            .map(|i| {
                serde_json::from_value(json!({
                    "uuid": format!("5e000000-0000-4000-8000-{i:012}"),
                    "hostname": if i == 0 { "aa-headnode".to_string() } else { format!("cn{i:03}") },
                    "headnode": i == 0,
                    "setup": true, "status": "running",
                    "rack_identifier": format!("rack-{}", i % 2),
                    "agents": [{"name": "marlin", "version": "1.0.0"},
                               {"name": "vm-agent", "version": "1.0.0"},
                               {"name": "agentsadm", "version": "0.1.0"}]
                }))
                .unwrap()
            })
            .collect();
        Reality::from_servers(&Catalog::builtin(), &servers)
    }

    fn upgrade(installed: &Installed) -> Action {
        Action::Upgrade {
            from: installed.into(),
            to: ImageRef {
                uuid: ImageUuid::from_u128(7),
                name: "x".into(),
                version: "2.0.0".into(),
                import_from: None,
            },
        }
    }

    /// Each server gets a marlin-agent and a vm-agent upgrade.
    fn build(bulk: bool, policy: &RolloutPolicy) -> Plan {
        let catalog = Catalog::builtin();
        let r = reality(6);
        let mut b = PlanBuilder::new(Operation::Update, &catalog, Intent::none());
        b.bulk(bulk).selected_servers(r.servers.len());
        for s in r.servers.values() {
            for name in ["marlin-agent", "vm-agent"] {
                let c = catalog.get(name).unwrap();
                let action = upgrade(&s.components[name]);
                b.step(s, true, c, action, TransportKind::InstallAgent);
            }
        }
        b.finish(policy)
    }

    /// A plan of no named component (check --fix's repair) is headed by
    /// its operation alone: it once read "Plan: repair (no components)".
    #[test]
    fn a_plan_of_no_named_component_says_its_operation() {
        let catalog = Catalog::builtin();
        let r = reality(2);
        let mut b = PlanBuilder::new(Operation::Repair, &catalog, Intent::none());
        b.bulk(true).selected_servers(r.servers.len());
        for s in r.servers.values() {
            let c = catalog.get("vm-agent").unwrap();
            let action = upgrade(&s.components["vm-agent"]);
            b.step(s, true, c, action, TransportKind::InstallAgent);
        }
        let text = b.finish(&RolloutPolicy::default()).display().to_string();
        assert_eq!(
            text.lines().next(),
            Some("Plan: repair (2 servers selected)"),
            "{text}"
        );
    }

    #[test]
    fn marlin_agent_never_in_bulk_and_named_needs_yes() {
        let bulk = build(true, &RolloutPolicy::default());
        assert!(
            bulk.servers()
                .values()
                .all(|sp| sp.steps.iter().all(|st| st.component == "vm-agent"))
        );
        assert_eq!(bulk.skips().len(), 6);
        assert!(bulk.skips().iter().all(|s| s.reason == SkipReason::NotBulk));
        assert!(!bulk.needs_explicit_yes());
        let named = build(false, &RolloutPolicy::default());
        assert_eq!(named.step_count(), 12);
        assert!(named.needs_explicit_yes());
        assert!(named.warnings()[0].starts_with("marlin-agent: restarting it aborts"));
        // Gates follow from the transport and the server, never the caller.
        assert!(
            named
                .servers()
                .values()
                .flat_map(|sp| &sp.steps)
                .all(|st| st.gate == Gate::GzHealth)
        );
    }

    #[test]
    fn waves_never_start_with_the_headnode() {
        let policy = RolloutPolicy {
            concurrency: 3,
            canary: Some(2),
            max_failures: Some(crate::FailureBudget::Count(1)),
            max_per_rack: Some(1),
        };
        let p = build(true, &policy);
        let r = p.rollout();
        // aa-headnode sorts first but is no canary; one canary per rack.
        let canaries: Vec<&str> = r.canaries().iter().map(|s| s.hostname.as_str()).collect();
        assert_eq!(canaries, ["cn001", "cn002"]);
        let order: Vec<&str> = r.order().map(|s| s.hostname.as_str()).collect();
        assert_eq!(
            order,
            ["cn001", "cn002", "aa-headnode", "cn003", "cn004", "cn005"]
        );
        assert_eq!(
            (r.concurrency, r.budget, r.max_per_rack),
            (3, Some(1), Some(1))
        );
        // Only the headnode: no canary wave at all.
        let catalog = Catalog::builtin();
        let only = reality(1);
        let hn = only.servers.values().next().unwrap();
        let mut b = PlanBuilder::new(Operation::Update, &catalog, Intent::none());
        let c = catalog.get("vm-agent").unwrap();
        b.step(
            hn,
            true,
            c,
            upgrade(&hn.components["vm-agent"]),
            TransportKind::Execute,
        );
        let p = b.finish(&policy);
        assert!(p.rollout().canaries().is_empty());
        assert_eq!(p.rollout().len(), 1);
    }

    #[test]
    fn default_canary_when_more_than_twenty_servers() {
        let policy = RolloutPolicy {
            canary: None,
            ..RolloutPolicy::default()
        };
        assert!(build(true, &policy).rollout().canaries().is_empty());
        let catalog = Catalog::builtin();
        let r = reality(22);
        let mut b = PlanBuilder::new(Operation::Update, &catalog, Intent::none());
        let c = catalog.get("vm-agent").unwrap();
        for s in r.servers.values() {
            b.step(
                s,
                false,
                c,
                upgrade(&s.components["vm-agent"]),
                TransportKind::InstallAgent,
            );
        }
        let p = b.finish(&policy);
        assert_eq!(p.rollout().canaries().len(), 1);
        assert_eq!(p.rollout().waves.len(), 2);
        assert!(
            p.servers()
                .values()
                .flat_map(|sp| &sp.steps)
                .all(|st| st.gate == Gate::ServerAgents)
        );
    }

    /// Each server gets a vm-agent upgrade; `durations` as history.
    fn build_timed(n: usize, policy: &RolloutPolicy, durations: Option<&Durations>) -> Plan {
        let catalog = Catalog::builtin();
        let r = reality(n);
        let mut b = PlanBuilder::new(Operation::Update, &catalog, Intent::none());
        let c = catalog.get("vm-agent").unwrap();
        for s in r.servers.values() {
            let action = upgrade(&s.components["vm-agent"]);
            b.step(s, true, c, action, TransportKind::InstallAgent);
        }
        b.durations(durations);
        b.finish(policy)
    }

    /// Issue 35: `agentsadm plan` counts the gates that overlap. Three
    /// servers one at a time, each updating config-agent, vm-agent,
    /// net-agent and cn-agent through cn-agent with `gz health` gates;
    /// history says each step took 11 s, 10 s of it the gate. Gates one
    /// after the other: 3 batches x 11 s per server, 99 s. Overlapped
    /// (the executor's way): 3 installs of 1 s, then the last gate, 13 s
    /// per server, 39 s.
    #[test]
    fn the_expected_finish_counts_the_gates_that_overlap() {
        let catalog = Catalog::builtin();
        let r = reality(4);
        let policy = RolloutPolicy {
            concurrency: 1,
            canary: Some(0),
            max_failures: None,
            max_per_rack: None,
        };
        let components = ["config-agent", "vm-agent", "net-agent", "cn-agent"];
        let samples: Vec<crate::timing::Sample> = r
            .servers
            .keys()
            .flat_map(|server| {
                components.iter().map(|c| crate::timing::Sample {
                    server: *server,
                    component: (*c).into(),
                    elapsed: std::time::Duration::from_secs(11),
                    outcome: crate::timing::SampleOutcome::Completed,
                })
            })
            .collect();
        let plan = |durations: &Durations| {
            let mut b = PlanBuilder::new(Operation::Update, &catalog, Intent::none());
            for s in r.servers.values().filter(|s| !s.headnode) {
                for c in components {
                    let action = upgrade(&s.components["vm-agent"]);
                    let c = catalog.get(c).unwrap();
                    b.step(s, true, c, action, TransportKind::InstallAgent);
                }
            }
            b.durations(Some(durations));
            b.finish(&policy)
        };
        let serial = plan(&Durations::from_samples(samples.clone()));
        let gates = components
            .iter()
            .map(|c| ((*c).to_string(), std::time::Duration::from_secs(10)));
        let overlapped = plan(&Durations::from_samples(samples).with_gates(gates));
        assert!(
            overlapped
                .servers()
                .values()
                .flat_map(|sp| &sp.steps)
                .all(|st| st.gate == Gate::GzHealth)
        );
        let finish = |p: &Plan| p.rollout().expected_finish.map(|d| d.as_secs());
        assert_eq!(finish(&serial), Some(99));
        assert_eq!(finish(&overlapped), Some(39));
        let line = |p: &Plan| {
            crate::display::rollout_lines(p.rollout(), 10)
                .into_iter()
                .find(|l| l.contains("expected finish"))
                .unwrap()
        };
        assert_eq!(
            line(&overlapped),
            "  expected finish: about 39s after the start (from the recorded installs of all 3 servers; longest expected first)"
        );
        assert_eq!(
            line(&serial),
            "  expected finish: about 1m39s after the start (from the recorded installs of all 3 servers; longest expected first)"
        );
    }

    fn history(secs: &[(usize, u64)]) -> Durations {
        Durations::from_samples(secs.iter().map(|&(i, s)| crate::timing::Sample {
            server: format!("5e000000-0000-4000-8000-{i:012}").parse().unwrap(),
            component: "vm-agent".into(),
            elapsed: std::time::Duration::from_secs(s),
            outcome: crate::timing::SampleOutcome::Completed,
        }))
    }

    #[test]
    fn a_server_whose_last_step_failed_is_passed_over_as_canary_and_the_plan_says_so() {
        use crate::timing::{Sample, SampleOutcome};
        let policy = RolloutPolicy {
            concurrency: 2,
            canary: Some(1),
            max_failures: None,
            max_per_rack: None,
        };
        let server = |i: usize| -> ServerUuid {
            format!("5e000000-0000-4000-8000-{i:012}").parse().unwrap()
        };
        let sample = |i: usize, secs: u64, outcome| Sample {
            server: server(i),
            component: "vm-agent".into(),
            elapsed: std::time::Duration::from_secs(secs),
            outcome,
        };
        // cn004 was the quickest, then failed at once: passed over; cn001,
        // next quickest, is the canary.
        let d = Durations::from_samples([
            sample(1, 10, SampleOutcome::Completed),
            sample(2, 30, SampleOutcome::Completed),
            sample(3, 30, SampleOutcome::Completed),
            sample(4, 2, SampleOutcome::Completed),
            sample(4, 0, SampleOutcome::Failed),
        ]);
        let p = build_timed(5, &policy, Some(&d));
        let r = p.rollout();
        let canaries: Vec<&str> = r.canaries().iter().map(|s| s.hostname.as_str()).collect();
        assert_eq!(canaries, ["cn001"]);
        let choice = r.canary_choice.as_ref().unwrap();
        assert_eq!(choice.basis, crate::CanaryBasis::Quickest);
        assert_eq!(choice.passed_over.len(), 1);
        assert_eq!(choice.passed_over[0].hostname, "cn004");
        let text = crate::display::rollout_lines(r, 10).join("\n");
        assert!(
            text.contains("canary: cn001 (must pass before the others start; chosen as the quickest by their completed installs; passed over: cn004 (its last vm-agent step failed))"),
            "{text}"
        );
        // Failures alone (no completed install on record): by hostname,
        // still passing the failed server over.
        let d = Durations::from_samples([sample(1, 0, SampleOutcome::Failed)]);
        let p = build_timed(3, &policy, Some(&d));
        let r = p.rollout();
        assert_eq!(r.canaries()[0].hostname, "cn002");
        assert_eq!(
            r.canary_choice.as_ref().unwrap().basis,
            crate::CanaryBasis::Hostname
        );
        // Every candidate failed last time: one of them anyway, and said.
        let d = Durations::from_samples((1..=3).map(|i| sample(i, 0, SampleOutcome::Failed)));
        let p = build_timed(3, &policy, Some(&d));
        let r = p.rollout();
        assert_eq!(r.canaries()[0].hostname, "cn001");
        assert_eq!(
            r.canary_choice.as_ref().unwrap().basis,
            crate::CanaryBasis::OnlyFailed
        );
    }

    #[test]
    fn with_history_the_longest_start_first_and_the_quickest_is_the_canary() {
        let policy = RolloutPolicy {
            concurrency: 2,
            canary: Some(1),
            max_failures: None,
            max_per_rack: None,
        };
        // cn003 is slow every time; cn005 was never seen (counts as the
        // typical server: the median, 25 s); cn004 is the quickest.
        let d = history(&[(0, 30), (1, 20), (2, 25), (3, 90), (4, 5)]);
        let p = build_timed(6, &policy, Some(&d));
        let r = p.rollout();
        let hosts = |w: &crate::Wave| -> Vec<String> {
            w.servers.iter().map(|s| s.hostname.clone()).collect()
        };
        assert_eq!(hosts(&r.waves[0]), ["cn004"]);
        assert_eq!(
            hosts(&r.waves[1]),
            ["cn003", "aa-headnode", "cn002", "cn005", "cn001"]
        );
        // Canary 5 s; then two at a time: cn003 (90) beside aa-headnode
        // (30), cn002 (25), cn005 (25) and cn001 (20): 5 + 100.
        assert_eq!(r.expected_finish, Some(std::time::Duration::from_secs(105)));
        assert_eq!(r.history_servers, 5);
        let cn005 = r.order().find(|s| s.hostname == "cn005").unwrap();
        assert_eq!(cn005.expected, Some(std::time::Duration::from_secs(25)));
        assert_eq!(cn005.usual, None);
        let text = crate::display::rollout_lines(r, 10).join("\n");
        assert!(
            text.contains(
                "expected finish: about 1m45s after the start (from the recorded installs of 5 of 6 servers, the catalog's expected times for the rest"
            ),
            "{text}"
        );
        // The same plan without history: by hostname, no estimate.
        let plain = build_timed(6, &policy, None);
        assert_eq!(plain.rollout().expected_finish, None);
        assert_eq!(hosts(&plain.rollout().waves[0]), ["cn001"]);
        assert!(plain.rollout().order().all(|s| s.expected.is_none()));
        let json = serde_json::to_string(plain.rollout()).unwrap();
        assert!(!json.contains("expected"), "{json}");
    }

    #[test]
    fn the_expected_finish_follows_the_rack_limit() {
        // Racks alternate (rack-0: even, rack-1: odd); one per rack at
        // once, four slots: never more than two running.
        let policy = RolloutPolicy {
            concurrency: 4,
            canary: Some(0),
            max_failures: None,
            max_per_rack: Some(1),
        };
        let d = history(&[(0, 10), (1, 10), (2, 10), (3, 10)]);
        let p = build_timed(4, &policy, Some(&d));
        assert_eq!(
            p.rollout().expected_finish,
            Some(std::time::Duration::from_secs(20))
        );
    }
}
