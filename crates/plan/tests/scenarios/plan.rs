//! Planner scenarios and snapshots of the printed plan (`snapshots/`,
//! exact; after an intended change `cargo insta review`, or
//! `INSTA_UPDATE=always`, and read the diff).

use crate::snapshot::snapshot;

use agentsadm_plan::Action;
use agentsadm_plan::IntentChange;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::PlanError;
use agentsadm_plan::PlanningInput;
use agentsadm_plan::Request;
use agentsadm_plan::ResolvedImages;
use agentsadm_plan::SkipReason;
use agentsadm_plan::TransportKind;
use agentsadm_plan::TransportMode;
use agentsadm_plan::example::ExampleDc;
use agentsadm_plan::example::instance_uuid;
use agentsadm_plan::example::request;
use agentsadm_plan::plan;
use agentsadm_types::ids::ServerUuid;

fn plan_with(
    dc: &ExampleDc,
    req: &Request,
    images: &ResolvedImages,
    transport: TransportMode,
) -> Result<Plan, PlanError> {
    let (intent, reality) = (dc.intent(), dc.reality());
    plan(&PlanningInput {
        catalog: &dc.catalog,
        intent: &intent,
        reality: &reality,
        request: req,
        options: transport.into(),
        images,
        durations: None,
    })
}

fn plan_ok(dc: &ExampleDc, req: &Request, images: &ResolvedImages) -> Plan {
    plan_with(dc, req, images, TransportMode::Auto).expect("plan")
}

#[test]
fn update_one_component_everywhere() {
    let mut dc = ExampleDc::new(3);
    let target = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images,
    );
    assert_eq!(p.servers().len(), 4);
    assert_eq!(p.service_changes().len(), 1);
    assert!(p.skips().is_empty());
    for sp in p.servers().values() {
        assert_eq!(sp.steps.len(), 1);
        assert_eq!(sp.steps[0].transport, TransportKind::InstallAgent);
        assert!(
            matches!(&sp.steps[0].action, Action::Upgrade { to, .. } if to.uuid == target.uuid)
        );
        assert!(
            matches!(&sp.intent[..], [IntentChange::UpdateInstance { image, .. }] if *image == target.uuid)
        );
    }
    snapshot!("update_one_component", &p.display().to_string());
    // Same input, same plan.
    assert_eq!(
        p,
        plan_ok(
            &dc,
            &request(Operation::Update, &["vm-agent"], &[]),
            &images
        )
    );
}

/// marlin-agent appears in an `--all` plan (and so in its summary) only
/// when a selected server runs it.
#[test]
fn marlin_agent_is_not_mentioned_where_no_server_has_it() {
    let mut dc = ExampleDc::new(2);
    let cn1 = dc.server_named("cn001");
    dc.manage("marlin-agent");
    let target = dc.publish("vm-agent", "2.0.0");
    let images = dc.images_with_targets(&[target]);
    let mentions = |p: &Plan| {
        p.skips()
            .iter()
            .any(|s| s.component.as_deref() == Some("marlin-agent"))
    };
    let p = plan_ok(&dc, &request(Operation::Update, &["--all"], &[]), &images);
    assert!(!mentions(&p), "{:?}", p.skips());
    assert!(!p.to_string().contains("marlin"), "{p}");
    dc.install(cn1, "marlin-agent", "1.0.0");
    let p = plan_ok(&dc, &request(Operation::Update, &["--all"], &[]), &images);
    assert!(mentions(&p));
    // Only when the servers selected include one that runs it.
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["--all"], &["cn002"]),
        &images,
    );
    assert!(!mentions(&p), "{:?}", p.skips());
}

