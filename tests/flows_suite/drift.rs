//! The drift finder and the repair planner without I/O: every finding kind
//! on the example datacenter, the text (snapshot) of `agentsadm check`, the
//! JSON `kind` strings, and convergence (apply the repairs to the example
//! datacenter, find again: only informational findings remain).

use crate::snapshot::snapshot;
use std::collections::{BTreeMap, BTreeSet};

use agentsadm_api::cnapi::AgentEntry;
use agentsadm_api::remote::AgentsReport;
use agentsadm_flows::drift;
use agentsadm_flows::drift::DriftInput;
use agentsadm_flows::drift::Finding;
use agentsadm_flows::drift::FindingKind;
use agentsadm_flows::drift::Fix;
use agentsadm_flows::repair;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_plan::Action;
use agentsadm_plan::ImageRef;
use agentsadm_plan::IntentChange;
use agentsadm_plan::RecordChange;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::derived_uuid;
use agentsadm_sim::testkit::image_ref;
use agentsadm_sim::testkit::image_uuid;
use agentsadm_sim::testkit::instance_uuid;
use agentsadm_sim::testkit::server_uuid;
use agentsadm_sim::testkit::service_uuid;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

fn images(dc: &ExampleDc) -> BTreeMap<ImageUuid, ImageRef> {
    dc.images.values().map(|m| (m.uuid, image_ref(m))).collect()
}

fn find(
    dc: &ExampleDc,
    live: &BTreeMap<ServerUuid, AgentsReport>,
    selection: Option<&BTreeSet<ServerUuid>>,
) -> (drift::Survey, Vec<Finding>) {
    let servers = dc.server_list();
    let instances = dc.instance_list();
    let images = images(dc);
    drift::find(&DriftInput {
        catalog: &dc.catalog,
        servers: &servers,
        services: &dc.services,
        instances: &instances,
        live,
        images: &images,
        selection,
        changed_by_sdcadm: &BTreeMap::new(),
        written_by_agentsadm: &BTreeMap::new(),
    })
}

fn inst(seed: &str) -> InstanceUuid {
    InstanceUuid(derived_uuid(seed))
}

/// Every kind of drift at once.
fn drifted() -> (ExampleDc, BTreeMap<ServerUuid, AgentsReport>) {
    let mut dc = ExampleDc::new(4);
    let (cn1, cn2, cn4) = (
        dc.server_named("cn001"),
        dc.server_named("cn002"),
        dc.server_named("cn004"),
    );
    // cn001: a pending update (wrong image) and a missing install.
    let newer = dc.publish("vm-agent", "1.1.0").uuid;
    dc.sapi_merge_params(instance_uuid(cn1, "vm-agent"), instance_params(cn1, newer));
    dc.remove_installed(cn1, "cmon-agent");
    // cn002: installed without instance, legacy instance (no params, as
    // the vm-agent and net-agent postinstalls leave them: server.agents
    // links it, not drift), an instance with half its params, duplicate.
    dc.drop_instance(cn2, "smartlogin");
    dc.make_legacy(cn2, "net-agent");
    dc.sapi_put_instance(
        instance_uuid(cn2, "cmon-agent"),
        service_uuid("cmon-agent"),
        Some(agentsadm_api::sapi::object([(
            "server_uuid",
            serde_json::json!(cn2),
        )])),
    );
    dc.sapi_put_instance(
        inst("dup"),
        service_uuid("vm-agent"),
        Some(instance_params(cn2, image_uuid("vm-agent", "1.0.0"))),
    );
    // A server that is not set up, with an instance left over.
    let cn5 = dc.add_server("cn005", false);
    dc.set_setup(cn5, false);
    dc.sapi_put_instance(
        inst("reset"),
        service_uuid("vm-agent"),
        Some(instance_params(cn5, image_uuid("vm-agent", "1.0.0"))),
    );
    // Instances of a deleted server and of nobody.
    dc.sapi_put_instance(
        inst("deleted"),
        service_uuid("firewaller"),
        Some(instance_params(
            server_uuid(99),
            image_uuid("firewaller", "1.0.0"),
        )),
    );
    dc.sapi_put_instance(inst("orphan"), service_uuid("amon-agent"), None);
    // Service defaults: unset, and not in IMGAPI.
    dc.set_service_default("hagfish-watcher", None);
    dc.set_service_default("amon-relay", Some(image_uuid("amon-relay", "9.9.9")));
    // cn004: unmanaged marlin-agent and a foreign package.
    dc.install(cn4, "marlin-agent", "1.0.0");
    let cabase = dc.publish("cabase", "1.0.0").uuid;
    dc.set_installed(cn4, "cabase", cabase, None);
    // cn004's own report: it already runs a newer net-agent than CNAPI says.
    let newer_net = dc.publish("net-agent", "1.1.0").uuid;
    let mut agents: Vec<AgentEntry> = dc.servers[&cn4].agents.clone().unwrap_or_default();
    for a in agents.iter_mut().filter(|a| a.name == "net-agent") {
        a.image_uuid = Some(newer_net);
        a.version = "1.1.0".parse().unwrap();
    }
    // cn004: vm-agent disabled in SAPI but running there; smartlogin off
    // there without SAPI saying so (issue 25).
    dc.sapi_merge_params(
        instance_uuid(cn4, "vm-agent"),
        agentsadm_api::sapi::object([(
            "agentsadm_disabled",
            serde_json::json!({"by": "alice", "at": "t", "reason": "migration"}),
        )]),
    );
    let live = BTreeMap::from([(
        cn4,
        AgentsReport {
            server_uuid: cn4,
            agents,
            errors: Vec::new(),
            services_off: vec!["smartlogin".parse().unwrap()],
        },
    )]);
    (dc, live)
}

