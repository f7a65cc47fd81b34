//! `agentsadm bench rollout`: a one-component upgrade across a fleet at
//! 20-wide, 5-wide (sdcadm's default) and shar-style (every component
//! reinstalled, one after the other, 5 servers at a time, as
//! `update-agents` does), each against the ideal for its concurrency:
//! `ceil(N / c) x latency x components`.
//!
//! Every install takes a fixed injected latency (a timer, no CPU), so the
//! wall time over the ideal measures the orchestrator's own overhead:
//! scheduling, SAPI intent writes, bookkeeping, outlier checks. On the
//! simulator the run holds the datacenter lock as a command does, and the
//! requests it makes of SAPI and CNAPI while executing are counted per
//! server step of the 20-wide run (`sapi_writes_per_step`,
//! `sapi_reads_per_step`, `cnapi_calls_per_step`).
//!
//! A realistic run follows (issue 14): log-normal install latencies
//! (median 20 s, p99 about 3 min, 1% stragglers, scaled down 1000x) on the
//! fake transport, 20 wide, with one canary wave and the health gate's
//! flags at `--min-healthy 0`, against the list-scheduling lower bound of
//! the same latencies plus one canary wave
//! (`realistic_wall_over_ideal_20`, goal <= 1.05).
//!
//! That bound assumes the long installs start early; an executor that
//! cannot know which installs will be long starts servers in order, and a
//! straggler that happens to come late in the order ends the run after the
//! bound. `realistic.list_scheduled_s` is what a zero-overhead executor
//! takes in the same order (the canary, then each server on the first
//! free slot); `realistic_wall_over_list_scheduled_20` is the executor's
//! own overhead against it, and `list_scheduled_s / ideal_s` the cost of
//! not knowing the latencies in advance.
//!
//! Scheduling from history (issue 24, [`super::history`]): the same
//! seeded fleet twice, on the fake transport, 20 wide with one canary,
//! under a model where each server has a persistent speed factor
//! (log-normal, sigma 0.8, and 1% of the servers four times slower again)
//! times per-install noise (log-normal, sigma 0.3), median 20 ms. The
//! first run has no history (servers start by hostname); the second plans
//! from the first's recorded durations (longest expected first, the
//! quickest server as canary). Each against `max(sum / 20, longest) + the
//! canary wave` of its own latencies: `no_history_wall_over_bound_20` and
//! `history_wall_over_bound_20` (goal <= 1.05); and the second plan's
//! expected finish against the wall time it took
//! (`history_expected_finish_over_wall`).
//!
//! Backends (`--backend`):
//! - `sim` (default): the simulated datacenter in the same process, over
//!   loopback HTTP: intent and reality gathered from SAPI and CNAPI, SAPI
//!   instance writes, CNAPI install-agent tasks waited on with
//!   `/tasks/:id/wait`, the mock servers' installs (download and verify
//!   of small images from the simulated IMGAPI, unpack, adoption, CNAPI
//!   report), with the latency injected by the simulator. This is the
//!   orchestrator's real path end to end; the mock servers run the real GZ
//!   installer in its mockcloud layout (a few files per install).
//! - `fake`: the in-process fake datacenter ([`agentsadm_sim::fake`]):
//!   the real planner and executor, a transport that sleeps the latency.
//!   It isolates the executor's own overhead.

use agentsadm_types::component::ComponentName;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use serde_json::json;

use agentsadm_orchestrate::execute::ExecOptions;

use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_orchestrate::run::{AskError, Operator, Shown};
use agentsadm_plan::ComponentSelection;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::RolloutPolicy;
use agentsadm_plan::ServerSelection;
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_types::ids::ServerUuid;

/// Options of `agentsadm bench rollout`.
#[derive(clap::Args, Clone, Debug)]
pub struct RolloutBenchArgs {
    /// Servers in the one-component runs.
    #[arg(long, default_value_t = 1000)]
    pub servers: usize,
    /// Servers in the shar-style run.
    #[arg(long, default_value_t = 200)]
    pub shar_servers: usize,
    /// Injected install latency per component, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub latency_ms: u64,
    /// What the orchestrator runs against.
    #[arg(long, value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// Only the 20-wide one-component run (to profile or time it alone).
    #[arg(long)]
    pub only_20: bool,
}