#[test]
fn update_all_orders_steps_and_skips_marlin_and_unmanaged() {
    let mut dc = ExampleDc::new(2);
    let hn = dc.server_named("headnode");
    let cn1 = dc.server_named("cn001");
    dc.install(cn1, "marlin-agent", "1.0.0");
    dc.manage("marlin-agent");
    dc.unmanage("firewaller");
    let names: Vec<String> = dc.catalog.names().map(ToString::to_string).collect();
    let targets: Vec<_> = names.iter().map(|n| dc.publish(n, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    let p = plan_ok(&dc, &request(Operation::Update, &["--all"], &[]), &images);

    let hn_steps: Vec<&str> = p.servers()[&hn]
        .steps
        .iter()
        .map(|s| s.component.as_str())
        .collect();
    // agentsadm before every step, all of which may run through it (gz
    // install, or gz health after cn-agent's task).
    assert_eq!(hn_steps.first(), Some(&"agentsadm"));
    assert_eq!(hn_steps.get(1), Some(&"agents_core"));
    assert_eq!(hn_steps.get(2), Some(&"config-agent"));
    assert_eq!(hn_steps.last(), Some(&"cn-agent"));
    assert!(hn_steps.contains(&"sdcadm") && hn_steps.contains(&"gz-tools"));
    assert!(!hn_steps.contains(&"firewaller"));
    let batches = p.servers()[&hn].batches();
    assert_eq!(
        batches.len(),
        5,
        "core-first (agentsadm, then agents_core), core-second, parallel-safe set, core-last"
    );
    assert_eq!(batches[3].len(), hn_steps.len() - 4);
    // gz-tools, sdcadm and agentsadm go through agentsadm gz; apm agents
    // through install-agent.
    for st in &p.servers()[&hn].steps {
        let expected = if ["gz-tools", "sdcadm", "agentsadm"].contains(&st.component.as_str()) {
            TransportKind::Execute
        } else {
            TransportKind::InstallAgent
        };
        assert_eq!(st.transport, expected, "{}", st.component);
    }
    assert!(
        !p.servers()[&cn1]
            .steps
            .iter()
            .any(|s| s.component == "marlin-agent")
    );
    assert!(
        p.skips()
            .iter()
            .any(|s| s.component.as_deref() == Some("marlin-agent")
                && s.reason == SkipReason::NotBulk
                && !s.blocking)
    );
    assert!(
        p.skips()
            .iter()
            .any(|s| s.component.as_deref() == Some("firewaller")
                && s.reason == SkipReason::Unmanaged
                && !s.blocking)
    );
    assert!(!p.needs_explicit_yes());
    assert!(!p.has_blocking_skips());
    snapshot!("update_all", &p.display().to_string());
}

#[test]
fn skips_carry_reasons_and_blocking_only_when_it_matters() {
    let mut dc = ExampleDc::new(6);
    let s = |dc: &ExampleDc, h: &str| dc.server_named(h);
    let (cn1, cn2, cn3, cn4, cn5, cn6) = (
        s(&dc, "cn001"),
        s(&dc, "cn002"),
        s(&dc, "cn003"),
        s(&dc, "cn004"),
        s(&dc, "cn005"),
        s(&dc, "cn006"),
    );
    dc.set_setup(cn1, false);
    dc.remove_installed(cn1, "vm-agent");
    dc.set_status(cn2, "unknown");
    dc.set_status(cn3, "unknown");
    let target = dc.publish("vm-agent", "1.1.0");
    // cn3 is down but already runs the target: converged, not skipped.
    let inst = instance_uuid(cn3, "vm-agent");
    dc.set_installed(cn3, "vm-agent", target.uuid, Some(inst));
    dc.remove_installed(cn4, "vm-agent");
    dc.drop_instance(cn4, "vm-agent");
    dc.make_legacy(cn5, "vm-agent");
    dc.drop_instance(cn6, "vm-agent");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let mut req = request(Operation::Update, &["vm-agent"], &[]);
    req.exclude = vec!["headnode".to_string()];
    let p = plan_ok(&dc, &req, &images);

    let reason_of = |server: ServerUuid| {
        p.skips()
            .iter()
            .find(|s| s.server == Some(server))
            .map(|s| (s.reason.clone(), s.blocking))
    };
    assert_eq!(
        reason_of(cn1),
        Some((SkipReason::NotSetup, false)),
        "--all servers: not set up is expected"
    );
    assert!(matches!(
        reason_of(cn2),
        Some((SkipReason::NotRunning { .. }, true))
    ));
    assert_eq!(reason_of(cn4), Some((SkipReason::ComponentAbsent, false)));
    assert_eq!(
        reason_of(dc.server_named("headnode")),
        Some((SkipReason::Excluded, false))
    );
    // cn3: converged in reality, but its instance still names the old image.
    assert!(p.servers()[&cn3].steps.is_empty());
    assert!(matches!(
        &p.servers()[&cn3].intent[..],
        [IntentChange::UpdateInstance { .. }]
    ));
    // cn5: legacy instance gets params; cn6: installed but never adopted.
    assert!(
        matches!(&p.servers()[&cn5].intent[..], [IntentChange::UpdateInstance { instance, .. }] if *instance == instance_uuid(cn5, "vm-agent"))
    );
    assert!(
        matches!(&p.servers()[&cn6].intent[..], [IntentChange::CreateInstance { instance, .. }] if *instance == instance_uuid(cn6, "vm-agent"))
    );
    assert!(p.has_blocking_skips());
    snapshot!("update_with_skips", &p.display().to_string());

    // Named, a server that is not set up blocks.
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &["cn001", "cn005"]),
        &images,
    );
    assert!(
        p.skips()
            .iter()
            .any(|s| s.server == Some(cn1) && s.reason == SkipReason::NotSetup && s.blocking)
    );
    assert!(
        p.service_changes().is_empty(),
        "-s never moves the service default"
    );
}