fn summary(findings: &[Finding]) -> Vec<(String, String, FindingKind, &'static str)> {
    findings
        .iter()
        .map(|f| {
            let action = match &f.fix {
                Fix::Install { .. } => "install",
                Fix::Upgrade { .. } => "upgrade",
                Fix::AdoptInstance { .. } => "adopt-instance",
                Fix::SetParams { .. } => "set-params",
                Fix::Restore { .. } => "restore",
                Fix::KeepMark { .. } => "keep-mark",
                Fix::DeleteInstance { .. } => "delete-instance",
                Fix::SetServiceDefault { .. } => "set-service-default",
                Fix::PostLiveReport => "post-live-report",
                Fix::Disable { .. } => "disable",
                Fix::Manual { .. } => "manual",
                Fix::None => "none",
            };
            (
                f.hostname.clone().unwrap_or_else(|| "-".into()),
                f.component.clone().unwrap_or_default(),
                f.kind,
                action,
            )
        })
        .collect()
}

#[test]
fn a_clean_datacenter_has_no_findings() {
    let dc = ExampleDc::new(3);
    let (_, findings) = find(&dc, &BTreeMap::new(), None);
    // marlin-agent is not installed anywhere by default: nothing at all.
    assert!(findings.is_empty(), "{findings:#?}");
    assert_eq!(
        drift::render(&findings, 4),
        "No drift found (4 servers checked).\n"
    );
}