/// What `bench rollout` runs against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The simulated datacenter over loopback HTTP.
    #[default]
    Sim,
    /// The in-process fake transport (no HTTP).
    Fake,
}

impl Backend {
    pub fn as_str(&self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Fake => "fake",
        }
    }
}

impl RolloutBenchArgs {
    /// These settings as `bench rollout` options (for `bench all`).
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "--servers".into(),
            self.servers.to_string(),
            "--shar-servers".into(),
            self.shar_servers.to_string(),
            "--latency-ms".into(),
            self.latency_ms.to_string(),
            "--backend".into(),
            self.backend.as_str().into(),
        ]
        .into_iter()
        .chain(self.only_20.then(|| "--only-20".to_string()))
        .collect()
    }
}

impl Default for RolloutBenchArgs {
    fn default() -> Self {
        RolloutBenchArgs {
            servers: 1000,
            shar_servers: 200,
            latency_ms: 50,
            backend: Backend::Sim,
            only_20: false,
        }
    }
}

/// One measured mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    pub mode: String,
    pub servers: usize,
    pub concurrency: usize,
    pub components: usize,
    pub wall_s: f64,
    pub ideal_s: f64,
    pub servers_per_s: f64,
    /// What each server step cost the headnode APIs (the simulator only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step: Option<PerStep>,
    /// Where a server's time went (the simulator only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<StepTimes>,
    /// The whole process's CPU time (user + system, every thread: the
    /// orchestrator and the simulated datacenter alike) while the executor
    /// ran, per server step, in milliseconds. It moves far less with the
    /// machine's load than the wall time does (main's code at load 4-12:
    /// 3.4-5.3 ms where wall_over_ideal_20 was 1.4-2.8), and at
    /// `concurrency / latency` steps a second it says how many cores the
    /// run needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms_per_step: Option<f64>,
}

/// Where a server's time went in the 20-wide run on the simulator, the
/// median over servers in milliseconds: its step's install (from its
/// start to cn-agent's task done: the server read, the lock's
/// confirmation, install-agent, the task wait), its `gz health` gate (an
/// execute, in the mode the step's server read gave), and the SAPI writes
/// after the steps (the rollout slot is free then), against the injected
/// install latency.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StepTimes {
    pub install_ms: f64,
    pub gate_ms: f64,
    pub after_steps_ms: f64,
    pub server_ms: f64,
}

/// Records [`StepTimes`] from the executor's events.
#[derive(Default)]
struct Timing {
    at: std::sync::Mutex<TimingMarks>,
}

#[derive(Default)]
struct TimingMarks {
    /// The executor's start and end (the rollout itself: not the lock's
    /// acquisition nor the plan made again under it).
    executed: (Option<Instant>, Option<Instant>),
    /// The process's CPU time at those two moments.
    cpu: (Option<Duration>, Option<Duration>),
    started: std::collections::BTreeMap<ServerUuid, Instant>,
    steps_ended: std::collections::BTreeMap<ServerUuid, Instant>,
    install: Vec<f64>,
    gate: Vec<f64>,
    after: Vec<f64>,
    server: Vec<f64>,
}

impl agentsadm_orchestrate::report::Reporter for Timing {
    fn event(&self, event: &agentsadm_orchestrate::report::ExecEvent<'_>) {
        use agentsadm_orchestrate::report::ExecEvent;
        let now = Instant::now();
        let mut m = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        match event {
            ExecEvent::Started { .. } => {
                m.executed.0 = Some(now);
                m.cpu.0 = super::process_cpu();
            }
            ExecEvent::Finished(_) => {
                m.executed.1 = Some(now);
                m.cpu.1 = super::process_cpu();
            }
            ExecEvent::ServerStarted { server, .. } => {
                m.started.insert(*server, now);
            }
            ExecEvent::StepFinished {
                server,
                elapsed,
                gate,
                ..
            } => {
                let gate = gate.and_then(|g| g.elapsed).unwrap_or_default();
                m.install.push(ms(elapsed.saturating_sub(gate)));
                m.gate.push(ms(gate));
                m.steps_ended.insert(*server, now);
            }
            ExecEvent::ServerFinished { server, .. } => {
                if let Some(t) = m.steps_ended.get(server).copied() {
                    m.after.push(ms(now - t));
                }
                if let Some(t) = m.started.get(server).copied() {
                    m.server.push(ms(now - t));
                }
            }
            _ => {}
        }
    }
}

