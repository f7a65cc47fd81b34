//! Fenced plans against the simulated datacenter, through the library's
//! one run ([`Run`]) that every changing command uses: the plan is made
//! under the lock and again after the prompt; a plan that changed while
//! the question was on screen is shown and asked about again, never
//! executed unconfirmed. `check --fix`, `adopt` and `server delete` here;
//! `update`, `install` and `remove` go through the same [`Run::go`].

use agentsadm_api::sapi::Update;
use agentsadm_api::sapi::UpdateAction;
use agentsadm_api::sapi::object;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckError;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::FixPlanner;
use agentsadm_flows::cleanup::CleanupPlan;
use agentsadm_flows::cleanup::CleanupPlanner;
use agentsadm_flows::cleanup::ServerAction;
use agentsadm_flows::repair::FixPlan;
use agentsadm_orchestrate::adopt::AdoptPlan;
use agentsadm_orchestrate::adopt::AdoptPlanner;
use agentsadm_orchestrate::report::Halted;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::run::{RunError, RunOutcome, RunSettings};
use agentsadm_orchestrate::store::instance_params;
use agentsadm_plan::RolloutPolicy;
use agentsadm_sim::BuildOptions;
use agentsadm_sim::PublishTarget;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;

use crate::flows_common::Script;
use crate::flows_common::fix_yes;
use crate::flows_common::instance_of;
use crate::flows_common::server;
use crate::flows_common::sim_run;
use crate::flows_common::small_dc;

const REQUEST: CheckRequest = CheckRequest {
    exclude: Vec::new(),
    servers: Vec::new(),
    live: false,
};

async fn fix_plan(dc: &SimDc) -> Result<FixPlan, CheckError> {
    let run = check::check(&dc.apis(), dc.catalog(), &REQUEST, &CheckConfig::default()).await?;
    Ok(FixPlan::new(run, dc.catalog(), &RolloutPolicy::default()))
}

/// SAPI's vm-agent instance of `hostname` names `image`: drift that
/// `check --fix` repairs with an upgrade.
async fn intend(
    apis: &agentsadm_api::Apis,
    dc_server: agentsadm_types::ids::ServerUuid,
    instance: InstanceUuid,
    image: ImageUuid,
) {
    apis.sapi
        .update_instance(instance, &Update::params(instance_params(dc_server, image)))
        .await
        .expect("SAPI update");
}

async fn intend_on(dc: &SimDc, hostname: &str, image: ImageUuid) {
    let cn = server(dc, hostname);
    let inst = instance_of(dc, cn, "vm-agent").await.expect("an instance");
    intend(&dc.apis(), cn, inst.uuid, image).await;
}

fn hosts(p: &FixPlan) -> Vec<String> {
    p.repairs
        .plan
        .servers_in_order()
        .into_iter()
        .map(|(_, sp)| sp.hostname.clone())
        .collect()
}

fn vm_agent_image(dc: &SimDc, hostname: &str) -> Option<ImageUuid> {
    dc.server_agents(server(dc, hostname))
        .into_iter()
        .find(|a| a.name == "vm-agent")
        .and_then(|a| a.image_uuid)
}

