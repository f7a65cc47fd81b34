//! Helpers for the flows tests: a small simulated datacenter, `check` and
//! `check --fix` with settings fit for loopback, and SAPI shortcuts to make
//! drift.

#![allow(dead_code)]

use std::time::Duration;

use agentsadm_api::sapi::CreateInstance;

use agentsadm_api::sapi::Instance;

use agentsadm_api::sapi::Update;

use agentsadm_api::sapi::UpdateAction;

use agentsadm_api::sapi::object;
use agentsadm_flows::check;
use agentsadm_flows::check::CheckConfig;
use agentsadm_flows::check::CheckRequest;
use agentsadm_flows::check::CheckRun;
use agentsadm_flows::check::FixOutcome;
use agentsadm_flows::drift::FindingKind;
use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::transport::CnapiTransportConfig;
use agentsadm_sim::SimConfig;
use agentsadm_sim::SimDc;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::ids::ServiceUuid;

/// Headnode, cn0001, cn0002 set up; cn0003 not set up.
pub async fn small_dc() -> SimDc {
    SimDc::start(SimConfig::default().servers(3).not_setup(["cn0003"]))
        .await
        .expect("simulator starts")
}

pub fn server(dc: &SimDc, hostname: &str) -> ServerUuid {
    dc.server(hostname)
        .unwrap_or_else(|| panic!("no server {hostname}"))
        .uuid
}

pub async fn check(dc: &SimDc, live: bool) -> CheckRun {
    check::check(
        &dc.apis(),
        dc.catalog(),
        &CheckRequest {
            servers: Vec::new(),
            exclude: Vec::new(),
            live,
        },
        &CheckConfig::default(),
    )
    .await
    .expect("check runs")
}

pub fn transport() -> CnapiTransportConfig {
    CnapiTransportConfig {
        wait_chunk: Duration::from_secs(5),
        execute_timeout: Duration::from_secs(60),
        confirm_poll: (Duration::from_millis(20), Duration::from_millis(200)),
        confirm_grace_after_failure: Duration::from_secs(2),
        ..Default::default()
    }
}

pub fn exec_options() -> ExecOptions {
    ExecOptions {
        task_timeout: Duration::from_secs(60),
        tick: Duration::from_millis(100),
        ..Default::default()
    }
}

/// `check --fix -y` through the library's one run (the lock, a history
/// entry in SAPI).
pub async fn fix(dc: &SimDc, run: &CheckRun) -> FixOutcome {
    let request = CheckRequest {
        servers: Vec::new(),
        exclude: Vec::new(),
        live: run.live_requested,
    };
    fix_yes(dc, &request, Default::default(), &NullReporter, &|| {
        nothing()
    })
    .await
}

/// `check --fix -y` for `request`, rolled out under `policy`, through the
/// library's one run, reporting to `reporter`; `then` is called once the
/// plan the run executes is made.
pub async fn fix_yes<'a>(
    dc: &SimDc,
    request: &CheckRequest,
    policy: agentsadm_plan::RolloutPolicy,
    reporter: &dyn agentsadm_orchestrate::report::Reporter,
    then: &'a Then<'a>,
) -> FixOutcome {
    use agentsadm_flows::check::FixPlanner;
    use agentsadm_orchestrate::run::{Planned, RunOutcome, RunSettings};
    let apis = dc.apis();
    let config = CheckConfig::default();
    let settings = RunSettings {
        yes: true,
        rollout: policy,
        options: exec_options(),
        ..RunSettings::default()
    };
    let planner = ThenPlanner::new(
        FixPlanner {
            apis: &apis,
            catalog: dc.catalog(),
            request,
            config: &config,
            policy,
        },
        2,
        then,
    );
    let operator = Script::new(&[], false, |_: &agentsadm_flows::repair::FixPlan| {
        Vec::new()
    });
    let mut run = sim_run(&apis, dc.catalog(), &settings, "check --fix");
    run.reporter = reporter;
    let outcome = run.go(&planner, &operator, std::future::pending()).await;
    let (plan, report) = match outcome {
        Ok(RunOutcome::Executed { planned, report }) => (planned.plan().clone(), report),
        // Nothing to repair (only what is left to the operator): nothing
        // ran, and the check says what is left.
        Ok(RunOutcome::Empty(_)) => {
            let after = check::check(&apis, dc.catalog(), request, &config)
                .await
                .expect("check after the repairs");
            return FixOutcome {
                repairs: Default::default(),
                after,
            };
        }
        other => panic!("the repairs did not run: {other:?}"),
    };
    check::after_fix(&apis, dc.catalog(), request, &config, &plan, report)
        .await
        .expect("check after the repairs")
}

