//! Helpers for tests against the simulated datacenter: raw HTTP requests
//! (for what the clients never send, such as a missing Accept-Version), a
//! small started datacenter, and plans carried out on the fake datacenter
//! through the orchestrator's one run with a scripted operator (tests
//! build no executor: tests/architecture/tests_shape.rs).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use agentsadm_orchestrate::ExecOptions;
use agentsadm_orchestrate::datacenter::{
    ApiDatacenter, CarrierSettings, Carriers, Datacenter, DatacenterError, Part, RunOn,
};
use agentsadm_orchestrate::lock::{LockError, LockStore};
use agentsadm_orchestrate::report::{ExecReport, InFlight, Reporter};
use agentsadm_orchestrate::run::{
    AskError, Operator, Planner, Run, RunError, RunOutcome, RunSettings, Shown,
};
use agentsadm_orchestrate::store::IntentStore;
use agentsadm_orchestrate::transport::Transport;
use agentsadm_plan::Plan;
use agentsadm_sim::SimConfig;
use agentsadm_sim::fake::FakeDc;
use agentsadm_types::catalog::Catalog;
use futures::future::{BoxFuture, LocalBoxFuture};

use agentsadm_sim::SimDc;

/// A small populated datacenter: headnode + `cns` compute nodes.
pub async fn small_dc(cns: usize) -> SimDc {
    SimDc::start(SimConfig::default().servers(cns))
        .await
        .expect("simulator starts")
}

/// A datacenter of a headnode and `cns` compute nodes, seeded with
/// `seed`, whose SAPI answers without the real one's latency model (21 ms
/// a write, one after another): for tests of the records a sequence of
/// commands leaves, never of how long SAPI takes.
pub async fn records_dc(cns: usize, seed: agentsadm_sim::SeedSpec) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(cns)
            .populate(seed)
            .sapi_timing(agentsadm_sim::SapiTiming::off()),
    )
    .await
    .expect("simulator starts")
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Raw {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// Send a request with exactly the given headers (no Accept-Version unless
/// passed).
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Result<Raw, reqwest::Error> {
    // Only a hang bound: a loaded CI machine can take seconds to answer.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let mut rb = client.request(method, url);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok(Raw {
        status,
        headers,
        text,
    })
}

pub async fn get(url: &str) -> Raw {
    raw(reqwest::Method::GET, url, &[], None)
        .await
        .expect("GET")
}

pub async fn get_v2(url: &str) -> Raw {
    raw(reqwest::Method::GET, url, &[("accept-version", "~2")], None)
        .await
        .expect("GET")
}

/// A datacenter for a run whose steps or intent go through a test's own
/// transport or store (one that records, or fails), with the fake
/// datacenter's lock.
pub struct FakeWith<'a> {
    pub fake: &'a FakeDc,
    pub transport: &'a dyn Transport,
    pub store: &'a dyn IntentStore,
}

impl Datacenter for FakeWith<'_> {
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>> {
        self.fake.lock_store()
    }

    fn sapi(&self) -> Option<&agentsadm_api::SapiClient> {
        None
    }

    fn import<'a>(
        &'a self,
        images: &'a [agentsadm_plan::ImageRef],
    ) -> BoxFuture<'a, Result<(), DatacenterError>> {
        self.fake.import(images)
    }

    fn carriers<'a>(
        &'a self,
        _plan: &Plan,
        _settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError> {
        Ok(Carriers {
            transport: Part::Lent(self.transport),
            store: Part::Lent(self.store),
            records: Part::Made(Box::new(agentsadm_orchestrate::records::NoRecords)),
            probe: Part::Made(Box::new(agentsadm_orchestrate::guard::NoProbe)),
        })
    }
}

/// The simulator's APIs carry the run's changes, but its lock lives in
/// memory (`lock`, a fake datacenter's) and no API is probed after a
/// failure: for a test of the transport's own retries under 5xx bursts,
/// which through SAPI's lock would halt the run as an outage (as they
/// should) before the retries are measured. Nothing moves out of `sdc`
/// and the history is not copied to SAPI.
pub struct LockInMemory<'a> {
    pub apis: ApiDatacenter<'a>,
    pub lock: &'a FakeDc,
}