/// While the operator reads the repairs for cn0001, someone points
/// cn0002's instance at the new build too. The re-plan after the yes
/// differs: it is shown and asked about again. Declined: nothing runs, on
/// either server. Confirmed: what runs is the second plan, the one shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_repairs_changed_after_the_prompt_are_not_executed() {
    for second_answer in [false, true] {
        let dc = small_dc().await;
        let before = vm_agent_image(&dc, "cn0001");
        let newer = dc
            .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
            .unwrap()
            .uuid;
        intend_on(&dc, "cn0001", newer).await;
        assert_eq!(hosts(&fix_plan(&dc).await.unwrap()), ["cn0001"]);
        let cn2 = server(&dc, "cn0002");
        let cn2_instance = instance_of(&dc, cn2, "vm-agent").await.unwrap().uuid;
        let apis = dc.apis();
        let operator = Script::new(&[true, second_answer], true, hosts).while_asking({
            let apis = apis.clone();
            async move { intend(&apis, cn2, cn2_instance, newer).await }
        });
        let settings = RunSettings::default();
        let run = sim_run(&apis, dc.catalog(), &settings, "check --fix");
        let planner = FixPlanner {
            apis: &apis,
            catalog: dc.catalog(),
            request: &REQUEST,
            config: &CheckConfig::default(),
            policy: RolloutPolicy::default(),
        };
        let outcome = run
            .go(&planner, &operator, std::future::pending())
            .await
            .unwrap();
        assert_eq!(operator.asked(), 2, "asked again about the changed repairs");
        assert_eq!(operator.changed(), [["cn0001", "cn0002"]]);
        if !second_answer {
            assert!(matches!(outcome, RunOutcome::Declined(_)));
            for h in ["cn0001", "cn0002"] {
                assert_eq!(vm_agent_image(&dc, h), before, "{h} was not touched");
            }
            dc.shutdown().await;
            continue;
        }
        let RunOutcome::Executed { planned, report } = outcome else {
            panic!("the changed repairs were confirmed: {outcome:?}")
        };
        assert_eq!(hosts(&planned), ["cn0001", "cn0002"]);
        let done = check::after_fix(
            &apis,
            dc.catalog(),
            &REQUEST,
            &CheckConfig::default(),
            &planned.repairs.plan,
            report,
        )
        .await
        .unwrap();
        assert_eq!(done.exit_status(), 0, "{}", done.after.render());
        for h in ["cn0001", "cn0002"] {
            assert_eq!(vm_agent_image(&dc, h), Some(newer), "{h}");
        }
        dc.shutdown().await;
    }
}

/// Another process broke the datacenter lock `check --fix` holds: no
/// repaired server starts and no SAPI write is made; the run ends with
/// exit status 2 and the drift still there to repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fix_under_a_broken_lock_starts_no_server() {
    let dc = small_dc().await;
    let before = vm_agent_image(&dc, "cn0001");
    let newer = dc
        .publish_component("vm-agent", &BuildOptions::new("1.1.0"), PublishTarget::Dc)
        .unwrap()
        .uuid;
    intend_on(&dc, "cn0001", newer).await;
    let plan = fix_plan(&dc).await.unwrap();
    assert_eq!(hosts(&plan), ["cn0001"]);
    // Once the run made the plan it executes, the lock's record goes
    // (a colleague's `--break-lock`, or an operator cleaning up).
    let apis = dc.apis();
    let outcome = fix_yes(
        &dc,
        &REQUEST,
        RolloutPolicy::default(),
        &NullReporter,
        &|| {
            let apis = apis.clone();
            Box::pin(async move {
                let keys = crate::one_at_a_time::lock_keys(&apis).await;
                crate::one_at_a_time::delete_metadata_keys(&apis, &keys).await;
            })
        },
    )
    .await;
    let servers = outcome.repairs.servers.as_ref().expect("server steps ran");
    assert_eq!(servers.halted, Some(Halted::LockLost));
    assert_eq!(outcome.exit_status(), 2);
    assert_eq!(
        vm_agent_image(&dc, "cn0001"),
        before,
        "cn0001 was not touched"
    );
    assert_eq!(hosts(&fix_plan(&dc).await.unwrap()), ["cn0001"]);
    dc.shutdown().await;
}

/// Strip `params` from the SAPI instance of `component` on `hostname`:
/// adoption's work.
async fn strip_params(dc: &SimDc, hostname: &str, component: &str) {
    let cn = server(dc, hostname);
    let inst = instance_of(dc, cn, component).await.expect("an instance");
    let strip = Update {
        action: Some(UpdateAction::Delete),
        params: Some(object([
            ("server_uuid", serde_json::Value::Null),
            ("image_uuid", serde_json::Value::Null),
        ])),
        metadata: None,
    };
    dc.apis()
        .sapi
        .update_instance(inst.uuid, &strip)
        .await
        .expect("strip params");
}

