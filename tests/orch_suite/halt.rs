//! The waves as the plan shows them, and what a halted rollout leaves as
//! intent, on the simulated datacenter:
//!
//! - the plan text and `--json` show the canaries, the order servers start
//!   in, the failure budget and the concurrency before anything runs, and
//!   the run follows them;
//! - a rollout halted by its failure budget puts intent back for what did
//!   not converge (issue 20, item 7): the service default this run moved
//!   and the failed servers' `params.image_uuid`, and says so; re-running
//!   the same command finishes the job.

use std::time::Duration;

use agentsadm_api::Apis;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::report::Halted;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::session::Session;
use agentsadm_plan::Operation;
use agentsadm_plan::PlanOptions;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::TransportMode;
use agentsadm_plan::rollout::FailureBudget;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SeedSpec;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_sim::testkit::request;
use agentsadm_types::ids::ImageUuid;

use crate::flows_common::instance_of;
use crate::flows_common::server;
use crate::flows_common::transport;

async fn sim(cns: usize) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(cns)
            .rack_size(2)
            .populate(SeedSpec {
                agents_without_params: Vec::new(),
                ..SeedSpec::default()
            }),
    )
    .await
    .expect("simulator starts")
}

async fn intended(dc: &SimDc, hostname: &str, component: &str) -> Option<ImageUuid> {
    instance_of(dc, server(dc, hostname), component)
        .await
        .and_then(|i| i.image_uuid())
}

async fn service_default(apis: &Apis, component: &str) -> Option<ImageUuid> {
    apis.sapi
        .list_agent_services()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == component)
        .and_then(|s| s.image_uuid())
}

/// A component whose postinstall keeps its SAPI instance: its target is
/// written before its step, so a halt has something to put back (an agent
/// whose postinstall replaces the instance is written after its step only,
/// and a failed step leaves nothing to put back).
const KEPT: &str = "firewaller";

/// Six CNs, firewaller 1.1.0 published (its postinstall keeps its SAPI
/// instance, so the instance is pointed at the new build before the step); installs fail on cn0001..cn0003.
/// One server at a time, a budget of one failure: cn0001 fails, cn0002
/// fails and the run halts. The service default goes back to 1.0.0 (a
/// server set up before the re-run must not get the halted build), the
/// failed servers' instances name 1.0.0 again, servers never started
/// keep 1.0.0, and the summary says what was put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_halt_puts_intent_back_for_what_did_not_converge() {
    let dc = sim(6).await;
    let apis = dc.apis();
    let old = service_default(&apis, KEPT).await.unwrap();
    let newer = dc
        .publish_component(KEPT, &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    for h in ["cn0001", "cn0002", "cn0003"] {
        dc.faults().fail_installs_on(server(&dc, h));
    }
    let session = Session {
        apis: &apis,
        catalog: dc.catalog(),
        updates: None,
    };
    let req = request(Operation::Update, &[KEPT], &[]);
    let rollout = RolloutPolicy {
        concurrency: 1,
        canary: Some(0),
        max_failures: Some(FailureBudget::Count(1)),
        max_per_rack: None,
    };
    let options = PlanOptions {
        transport: TransportMode::Auto,
        ignore_holds: false,
        rollout,
    };
    let planned = session
        .plan(&req, ImageChoice::Image(newer), options)
        .await
        .unwrap();
    let p = &planned.plan;
    assert_eq!(p.service_changes().len(), 1);
    assert_eq!(p.rollout().budget, Some(1));
    let exec = ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let report = crate::flows_common::execute_yes(
        session.apis,
        session.catalog,
        p,
        &exec,
        transport(),
        &NullReporter,
    )
    .await;
    assert_eq!(
        report.halted,
        Some(Halted::Budget {
            failures: 2,
            budget: 1
        })
    );
    assert_eq!(report.service_changes_reverted, 1);
    let mut failed: Vec<&str> = report
        .servers
        .values()
        .filter(|o| o.status == ServerStatus::Failed)
        .map(|o| o.hostname.as_str())
        .collect();
    failed.sort();
    assert_eq!(failed, ["cn0001", "cn0002"]);
    let reverted: Vec<&str> = report
        .intent_reverted
        .iter()
        .map(|r| r.hostname.as_str())
        .collect();
    assert_eq!(reverted, ["cn0001", "cn0002"]);
    assert!(report.intent_reverted.iter().all(|r| r.error.is_none()));
    // SAPI: the default and the failed servers' instances name 1.0.0;
    // the servers that never started were never pointed at 1.1.0.
    assert_eq!(service_default(&apis, KEPT).await, Some(old));
    for h in ["cn0001", "cn0002", "cn0003", "cn0004"] {
        assert_eq!(intended(&dc, h, KEPT).await, Some(old), "{h}");
    }
    let text = report.render(p);
    assert!(
        text.contains("halted after 2 failures (budget 1)")
            && text.contains("Intent put back after the halt: the default image of 1 service")
            && text.contains("firewaller on cn0001, firewaller on cn0002"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["intent_reverted"].as_array().unwrap().len(), 2);
    assert_eq!(json["service_changes_reverted"], 1);

    // Fixed: the same command again finishes the job, and nothing is left.
    dc.faults().clear();
    let again = session
        .plan(&req, ImageChoice::Image(newer), options)
        .await
        .unwrap();
    assert_eq!(again.plan.service_changes().len(), 1);
    let report = crate::flows_common::execute_yes(
        session.apis,
        session.catalog,
        &again.plan,
        &exec,
        transport(),
        &NullReporter,
    )
    .await;
    assert!(report.all_succeeded(), "{}", report.render(&again.plan));
    let last = session
        .plan(&req, ImageChoice::Image(newer), options)
        .await
        .unwrap();
    assert!(last.plan.is_empty(), "{}", last.plan);
    dc.shutdown().await;
}

async fn cli(dc: &SimDc, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc).run(args).await
}