#[test]
fn servers_by_uuid_or_hostname_and_unknown_ones_are_all_named() {
    let mut dc = ExampleDc::new(3);
    let target = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(&[target]);
    let cn2 = dc.server_named("cn002");
    let req = request(
        Operation::Update,
        &["vm-agent"],
        &[&format!("cn001,{cn2}"), "cn003"],
    );
    let p = plan_ok(&dc, &req, &images);
    assert_eq!(p.servers().len(), 3);
    assert_eq!(p.selected_servers(), 3);

    let req = request(
        Operation::Update,
        &["vm-agent"],
        &["cn001,nope", "0badf00d-0000-4000-8000-000000000000"],
    );
    let err = plan_with(&dc, &req, &images, TransportMode::Auto).unwrap_err();
    snapshot!("refusal_unknown_servers", err.to_string());
    let err = plan_with(
        &dc,
        &request(Operation::Update, &["vm-agnet"], &[]),
        &images,
        TransportMode::Auto,
    )
    .unwrap_err();
    snapshot!("refusal_unknown_component", err.to_string());
    let mut req = request(Operation::Update, &["vm-agent"], &[]);
    req.exclude = vec!["cn999".into()];
    assert!(matches!(
        plan_with(&dc, &req, &images, TransportMode::Auto),
        Err(PlanError::UnknownServers { .. })
    ));
}

#[test]
fn update_without_image_converges_to_intent() {
    let mut dc = ExampleDc::new(3);
    let new = dc.publish("vm-agent", "1.1.0");
    let cn1 = dc.server_named("cn001");
    // An interrupted run left cn001's instance (and the service) at 1.1.0.
    dc.set_service_default("vm-agent", Some(new.uuid));
    dc.sapi_merge_params(
        instance_uuid(cn1, "vm-agent"),
        agentsadm_types::sapi::instance_params(cn1, new.uuid),
    );
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &dc.known_images(),
    );
    assert_eq!(p.servers().keys().copied().collect::<Vec<_>>(), vec![cn1]);
    assert!(p.service_changes().is_empty());

    // Intent names an image the datacenter IMGAPI does not have.
    let mut images = dc.known_images();
    images.known.remove(&new.uuid);
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images,
    );
    assert!(p.servers().is_empty());
    assert!(p.skips().iter().any(|s| s.server == Some(cn1)
        && matches!(s.reason, SkipReason::ImageNotInDc { .. })
        && s.blocking));
}

#[test]
fn update_imports_targets_from_the_updates_server_first() {
    let dc = ExampleDc::new(1);
    let mut target = dc.image_ref("cn-agent", "3.0.0");
    target.import_from = Some("https://updates.example.com?channel=dev".into());
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["cn-agent"], &[]),
        &images,
    );
    assert_eq!(p.imports(), vec![target]);
    snapshot!("update_import", &p.display().to_string());
}

#[test]
fn marlin_is_only_touched_by_name_with_a_warning() {
    let mut dc = ExampleDc::new(3);
    let cn1 = dc.server_named("cn001");
    dc.install(cn1, "marlin-agent", "1.0.0");
    dc.manage("marlin-agent");
    let target = dc.publish("marlin-agent", "1.1.0");
    let images = dc.images_with_targets(&[target]);
    let p = plan_ok(&dc, &request(Operation::Update, &["marlin"], &[]), &images);
    assert_eq!(p.servers().len(), 1);
    assert!(p.needs_explicit_yes());
    assert_eq!(
        p.explicit_yes().iter().copied().collect::<Vec<_>>(),
        [agentsadm_plan::ExplicitYes::AbortsRunningWork]
    );
    assert_eq!(p.warnings().len(), 1);
    // The warning, where the plan shows it.
    snapshot!("plan_marlin_named", p.display().to_string());
}

