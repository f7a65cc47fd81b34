//! agentsadm first: no server is sent a command line its agentsadm cannot
//! parse. Every step states the oldest agentsadm that parses what it sends
//! ([`Step::needs_agentsadm`], from [`agentsadm_types::compat`]); a server
//! whose copy (as `server.agents` reports it) is missing, says no version,
//! or is older gets an agentsadm step first:
//!
//! - through the bootstrap ([`TransportKind::Bootstrap`]: a script that
//!   needs no agentsadm) when its copy cannot parse an execute install
//!   either, else through an ordinary execute install;
//! - to the datacenter's agentsadm ([`crate::ResolvedImages::agentsadm`]),
//!   with the components that need it (`agentsadm: cn0042 1.2.0 -> 1.4.0,
//!   needed by gz-tools`).
//!
//! A plan that already moves agentsadm on the server keeps its own step
//! (through the bootstrap when the copy there cannot parse the execute
//! install), and the other steps are judged against the version it
//! installs. When no agentsadm new enough can be had, a step that needs
//! one is left out with a blocking skip, except that a cn-agent task's
//! `gz health` gate falls back to `server.agents` (the install itself
//! needs no agentsadm), with a warning.

use std::collections::{BTreeMap, BTreeSet};

use agentsadm_types::catalog::{Catalog, Component, ComponentKind};
use agentsadm_types::compat::{self, GzUse};
use agentsadm_types::component::{ComponentName, ComponentVersion};
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::version::VersionKey;

use super::request::{ImageRef, TransportKind};
use super::skip::{AgentsadmShort, Skip, SkipReason};
use super::types::{Action, Gate, MinVersion, Plan, ServerPlan, Step};
use crate::reality::Installed;

/// The catalog's agentsadm, if it has one.
pub(crate) fn component(catalog: &Catalog) -> Option<&Component> {
    catalog.iter().find(|c| c.kind == ComponentKind::Agentsadm)
}

/// A server's agentsadm, as far as the plan can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Copy {
    None,
    /// Present, version not reported (parses only the baseline).
    Unknown,
    Version(VersionKey),
}

impl Copy {
    fn of(installed: Option<&Installed>) -> Copy {
        match installed {
            None => Copy::None,
            Some(i) => match VersionKey::of(&i.version) {
                Some(k) => Copy::Version(k),
                None => Copy::Unknown,
            },
        }
    }

    fn parses(&self, min: &semver::Version) -> bool {
        match self {
            Copy::None => false,
            Copy::Unknown => compat::parses(None, min),
            Copy::Version(k) => compat::parses(Some(k), min),
        }
    }

    fn describe(&self, installed: Option<&Installed>) -> String {
        match (self, installed) {
            (Copy::None, _) => "none".to_string(),
            (Copy::Unknown, _) => "version unknown".to_string(),
            (Copy::Version(_), Some(i)) => i.version.to_string(),
            (Copy::Version(k), None) => k.to_string(),
        }
    }
}

/// What the rule needs beyond the plan: the catalog's agentsadm, the image
/// to give servers, each server's copy and whether execute reaches it.
pub(crate) struct Supply<'a> {
    pub component: &'a Component,
    pub target: Option<&'a ImageRef>,
    pub copies: &'a BTreeMap<ServerUuid, Option<Installed>>,
    pub execute: &'a BTreeMap<ServerUuid, bool>,
}