impl Datacenter for LockInMemory<'_> {
    fn lock_store(&self) -> BoxFuture<'_, Result<Part<'_, dyn LockStore + '_>, LockError>> {
        self.lock.lock_store()
    }

    fn sapi(&self) -> Option<&agentsadm_api::SapiClient> {
        None
    }

    fn import<'a>(
        &'a self,
        images: &'a [agentsadm_plan::ImageRef],
    ) -> BoxFuture<'a, Result<(), DatacenterError>> {
        self.apis.import(images)
    }

    fn carriers<'a>(
        &'a self,
        plan: &Plan,
        settings: &CarrierSettings<'_>,
    ) -> Result<Carriers<'a>, DatacenterError> {
        let carriers = self.apis.carriers(plan, settings)?;
        Ok(Carriers {
            probe: Part::Made(Box::new(agentsadm_orchestrate::guard::NoProbe)),
            ..carriers
        })
    }
}

/// The operator of a run in a test: agrees in advance as `-y` does, or
/// answers the plan's question from `answers` (then no); answers the
/// canary question with `canary`; after an interrupt, stops waiting at
/// once (a script) or, as a terminal does, keeps waiting until a second
/// interrupt comes `second` later (`None`: never). Keeps what it was told.
pub struct Scripted {
    pub interactive: bool,
    pub answers: Mutex<VecDeque<bool>>,
    pub canary: bool,
    pub keep_waiting: Option<Option<Duration>>,
    /// The canary questions asked: the canaries and how many are left.
    pub canaries: Mutex<Vec<(Vec<String>, usize)>>,
    pub notes: Mutex<Vec<String>>,
}

impl Scripted {
    /// `-y`, from a script: no question, go on after the canary wave,
    /// stop waiting at the first interrupt.
    pub fn yes() -> Scripted {
        Scripted {
            interactive: false,
            answers: Mutex::new(VecDeque::new()),
            canary: true,
            keep_waiting: None,
            canaries: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// At a terminal: answers the plan's question with `answers`.
    pub fn at_terminal(answers: &[bool]) -> Scripted {
        Scripted {
            interactive: true,
            answers: Mutex::new(answers.iter().copied().collect()),
            ..Scripted::yes()
        }
    }

    /// Answers the canary question with `go_on`.
    pub fn canary(self, go_on: bool) -> Scripted {
        Scripted {
            canary: go_on,
            ..self
        }
    }

    /// Keeps waiting after an interrupt until a second one `second`
    /// later (`None`: never).
    pub fn keeps_waiting(self, second: Option<Duration>) -> Scripted {
        Scripted {
            keep_waiting: Some(second),
            ..self
        }
    }
}

impl Operator<Plan> for Scripted {
    fn show(&self, _: &Plan, _: Shown) {}

    fn interactive(&self) -> bool {
        self.interactive
    }

    async fn ask(&self, _: &Plan) -> Result<bool, AskError> {
        Ok(self.answers.lock().unwrap().pop_front().unwrap_or(false))
    }

    fn note(&self, message: &str) {
        self.notes.lock().unwrap().push(message.to_string());
    }

    async fn canary_passed(&self, canaries: &[String], remaining: usize, _yes: bool) -> bool {
        self.canaries
            .lock()
            .unwrap()
            .push((canaries.to_vec(), remaining));
        self.canary
    }

    fn keep_waiting(&self, _: &[InFlight]) -> Option<LocalBoxFuture<'_, ()>> {
        let second = self.keep_waiting?;
        Some(Box::pin(async move {
            match second {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        }))
    }
}

/// A planner that makes `plan` every time: the test made and checked it
/// on the fake datacenter; the run plans again under the lock (the same
/// plan) and carries it out.
pub struct Made<'a>(pub &'a Plan);

impl Planner for Made<'_> {
    type Planned = Plan;
    type Error = std::convert::Infallible;

    async fn plan(&self) -> Result<Plan, std::convert::Infallible> {
        Ok(self.0.clone())
    }
}

/// The settings of `-y` with these executor options.
pub fn yes_with(options: &ExecOptions) -> RunSettings {
    RunSettings {
        yes: true,
        options: options.clone(),
        ..RunSettings::default()
    }
}

/// Carry out `plan` on `datacenter` through the one run the binary goes
/// through (the lock taken, refreshed and confirmed before each change,
/// the plan made again under it, `settings`' `-y` or `operator`'s
/// answers, the canary question, interrupts from `cancel`, the history
/// entry), judging slow servers against `catalog` as the binary does.
pub async fn run_on(
    datacenter: impl Datacenter,
    catalog: &Catalog,
    plan: &Plan,
    settings: &RunSettings,
    reporter: &dyn Reporter,
    operator: &Scripted,
    cancel: impl Future<Output = ()>,
) -> Result<RunOutcome<Plan>, RunError<std::convert::Infallible>> {
    Run::on(
        RunOn::Lent(&datacenter),
        catalog,
        settings,
        reporter,
        "update",
    )
    .go(&Made(plan), operator, cancel)
    .await
}