#[test]
fn named_unmanaged_component_is_a_blocking_skip() {
    let mut dc = ExampleDc::new(1);
    dc.unmanage("vm-agent");
    let target = dc.publish("vm-agent", "1.1.0");
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &dc.images_with_targets(&[target]),
    );
    assert!(p.is_empty());
    assert!(
        p.skips()
            .iter()
            .any(|s| s.reason == SkipReason::Unmanaged && s.blocking)
    );
}

#[test]
fn transport_modes() {
    let mut dc = ExampleDc::new(1);
    let targets = vec![
        dc.publish("gz-tools", "2.0.0"),
        dc.publish("vm-agent", "2.0.0"),
    ];
    let images = dc.images_with_targets(&targets);
    let req = request(Operation::Update, &["gz-tools", "vm-agent"], &[]);
    let p = plan_with(&dc, &req, &images, TransportMode::Execute).unwrap();
    assert!(
        p.servers()
            .values()
            .flat_map(|s| &s.steps)
            .all(|s| s.transport == TransportKind::Execute)
    );
    let p = plan_with(&dc, &req, &images, TransportMode::InstallAgent).unwrap();
    assert!(
        p.servers()
            .values()
            .flat_map(|s| &s.steps)
            .all(|s| s.component == "vm-agent")
    );
    assert!(
        p.skips()
            .iter()
            .any(|s| matches!(s.reason, SkipReason::TransportUnsupported { .. }) && s.blocking)
    );
}

#[test]
fn install_on_named_servers_and_adopt_afterwards() {
    let mut dc = ExampleDc::new(3);
    let cn1 = dc.server_named("cn001");
    dc.install(cn1, "dockerlogger", "1.0.0");
    let req = request(
        Operation::Install,
        &["dockerlogger"],
        &["cn001", "cn002", "cn003"],
    );
    let p = plan_ok(&dc, &req, &dc.known_images());
    assert_eq!(p.servers().len(), 2);
    assert!(p.skips().iter().any(|s| s.server == Some(cn1)
        && matches!(s.reason, SkipReason::AlreadyInstalled { .. })
        && !s.blocking));
    for sp in p.servers().values() {
        assert_eq!(sp.steps[0].transport, TransportKind::Execute);
        assert!(matches!(
            &sp.intent[..],
            [IntentChange::AdoptInstalled { .. }]
        ));
    }
    snapshot!("install", &p.display().to_string());

    dc.unmanage("firewall-logger-agent");
    let err = plan_with(
        &dc,
        &request(Operation::Install, &["firewall-logger-agent"], &["cn001"]),
        &dc.known_images(),
        TransportMode::Auto,
    )
    .unwrap_err();
    snapshot!("refusal_install_unmanaged", err.to_string());
    dc.manage("firewall-logger-agent");
    dc.set_service_default("firewall-logger-agent", None);
    let err = plan_with(
        &dc,
        &request(Operation::Install, &["firewall-logger-agent"], &["cn001"]),
        &dc.known_images(),
        TransportMode::Auto,
    )
    .unwrap_err();
    assert!(matches!(err, PlanError::NoInstallImage { .. }), "{err}");
    let err = plan_with(
        &dc,
        &request(Operation::Install, &["vm-agent", "cn-agent"], &["cn001"]),
        &dc.known_images(),
        TransportMode::Auto,
    )
    .unwrap_err();
    assert!(matches!(err, PlanError::OneComponent { count: 2, .. }));
}

