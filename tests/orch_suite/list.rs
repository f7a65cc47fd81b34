//! `agentsadm list`'s rows and summary on the example datacenter (pure).

use agentsadm_cli::orch::ListSummaryRow;

use agentsadm_cli::orch::list_rows;

use agentsadm_cli::orch::list_summary;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::instance_uuid;
use agentsadm_types::ids::ServerUuid;
use std::collections::BTreeMap;

use agentsadm_flows::drift;
use agentsadm_flows::drift::DriftInput;
use agentsadm_plan::ImageRef;
use agentsadm_sim::testkit::image_ref;
use agentsadm_types::ids::ImageUuid;

#[test]
fn list_states() {
    let mut dc = ExampleDc::new(1);
    let cn1 = dc.server_named("cn001");
    let newer = dc.publish("vm-agent", "2.0.0").uuid;
    dc.set_service_default("vm-agent", Some(newer));
    dc.sapi_merge_params(instance_uuid(cn1, "vm-agent"), instance_params(cn1, newer));
    dc.drop_instance(cn1, "net-agent");
    dc.remove_installed(cn1, "cmon-agent");
    let rows = list_rows(&dc.intent(), &dc.reality(), &[cn1], &[]);
    let state = |c: &str| rows.iter().find(|r| r.component == c).map(|r| r.state);
    assert_eq!(state("vm-agent"), Some("wrong-image"));
    assert_eq!(state("net-agent"), Some("installed-without-instance"));
    assert_eq!(state("cmon-agent"), Some("missing-install"));
    assert_eq!(state("smartlogin"), Some("ok"));
    assert!(rows.iter().all(|r| r.server_status == "running"));

    // One vocabulary: every state but ok is the kind check reports for the
    // same server and component.
    let servers = dc.server_list();
    let instances = dc.instance_list();
    let images: BTreeMap<ImageUuid, ImageRef> =
        dc.images.values().map(|m| (m.uuid, image_ref(m))).collect();
    let (_, findings) = drift::find(&DriftInput {
        catalog: &dc.catalog,
        servers: &servers,
        services: &dc.services,
        instances: &instances,
        live: &BTreeMap::new(),
        images: &images,
        selection: None,
        changed_by_sdcadm: &BTreeMap::new(),
        written_by_agentsadm: &BTreeMap::new(),
    });
    for r in rows.iter().filter(|r| r.state != "ok") {
        let kinds: Vec<&str> = findings
            .iter()
            .filter(|f| f.server == Some(r.server) && f.component.as_deref() == Some(&r.component))
            .map(|f| f.kind.as_str())
            .collect();
        assert!(
            kinds.contains(&r.state),
            "{}: list says {}, check {kinds:?}",
            r.component,
            r.state
        );
    }
    let all: Vec<ServerUuid> = dc.reality().servers.keys().copied().collect();
    let rows = list_rows(&dc.intent(), &dc.reality(), &all, &[]);
    let summary = list_summary(&rows, &dc.intent());
    assert_eq!(
        summary.iter().map(|r| r.servers).sum::<usize>(),
        rows.len(),
        "every row is counted once"
    );
    let vm: Vec<&ListSummaryRow> = summary
        .iter()
        .filter(|r| r.component == "vm-agent")
        .collect();
    assert_eq!(vm.len(), 1, "one image of vm-agent installed");
    assert_eq!(vm[0].states.get("wrong-image"), Some(&1));
    assert_eq!(vm[0].states.get("ok"), Some(&(vm[0].servers - 1)));
}
