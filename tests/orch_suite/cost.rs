//! What a rollout costs the headnode per server step (issue 35), through
//! the one run every changing command uses, on the simulator: one SAPI
//! write per step (after the step for an agent whose postinstall replaces
//! its instance, before it for one whose postinstall keeps it), no lock
//! read of its own (a confirmation stands for a short window), and every
//! instance as it must stand afterwards.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentsadm_orchestrate::images::ImageChoice;
use agentsadm_orchestrate::report::{ExecEvent, Reporter};
use agentsadm_orchestrate::run::{Run, RunOutcome};
use agentsadm_orchestrate::session::{RequestPlanner, Session};
use agentsadm_plan::{Operation, PlanOptions, RolloutPolicy, TransportMode};
use agentsadm_sim::testkit::request;
use agentsadm_sim::{CallCount, SeedSpec, SimApi, SimConfig, SimDc};

use crate::flows_common::{Script, exec_options, instance_of, transport};

/// CNAPI's requests by route (`GET /servers`...).
type Routes = BTreeMap<String, u64>;

/// The clients' SAPI and CNAPI requests while the executor ran (from its
/// start to its end event), and CNAPI's by route.
struct Counting<'d> {
    dc: &'d SimDc,
    at: Mutex<Vec<(CallCount, CallCount, Routes)>>,
}

impl Reporter for Counting<'_> {
    fn event(&self, event: &ExecEvent<'_>) {
        if matches!(event, ExecEvent::Started { .. } | ExecEvent::Finished(_)) {
            let now = (
                self.dc.client_calls(SimApi::Sapi),
                self.dc.client_calls(SimApi::Cnapi),
                self.dc.client_routes(SimApi::Cnapi),
            );
            self.at.lock().unwrap().push(now);
        }
    }
}