#[test]
fn headnode_only_components_are_planned_for_the_headnode_only() {
    let mut dc = ExampleDc::new(2);
    let hn = dc.server_named("headnode");
    dc.remove_installed(hn, "sdcadm");
    // Without -s: the headnode alone, the compute nodes not even skipped.
    let p = plan_ok(
        &dc,
        &request(Operation::Install, &["sdcadm"], &[]),
        &dc.known_images(),
    );
    assert_eq!(p.servers().keys().copied().collect::<Vec<_>>(), [hn]);
    assert!(p.skips().is_empty(), "{:?}", p.skips());
    // A compute node named with -s refuses the plan, before anything runs.
    for servers in [&["cn001"][..], &["headnode", "cn001", "cn002"]] {
        let err = plan_with(
            &dc,
            &request(Operation::Install, &["sdcadm"], servers),
            &dc.known_images(),
            TransportMode::Auto,
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::HeadnodeOnly { .. }), "{err}");
        let name = format!("refusal_headnode_only_{}_servers", servers.len());
        snapshot!(name.as_str(), err.to_string());
    }
    let p = plan_ok(
        &dc,
        &request(Operation::Install, &["sdcadm"], &["headnode"]),
        &dc.known_images(),
    );
    assert_eq!(p.servers().len(), 1);
}

/// `update` keeps a headnode-only component to the headnode as `install`
/// does: a compute node is never planned (even one that reports it), and
/// one named with `-s` refuses the plan instead of failing at run time.
#[test]
fn headnode_only_components_are_updated_on_the_headnode_only() {
    let mut dc = ExampleDc::new(2);
    let hn = dc.server_named("headnode");
    let cn1 = dc.server_named("cn001");
    // A compute node that reports sdcadm (copied there by hand).
    dc.install(cn1, "sdcadm", "1.0.0");
    let target = dc.publish("sdcadm", "1.1.0");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let p = plan_ok(&dc, &request(Operation::Update, &["sdcadm"], &[]), &images);
    assert_eq!(p.servers().keys().copied().collect::<Vec<_>>(), [hn]);
    assert!(p.skips().is_empty(), "{:?}", p.skips());
    for servers in [&["cn001"][..], &["headnode", "cn002"]] {
        let err = plan_with(
            &dc,
            &request(Operation::Update, &["sdcadm"], servers),
            &images,
            TransportMode::Auto,
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::HeadnodeOnly { .. }), "{err}");
    }
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["sdcadm"], &["headnode"]),
        &images,
    );
    assert_eq!(p.servers().keys().copied().collect::<Vec<_>>(), [hn]);
    // --all on a compute node: every other component moves, sdcadm is
    // simply not planned there.
    let vm = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(&[target, vm]);
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["--all"], &["cn001"]),
        &images,
    );
    let steps: Vec<String> = p.servers()[&cn1]
        .steps
        .iter()
        .map(|s| s.component.to_string())
        .collect();
    assert_eq!(steps, ["vm-agent"]);
}

#[test]
fn remove_deletes_instances_and_refuses_cn_agent() {
    let mut dc = ExampleDc::new(3);
    let (cn1, cn2, cn3) = (
        dc.server_named("cn001"),
        dc.server_named("cn002"),
        dc.server_named("cn003"),
    );
    // cn002: uninstalled by hand, SAPI instance left behind.
    dc.remove_installed(cn2, "cmon-agent");
    // cn003: neither installed nor in SAPI.
    dc.remove_installed(cn3, "cmon-agent");
    dc.drop_instance(cn3, "cmon-agent");
    let req = request(
        Operation::Remove,
        &["cmon-agent"],
        &["cn001", "cn002", "cn003"],
    );
    let p = plan_ok(&dc, &req, &dc.known_images());
    assert!(matches!(
        &p.servers()[&cn1].steps[0].action,
        Action::Remove { .. }
    ));
    assert!(matches!(
        &p.servers()[&cn1].intent[..],
        [IntentChange::DeleteInstance { .. }]
    ));
    assert!(p.servers()[&cn2].steps.is_empty());
    assert!(matches!(
        &p.servers()[&cn2].intent[..],
        [IntentChange::DeleteInstance { .. }]
    ));
    assert!(
        p.skips()
            .iter()
            .any(|s| s.server == Some(cn3) && s.reason == SkipReason::NotInstalled)
    );
    snapshot!("remove", &p.display().to_string());

    let err = plan_with(
        &dc,
        &request(Operation::Remove, &["cn-agent"], &["cn001"]),
        &dc.known_images(),
        TransportMode::Auto,
    )
    .unwrap_err();
    snapshot!("refusal_remove_cn_agent", err.to_string());
}

#[test]
fn large_plans_are_shown_grouped() {
    let mut dc = ExampleDc::new(120);
    let cn7 = dc.server_named("cn007");
    dc.set_status(cn7, "unknown");
    let target = dc.publish("net-agent", "1.1.0");
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["net-agent"], &[]),
        &dc.images_with_targets(&[target]),
    );
    assert_eq!(p.servers().len(), 120);
    let text = p.display_compact(50).to_string();
    assert!(text.lines().count() < 30, "{text}");
    snapshot!("update_grouped", &text);
    // JSON has every server.
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["servers"].as_object().unwrap().len(), 120);
}

