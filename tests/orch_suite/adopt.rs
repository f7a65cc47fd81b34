//! Adoption planning on the example datacenter (pure): what is created,
//! completed, skipped, and what is left alone.

use agentsadm_orchestrate::adopt::NewService;
use agentsadm_orchestrate::adopt::plan_adoption;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::image_uuid;
use agentsadm_sim::testkit::instance_uuid;
use agentsadm_types::ids::ServerUuid;

#[test]
fn adopts_what_is_missing_and_leaves_pending_updates_alone() {
    let mut dc = ExampleDc::new(2);
    let hn = dc.server_named("headnode");
    let (cn1, cn2) = (dc.server_named("cn001"), dc.server_named("cn002"));
    dc.unmanage("vm-agent");
    dc.set_service_default("net-agent", None);
    dc.make_legacy(cn1, "cmon-agent");
    dc.drop_instance(cn2, "smartlogin");
    // A pending update: params complete, image differs from installed.
    let newer = dc.publish("amon-agent", "2.0.0").uuid;
    dc.sapi_merge_params(
        instance_uuid(cn1, "amon-agent"),
        instance_params(cn1, newer),
    );
    // No instance UUID reported.
    let img = image_uuid("hagfish-watcher", "1.0.0");
    dc.set_installed(cn2, "hagfish-watcher", img, None);

    let plan = plan_adoption(&dc.catalog, &dc.intent(), &dc.reality(), None);
    assert_eq!(
        plan.new_services,
        vec![NewService {
            component: "vm-agent".parse().unwrap(),
            default_image: Some(image_uuid("vm-agent", "1.0.0"))
        }]
    );
    assert_eq!(plan.service_defaults.len(), 1);
    assert_eq!(plan.service_defaults[0].component, "net-agent");
    let adopted: Vec<(ServerUuid, &str, bool)> = plan
        .instances
        .iter()
        .map(|i| (i.server, i.component.as_str(), i.exists))
        .collect();
    assert!(adopted.contains(&(cn1, "cmon-agent", true)));
    assert!(adopted.contains(&(cn2, "smartlogin", false)));
    assert!(adopted.contains(&(hn, "vm-agent", false)));
    assert!(!adopted.iter().any(|(_, c, _)| *c == "amon-agent"));
    assert_eq!(plan.skips.len(), 1);
    assert!(plan.skips[0].reason.contains("no instance UUID"));
    // Three vm-agent instances (all servers) + cmon + smartlogin.
    assert_eq!(plan.instances.len(), 5);

    let only_cn2 = plan_adoption(&dc.catalog, &dc.intent(), &dc.reality(), Some(&[cn2]));
    assert!(only_cn2.instances.iter().all(|i| i.server == cn2));
    assert_eq!(
        only_cn2.new_services.len(),
        1,
        "services are datacenter-wide"
    );
}