impl Timing {
    /// How long the executor ran, in seconds.
    fn executed_s(&self) -> Option<f64> {
        let m = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(a), Some(b)) = m.executed else {
            return None;
        };
        Some((b - a).as_secs_f64())
    }

    /// The process's CPU time while the executor ran.
    fn executed_cpu(&self) -> Option<Duration> {
        let m = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(a), Some(b)) = m.cpu else {
            return None;
        };
        Some(b.saturating_sub(a))
    }

    fn times(&self) -> StepTimes {
        let m = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            round3(v.get(v.len() / 2).copied().unwrap_or(0.0))
        };
        StepTimes {
            install_ms: median(&m.install),
            gate_ms: median(&m.gate),
            after_steps_ms: median(&m.after),
            server_ms: median(&m.server),
        }
    }
}

/// Requests the orchestrator made per server step while it executed (the
/// service default write and the lock's reads included; the simulated
/// servers' own requests not).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PerStep {
    pub steps: usize,
    pub sapi_writes: f64,
    pub sapi_reads: f64,
    pub cnapi_calls: f64,
}

impl PerStep {
    fn new(
        steps: usize,
        sapi: agentsadm_sim::CallCount,
        cnapi: agentsadm_sim::CallCount,
    ) -> PerStep {
        let per = |n: u64| round3(n as f64 / steps.max(1) as f64);
        PerStep {
            steps,
            sapi_writes: per(sapi.writes),
            sapi_reads: per(sapi.reads),
            cnapi_calls: per(cnapi.reads + cnapi.writes),
        }
    }
}