#[test]
fn latest_never_downgrades() {
    let mut dc = ExampleDc::new(2);
    let cn1 = dc.server_named("cn001");
    dc.install(cn1, "vm-agent", "1.5.0");
    let latest = dc.publish("vm-agent", "1.2.0");
    let mut images = dc.images_with_targets(std::slice::from_ref(&latest));
    images.no_downgrade = true;
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images,
    );
    assert_eq!(p.servers().len(), 2, "the other two go to 1.2.0");
    assert!(!p.servers().contains_key(&cn1));
    assert!(p.skips().iter().any(|s| s.server == Some(cn1)
        && matches!(s.reason, SkipReason::NewerInstalled { .. })
        && !s.blocking));
    // An explicit --image may downgrade.
    images.no_downgrade = false;
    let p = plan_ok(
        &dc,
        &request(Operation::Update, &["vm-agent"], &[]),
        &images,
    );
    assert!(p.servers().contains_key(&cn1));
    assert!(agentsadm_plan::is_newer(
        "1.2.0-master-20260301T000000Z-g96cbc65",
        "1.2.0-master-20260201T000000Z-gfae7adc"
    ));
    assert!(!agentsadm_plan::is_newer("garbage", "1.0.0"));
}

#[test]
fn bulk_update_lists_only_the_components_that_move() {
    // What `update --all --latest` resolves when only vm-agent has a newer
    // image: a target for every component, most of them already in place.
    let mut dc = ExampleDc::new(2);
    let names: Vec<String> = dc.catalog.names().map(ToString::to_string).collect();
    let targets: Vec<_> = names
        .iter()
        .map(|n| dc.publish(n, if n == "vm-agent" { "1.1.0" } else { "1.0.0" }))
        .collect();
    let images = dc.images_with_targets(&targets);
    let p = plan_ok(&dc, &request(Operation::Update, &["--all"], &[]), &images);
    let shown = p.display().to_string();
    assert_eq!(
        p.changed_components().into_iter().collect::<Vec<_>>(),
        vec!["vm-agent"]
    );
    let targets = shown
        .split("Target images:")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("a Target images section");
    assert!(targets.contains("vm-agent 1.1.0"), "{shown}");
    assert_eq!(targets.trim().lines().count(), 1, "{shown}");
    let unchanged = shown
        .lines()
        .find(|l| l.starts_with("No change for: "))
        .expect("a No change line");
    assert!(unchanged.contains("cn-agent") && !unchanged.contains("vm-agent"));
}

/// Each step's gate, one line per kind (issue 14): with execute, the
/// install-agent steps are checked with `gz health`; without it (the
/// install-agent transport), only `server.agents` confirms them, and the
/// plan says so. `--json` carries the gate on every step.
#[test]
fn the_plan_says_which_gate_applies() {
    let mut dc = ExampleDc::new(3);
    let target = dc.publish("vm-agent", "1.1.0");
    let images = dc.images_with_targets(std::slice::from_ref(&target));
    let req = request(Operation::Update, &["vm-agent"], &[]);
    let auto = plan_ok(&dc, &req, &images);
    snapshot!("plan_gates_execute", auto.display().to_string());
    let flags = agentsadm_plan::HealthFlags {
        min_healthy: std::time::Duration::ZERO,
        timeout: std::time::Duration::from_secs(120),
    };
    snapshot!(
        "plan_gates_with_health_flags",
        auto.display().with_health(Some(flags)).to_string()
    );
    snapshot!(
        "plan_gates_json",
        serde_json::to_string_pretty(&auto).unwrap()
    );
    let json = serde_json::to_value(&auto).unwrap();
    let server = json["servers"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    assert_eq!(server["steps"][0]["gate"], "gz-health");

    let no_execute = plan_with(&dc, &req, &images, TransportMode::InstallAgent).expect("plan");
    snapshot!("plan_gates_install_agent", no_execute.display().to_string());
    let json = serde_json::to_value(&no_execute).unwrap();
    let server = json["servers"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    assert_eq!(server["steps"][0]["gate"], "server-agents");
}