/// The drift findings (not informational) as (hostname or "-", component, kind).
pub fn drift(run: &CheckRun) -> Vec<(String, String, FindingKind)> {
    run.findings
        .iter()
        .filter(|f| !f.informational)
        .map(|f| {
            (
                f.hostname.clone().unwrap_or_else(|| "-".into()),
                f.component.clone().unwrap_or_default(),
                f.kind,
            )
        })
        .collect()
}

pub fn one(host: &str, component: &str, kind: FindingKind) -> Vec<(String, String, FindingKind)> {
    vec![(host.to_string(), component.to_string(), kind)]
}

/// The SAPI instance of a component on a server (by params.server_uuid).
pub async fn instance_of(dc: &SimDc, server: ServerUuid, component: &str) -> Option<Instance> {
    let apis = dc.apis();
    let svc = service(dc, component).await;
    // Without params (vm-agent's and net-agent's, as real postinstalls
    // leave them), the server's own instance is the one server.agents
    // lists.
    let reported: Vec<_> = dc
        .server_agents(server)
        .into_iter()
        .filter_map(|a| a.uuid)
        .collect();
    apis.sapi
        .list_agent_instances()
        .await
        .unwrap()
        .into_iter()
        .find(|i| {
            i.service_uuid == svc
                && match i.server_uuid() {
                    Some(s) => s == server,
                    None => reported.contains(&i.uuid),
                }
        })
}

pub async fn service(dc: &SimDc, component: &str) -> ServiceUuid {
    dc.apis()
        .sapi
        .list_agent_services()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == component)
        .unwrap_or_else(|| panic!("no service {component}"))
        .uuid
}

/// Create an agent instance with these params (or none).
pub async fn put_instance(
    dc: &SimDc,
    uuid: InstanceUuid,
    component: &str,
    params: Option<serde_json::Map<String, serde_json::Value>>,
) {
    let svc = service(dc, component).await;
    dc.apis()
        .sapi
        .create_instance(&CreateInstance {
            uuid: Some(uuid),
            service_uuid: Some(svc),
            params,
            ..Default::default()
        })
        .await
        .expect("create instance");
}

/// Remove params keys from a service.
pub async fn delete_service_param(dc: &SimDc, component: &str, key: &str) {
    let svc = service(dc, component).await;
    let update = Update {
        action: Some(UpdateAction::Delete),
        params: Some(object([(key, "")])),
        metadata: None,
    };
    dc.apis()
        .sapi
        .update_service(svc, &update)
        .await
        .expect("update service");
}

/// Assert a check finds nothing but informational findings.
pub fn assert_clean(run: &CheckRun) {
    assert!(
        !run.has_drift() && run.warnings.is_empty(),
        "expected no drift:\n{}",
        run.render()
    );
}

/// The run's operator in a test: it records what was shown and asked,
/// answers from a script, and can make a change in the datacenter while
/// its first question is on screen (as a colleague or another tool would).
pub struct Script<P> {
    /// Answers to the questions, in order (then no).
    pub answers: std::sync::Mutex<std::collections::VecDeque<bool>>,
    pub interactive: bool,
    /// How many questions were asked.
    pub asked: std::sync::atomic::AtomicUsize,
    /// Each plan shown: how, and what `describe` made of it.
    pub shown: std::sync::Mutex<Vec<(agentsadm_orchestrate::run::Shown, Vec<String>)>>,
    describe: fn(&P) -> Vec<String>,
    /// Made while the first question is on screen.
    inject: std::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

impl<P> Script<P> {
    pub fn new(answers: &[bool], interactive: bool, describe: fn(&P) -> Vec<String>) -> Self {
        Script {
            answers: std::sync::Mutex::new(answers.iter().copied().collect()),
            interactive,
            asked: Default::default(),
            shown: Default::default(),
            describe,
            inject: std::sync::Mutex::new(None),
        }
    }