/// The report of a run that executed.
pub fn executed(
    outcome: Result<RunOutcome<Plan>, RunError<std::convert::Infallible>>,
) -> ExecReport {
    match outcome {
        Ok(RunOutcome::Executed { report, .. }) => report,
        other => panic!("the plan did not run: {other:?}"),
    }
}

/// `plan` carried out on `fake` with `-y` and `options` through the run
/// ([`run_on`]), reporting to `reporter`.
pub async fn run_yes(
    fake: &FakeDc,
    plan: &Plan,
    options: &ExecOptions,
    reporter: &dyn Reporter,
) -> ExecReport {
    let catalog = fake.dc().catalog.clone();
    let report = executed(
        run_on(
            fake,
            &catalog,
            plan,
            &yes_with(options),
            reporter,
            &Scripted::yes(),
            std::future::pending(),
        )
        .await,
    );
    // The run went through the datacenter lock: it handed out a
    // generation, and released its record at the end.
    assert!(
        fake.lock_metadata()
            .contains_key(agentsadm_orchestrate::lock::board::GENERATION_KEY),
        "the run took no lock"
    );
    assert!(fake.lock_record().is_none(), "the run kept its lock");
    report
}

/// `plan` carried out on `fake` with `-y` and `options` through the run,
/// its steps carried by `transport` (a wrapper around the fake's own that
/// injects what the test is about).
pub async fn run_through(
    fake: &FakeDc,
    transport: &dyn Transport,
    plan: &Plan,
    options: &ExecOptions,
) -> ExecReport {
    let catalog = fake.dc().catalog.clone();
    let datacenter = FakeWith {
        fake,
        transport,
        store: fake,
    };
    executed(
        run_on(
            datacenter,
            &catalog,
            plan,
            &yes_with(options),
            &agentsadm_orchestrate::report::NullReporter,
            &Scripted::yes(),
            std::future::pending(),
        )
        .await,
    )
}

/// A fake datacenter of `cns` compute nodes with net-agent 2.0.0
/// published, and the plan that updates net-agent everywhere one server at
/// a time, with no canary wave.
pub fn net_agent_one_at_a_time(cns: usize) -> (FakeDc, Plan) {
    use agentsadm_plan::{
        ComponentSelection, Operation, PlanOptions, PlanningInput, Request, ServerSelection,
        TransportMode, plan,
    };
    let mut dc = agentsadm_sim::testkit::ExampleDc::new(cns);
    let target = dc.publish("net-agent", "2.0.0");
    let images = dc.images_with_targets(&[target]);
    let fake = FakeDc::new(dc);
    let (intent, reality) = fake.snapshot();
    let catalog = fake.dc().catalog.clone();
    let request = Request {
        operation: Operation::Update,
        components: ComponentSelection::Named(vec!["net-agent".parse().unwrap()]),
        servers: ServerSelection::All,
        exclude: Vec::new(),
    };
    let mut options: PlanOptions = TransportMode::Auto.into();
    options.rollout.concurrency = 1;
    options.rollout.canary = Some(0);
    let p = plan(&PlanningInput {
        catalog: &catalog,
        intent: &intent,
        reality: &reality,
        request: &request,
        options,
        images: &images,
        durations: None,
    })
    .unwrap();
    (fake, p)
}

/// A colleague's `--break-lock` in `fake` while a run holds its lock: a
/// held record of a later generation beside the run's.
pub fn break_lock(fake: &FakeDc) {
    let mut theirs = fake.lock_record().expect("a run holds the lock");
    theirs.token = "theirs".into();
    theirs.owner = "root@hn:2".into();
    theirs.generation += 1;
    let value = serde_json::to_value(&theirs).expect("a lock record is JSON");
    fake.edit_lock_metadata(|m| {
        m.insert(theirs.key(), value);
    });
}

/// An interrupt (Ctrl-C) `after` the run starts executing: the clock
/// starts when the executor first waits on it, not when this is made
/// (the run takes the lock first).
pub async fn interrupt_after(after: Duration) {
    tokio::time::sleep(after).await
}