pub(super) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Plan an update of `components` (None: every component, shar-style) on
/// a fresh fake fleet of `servers`, execute it, and time the execution.
async fn measure_fake(
    mode: &str,
    servers: usize,
    concurrency: usize,
    latency: Duration,
    components: Option<&[&str]>,
) -> anyhow::Result<ModeResult> {
    let mut dc = ExampleDc::new(servers.saturating_sub(1));
    let names: Vec<ComponentName> = match components {
        Some(c) => c.iter().map(|s| s.parse()).collect::<Result<_, _>>()?,
        None => dc
            .catalog
            .default_set(false)
            .iter()
            .map(|c| c.name.clone())
            .collect(),
    };
    let targets: Vec<_> = names.iter().map(|n| dc.publish(n, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    let fake = FakeDc::new(dc);
    fake.faults().latency = latency;
    let rollout = RolloutPolicy {
        concurrency,
        ..RolloutPolicy::default()
    };
    let plan = fake.plan_with(&update_everywhere(names.clone()), &images, rollout, None)?;
    check_plan(&plan, servers)?;
    // The shar installs one component after the other; so does this run.
    let options = ExecOptions {
        parallel_within_server: components.is_some(),
        ..Default::default()
    };
    let report = run_on_fake(&fake, &plan, &options).await?;
    let wall = report.elapsed.as_secs_f64();
    anyhow::ensure!(
        report.all_succeeded(),
        "benchmark rollout did not succeed everywhere:\n{}",
        report.render(&plan)
    );
    Ok(result(
        mode,
        servers,
        concurrency,
        names.len(),
        latency,
        wall,
    ))
}

fn result(
    mode: &str,
    servers: usize,
    concurrency: usize,
    per_server: usize,
    latency: Duration,
    wall: f64,
) -> ModeResult {
    let rounds = servers.div_ceil(concurrency);
    let ideal = rounds as f64 * latency.as_secs_f64() * per_server as f64;
    ModeResult {
        mode: mode.to_string(),
        servers,
        concurrency,
        components: per_server,
        wall_s: round3(wall),
        ideal_s: round3(ideal),
        servers_per_s: round3(servers as f64 / wall),
        per_step: None,
        times: None,
        cpu_ms_per_step: None,
    }
}

/// The same against the simulated datacenter: a fresh one per mode, with
/// the default set installed at 1.0.0 and 1.1.0 published; update to it.
async fn measure_sim(
    mode: &str,
    servers: usize,
    concurrency: usize,
    latency: Duration,
    components: Option<&[&str]>,
) -> anyhow::Result<ModeResult> {
    use agentsadm_sim::GzLayout;
    use agentsadm_sim::LatencySpec;
    use agentsadm_sim::SeedSpec;
    use agentsadm_sim::SimConfig;
    use agentsadm_sim::SimDc;
    use agentsadm_sim::Strictness;

    let config = SimConfig::default()
        .servers(servers.saturating_sub(1))
        .populate(SeedSpec {
            dc_newer: Some("1.1.0".to_string()),
            ..SeedSpec::default()
        })
        // cn-agent's restart is part of the install latency here.
        .cn_agent_restart(Duration::ZERO)
        // The real installer in its cheapest layout: the benchmark is about
        // the orchestrator, not about writing GZ trees.
        .gz_layout(GzLayout::Mockcloud)
        // Here the mockcloud servers stand in for SunOS compute nodes: the
        // shar-style mode installs gz-tools through CNAPI execute, which a
        // real mockcloud CN (and by default the simulator's) refuses.
        .strictness(Strictness {
            mockcloud_refuses_execute: false,
            ..Strictness::default()
        })
        .install_latency(LatencySpec::fixed(latency.as_millis() as u64));
    let dc = SimDc::start(config).await?;
    // Mock servers write their GZ directory on first use; do that before
    // the clock starts, as a real fleet's servers already exist.
    let servers = dc.servers();
    let prepared: Vec<_> = futures::stream::iter(servers.iter())
        .map(|s| dc.gz_report(s.uuid))
        .buffer_unordered(8)
        .collect()
        .await;
    for p in prepared {
        p?;
    }
    let servers = servers.len();
    let names: Vec<ComponentName> = match components {
        Some(c) => c.iter().map(|s| s.parse()).collect::<Result<_, _>>()?,
        None => dc
            .catalog()
            .default_set(false)
            .iter()
            .map(|c| c.name.clone())
            .collect(),
    };
    let update = super::SimUpdate {
        components: names.clone(),
        servers: ServerSelection::All,
        rollout: RolloutPolicy {
            concurrency,
            ..RolloutPolicy::default()
        },
        options: ExecOptions {
            parallel_within_server: components.is_some(),
            ..Default::default()
        },
        // The lock as the binary holds it (settle 500 ms: a confirmation
        // stands 250 ms). With a 20 ms settle here, as before, each stood
        // 10 ms, shorter than a SAPI read on a loaded machine: every turn
        // and step read the lock, about 2 reads per step. The rollout is
        // timed from the executor's start to its end, so the settle
        // pauses of the lock's acquisition are not in it.
        settle: None,
    };
    // The run takes the datacenter lock and confirms it as the binary
    // does: its reads are part of what a step costs.
    use agentsadm_sim::SimApi;
    let calls = || {
        (
            dc.client_calls(SimApi::Sapi),
            dc.client_calls(SimApi::Cnapi),
        )
    };
    let timing = Timing::default();
    let before = calls();
    let ran = update.run(&dc, &timing, "rollout").await;
    let after = calls();
    dc.shutdown().await;
    let ran = ran?;
    check_plan(&ran.plan, servers)?;
    let wall = timing.executed_s().unwrap_or(ran.wall_s);
    let per_step = PerStep::new(
        ran.plan.step_count(),
        after.0 - before.0,
        after.1 - before.1,
    );
    let mut r = result(mode, servers, concurrency, names.len(), latency, wall);
    r.cpu_ms_per_step = timing
        .executed_cpu()
        .map(|c| round3(c.as_secs_f64() * 1000.0 / per_step.steps.max(1) as f64));
    r.per_step = Some(per_step);
    r.times = Some(timing.times());
    Ok(r)
}

async fn measure(
    backend: Backend,
    mode: &str,
    servers: usize,
    concurrency: usize,
    latency: Duration,
    components: Option<&[&str]>,
) -> anyhow::Result<ModeResult> {
    match backend {
        Backend::Sim => measure_sim(mode, servers, concurrency, latency, components).await,
        Backend::Fake => measure_fake(mode, servers, concurrency, latency, components).await,
    }
}

pub(super) fn check_plan(plan: &Plan, servers: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        plan.servers().len() == servers,
        "benchmark plan covers {} servers, expected {servers}",
        plan.servers().len()
    );
    Ok(())
}

/// The realistic run's result: wall time over the ideal of its own sampled
/// latencies, and how many canary waves it ran.
#[derive(Clone, Debug, Serialize)]
pub struct RealisticResult {
    pub servers: usize,
    pub concurrency: usize,
    pub wall_s: f64,
    pub ideal_s: f64,
    pub canary_waves: usize,
    /// What a zero-overhead executor takes: the canary, then greedy list
    /// scheduling of the other servers in run order, `concurrency` wide.
    pub list_scheduled_s: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Install latencies as operators see them, scaled down 1000x: log-normal
/// with median 20 s and p99 about 3 min (sigma = ln(9) / 2.326), and 1% of
/// the servers stragglers at four times that. Seeded: the same every run.
fn realistic_latencies(n: usize) -> Vec<Duration> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(14);
    let sigma = 9f64.ln() / 2.326;
    (0..n)
        .map(|_| {
            let u1: f64 = 1.0 - rng.r#gen::<f64>();
            let u2: f64 = rng.r#gen::<f64>();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let mut ms = 20.0 * (sigma * z).exp();
            if rng.r#gen::<f64>() < 0.01 {
                ms *= 4.0;
            }
            Duration::from_secs_f64(ms.max(1.0) / 1000.0)
        })
        .collect()
}