    /// Make `change` while the first question is on screen.
    pub fn while_asking(
        self,
        change: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        *self.inject.lock().unwrap() = Some(Box::pin(change));
        self
    }

    pub fn asked(&self) -> usize {
        self.asked.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// What was shown after a change was noticed.
    pub fn changed(&self) -> Vec<Vec<String>> {
        self.shown
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| *s == agentsadm_orchestrate::run::Shown::Changed)
            .map(|(_, d)| d.clone())
            .collect()
    }
}

impl<P> agentsadm_orchestrate::run::Operator<P> for Script<P> {
    fn show(&self, planned: &P, shown: agentsadm_orchestrate::run::Shown) {
        self.shown
            .lock()
            .unwrap()
            .push((shown, (self.describe)(planned)));
    }

    fn interactive(&self) -> bool {
        self.interactive
    }

    async fn ask(&self, _: &P) -> Result<bool, agentsadm_orchestrate::run::AskError> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let inject = self.inject.lock().unwrap().take();
        if let Some(change) = inject {
            change.await;
        }
        Ok(self.answers.lock().unwrap().pop_front().unwrap_or(false))
    }

    fn note(&self, _: &str) {}

    async fn canary_passed(&self, _: &[String], _: usize, _: bool) -> bool {
        true
    }
}

/// A run of the library's one pipeline against the simulator: its
/// transport and lock timing fit for loopback.
pub fn sim_run<'a>(
    apis: &'a agentsadm_api::Apis,
    catalog: &'a agentsadm_types::catalog::Catalog,
    settings: &'a agentsadm_orchestrate::run::RunSettings,
    operation: &str,
) -> agentsadm_orchestrate::run::Run<'a> {
    let mut run =
        agentsadm_orchestrate::run::Run::new(apis, catalog, settings, &NullReporter, operation);
    run.transport = transport();
    run.lock.settle = Duration::from_millis(20);
    // Recorded in SAPI only: no journals in the developer's home.
    if let Some(h) = run.history.as_mut() {
        h.local = None;
    }
    run
}

/// `agentsadm adopt -y` through the library's one run (the lock, a
/// history entry in SAPI), against the simulator.
pub async fn adopt_yes(
    apis: &agentsadm_api::Apis,
    catalog: &agentsadm_types::catalog::Catalog,
) -> agentsadm_orchestrate::adopt::AdoptReport {
    use agentsadm_orchestrate::adopt::{AdoptPlan, AdoptPlanner, AdoptReport};
    use agentsadm_orchestrate::run::{RunOutcome, RunSettings};
    let settings = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let planner = AdoptPlanner {
        apis,
        catalog,
        servers: Vec::new(),
    };
    let operator = Script::new(&[], false, |_: &AdoptPlan| Vec::new());
    let outcome = sim_run(apis, catalog, &settings, "adopt")
        .go(&planner, &operator, std::future::pending())
        .await;
    match outcome {
        Ok(RunOutcome::Executed { report, .. }) => AdoptReport::from_exec(&report),
        Ok(RunOutcome::Empty(_)) => AdoptReport::default(),
        other => panic!("adoption did not run: {other:?}"),
    }
}

/// A command's planner, with `then` called once the `at`-th plan is made:
/// with `-y` the second plan (the one made under the lock) is the one the
/// run executes, so `at: 2` changes the datacenter between the plan and
/// its execution.
pub struct ThenPlanner<'a, P> {
    pub inner: P,
    pub at: usize,
    pub then: &'a Then<'a>,
    calls: std::sync::atomic::AtomicUsize,
}

