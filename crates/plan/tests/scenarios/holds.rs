//! Holds (issue 25) as a rule of the planner: a held component stays where
//! it is in every bulk plan, with a skip saying who held it, when and why;
//! naming a held server refuses (blocking) unless `--ignore-holds`, which
//! needs an explicit yes; a datacenter-wide hold keeps the service default.

use serde_json::json;

use crate::snapshot::snapshot;
use agentsadm_plan::example::{ExampleDc, instance_uuid, request, service_uuid};
use agentsadm_plan::{
    HoldScope, Operation, Plan, PlanningInput, ResolvedImages, SkipReason, TransportMode, plan,
};
use agentsadm_types::sapi::object;

fn hold(reason: &str) -> serde_json::Value {
    json!({"by": "alice", "at": "2026-11-26T09:00:00Z", "reason": reason})
}

fn plan_of(
    dc: &ExampleDc,
    req: &agentsadm_plan::Request,
    images: &ResolvedImages,
    ignore: bool,
) -> Plan {
    let (intent, reality) = (dc.intent(), dc.reality());
    let mut options: agentsadm_plan::PlanOptions = TransportMode::Auto.into();
    options.ignore_holds = ignore;
    plan(&PlanningInput {
        catalog: &dc.catalog,
        intent: &intent,
        reality: &reality,
        request: req,
        options,
        images,
        durations: None,
    })
    .expect("plan")
}

/// vm-agent held on cn001 and cn002, 1.1.0 published.
fn held_dc() -> (ExampleDc, ResolvedImages) {
    let mut dc = ExampleDc::new(3);
    for host in ["cn001", "cn002"] {
        let s = dc.server_named(host);
        assert!(dc.sapi_merge_params(
            instance_uuid(s, "vm-agent"),
            object([("agentsadm_hold", hold("support case 4711"))]),
        ));
    }
    let target = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    (dc, images)
}

#[test]
fn bulk_update_skips_held_servers_with_who_when_why() {
    let (dc, images) = held_dc();
    let p = plan_of(
        &dc,
        &request(Operation::Update, &["--all"], &[]),
        &images,
        false,
    );
    let held: Vec<_> = p
        .skips()
        .iter()
        .filter(|s| matches!(s.reason, SkipReason::Held { .. }))
        .collect();
    assert_eq!(held.len(), 2, "{:?}", p.skips());
    for s in &held {
        assert!(!s.blocking);
        assert!(!p.servers().contains_key(&s.server.unwrap()));
    }
    // The others move; the service default too (the hold is per server).
    assert_eq!(p.servers().len(), 2);
    assert_eq!(p.service_changes().len(), 1);
    assert!(!p.has_blocking_skips());
    snapshot!("update_with_holds", &p.display().to_string());
    // The JSON (and so the run log) carries the hold.
    snapshot!(
        "update_with_holds_json",
        serde_json::to_string_pretty(&p).unwrap()
    );
}

#[test]
fn naming_a_held_server_refuses_unless_ignore_holds() {
    let (dc, images) = held_dc();
    let req = request(Operation::Update, &["vm-agent"], &["cn001", "cn003"]);
    let p = plan_of(&dc, &req, &images, false);
    let cn1 = dc.server_named("cn001");
    assert!(!p.servers().contains_key(&cn1));
    assert!(p.servers().contains_key(&dc.server_named("cn003")));
    let s = p.skips().iter().find(|s| s.server == Some(cn1)).unwrap();
    assert!(s.blocking);
    snapshot!("hold_named_refused", p.display().to_string());
    assert!(!p.needs_explicit_yes());

    let p = plan_of(&dc, &req, &images, true);
    assert!(p.servers().contains_key(&cn1));
    assert!(p.skips().is_empty(), "{:?}", p.skips());
    assert!(p.needs_explicit_yes());
    // The reason is the hold, never marlin-agent's (it is not in the plan).
    assert_eq!(
        p.explicit_yes().iter().copied().collect::<Vec<_>>(),
        [agentsadm_plan::ExplicitYes::OverridesHolds]
    );
    snapshot!("hold_ignored", p.display().to_string());
}

#[test]
fn a_datacenter_wide_hold_keeps_servers_and_the_service_default() {
    let mut dc = ExampleDc::new(2);
    let svc = dc
        .services
        .iter_mut()
        .find(|s| s.uuid == service_uuid("vm-agent"))
        .unwrap();
    svc.params
        .get_or_insert_with(Default::default)
        .insert("agentsadm_hold".into(), hold("canary kept back"));
    let target = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let p = plan_of(
        &dc,
        &request(Operation::Update, &["--all"], &[]),
        &images,
        false,
    );
    assert!(
        p.servers()
            .values()
            .all(|sp| sp.steps.iter().all(|s| s.component != "vm-agent"))
    );
    assert!(
        p.service_changes()
            .iter()
            .all(|c| c.component != "vm-agent")
    );
    assert!(p.skips().iter().any(|s| matches!(
        &s.reason,
        SkipReason::Held { scope: HoldScope::Datacenter, hold, .. } if hold.reason.as_deref() == Some("canary kept back")
    ) && s.server.is_none()));
    // A server added later gets the service's hold too.
    dc.add_server("cn009", false);
    let p = plan_of(
        &dc,
        &request(Operation::Update, &["--all"], &[]),
        &images,
        false,
    );
    assert!(
        p.servers()
            .values()
            .all(|sp| sp.steps.iter().all(|s| s.component != "vm-agent"))
    );
}
