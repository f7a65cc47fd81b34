//! agentsadm first (issue 21), as the planner decides it: servers whose
//! agentsadm is missing, too old, or of unknown version get it before any
//! step that runs through it, for a gz-tools (execute) and vm-agent
//! (install-agent with its `gz health` gate) update, and for a disable.
//! The rollout that carries such a plan out is in orch_suite's
//! agentsadm_first.

use agentsadm_plan::example::{ExampleDc, request};
use agentsadm_plan::{
    Action, Operation, PlanningInput, SkipReason, TransportKind, TransportMode, plan,
};
use agentsadm_types::component::ComponentVersion;

use crate::snapshot::snapshot;

/// The planning input of `req` on the example datacenter (auto
/// transport, no run history).
fn input<'a>(
    dc: &'a ExampleDc,
    intent: &'a agentsadm_plan::Intent,
    reality: &'a agentsadm_plan::reality::Reality,
    req: &'a agentsadm_plan::Request,
    images: &'a agentsadm_plan::ResolvedImages,
) -> PlanningInput<'a> {
    PlanningInput {
        catalog: &dc.catalog,
        intent,
        reality,
        request: req,
        options: TransportMode::Auto.into(),
        images,
        durations: None,
    }
}

/// cn001 current (1.0.0), cn002 on an old copy (0.0.9), cn003 on a copy
/// that says no version, cn004 with none.
fn example() -> ExampleDc {
    let mut dc = ExampleDc::new(4);
    let old = dc.publish("agentsadm", "0.0.9");
    dc.set_installed(dc.server_named("cn002"), "agentsadm", old.uuid, None);
    let cn3 = dc.server_named("cn003");
    let s = dc.servers.get_mut(&cn3).unwrap();
    for a in s.agents.iter_mut().flatten() {
        if a.name == "agentsadm" {
            a.version = ComponentVersion::unknown();
            a.image_uuid = None;
        }
    }
    dc.remove_installed(dc.server_named("cn004"), "agentsadm");
    dc
}

/// `gz disable` came with agentsadm 0.2.0: a disable on a server whose
/// copy is older gets agentsadm first, as an update does, not a blocking
/// skip (the disable plan resolves the agentsadm target like any request).
#[test]
fn a_disable_gives_agentsadm_first_where_the_copy_predates_gz_disable() {
    let mut dc = ExampleDc::new(2);
    let v010 = dc.publish("agentsadm", "0.1.0");
    dc.set_installed(dc.server_named("cn002"), "agentsadm", v010.uuid, None);
    let images = dc.images_with_targets(&[]);
    assert!(images.agentsadm.is_some());
    let (intent, reality) = (dc.intent(), dc.reality());
    let req = request(Operation::Disable, &["net-agent"], &["cn001", "cn002"]);
    let mark = agentsadm_plan::Mark {
        by: "root@headnode".into(),
        at: "2026-11-26T12:00:00Z".into(),
        reason: Some("RFD 58".into()),
    };
    let input = input(&dc, &intent, &reality, &req, &images);
    let p = agentsadm_plan::plan_disable(&input, Some(&mark)).unwrap();
    let text = p.display().to_string();
    let steps = |host: &str| -> Vec<String> {
        let sp = p.servers().values().find(|s| s.hostname == host).unwrap();
        sp.steps.iter().map(|s| s.component.to_string()).collect()
    };
    assert_eq!(steps("cn001"), ["net-agent"], "{text}");
    assert_eq!(steps("cn002"), ["agentsadm", "net-agent"], "{text}");
    assert!(p.skips().is_empty(), "{text}");
    // Without an agentsadm image the old copy's server is refused, saying
    // what to do.
    let mut none = images.clone();
    none.agentsadm = None;
    let p = agentsadm_plan::plan_disable(
        &PlanningInput {
            images: &none,
            ..input
        },
        Some(&mark),
    )
    .unwrap();
    assert!(
        p.skips()
            .iter()
            .any(|s| s.blocking && matches!(s.reason, SkipReason::AgentsadmTooOld(_))),
        "{}",
        p.display()
    );
}

#[test]
fn plan_shows_agentsadm_first_where_the_copy_cannot_parse_the_steps() {
    let mut dc = example();
    let targets = vec![
        dc.publish("gz-tools", "2.0.0"),
        dc.publish("vm-agent", "2.0.0"),
    ];
    let images = dc.images_with_targets(&targets);
    let (intent, reality) = (dc.intent(), dc.reality());
    let req = request(Operation::Update, &["gz-tools", "vm-agent"], &[]);
    let p = plan(&input(&dc, &intent, &reality, &req, &images)).unwrap();
    let text = p.display().to_string();
    for host in ["cn002", "cn003", "cn004"] {
        let sp = p.servers().values().find(|s| s.hostname == host).unwrap();
        let first = &sp.steps[0];
        assert_eq!(first.component, "agentsadm", "{host}\n{text}");
        assert_eq!(first.transport, TransportKind::Bootstrap, "{host}");
        assert_eq!(first.needed_by, ["gz-tools", "vm-agent"], "{host}");
        assert_eq!(
            matches!(first.action, Action::Install { .. }),
            host == "cn004"
        );
    }
    for host in ["headnode", "cn001"] {
        let sp = p.servers().values().find(|s| s.hostname == host).unwrap();
        assert!(
            sp.steps.iter().all(|s| s.component != "agentsadm"),
            "{host}"
        );
        // Every step says what it needs of the server's agentsadm.
        assert!(
            sp.steps.iter().all(|s| s.needs_agentsadm.is_some()),
            "{host}"
        );
    }
    assert!(p.skips().is_empty(), "{text}");
    snapshot!("update_agentsadm_first", text);

    // Without an agentsadm image to give them, the execute steps are left
    // out (blocking) and cn-agent's tasks lose only their health check.
    let mut none = images.clone();
    none.agentsadm = None;
    let p = plan(&input(&dc, &intent, &reality, &req, &none)).unwrap();
    let skipped: Vec<(&str, &str)> = p
        .skips()
        .iter()
        .filter(|s| matches!(s.reason, SkipReason::AgentsadmTooOld(_)))
        .map(|s| {
            (
                s.hostname.as_deref().unwrap(),
                s.component.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        [
            ("cn002", "gz-tools"),
            ("cn003", "gz-tools"),
            ("cn004", "gz-tools")
        ]
    );
    assert!(p.has_blocking_skips());
    assert!(
        p.warnings()
            .iter()
            .any(|w| w.starts_with("3 servers (cn002, cn003, cn004): agentsadm is missing")),
        "{:?}",
        p.warnings()
    );
}