/// Run `plan` on `fake` with each server taking its `slow` milliseconds
/// (the fake sleeps its 1 ms latency times the factor), health gates at
/// `--min-healthy 0`; the report and the wall time in seconds. A server
/// that failed fails the benchmark (`what` names it).
pub(super) async fn run_timed(
    fake: &FakeDc,
    plan: &Plan,
    slow: impl IntoIterator<Item = (ServerUuid, f64)>,
    what: &str,
) -> anyhow::Result<(ExecReport, f64)> {
    {
        let mut f = fake.faults();
        f.latency = Duration::from_millis(1);
        f.slow.extend(slow);
    }
    let options = ExecOptions {
        health: Some(agentsadm_plan::HealthFlags {
            min_healthy: Duration::ZERO,
            timeout: Duration::from_secs(120),
        }),
        tick: Duration::from_millis(100),
        ..Default::default()
    };
    let report = run_on_fake(fake, plan, &options).await?;
    let wall = report.elapsed.as_secs_f64();
    anyhow::ensure!(
        report.all_succeeded(),
        "{what} rollout did not succeed everywhere:\n{}",
        report.render(plan)
    );
    Ok((report, wall))
}

/// Carry out `plan` on the fake datacenter through the one run the binary
/// goes through (`-y`, the lock in the fake's SAPI metadata, the plan
/// made under it, the history's SAPI copy left out: the fake has no
/// SAPI). The report's `elapsed` is the execution alone, after the lock's
/// settle pause, which is what these benchmarks time.
async fn run_on_fake(
    fake: &FakeDc,
    plan: &Plan,
    options: &ExecOptions,
) -> anyhow::Result<ExecReport> {
    use agentsadm_orchestrate::datacenter::RunOn;
    use agentsadm_orchestrate::run::{Planner, Run, RunOutcome, RunSettings};

    /// The plan the benchmark made, as the run's planner.
    struct Made<'p>(&'p Plan);
    impl Planner for Made<'_> {
        type Planned = Plan;
        type Error = std::convert::Infallible;
        async fn plan(&self) -> Result<Plan, std::convert::Infallible> {
            Ok(self.0.clone())
        }
    }

    let catalog = fake.dc().catalog.clone();
    let settings = RunSettings {
        yes: true,
        options: options.clone(),
        ..RunSettings::default()
    };
    let reporter = NullReporter;
    let run = Run::on(RunOn::Lent(fake), &catalog, &settings, &reporter, "update");
    match run
        .go(&Made(plan), &Unattended, std::future::pending())
        .await?
    {
        RunOutcome::Executed { report, .. } => Ok(report),
        other => anyhow::bail!("the benchmark's plan did not run: {other:?}"),
    }
}

