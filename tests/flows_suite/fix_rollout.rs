//! `check --fix` rolls out as `update` does (issue 19): its repairs are one
//! plan made by the same builder, so it has the failure budget, the canary
//! wave (never the headnode), the rack limit and the concurrency of
//! `-j`, `--canary`, `--max-failures` and `--max-per-rack`, and never
//! restarts marlin-agent in bulk.

use std::collections::BTreeMap;

use agentsadm_api::sapi::Update;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::drift::Finding;
use agentsadm_flows::drift::FindingKind;
use agentsadm_flows::drift::Fix;
use agentsadm_flows::repair;
use agentsadm_flows::repair::FixPlan;
use agentsadm_orchestrate::report::Halted;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::store::instance_params;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::SkipReason;
use agentsadm_plan::TransportKind;
use agentsadm_plan::rollout::FailureBudget;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::recording::RecordingReporter;
use agentsadm_sim::testkit::ExampleDc;

use crate::flows_common::*;

const REQUEST: CheckRequest = CheckRequest {
    exclude: Vec::new(),
    servers: Vec::new(),
    live: false,
};

/// Six CNs in racks of two (rack-01: cn0001, cn0002; rack-02: cn0003,
/// cn0004; rack-03: cn0005, cn0006), each CN's vm-agent instance pointed
/// at a newer build: six upgrades for `check --fix`.
async fn drifted() -> SimDc {
    let dc = SimDc::start(SimConfig::default().servers(6).rack_size(2))
        .await
        .expect("simulator starts");
    let newer = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    for s in dc.compute_nodes() {
        let inst = instance_of(&dc, s.uuid, "vm-agent").await.unwrap();
        dc.apis()
            .sapi
            .update_instance(inst.uuid, &Update::params(instance_params(s.uuid, newer)))
            .await
            .unwrap();
    }
    dc
}

async fn fix_plan(dc: &SimDc, policy: RolloutPolicy) -> FixPlan {
    let run = check::check(&dc.apis(), dc.catalog(), &REQUEST, &CheckConfig::default())
        .await
        .unwrap();
    FixPlan::new(run, dc.catalog(), &policy)
}

/// Carry out the repairs (`-y`) through the one run, recording the
/// executor's events.
async fn fix_recorded(dc: &SimDc, policy: RolloutPolicy) -> (check::FixOutcome, Vec<String>) {
    let reporter = RecordingReporter::default();
    let outcome = fix_yes(dc, &REQUEST, policy, &reporter, &|| nothing()).await;
    (outcome, reporter.lines())
}

fn starts(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("server-start "))
        .collect()
}

/// Installs fail on cn0001..cn0003; one server at a time with a budget of
/// one failure: the second failure halts the repairs, nothing else
/// starts, and the run ends with exit status 2 (the drift left is there
/// for the next run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_halts_on_its_failure_budget() {
    let dc = drifted().await;
    for h in ["cn0001", "cn0002", "cn0003"] {
        dc.faults().fail_installs_on(server(&dc, h));
    }
    let policy = RolloutPolicy {
        concurrency: 1,
        canary: Some(0),
        max_failures: Some(FailureBudget::Count(1)),
        max_per_rack: None,
    };
    let plan = fix_plan(&dc, policy).await;
    assert_eq!(plan.repairs.plan.step_count(), 6, "{}", plan.render());
    assert_eq!(plan.repairs.plan.rollout().budget, Some(1));
    assert!(
        plan.repairs
            .render()
            .contains("halts once more than 1 server has failed")
    );
    let (outcome, lines) = fix_recorded(&dc, policy).await;
    assert_eq!(starts(&lines), ["cn0001", "cn0002"]);
    let servers = outcome.repairs.servers.as_ref().unwrap();
    assert_eq!(
        servers.halted,
        Some(Halted::Budget {
            failures: 2,
            budget: 1
        })
    );
    assert_eq!(servers.counts().not_started, 4);
    assert_eq!(outcome.exit_status(), 2);
    let left = drift(&outcome.after);
    assert_eq!(left.len(), 6, "every upgrade is still to do: {left:?}");
    dc.shutdown().await;
}

