//! An empty or half-set-up datacenter (issue 15): the plan leads with the
//! real cause (`11 servers are not set up`, components never adopted into
//! SAPI) instead of a long list of skips. Pure (planner and display).

use agentsadm_plan::Operation;

use agentsadm_plan::PlanningInput;

use agentsadm_plan::TransportMode;

use agentsadm_plan::example::ExampleDc;
use agentsadm_plan::example::request;
use agentsadm_plan::plan;

use crate::snapshot::snapshot;

#[test]
fn a_half_set_up_datacenter_leads_with_the_cause() {
    // A headnode and 11 CNs, none of the CNs set up yet, and no agent but
    // vm-agent adopted into SAPI.
    let mut dc = ExampleDc::new(11);
    for i in 1..=11 {
        let cn = dc.server_named(&format!("cn{i:03}"));
        dc.set_setup(cn, false);
    }
    let names: Vec<String> = dc.catalog.names().map(ToString::to_string).collect();
    for n in names.iter().filter(|n| *n != "vm-agent") {
        dc.unmanage(n);
    }
    let target = dc.publish("vm-agent", "2.0.0");
    let images = dc.images_with_targets(&[target]);
    let (intent, reality) = (dc.intent(), dc.reality());
    let p = plan(&PlanningInput {
        catalog: &dc.catalog,
        intent: &intent,
        reality: &reality,
        request: &request(Operation::Update, &["--all"], &[]),
        options: TransportMode::Auto.into(),
        images: &images,
        durations: None,
    })
    .expect("plan");
    // The cause first (11 servers not set up, the components never
    // adopted, one line each), then one skip line each for the unmanaged
    // components and the servers not set up (no line for a component no
    // selected server runs).
    snapshot!("plan_half_set_up", p.display_compact(20).to_string());
}

#[test]
fn a_set_up_datacenter_has_no_cause_lines() {
    let mut dc = ExampleDc::new(2);
    let target = dc.publish("vm-agent", "2.0.0");
    let images = dc.images_with_targets(&[target]);
    let (intent, reality) = (dc.intent(), dc.reality());
    let p = plan(&PlanningInput {
        catalog: &dc.catalog,
        intent: &intent,
        reality: &reality,
        request: &request(Operation::Update, &["vm-agent"], &[]),
        options: TransportMode::Auto.into(),
        images: &images,
        durations: None,
    })
    .expect("plan");
    let text = p.display_compact(20).to_string();
    assert!(!text.contains("not set up"), "{text}");
    assert!(!text.contains("have no SAPI service"), "{text}");
}