/// `update COMPONENT...` on every server: the request the rollout
/// benchmarks plan.
pub(super) fn update_everywhere(components: Vec<ComponentName>) -> Request {
    Request {
        operation: Operation::Update,
        components: ComponentSelection::Named(components),
        servers: ServerSelection::All,
        exclude: Vec::new(),
    }
}

/// The fleet's vm-agent update to `target`, `concurrency` wide with one
/// canary, planned with `durations` (or none); checked to cover the fleet.
pub(super) fn plan_vm_agent_update(
    fake: &FakeDc,
    target: &agentsadm_plan::ImageRef,
    servers: usize,
    concurrency: usize,
    durations: Option<&agentsadm_plan::timing::Durations>,
) -> anyhow::Result<Plan> {
    let images = fake.dc().images_with_targets(std::slice::from_ref(target));
    let rollout = RolloutPolicy {
        concurrency,
        canary: Some(1),
        ..RolloutPolicy::default()
    };
    let plan = fake.plan_with(
        &update_everywhere(vec![ComponentName::from_static("vm-agent")]),
        &images,
        rollout,
        durations,
    )?;
    check_plan(&plan, servers)?;
    Ok(plan)
}

/// The realistic run on the fake transport (the latency model is the
/// point; the simulator's own per-install CPU would blur it): one
/// component on `servers` servers, 20 wide, one canary, the health gate's
/// flags at `--min-healthy 0`. The ideal is the list-scheduling lower bound
/// of the same latencies, max(sum / 20, longest), plus one canary wave.
async fn measure_realistic(servers: usize) -> anyhow::Result<RealisticResult> {
    let concurrency = 20;
    let mut dc = ExampleDc::new(servers.saturating_sub(1));
    let target = dc.publish("vm-agent", "2.0.0");
    let fake = FakeDc::new(dc);
    let plan = plan_vm_agent_update(&fake, &target, servers, concurrency, None)?;
    let latencies = realistic_latencies(servers);
    let slow = plan
        .servers_in_order()
        .into_iter()
        .zip(&latencies)
        .map(|((uuid, _), l)| (*uuid, l.as_secs_f64() * 1000.0));
    let (report, wall) = run_timed(&fake, &plan, slow, "realistic").await?;
    let secs: Vec<f64> = latencies.iter().map(Duration::as_secs_f64).collect();
    let sum: f64 = secs.iter().sum();
    let longest = secs.iter().cloned().fold(0.0, f64::max);
    // The canary is the first server in run order (no racks here).
    let canary_wave = secs.first().copied().unwrap_or(0.0);
    let ideal = (sum / concurrency as f64).max(longest) + canary_wave;
    let list_scheduled = canary_wave + list_schedule(secs.get(1..).unwrap_or(&[]), concurrency);
    let mut sorted = secs.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] * 1000.0;
    Ok(RealisticResult {
        servers,
        concurrency,
        wall_s: round3(wall),
        ideal_s: round3(ideal),
        canary_waves: usize::from(report.canary.is_some()),
        list_scheduled_s: round3(list_scheduled),
        median_ms: round3(pct(0.5)),
        p99_ms: round3(pct(0.99)),
        max_ms: round3(longest * 1000.0),
    })
}