#[test]
fn every_kind_is_found_with_its_fix() {
    let (dc, live) = drifted();
    let (_, findings) = find(&dc, &live, None);
    let got = summary(&findings);
    let k = |h: &str, c: &str, kind: FindingKind, a: &'static str| {
        (h.to_string(), c.to_string(), kind, a)
    };
    use FindingKind::*;
    let expected = vec![
        k(
            "-",
            "amon-relay",
            DefaultImageNotInImgapi,
            "set-service-default",
        ),
        k(
            "-",
            "hagfish-watcher",
            ServiceWithoutDefaultImage,
            "set-service-default",
        ),
        k("cn001", "cmon-agent", MissingInstall, "install"),
        k("cn001", "vm-agent", WrongImage, "upgrade"),
        k("cn002", "cmon-agent", InstanceWithoutParams, "set-params"),
        k(
            "cn002",
            "smartlogin",
            InstalledWithoutInstance,
            "adopt-instance",
        ),
        k("cn002", "vm-agent", DuplicateInstance, "delete-instance"),
        k("cn004", "cabase", UnmanagedComponent, "none"),
        k("cn004", "marlin-agent", UnmanagedComponent, "none"),
        k("cn004", "net-agent", WrongImage, "upgrade"),
        k("cn004", "net-agent", StaleCnapiReport, "post-live-report"),
        k("cn004", "smartlogin", DisabledWithoutIntent, "manual"),
        k("cn004", "vm-agent", RunningWhereDisabled, "disable"),
        // Its disabled mark, written straight into the instance, has no
        // second copy on the service.
        k("cn004", "vm-agent", MarkKeptOnce, "keep-mark"),
        k(
            "cn005",
            "vm-agent",
            InstanceForUnsetupServer,
            "delete-instance",
        ),
        k(
            "-",
            "firewaller",
            InstanceForMissingServer,
            "delete-instance",
        ),
        k(
            "-",
            "amon-agent",
            InstanceForMissingServer,
            "delete-instance",
        ),
    ];
    // Datacenter-wide ones first; orphans by server UUID (none sorts first).
    let mut sorted_expected = expected.clone();
    sorted_expected.sort();
    let mut sorted_got = got.clone();
    sorted_got.sort();
    assert_eq!(sorted_got, sorted_expected, "{got:#?}");
    // Every kind appears in this scenario, but the two about servers'
    // reports that contradict SAPI or themselves (flows_suite records),
    // and instance-params-erased, which needs the run history
    // (a_bare_instance_is_drift_only_where_agentsadm_recorded_more).
    let kinds: BTreeSet<FindingKind> = findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds.len(), FindingKind::ALL.len() - 3);
    assert!(drift::has_drift(&findings));

    snapshot!("flows_check", drift::render(&findings, 6));

    // The JSON kind strings are stable.
    let json = serde_json::to_value(&findings).unwrap();
    let kinds: BTreeSet<String> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect();
    let expected: BTreeSet<String> = [
        "missing-install",
        "wrong-image",
        "installed-without-instance",
        "instance-for-missing-server",
        "instance-for-unsetup-server",
        "instance-without-params",
        "duplicate-instance",
        "stale-cnapi-report",
        "service-without-default-image",
        "default-image-not-in-imgapi",
        "unmanaged-component",
        "running-where-disabled",
        "disabled-without-intent",
        "mark-kept-once",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, expected);
    for k in FindingKind::ALL {
        assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
    }
    assert_eq!(
        FindingKind::InstanceNamesOtherServer.as_str(),
        "instance-names-other-server"
    );
    assert_eq!(
        FindingKind::UnusableServerAgents.as_str(),
        "unusable-server-agents"
    );
    let first = &json.as_array().unwrap()[0];
    assert_eq!(first["kind"], "instance-for-missing-server");
    assert_eq!(first["fix"]["action"], "delete-instance");
}