/// Set every step's need, and put agentsadm first where it must be (module
/// docs). Returns the skips of the steps left out and the servers whose
/// health gates fell back to `server.agents`.
pub(crate) fn first(plan: &mut Plan, supply: &Supply<'_>) -> (Vec<Skip>, Vec<String>) {
    let mut skips = Vec::new();
    let mut ungated: BTreeSet<String> = BTreeSet::new();
    for (uuid, sp) in plan.servers.iter_mut() {
        for st in &mut sp.steps {
            // An install that keeps a disabled component off sends `gz
            // disable` too.
            st.needs_agentsadm = st
                .gz_use()
                .into_iter()
                .chain(st.keep_off.as_ref().map(|_| GzUse::Switch))
                .map(|u| u.needs())
                .max()
                .map(MinVersion);
        }
        let installed = supply.copies.get(uuid).and_then(Option::as_ref);
        let execute = supply.execute.get(uuid).copied().unwrap_or(false);
        let unmet = server(sp, supply, installed, execute);
        sp.execute_together = execute
            && runs_the_steps(sp, supply, installed).parses(&GzUse::InstallTogether.needs());
        if unmet.is_empty() {
            continue;
        }
        let have = Copy::of(installed).describe(installed);
        let mut dropped: BTreeSet<ComponentName> = BTreeSet::new();
        sp.steps.retain_mut(|st| {
            let Some(need) = st
                .needs_agentsadm
                .clone()
                .filter(|_| unmet.contains(&st.component))
            else {
                return true;
            };
            if st.transport == TransportKind::InstallAgent
                && st.gate == Gate::GzHealth
                && st.keep_off.is_none()
            {
                st.gate = Gate::ServerAgents;
                st.needs_agentsadm = None;
                ungated.insert(sp.hostname.clone());
                return true;
            }
            skips.push(Skip {
                server: Some(*uuid),
                hostname: Some(sp.hostname.clone()),
                component: Some(st.component.clone()),
                reason: SkipReason::AgentsadmTooOld(Box::new(AgentsadmShort {
                    have: have.clone(),
                    need: need.to_string(),
                })),
                blocking: true,
            });
            dropped.insert(st.component.clone());
            false
        });
        // Their SAPI writes go with them: intent must not claim a build
        // the server never got.
        sp.intent.retain(|c| !dropped.contains(c.component()));
    }
    (skips, ungated.into_iter().collect())
}

/// The copy that runs a server's steps after the plan's own agentsadm step
/// (the one it installs; none after a removal), else the one there now.
fn runs_the_steps(sp: &ServerPlan, supply: &Supply<'_>, installed: Option<&Installed>) -> Copy {
    match sp
        .steps
        .iter()
        .find(|st| st.component == supply.component.name)
    {
        Some(own) => match own.action.target() {
            Some(t) => Copy::of(Some(&Installed {
                version: ComponentVersion::reported(&t.version).unwrap_or_default(),
                image: Some(t.uuid),
                instance: None,
            })),
            None => Copy::None,
        },
        None => Copy::of(installed),
    }
}