fn adopted(p: &AdoptPlan) -> Vec<String> {
    let mut v: Vec<String> = p
        .instances
        .iter()
        .map(|i| format!("{} {}", i.hostname, i.component))
        .collect();
    v.sort();
    v
}

/// `adopt` goes through the one run: `-n` changes nothing (not even the
/// lock), no `-y` without a terminal refuses, `-y` adopts without asking,
/// and a change made while the question is on screen is shown and asked
/// about again: declined, nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_dry_run_yes_prompt_and_fence() {
    // Every instance with its params, but cn0001's cmon-agent.
    let dc = SimDc::start(
        agentsadm_sim::SimConfig::default()
            .servers(3)
            .not_setup(["cn0003"])
            .populate(agentsadm_sim::SeedSpec {
                agents_without_params: Vec::new(),
                ..Default::default()
            }),
    )
    .await
    .expect("simulator starts");
    strip_params(&dc, "cn0001", "cmon-agent").await;
    let apis = dc.apis();
    let planner = AdoptPlanner {
        apis: &apis,
        catalog: dc.catalog(),
        servers: Vec::new(),
    };
    let go = async |settings: &RunSettings, operator: &Script<AdoptPlan>| {
        sim_run(&apis, dc.catalog(), settings, "adopt")
            .go(&planner, operator, std::future::pending())
            .await
    };

    // -n: shown, nothing written.
    let before = dc.mutation_count();
    let dry = RunSettings {
        dry_run: true,
        ..RunSettings::default()
    };
    let operator = Script::new(&[], false, adopted);
    let outcome = go(&dry, &operator).await.unwrap();
    assert!(matches!(outcome, RunOutcome::DryRun(ref p) if adopted(p) == ["cn0001 cmon-agent"]));
    assert_eq!(dc.mutation_count(), before, "-n writes nothing");

    // No -y, no terminal: refused before the lock.
    let outcome = go(&RunSettings::default(), &operator).await;
    assert!(matches!(outcome, Err(RunError::NeedsYes)), "{outcome:?}");
    assert_eq!(dc.mutation_count(), before, "nothing written");

    // The question on screen while cn0002's vm-agent loses its params too:
    // the new plan is shown and asked about; declined, nothing is written.
    let fence = Script::new(&[true, false], true, adopted).while_asking({
        let dc_apis = apis.clone();
        let cn2 = server(&dc, "cn0002");
        let inst = instance_of(&dc, cn2, "vm-agent").await.unwrap().uuid;
        async move {
            let strip = Update {
                action: Some(UpdateAction::Delete),
                params: Some(object([
                    ("server_uuid", serde_json::Value::Null),
                    ("image_uuid", serde_json::Value::Null),
                ])),
                metadata: None,
            };
            dc_apis.sapi.update_instance(inst, &strip).await.unwrap();
        }
    });
    let instances_before_answer = apis.sapi.list_agent_instances().await.unwrap();
    let outcome = go(&RunSettings::default(), &fence).await.unwrap();
    assert_eq!(fence.asked(), 2);
    assert_eq!(
        fence.changed(),
        [["cn0001 cmon-agent", "cn0002 vm-agent"]],
        "the changed plan is shown"
    );
    assert!(matches!(outcome, RunOutcome::Declined(_)));
    let after: Vec<_> = apis.sapi.list_agent_instances().await.unwrap();
    let changed_by_run: Vec<_> = after
        .iter()
        .filter(|i| i.server_uuid().is_some())
        .filter(|i| {
            !instances_before_answer
                .iter()
                .any(|b| b.uuid == i.uuid && b.server_uuid().is_some())
        })
        .collect();
    assert!(changed_by_run.is_empty(), "declined: nothing adopted");

    // -y: adopted without a question, and nothing left after.
    let yes = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let operator = Script::new(&[], false, adopted);
    let outcome = go(&yes, &operator).await.unwrap();
    assert_eq!(operator.asked(), 0);
    let RunOutcome::Executed { report, .. } = outcome else {
        panic!("adopted: {outcome:?}")
    };
    let adopted_now = agentsadm_orchestrate::adopt::AdoptReport::from_exec(&report);
    assert_eq!(adopted_now.instances_adopted, 2, "{adopted_now:?}");
    let again = go(&yes, &Script::new(&[], false, adopted)).await.unwrap();
    assert!(matches!(again, RunOutcome::Empty(_)), "{again:?}");
    dc.shutdown().await;
}