/// A bare instance (no params, as a postinstall's re-adoption leaves it)
/// is drift only where agentsadm recorded more for it: its history shows
/// it wrote that instance (`written_by_agentsadm`), or the service's
/// ledger keeps a mark for that very instance. Each is written back
/// whole in one SAPI write.
#[test]
fn a_bare_instance_is_drift_only_where_agentsadm_recorded_more() {
    use agentsadm_plan::marks::{HOLD_PARAM, ledger_key, ledger_value};
    let mut dc = ExampleDc::new(3);
    let (cn1, cn2, cn3) = (
        dc.server_named("cn001"),
        dc.server_named("cn002"),
        dc.server_named("cn003"),
    );
    // Bare everywhere; agentsadm wrote cn001's vm-agent only.
    for cn in [cn1, cn2, cn3] {
        dc.make_legacy(cn, "vm-agent");
    }
    // A hold on cn002's net-agent that its instance (params kept) lost,
    // and one on cn003's net-agent put on an instance it no longer has.
    let hold = agentsadm_plan::Mark {
        by: "alice".into(),
        at: "t".into(),
        reason: Some("case 7".into()),
    };
    let net = dc
        .services
        .iter_mut()
        .find(|s| s.name == "net-agent")
        .unwrap();
    let params = net.params.get_or_insert_with(Default::default);
    params.insert(
        ledger_key(HOLD_PARAM, cn2),
        ledger_value(&hold, instance_uuid(cn2, "net-agent")),
    );
    params.insert(
        ledger_key(HOLD_PARAM, cn3),
        ledger_value(&hold, inst("an instance set up before")),
    );
    let written = BTreeMap::from([(cn1, BTreeSet::from(["vm-agent".parse().unwrap()]))]);
    let servers = dc.server_list();
    let instances = dc.instance_list();
    let images = images(&dc);
    let (survey, findings) = drift::find(&DriftInput {
        catalog: &dc.catalog,
        servers: &servers,
        services: &dc.services,
        instances: &instances,
        live: &BTreeMap::new(),
        images: &images,
        selection: None,
        changed_by_sdcadm: &BTreeMap::new(),
        written_by_agentsadm: &written,
    });
    assert_eq!(
        summary(&findings),
        vec![
            (
                "cn001".to_string(),
                "vm-agent".to_string(),
                FindingKind::InstanceParamsErased,
                "restore"
            ),
            (
                "cn002".to_string(),
                "net-agent".to_string(),
                FindingKind::InstanceParamsErased,
                "restore"
            ),
        ],
        "{findings:#?}"
    );
    // The lost hold still holds.
    assert!(survey.intent.holds.get(&cn2, "net-agent").is_some());
    assert!(survey.intent.holds.get(&cn3, "net-agent").is_none());
    let runs = dc.installed(cn1, "vm-agent").unwrap().image_uuid.unwrap();
    assert!(
        findings[0]
            .details
            .contains("params.server_uuid and params.image_uuid"),
        "{}",
        findings[0].details
    );
    assert!(
        findings[1]
            .details
            .contains("the hold (by alice at t: case 7)")
            && !findings[1].details.contains("params.server_uuid"),
        "{}",
        findings[1].details
    );
    let plan = repair::plan_repairs(&dc.catalog, &survey, &BTreeMap::new(), &findings);
    let writes: Vec<_> = plan.plan.records().iter().collect();
    assert_eq!(writes.len(), 2, "one write per instance: {writes:#?}");
    assert_eq!(plan.plan.step_count(), 0);
    match writes[0] {
        RecordChange::Instance {
            server: Some(s),
            change:
                IntentChange::Restore {
                    instance,
                    image,
                    marks,
                    ..
                },
            ..
        } => {
            assert_eq!(
                (*s, *instance, *image),
                (cn1, instance_uuid(cn1, "vm-agent"), runs)
            );
            assert!(marks.is_empty());
        }
        other => panic!("a restore of cn001's vm-agent: {other:#?}"),
    }
    match writes[1] {
        RecordChange::Instance {
            change: IntentChange::Restore { marks, .. },
            ..
        } => assert_eq!(marks, &vec![(agentsadm_plan::MarkKey::Hold, hold)]),
        other => panic!("a restore of cn002's net-agent: {other:#?}"),
    }
}

#[test]
fn selection_limits_to_servers() {
    let (dc, live) = drifted();
    let cn2 = dc.server_named("cn002");
    let only = BTreeSet::from([cn2]);
    let (_, findings) = find(&dc, &live, Some(&only));
    assert!(!findings.is_empty());
    assert!(
        findings.iter().all(|f| f.server == Some(cn2)),
        "{findings:#?}"
    );
}

#[test]
fn server_steps_wait_for_running_servers_and_never_restart_marlin() {
    let mut dc = ExampleDc::new(2);
    let (cn1, cn2) = (dc.server_named("cn001"), dc.server_named("cn002"));
    let newer = dc.publish("vm-agent", "1.1.0").uuid;
    dc.sapi_merge_params(instance_uuid(cn1, "vm-agent"), instance_params(cn1, newer));
    dc.set_status(cn1, "unknown");
    // marlin-agent managed, installed, with a pending update.
    dc.manage("marlin-agent");
    dc.install(cn2, "marlin-agent", "1.0.0");
    let m2 = dc.publish("marlin-agent", "2.0.0").uuid;
    dc.sapi_merge_params(instance_uuid(cn2, "marlin-agent"), instance_params(cn2, m2));
    // An instance naming an image IMGAPI does not have.
    dc.sapi_merge_params(
        instance_uuid(cn2, "cmon-agent"),
        instance_params(cn2, image_uuid("cmon-agent", "7.0.0")),
    );
    // An instance naming another component's image, one IMGAPI has.
    let smartlogin = dc.publish("smartlogin", "9.0.0").uuid;
    dc.sapi_merge_params(
        instance_uuid(cn2, "vm-agent"),
        instance_params(cn2, smartlogin),
    );
    let (_, findings) = find(&dc, &BTreeMap::new(), None);
    let hint = |host: &str, c: &str| match findings
        .iter()
        .find(|f| f.hostname.as_deref() == Some(host) && f.component.as_deref() == Some(c))
        .map(|f| &f.fix)
    {
        Some(Fix::Manual { hint }) => hint.clone(),
        other => panic!("{host} {c}: {other:?}"),
    };
    assert!(hint("cn001", "vm-agent").contains("not running"));
    assert!(hint("cn002", "marlin-agent").contains("aborts running work"));
    assert!(hint("cn002", "cmon-agent").contains("not in the datacenter IMGAPI"));
    assert!(
        hint("cn002", "vm-agent").contains("is smartlogin, not vm-agent"),
        "{}",
        hint("cn002", "vm-agent")
    );
    let plan = repair::plan_repairs(
        &dc.catalog,
        &find(&dc, &BTreeMap::new(), None).0,
        &BTreeMap::new(),
        &findings,
    );
    assert!(plan.is_empty());
    assert_eq!(plan.manual, 4);
}