/// One server: fix the transport of the plan's own agentsadm step, or add
/// one. Returns the components whose steps still cannot be parsed there.
fn server(
    sp: &mut ServerPlan,
    supply: &Supply<'_>,
    installed: Option<&Installed>,
    execute: bool,
) -> BTreeSet<ComponentName> {
    let name = &supply.component.name;
    let copy = Copy::of(installed);
    let install_needs = GzUse::Install.needs();
    // The copy that runs the other steps: the one the plan's agentsadm step
    // installs, else the one there now.
    let after = match sp.steps.iter_mut().find(|st| st.component == *name) {
        Some(own) => {
            if own.transport == TransportKind::Execute
                && !matches!(own.action, Action::Remove { .. })
                && !copy.parses(&install_needs)
            {
                own.transport = TransportKind::Bootstrap;
                own.needs_agentsadm = None;
            }
            match own.action.target() {
                Some(t) => Copy::of(Some(&Installed {
                    version: ComponentVersion::reported(&t.version).unwrap_or_default(),
                    image: Some(t.uuid),
                    instance: None,
                })),
                None => Copy::None,
            }
        }
        None => copy.clone(),
    };
    let wanting = |after: &Copy| -> Vec<(&ComponentName, &MinVersion)> {
        sp.steps
            .iter()
            .filter(|st| st.component != *name)
            .filter_map(|st| st.needs_agentsadm.as_ref().map(|n| (&st.component, n)))
            .filter(|(_, n)| !after.parses(&n.0))
            .collect()
    };
    let wanted = wanting(&after);
    if wanted.is_empty() {
        return BTreeSet::new();
    }
    let names: BTreeSet<ComponentName> = wanted.iter().map(|(c, _)| (*c).clone()).collect();
    let has_own = sp.steps.iter().any(|st| st.component == *name);
    let Some(target) = supply.target.filter(|_| execute && !has_own) else {
        return names;
    };
    let new = Copy::of(Some(&Installed {
        version: ComponentVersion::reported(&target.version).unwrap_or_default(),
        image: Some(target.uuid),
        instance: None,
    }));
    if !wanting(&new).is_empty() {
        return names;
    }
    let (action, transport) = match installed {
        None => (
            Action::Install { to: target.clone() },
            TransportKind::Bootstrap,
        ),
        Some(i) => (
            Action::Upgrade {
                from: i.into(),
                to: target.clone(),
            },
            if copy.parses(&install_needs) {
                TransportKind::Execute
            } else {
                TransportKind::Bootstrap
            },
        ),
    };
    let step = Step {
        component: name.clone(),
        order: supply.component.order,
        gate: Gate::Installer,
        needs_agentsadm: (transport == TransportKind::Execute).then(|| MinVersion(install_needs)),
        needed_by: names.into_iter().collect(),
        // agentsadm itself has no services to keep off.
        keep_off: None,
        record: None,
        action,
        transport,
    };
    sp.steps.insert(0, step);
    BTreeSet::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reality::Reality;
    use crate::{Operation, PlanBuilder, RolloutPolicy};
    use agentsadm_types::cnapi::Server;
    use agentsadm_types::ids::ImageUuid;
    use serde_json::json;

    fn image(n: u128, name: &str, version: &str) -> ImageRef {
        ImageRef {
            uuid: ImageUuid::from_u128(n),
            name: name.into(),
            version: version.into(),
            import_from: None,
        }
    }

    /// cn1: agentsadm 0.1.0 (current enough); cn2: 0.0.9 (versioned, too
    /// old); cn3: a copy that says no version; cn4: none.
    fn reality() -> Reality {
        let agentsadm = |v: Option<&str>| match v {
            Some(v) => {
                json!([{"name": "agentsadm", "version": v, "image_uuid": ImageUuid::from_u128(90)},
                              {"name": "gz-tools", "version": "1.0.0", "image_uuid": ImageUuid::from_u128(80)},
                              {"name": "vm-agent", "version": "1.0.0", "image_uuid": ImageUuid::from_u128(70)}])
            }
            None => {
                json!([{"name": "gz-tools", "version": "1.0.0", "image_uuid": ImageUuid::from_u128(80)},
                           {"name": "vm-agent", "version": "1.0.0", "image_uuid": ImageUuid::from_u128(70)}])
            }
        };
        let servers: Vec<Server> = [
            Some("0.1.0-master-20261126T072930Z-g3df32ef"),
            Some("0.0.9-master-20261101T000000Z-g0000000"),
            Some(""),
            None,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(json!({
                "uuid": format!("5e000000-0000-4000-8000-{:012}", i + 1),
                "hostname": format!("cn{}", i + 1),
                "setup": true, "status": "running",
                "agents": agentsadm(v),
            }))
            .unwrap()
        })
        .collect();
        Reality::from_servers(&Catalog::builtin(), &servers)
    }

    fn plan(component: &str, transport: TransportKind, target: Option<ImageRef>) -> Plan {
        let catalog = Catalog::builtin();
        let r = reality();
        let mut b = PlanBuilder::new(Operation::Update, &catalog, crate::intent::Intent::none());
        b.agentsadm(target);
        let c = catalog.get(component).unwrap();
        for s in r.servers.values() {
            let Some(installed) = s.components.get(component) else {
                continue;
            };
            let action = Action::Upgrade {
                from: installed.into(),
                to: image(2, component, "2.0.0"),
            };
            b.step(s, true, c, action, transport);
        }
        b.finish(&RolloutPolicy::default())
    }

    fn first_step(p: &Plan, host: &str) -> (String, TransportKind, Vec<String>) {
        let sp = p.servers().values().find(|s| s.hostname == host).unwrap();
        let st = &sp.steps[0];
        (
            st.component.to_string(),
            st.transport,
            st.needed_by.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn old_unknown_and_missing_copies_get_agentsadm_first() {
        let target = image(91, "agentsadm", "0.2.0-master-20261201T000000Z-g1111111");
        let p = plan("gz-tools", TransportKind::Execute, Some(target));
        let needed = vec!["gz-tools".to_string()];
        // Current enough: nothing added.
        assert_eq!(
            p.servers()
                .values()
                .find(|s| s.hostname == "cn1")
                .unwrap()
                .steps
                .len(),
            1
        );
        // Too old, unknown, missing: none can parse an execute install, so
        // all go through the bootstrap.
        for host in ["cn2", "cn3", "cn4"] {
            assert_eq!(
                first_step(&p, host),
                ("agentsadm".into(), TransportKind::Bootstrap, needed.clone()),
                "{host}"
            );
        }
        let cn4 = p.servers().values().find(|s| s.hostname == "cn4").unwrap();
        assert!(matches!(cn4.steps[0].action, Action::Install { .. }));
        assert_eq!(cn4.steps[0].needs_agentsadm, None);
        assert_eq!(
            cn4.steps[1].needs_agentsadm,
            Some(MinVersion(compat::FIRST_VERSIONED))
        );
        assert!(p.skips().is_empty());
    }

    #[test]
    fn the_plan_shows_each_agentsadm_step_and_what_needs_it() {
        let to = "0.2.0-master-20261201T000000Z-g1111111";
        let p = plan(
            "gz-tools",
            TransportKind::Execute,
            Some(image(91, "agentsadm", to)),
        );
        let text = p.to_string();
        for line in [
            format!(
                "agentsadm: cn2 0.0.9-master-20261101T000000Z-g0000000 -> {to}, needed by gz-tools [bootstrap]"
            ),
            format!("agentsadm: cn3 (version unknown) -> {to}, needed by gz-tools [bootstrap]"),
            format!("agentsadm: cn4 (none) -> {to}, needed by gz-tools [bootstrap]"),
        ] {
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(!text.contains("agentsadm: cn1"), "{text}");
        let grouped = p.display_compact(1).to_string();
        assert!(
            grouped.contains(&format!(
                "agentsadm: cn2 0.0.9-master-20261101T000000Z-g0000000 -> {to}"
            )),
            "{grouped}"
        );
    }

    #[test]
    fn without_an_agentsadm_image_steps_are_left_out_or_ungated() {
        let p = plan("gz-tools", TransportKind::Execute, None);
        let hosts: Vec<&str> = p.servers().values().map(|s| s.hostname.as_str()).collect();
        assert_eq!(hosts, ["cn1"]);
        let skipped: Vec<(&str, &SkipReason)> = p
            .skips()
            .iter()
            .map(|s| (s.hostname.as_deref().unwrap(), &s.reason))
            .collect();
        assert_eq!(skipped.len(), 3);
        assert!(p.skips().iter().all(|s| s.blocking));
        assert!(
            matches!(skipped[2], ("cn4", SkipReason::AgentsadmTooOld(short)) if short.have == "none")
        );
        // A cn-agent task needs no agentsadm; only its health check does.
        let p = plan("vm-agent", TransportKind::InstallAgent, None);
        assert_eq!(p.servers().len(), 4);
        let gates: Vec<Gate> = p.servers().values().map(|s| s.steps[0].gate).collect();
        assert_eq!(
            gates,
            [
                Gate::GzHealth,
                Gate::ServerAgents,
                Gate::ServerAgents,
                Gate::ServerAgents
            ]
        );
        assert_eq!(p.warnings().len(), 1, "{:?}", p.warnings());
        assert!(p.skips().is_empty());
    }

    #[test]
    fn a_target_too_old_for_the_steps_is_not_used() {
        let old = image(91, "agentsadm", "0.0.5");
        let p = plan("gz-tools", TransportKind::Execute, Some(old));
        assert_eq!(p.skips().len(), 3);
    }

    #[test]
    fn the_plans_own_agentsadm_step_goes_first_through_the_bootstrap_where_needed() {
        let p = plan("agentsadm", TransportKind::Execute, None);
        for (host, transport) in [
            ("cn1", TransportKind::Execute),
            ("cn2", TransportKind::Bootstrap),
            ("cn3", TransportKind::Bootstrap),
        ] {
            assert_eq!(
                first_step(&p, host),
                ("agentsadm".into(), transport, vec![]),
                "{host}"
            );
        }
    }
}