/// The makespan of greedy list scheduling: each job, in order, starts on
/// the first of `width` slots to free up.
pub(super) fn list_schedule(jobs: &[f64], width: usize) -> f64 {
    let mut slots = vec![0.0f64; width.max(1)];
    for j in jobs {
        let first = slots
            .iter_mut()
            .min_by(|a, b| a.total_cmp(b))
            .expect("at least one slot");
        *first += j;
    }
    slots.into_iter().fold(0.0, f64::max)
}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(args: &RolloutBenchArgs) -> anyhow::Result<serde_json::Value> {
    let latency = Duration::from_millis(args.latency_ms.max(1));
    let one = ["vm-agent"];
    let b = args.backend;
    let wide = measure(b, "one-component", args.servers, 20, latency, Some(&one)).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { round3(a / b) } else { 0.0 };
    if args.only_20 {
        return Ok(json!({
            "backend": b.as_str(),
            "latency_ms": args.latency_ms,
            "modes": [wide],
            "wall_over_ideal_20": ratio(wide.wall_s, wide.ideal_s),
            "cpu_ms_per_step_20": wide.cpu_ms_per_step,
            "cnapi_calls_per_step": wide.per_step.map(|p| p.cnapi_calls),
            "times_20": wide.times,
            "load_average": super::load_average(),
        }));
    }
    let narrow = measure(b, "one-component", args.servers, 5, latency, Some(&one)).await?;
    let shar = measure(b, "shar-style", args.shar_servers, 5, latency, None).await?;
    // With the simulator, its own per-install work (HTTP, unpacking, SAPI
    // adoption, CNAPI report, on the same cores) is part of the wall time;
    // the fake transport's 20-wide run in the same process separates the
    // orchestrator's own overhead.
    let executor_only = match b {
        Backend::Sim => {
            let f = measure_fake("one-component", args.servers, 20, latency, Some(&one)).await?;
            Some(ratio(f.wall_s, f.ideal_s))
        }
        Backend::Fake => None,
    };
    let realistic = measure_realistic(args.servers).await?;
    let history = super::history::measure(args.servers).await?;
    Ok(json!({
        "backend": match b {
            Backend::Sim => "simulator (in-process, loopback HTTP)",
            Backend::Fake => "fake transport (in-process, no HTTP)",
        },
        "latency_ms": args.latency_ms,
        "modes": [wide, narrow, shar],
        "wall_over_ideal_20": ratio(wide.wall_s, wide.ideal_s),
        "cpu_ms_per_step_20": wide.cpu_ms_per_step,
        "sapi_writes_per_step": wide.per_step.map(|p| p.sapi_writes),
        "sapi_reads_per_step": wide.per_step.map(|p| p.sapi_reads),
        "cnapi_calls_per_step": wide.per_step.map(|p| p.cnapi_calls),
        "times_20": wide.times,
        "load_average": super::load_average(),
        "speedup_vs_5_wide": ratio(wide.servers_per_s, narrow.servers_per_s),
        "speedup_vs_shar": ratio(wide.servers_per_s, shar.servers_per_s),
        "executor_only_wall_over_ideal_20": executor_only,
        "realistic": realistic,
        "realistic_wall_over_ideal_20": ratio(realistic.wall_s, realistic.ideal_s),
        "realistic_canary_waves": realistic.canary_waves,
        "realistic_wall_over_list_scheduled_20": ratio(realistic.wall_s, realistic.list_scheduled_s),
        "no_history_wall_over_bound_20": ratio(history.no_history.wall_s, history.no_history.bound_s),
        "history_wall_over_bound_20": ratio(history.with_history.wall_s, history.with_history.bound_s),
        "history_expected_finish_over_wall": history
            .with_history
            .expected_finish_s
            .map(|e| ratio(e, history.with_history.wall_s)),
        "history": history,
    }))
}

/// The benchmark's operator: `-y`, nothing shown, the canary wave passes.
pub(super) struct Unattended;

impl Operator<Plan> for Unattended {
    fn show(&self, _: &Plan, _: Shown) {}

    fn interactive(&self) -> bool {
        false
    }

    async fn ask(&self, _: &Plan) -> Result<bool, AskError> {
        Ok(false)
    }

    fn note(&self, _: &str) {}

    async fn canary_passed(&self, _: &[String], _: usize, _: bool) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_long_job_ends_the_list_schedule_after_the_lower_bound() {
        // Two slots: 1 and 1 first, then the long one: it starts at 1.
        assert_eq!(list_schedule(&[1.0, 1.0, 2.0], 2), 3.0);
        // Long first: the bound max(sum / 2, longest) = 2 is reached.
        assert_eq!(list_schedule(&[2.0, 1.0, 1.0], 2), 2.0);
        assert_eq!(list_schedule(&[], 20), 0.0);
    }
}