/// Apply a repair plan to the example datacenter the way SAPI, CNAPI and
/// the servers would.
fn apply(
    dc: &mut ExampleDc,
    plan: &repair::RepairPlan,
    live: &mut BTreeMap<ServerUuid, AgentsReport>,
) {
    for (server, _, agents) in plan.reports() {
        dc.servers.get_mut(&server).unwrap().agents = Some(agents.to_vec());
    }
    live.clear();
    for r in plan.sapi() {
        match r {
            RecordChange::ServiceDefault { change: c } => {
                dc.set_service_default(&c.component, Some(c.to.uuid))
            }
            RecordChange::Instance { server, change, .. } => match change {
                IntentChange::CreateInstance {
                    service,
                    instance,
                    image,
                    ..
                } => dc.sapi_put_instance(
                    *instance,
                    *service,
                    Some(instance_params(server.unwrap(), *image)),
                ),
                IntentChange::UpdateInstance {
                    instance, image, ..
                } => {
                    assert!(
                        dc.sapi_merge_params(*instance, instance_params(server.unwrap(), *image))
                    );
                }
                IntentChange::DeleteInstance { instance, .. } => {
                    assert!(dc.sapi_delete_instance(*instance));
                }
                // Both copies of a mark: the service's, and the
                // instance's (the same value again).
                IntentChange::Mark {
                    component,
                    instance,
                    key,
                    mark: Some(mark),
                    ..
                } => {
                    let service = dc
                        .services
                        .iter_mut()
                        .find(|s| s.name == component.as_str())
                        .unwrap();
                    service.params.get_or_insert_with(Default::default).insert(
                        agentsadm_plan::marks::ledger_key(key.param(), server.unwrap()),
                        agentsadm_plan::marks::ledger_value(mark, *instance),
                    );
                    assert!(dc.sapi_merge_params(
                        *instance,
                        agentsadm_api::sapi::object([(key.param(), mark.to_value())])
                    ));
                }
                other => panic!("not a SAPI-only repair: {other:?}"),
            },
            other => panic!("not a repair: {other:?}"),
        }
    }
    for (server, sp) in plan.plan.servers() {
        for st in &sp.steps {
            match &st.action {
                Action::Install { to } => {
                    // A fresh install makes a fresh instance UUID.
                    let new = inst(&format!("new/{server}/{}", st.component));
                    dc.set_installed(*server, &st.component, to.uuid, Some(new));
                    assert!(sp.intent.iter().any(|c| matches!(c,
                        IntentChange::AdoptInstalled { component, .. } if *component == st.component)));
                    dc.sapi_put_instance(
                        new,
                        service_uuid(&st.component),
                        Some(instance_params(*server, to.uuid)),
                    );
                }
                Action::Upgrade { to, .. } => {
                    let keep = dc.installed(*server, &st.component).and_then(|a| a.uuid);
                    dc.set_installed(*server, &st.component, to.uuid, keep);
                }
                Action::Remove { .. } => panic!("repairs never remove"),
                // SMF states are only seen in live reports, which the
                // check after the repairs does not read (the sim test
                // `marks_sim` checks the server's state).
                Action::Disable { .. } => {}
                Action::Enable => panic!("repairs never enable"),
            }
        }
    }
    for r in plan.replaced() {
        dc.sapi_delete_instance(r.instance);
    }
}