fn deletions(p: &CleanupPlan) -> Vec<String> {
    let mut v: Vec<String> = p.instances.iter().map(|i| i.uuid.to_string()).collect();
    v.sort();
    v
}

/// `server delete` goes through the same fence: an instance of the server
/// recorded while the question is on screen makes a new plan, shown and
/// asked about; declined, nothing is deleted and CNAPI keeps the server.
/// Confirmed, the second plan runs: every instance, then CNAPI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_delete_goes_through_the_same_fence() {
    for second_answer in [false, true] {
        let dc = small_dc().await;
        let apis = dc.apis();
        let cn = server(&dc, "cn0001");
        let planner = CleanupPlanner {
            apis: &apis,
            action: ServerAction::Delete,
            name: "cn0001".to_string(),
        };
        let late = InstanceUuid::new_v4();
        let image = dc.default_image("vm-agent").unwrap();
        let operator = Script::new(&[true, second_answer], true, deletions).while_asking({
            let apis = apis.clone();
            let svc = crate::flows_common::service(&dc, "vm-agent").await;
            async move {
                apis.sapi
                    .create_instance(&agentsadm_api::sapi::CreateInstance {
                        uuid: Some(late),
                        service_uuid: Some(svc),
                        params: Some(instance_params(cn, image)),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
        });
        let settings = RunSettings::default();
        let outcome = sim_run(&apis, dc.catalog(), &settings, "server delete cn0001")
            .go(&planner, &operator, std::future::pending())
            .await
            .unwrap();
        assert_eq!(operator.asked(), 2);
        let changed = operator.changed();
        assert_eq!(changed.len(), 1);
        assert!(changed[0].contains(&late.to_string()));
        if !second_answer {
            assert!(matches!(outcome, RunOutcome::Declined(_)));
            assert!(dc.record(cn).is_some(), "CNAPI keeps the server");
            assert!(apis.sapi.get_instance(late).await.is_ok());
            assert!(instance_of(&dc, cn, "cmon-agent").await.is_some());
            dc.shutdown().await;
            continue;
        }
        let RunOutcome::Executed { report, .. } = outcome else {
            panic!("confirmed: {outcome:?}")
        };
        let report = agentsadm_flows::cleanup::CleanupReport::from_exec(&report);
        assert_eq!(report.exit_status(), 0, "{report:?}");
        assert!(dc.record(cn).is_none());
        assert!(
            apis.sapi.get_instance(late).await.is_err(),
            "the late one too"
        );
        dc.shutdown().await;
    }
}

/// A lock held by another agentsadm is reported before any plan is made
/// or shown, for every command (here `server delete`), and nothing is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_refuses_before_planning() {
    let dc = small_dc().await;
    let apis = dc.apis();
    let store = agentsadm_orchestrate::lock::SapiLockStore::new(apis.sapi.clone())
        .await
        .unwrap();
    let held = agentsadm_orchestrate::lock::acquire(
        &store,
        "ops@otherhost:4242",
        "update --all",
        &agentsadm_orchestrate::lock::LockOptions {
            settle: std::time::Duration::from_millis(10),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let before = dc.mutation_count();
    let planner = CleanupPlanner {
        apis: &apis,
        action: ServerAction::Delete,
        name: "cn0001".to_string(),
    };
    let operator = Script::new(&[true], true, deletions);
    let yes = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let err = sim_run(&apis, dc.catalog(), &yes, "server delete cn0001")
        .go(&planner, &operator, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ops@otherhost:4242"), "{err}");
    assert!(operator.shown.lock().unwrap().is_empty(), "no plan shown");
    assert_eq!(dc.mutation_count(), before);
    held.release().await.unwrap();
    dc.shutdown().await;
}