/// Two canaries from different racks go first and pass before the others
/// start; at most one server of a rack runs at a time; the repairs
/// converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_runs_canaries_first_and_respects_the_rack_limit() {
    let dc = drifted().await;
    let policy = RolloutPolicy {
        concurrency: 4,
        canary: Some(2),
        max_failures: Some(FailureBudget::DEFAULT),
        max_per_rack: Some(1),
    };
    let plan = fix_plan(&dc, policy).await;
    let canaries: Vec<&str> = plan
        .repairs
        .plan
        .rollout()
        .canaries()
        .iter()
        .map(|w| w.hostname.as_str())
        .collect();
    assert_eq!(canaries, ["cn0001", "cn0003"]);
    let (outcome, lines) = fix_recorded(&dc, policy).await;
    assert_eq!(outcome.exit_status(), 0, "{}", outcome.after.render());
    let servers = outcome.repairs.servers.as_ref().unwrap();
    assert!(servers.canary.as_ref().unwrap().passed);
    // The canaries finish before any other server starts.
    // Together, in either order: each turn says it started once it has
    // confirmed the lock, and the two canaries' turns run at once.
    let started = starts(&lines);
    let mut first_two = started[..2].to_vec();
    first_two.sort_unstable();
    assert_eq!(first_two, ["cn0001", "cn0003"], "{lines:?}");
    let third = lines
        .iter()
        .position(|l| {
            l.starts_with("server-start ") && !l.ends_with("cn0001") && !l.ends_with("cn0003")
        })
        .unwrap();
    let canaries_done = lines
        .iter()
        .filter(|l| l.starts_with("server-done cn0001") || l.starts_with("server-done cn0003"))
        .count();
    assert_eq!(canaries_done, 2);
    assert!(
        lines[..third]
            .iter()
            .filter(|l| l.starts_with("server-done "))
            .count()
            >= 2,
        "{lines:?}"
    );
    // At most one server of each rack in flight.
    let rack = |h: &str| match h {
        "cn0001" | "cn0002" => "rack-01",
        "cn0003" | "cn0004" => "rack-02",
        _ => "rack-03",
    };
    let mut in_flight: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &lines {
        if let Some(h) = l.strip_prefix("server-start ") {
            let n = in_flight.entry(rack(h)).or_default();
            *n += 1;
            assert!(*n <= 1, "two servers of {} at once: {lines:?}", rack(h));
        } else if let Some(rest) = l.strip_prefix("server-done ") {
            let h = rest.split(' ').next().unwrap();
            *in_flight.get_mut(rack(h)).unwrap() -= 1;
        }
    }
    assert!(
        servers
            .servers
            .values()
            .all(|o| o.status == ServerStatus::Succeeded)
    );
    dc.shutdown().await;
}

/// A repair that would restart marlin-agent (an upgrade its instance asks
/// for) is never part of `check --fix`, a bulk operation: the plan leaves
/// it alone with the reason, as `update --all` does, and needs no
/// explicit yes.
#[test]
fn check_fix_never_restarts_marlin_agent() {
    let mut dc = ExampleDc::new(2);
    let cn1 = dc.server_named("cn001");
    dc.manage("marlin-agent");
    dc.install(cn1, "marlin-agent", "1.0.0");
    let m2 = dc.publish("marlin-agent", "2.0.0");
    let vm2 = dc.publish("vm-agent", "2.0.0");
    let servers = dc.server_list();
    let instances = dc.instance_list();
    let images = BTreeMap::new();
    let (survey, _) = agentsadm_flows::drift::find(&agentsadm_flows::drift::DriftInput {
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
    let upgrade = |component: &str, image: &agentsadm_plan::ImageRef| Finding {
        kind: FindingKind::WrongImage,
        server: Some(cn1),
        hostname: Some("cn001".into()),
        component: Some(component.into()),
        instance: None,
        details: String::new(),
        fix: Fix::Upgrade {
            image: image.clone(),
            transport: TransportKind::InstallAgent,
        },
        informational: false,
    };
    let findings = [upgrade("marlin-agent", &m2), upgrade("vm-agent", &vm2)];
    let plan = repair::plan_repairs(&dc.catalog, &survey, &BTreeMap::new(), &findings);
    let steps: Vec<&str> = plan
        .plan
        .servers()
        .values()
        .flat_map(|sp| &sp.steps)
        .map(|st| st.component.as_str())
        .collect();
    assert_eq!(steps, ["vm-agent"]);
    let skip = &plan.plan.skips()[0];
    assert_eq!(skip.component.as_deref(), Some("marlin-agent"));
    assert_eq!(skip.reason, SkipReason::NotBulk);
    assert!(!plan.plan.needs_explicit_yes());
    assert!(
        plan.render()
            .contains("left alone: marlin-agent on cn001: never updated in bulk"),
        "{}",
        plan.render()
    );
}