#[test]
fn repairs_converge() {
    let (mut dc, mut live) = drifted();
    // What is off without SAPI saying so is the operator's to decide
    // (a manual fix): left out here.
    for r in live.values_mut() {
        r.services_off.clear();
    }
    let (survey, findings) = find(&dc, &live, None);
    let plan = repair::plan_repairs(&dc.catalog, &survey, &live, &findings);
    assert_eq!(plan.manual, 0, "{}", plan.render());
    assert_eq!(plan.reports().count(), 1);
    assert_eq!(plan.replaced().len(), 1);
    // cmon-agent install on cn001, vm-agent on cn001 and net-agent on
    // cn004, and vm-agent disabled again on cn004.
    assert_eq!(plan.plan.step_count(), 4, "{}", plan.render());
    snapshot!("flows_repairs", plan.render());

    apply(&mut dc, &plan, &mut live);
    let (_, after) = find(&dc, &live, None);
    assert!(!drift::has_drift(&after), "{}", drift::render(&after, 6));
    assert!(
        after
            .iter()
            .all(|f| f.kind == FindingKind::UnmanagedComponent)
    );
}

#[test]
fn servers_being_set_up_and_silent_servers_are_not_cleaned_up() {
    let mut dc = ExampleDc::new(2);
    let cn2 = dc.server_named("cn002");
    // cn002 is being set up: its fresh instances are not leftovers.
    dc.set_setup(cn2, false);
    dc.servers.get_mut(&cn2).unwrap().setting_up = Some(true);
    // A legacy instance nobody reports, while a server reports no UUIDs.
    dc.sapi_put_instance(inst("legacy"), service_uuid("vm-agent"), None);
    let cn1 = dc.server_named("cn001");
    for a in dc
        .servers
        .get_mut(&cn1)
        .unwrap()
        .agents
        .iter_mut()
        .flatten()
    {
        a.uuid = None;
    }
    let (_, findings) = find(&dc, &BTreeMap::new(), None);
    assert!(
        findings.iter().all(|f| f.server != Some(cn2)),
        "{findings:#?}"
    );
    let orphan = findings
        .iter()
        .find(|f| f.kind == FindingKind::InstanceForMissingServer)
        .unwrap();
    match &orphan.fix {
        Fix::Manual { hint } => assert!(hint.contains("cn001"), "{hint}"),
        other => panic!("{other:?}"),
    }
}

/// A held server that runs another image than SAPI names was changed by
/// something other than agentsadm (sdcadm ignores holds, issue 29): said
/// as such, and never "fixed" by an upgrade that the hold forbids.
#[test]
fn a_held_server_changed_by_someone_else_is_said() {
    let mut dc = ExampleDc::new(2);
    let cn1 = dc.server_named("cn001");
    // What `sdcadm experimental update vm-agent` leaves: the server runs
    // 1.1.0, its SAPI instance still names 1.0.0.
    let newer = dc.publish("vm-agent", "1.1.0").uuid;
    dc.set_installed(cn1, "vm-agent", newer, Some(instance_uuid(cn1, "vm-agent")));
    let (_, findings) = find(&dc, &BTreeMap::new(), None);
    let f = findings
        .iter()
        .find(|f| f.hostname.as_deref() == Some("cn001"))
        .expect("a finding on cn001");
    assert_eq!(f.kind, FindingKind::WrongImage);
    assert!(
        matches!(f.fix, Fix::Upgrade { .. }),
        "not held: {:?}",
        f.fix
    );
    dc.sapi_merge_params(
        instance_uuid(cn1, "vm-agent"),
        agentsadm_api::sapi::object([(
            agentsadm_plan::marks::HOLD_PARAM,
            serde_json::json!({"by": "op@hn:1", "at": "2026-11-27T20:00:00Z", "reason": "canary"}),
        )]),
    );
    let (_, findings) = find(&dc, &BTreeMap::new(), None);
    let f = findings
        .iter()
        .find(|f| f.hostname.as_deref() == Some("cn001"))
        .expect("a finding on cn001");
    assert_eq!(f.kind, FindingKind::WrongImage);
    assert!(
        f.details.contains("held") && f.details.contains("sdcadm ignores holds"),
        "{}",
        f.details
    );
    assert!(matches!(f.fix, Fix::Manual { .. }), "{:?}", f.fix);
}