/// The requests of each route made between `before` and `after`.
fn routes_between(before: &Routes, after: &Routes) -> Routes {
    after
        .iter()
        .map(|(route, n)| (route.clone(), n - before.get(route).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `update <components> -y` on `hosts` (every server if empty) through
/// a run on the simulator, with `rollout`, and the lock's settle pause in
/// seconds if given. Returns the plan executed (which exited 0) and the
/// clients' requests counted at the executor's start and end.
async fn counted_update(
    dc: &SimDc,
    components: &[&str],
    hosts: &[&str],
    rollout: RolloutPolicy,
    settle_s: Option<u64>,
) -> (agentsadm_plan::Plan, Vec<(CallCount, CallCount, Routes)>) {
    let apis = dc.apis();
    let settings = agentsadm_orchestrate::run::RunSettings {
        yes: true,
        rollout,
        options: exec_options(),
        ..Default::default()
    };
    let planner = RequestPlanner {
        session: Session {
            apis: &apis,
            catalog: dc.catalog(),
            updates: None,
        },
        request: request(Operation::Update, components, hosts),
        choice: ImageChoice::Latest,
        options: PlanOptions {
            transport: TransportMode::Auto,
            ignore_holds: false,
            rollout: settings.rollout,
        },
        durations: None,
        overlay: None,
    };
    let counting = Counting {
        dc,
        at: Mutex::new(Vec::new()),
    };
    let mut run = Run::new(&apis, dc.catalog(), &settings, &counting, "update");
    run.transport = transport();
    run.history = None;
    if let Some(s) = settle_s {
        run.lock.settle = std::time::Duration::from_secs(s);
    }
    let operator = Script::new(&[], false, |_: &agentsadm_plan::Plan| Vec::<String>::new());
    let outcome = run
        .go(&planner, &operator, std::future::pending())
        .await
        .expect("the run");
    let RunOutcome::Executed { planned, report } = outcome else {
        panic!("executed: {outcome:?}")
    };
    assert_eq!(
        report.exit_status(&planned),
        0,
        "{}",
        report.render(&planned)
    );
    let at = counting.at.lock().unwrap().clone();
    (planned, at)
}

/// `update vm-agent firewaller -y -J 8` on eight compute nodes: vm-agent's
/// postinstall re-adopts its instance bare (SAPI replaces the object),
/// firewaller's adopts only a missing one. Each server step makes one SAPI
/// write (main: two, before and after the step) and four CNAPI requests
/// (one server read, not two), the lock is read a few times for the whole
/// run (main: twice per server), and afterwards every instance names its
/// server and the image it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_costs_one_sapi_write_and_no_lock_read_of_its_own() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(8)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let components = ["vm-agent", "firewaller"];
    let rollout = RolloutPolicy {
        concurrency: 8,
        canary: Some(0),
        ..RolloutPolicy::default()
    };
    // A window of 2 s (half the settle pause): the whole execution, even
    // on a loaded machine, is a few windows, however many steps it has.
    let (planned, at) = counted_update(&dc, &components, &[], rollout, Some(4)).await;
    let steps = planned.step_count();
    let servers = planned.servers().len();
    assert_eq!(steps, 2 * servers, "{planned}");
    let [(sapi0, cnapi0, routes0), (sapi1, cnapi1, routes1)] = &at[..] else {
        panic!("a start and an end: {at:?}")
    };
    let sapi = *sapi1 - *sapi0;
    assert_eq!(
        sapi.writes as usize, steps,
        "one SAPI write per server step"
    );
    assert!(
        (sapi.reads as usize) < servers,
        "the lock is not read per server or step: {sapi:?} for {servers} servers"
    );
    // CNAPI, per step through cn-agent: the server read before the task
    // (server.agents against the plan; it also gives the execute mode),
    // install-agent, the task's wait and the `gz health` execute. The
    // check reuses its step's read (main: a second read per step).
    let cnapi = *cnapi1 - *cnapi0;
    let routes = routes_between(routes0, routes1);
    let per_step = |route: &str| routes.get(route).copied().unwrap_or(0) as usize;
    for route in [
        "GET /servers",
        "POST /servers/:id/install-agent",
        "POST /servers/:id/execute",
    ] {
        assert_eq!(per_step(route), steps, "{route} once per step: {routes:#?}");
    }
    // A task waits in 5 s chunks: one each, unless the machine is slow.
    let waits = per_step("GET /tasks/:id/wait");
    assert!(waits >= steps, "{routes:#?}");
    assert_eq!(
        (cnapi.reads + cnapi.writes) as usize,
        3 * steps + waits,
        "nothing else asked of CNAPI: {routes:#?}"
    );
    for s in dc.servers().into_iter().filter(|s| !s.headnode) {
        for c in components {
            let runs = dc
                .server_agents(s.uuid)
                .into_iter()
                .find(|a| a.name == c)
                .and_then(|a| a.image_uuid);
            let inst = instance_of(&dc, s.uuid, c).await.expect("an instance");
            assert_eq!(inst.server_uuid(), Some(s.uuid), "{} {c}", s.hostname);
            assert_eq!(inst.image_uuid(), runs, "{} {c}", s.hostname);
            assert!(runs.is_some());
        }
    }
    dc.shutdown().await;
}

/// `update sdcadm gz-tools` on the headnode, whose agentsadm parses
/// `--expect` (issue 35): both go in one `gz install` through the real
/// installer, one CNAPI execute for the two steps (one each before),
/// and each is recorded on its own: its SAPI instance names the server
/// and the image the server now runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headnodes_execute_steps_share_one_execute() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(1)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let components = ["sdcadm", "gz-tools"];
    let hn = dc.headnode();
    let hosts = [hn.hostname.as_str()];
    let (planned, at) =
        counted_update(&dc, &components, &hosts, RolloutPolicy::default(), None).await;
    assert_eq!(planned.step_count(), 2, "{planned}");
    assert_eq!(
        planned.servers()[&hn.uuid].execute_groups(),
        [vec![0, 1]],
        "{planned}"
    );
    let [(_, _, routes0), (_, _, routes1)] = &at[..] else {
        panic!("a start and an end: {at:?}")
    };
    let routes = routes_between(routes0, routes1);
    assert_eq!(
        routes.get("POST /servers/:id/execute").copied(),
        Some(1),
        "{routes:#?}"
    );
    for c in components {
        let runs = dc
            .server_agents(hn.uuid)
            .into_iter()
            .find(|a| a.name == c)
            .and_then(|a| a.image_uuid);
        let target = planned.servers()[&hn.uuid]
            .steps
            .iter()
            .find(|st| st.component == c)
            .and_then(|st| st.action.target())
            .map(|t| t.uuid);
        assert_eq!(runs, target, "{c}");
        let inst = instance_of(&dc, hn.uuid, c).await.expect("an instance");
        assert_eq!(inst.server_uuid(), Some(hn.uuid), "{c}");
        assert_eq!(inst.image_uuid(), runs, "{c}");
    }
    dc.shutdown().await;
}