/// `plan update` shows the waves before anything runs: the canaries (one
/// per rack, never the headnode), the order, the budget and the
/// concurrency, in text and in `--json`; `update -y` then follows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_shows_its_waves_and_the_run_follows_them() {
    let dc = sim(6).await;
    let newer = dc
        .publish_component("cmon-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    let target = format!("cmon-agent@{newer}");
    let args = [
        "update",
        &target,
        "--canary",
        "2",
        "-J",
        "3",
        "--max-failures",
        "2",
        "--max-per-rack",
        "1",
    ];
    let plan_args: Vec<&str> = ["plan"].iter().chain(&args).copied().collect();
    let (code, text, err) = cli(&dc, &plan_args).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(
            "Rollout: 3 servers at a time, at most 1 per rack; halts once more than 2 servers have failed (--max-failures 2):"
        ) && text.contains("  canary: cn0001, cn0003 (must pass before the others start; chosen as the first by hostname (no completed installs on record))")
            && text.contains("  then, in this order: cn0002, cn0004, cn0005, cn0006, headnode"),
        "{text}"
    );
    let mut json_args = plan_args.clone();
    json_args.push("--json");
    let (code, out, err) = cli(&dc, &json_args).await;
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rollout = &doc["plan"]["rollout"];
    assert_eq!(rollout["concurrency"], 3);
    assert_eq!(rollout["budget"], 2);
    assert_eq!(rollout["max_failures"], "2");
    assert_eq!(rollout["max_per_rack"], 1);
    assert_eq!(rollout["waves"][0]["canary"], true);
    let canaries: Vec<&str> = rollout["waves"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(canaries, ["cn0001", "cn0003"]);

    // Run it: the canaries first, as shown.
    let mut run_args: Vec<&str> = args.to_vec();
    run_args.extend(["-y", "--json"]);
    let (code, out, err) = cli(&dc, &run_args).await;
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["result"]["canary"]["servers"],
        serde_json::json!(["cn0001", "cn0003"])
    );
    assert_eq!(doc["result"]["canary"]["passed"], true);
    dc.shutdown().await;
}

/// `agentsadm adopt -y` (the example in its `--help`) parses and adopts;
/// `adopt` without it and without a terminal refuses and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_takes_yes_and_refuses_without_it() {
    let dc = SimDc::start(SimConfig::default().servers(2))
        .await
        .expect("simulator starts");
    let before = dc.mutation_count();
    let (code, out, err) = cli(&dc, &["adopt"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("pass -y"), "{err}");
    assert!(
        out.contains("instances to adopt"),
        "the plan is shown: {out}"
    );
    assert_eq!(dc.mutation_count(), before, "nothing changed");
    let (code, out, err) = cli(&dc, &["adopt", "-y"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Adopted"), "{out}");
    let (code, out, _) = cli(&dc, &["adopt", "-n"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("0 instances to adopt"), "{out}");
    dc.shutdown().await;
}