/// What a [`ThenPlanner`] does once its plan is made.
pub type Then<'a> = dyn Fn() -> futures::future::BoxFuture<'a, ()> + Sync + 'a;

/// Nothing happens between the plan and its execution.
pub fn nothing() -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async {})
}

impl<'a, P> ThenPlanner<'a, P> {
    pub fn new(inner: P, at: usize, then: &'a Then<'a>) -> Self {
        ThenPlanner {
            inner,
            at,
            then,
            calls: Default::default(),
        }
    }
}

impl<P: agentsadm_orchestrate::run::Planner> agentsadm_orchestrate::run::Planner
    for ThenPlanner<'_, P>
{
    type Planned = P::Planned;
    type Error = P::Error;

    async fn plan(&self) -> Result<P::Planned, P::Error> {
        let planned = self.inner.plan().await?;
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if n == self.at {
            (self.then)().await;
        }
        Ok(planned)
    }
}

/// `server delete|factory-reset NAME -y` through the library's one run
/// (the lock, a history entry in SAPI), against the simulator; `then` is
/// called once the plan the run executes is made.
pub async fn cleanup_yes<'a>(
    dc: &SimDc,
    action: agentsadm_flows::cleanup::ServerAction,
    name: &str,
    then: &'a Then<'a>,
) -> agentsadm_flows::cleanup::CleanupReport {
    use agentsadm_flows::cleanup::{CleanupPlan, CleanupPlanner, CleanupReport};
    use agentsadm_orchestrate::run::{RunOutcome, RunSettings};
    let apis = dc.apis();
    let settings = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let operation = format!("server {} {name}", action.as_str());
    let planner = ThenPlanner::new(
        CleanupPlanner {
            apis: &apis,
            action,
            name: name.to_string(),
        },
        2,
        then,
    );
    let operator = Script::new(&[], false, |_: &CleanupPlan| Vec::new());
    let outcome = sim_run(&apis, dc.catalog(), &settings, &operation)
        .go(&planner, &operator, std::future::pending())
        .await;
    match outcome {
        Ok(RunOutcome::Executed { report, .. }) => CleanupReport::from_exec(&report),
        other => panic!("the cleanup did not run: {other:?}"),
    }
}

/// A command's planner that makes `plan` every time: for tests that made
/// and checked a plan themselves and now carry it out. The run still takes
/// the lock, plans again under it (the same plan), confirms it with `-y`
/// and records it, as for every command.
pub struct AsPlanned<'a>(pub &'a agentsadm_plan::Plan);

impl agentsadm_orchestrate::run::Planner for AsPlanned<'_> {
    type Planned = agentsadm_plan::Plan;
    type Error = std::convert::Infallible;

    async fn plan(&self) -> Result<agentsadm_plan::Plan, std::convert::Infallible> {
        Ok(self.0.clone())
    }
}

/// Carry out `plan` with `-y` through the library's one run (the lock, a
/// history entry in SAPI), with these executor options and transport,
/// reporting to `reporter`.
pub async fn execute_yes(
    apis: &agentsadm_api::Apis,
    catalog: &agentsadm_types::catalog::Catalog,
    plan: &agentsadm_plan::Plan,
    options: &ExecOptions,
    transport: CnapiTransportConfig,
    reporter: &dyn agentsadm_orchestrate::report::Reporter,
) -> agentsadm_orchestrate::report::ExecReport {
    use agentsadm_orchestrate::run::{RunOutcome, RunSettings};
    let settings = RunSettings {
        yes: true,
        options: options.clone(),
        ..RunSettings::default()
    };
    let operator = Script::new(&[], false, |_: &agentsadm_plan::Plan| Vec::new());
    let mut run = sim_run(apis, catalog, &settings, "update");
    run.transport = transport;
    run.reporter = reporter;
    match run
        .go(&AsPlanned(plan), &operator, std::future::pending())
        .await
    {
        Ok(RunOutcome::Executed { report, .. }) => report,
        Ok(RunOutcome::Empty(_)) => Default::default(),
        other => panic!("the plan did not run: {other:?}"),
    }
}
