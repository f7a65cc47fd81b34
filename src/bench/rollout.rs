//! `agentsadm bench rollout`: a one-component upgrade across a fleet at
//! 20-wide, 5-wide (sdcadm's default) and shar-style (every component
//! reinstalled, one after the other, 5 servers at a time, as
//! `update-agents` does), each against the ideal for its concurrency:
//! `ceil(N / c) x latency x components`.
//!
//! Every install takes a fixed injected latency (a timer, no CPU), so the
//! wall time over the ideal measures the orchestrator's own overhead:
//! scheduling, SAPI intent writes, bookkeeping, outlier checks.
//!
//! Backend: the in-process fake datacenter ([`crate::orchestrate::fake`]),
//! which runs the real planner and executor with a transport that sleeps the
//! latency and updates the server's record. The simulated datacenter (HTTP
//! APIs and mock servers) will replace it once it lands; the JSON says
//! which backend produced the figures.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::orchestrate::execute::{ExecOptions, Executor};
use crate::orchestrate::fake::FakeDc;
use crate::orchestrate::plan::{
    ComponentSelection, Operation, Plan, PlanOptions, PlanningInput, Request, ServerSelection,
    TransportMode, plan,
};
use crate::orchestrate::report::NullReporter;
use crate::orchestrate::testkit::ExampleDc;

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
}

impl Default for RolloutBenchArgs {
    fn default() -> Self {
        RolloutBenchArgs {
            servers: 1000,
            shar_servers: 200,
            latency_ms: 50,
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
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Plan an update of `components` (None: every component, shar-style) on
/// a fresh fleet of `servers`, execute it, and time the execution.
async fn measure(
    mode: &str,
    servers: usize,
    concurrency: usize,
    latency: Duration,
    components: Option<&[&str]>,
) -> anyhow::Result<ModeResult> {
    let mut dc = ExampleDc::new(servers.saturating_sub(1));
    let names: Vec<String> = match components {
        Some(c) => c.iter().map(|s| s.to_string()).collect(),
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
    let plan = {
        let dc = fake.dc();
        let (intent, reality) = (dc.intent(), dc.reality());
        plan(&PlanningInput {
            catalog: &dc.catalog,
            intent: &intent,
            reality: &reality,
            request: &Request {
                operation: Operation::Update,
                components: ComponentSelection::Named(names.clone()),
                servers: ServerSelection::All,
                exclude: Vec::new(),
            },
            options: PlanOptions {
                transport: TransportMode::Auto,
            },
            images: &images,
        })?
    };
    check_plan(&plan, servers)?;
    // The shar installs one component after the other; so does this run.
    let options = ExecOptions {
        concurrency,
        parallel_within_server: components.is_some(),
        ..Default::default()
    };
    let reporter = NullReporter;
    let executor = Executor {
        transport: &fake,
        store: &fake,
        reporter: &reporter,
        options: &options,
    };
    let t = Instant::now();
    let report = executor.execute(&plan, std::future::pending()).await?;
    let wall = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        report.all_succeeded(),
        "benchmark rollout did not succeed everywhere:\n{}",
        report.render(&plan)
    );
    // The shar-style ideal counts every component a compute node gets (the
    // headnode has a couple more, which the ideal leaves out).
    let per_server = names.len();
    let rounds = servers.div_ceil(concurrency);
    let ideal = rounds as f64 * latency.as_secs_f64() * per_server as f64;
    Ok(ModeResult {
        mode: mode.to_string(),
        servers,
        concurrency,
        components: per_server,
        wall_s: round3(wall),
        ideal_s: round3(ideal),
        servers_per_s: round3(servers as f64 / wall),
    })
}

fn check_plan(plan: &Plan, servers: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        plan.servers.len() == servers,
        "benchmark plan covers {} servers, expected {servers}",
        plan.servers.len()
    );
    Ok(())
}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(args: &RolloutBenchArgs) -> anyhow::Result<serde_json::Value> {
    let latency = Duration::from_millis(args.latency_ms.max(1));
    let one = ["vm-agent"];
    let wide = measure("one-component", args.servers, 20, latency, Some(&one)).await?;
    let narrow = measure("one-component", args.servers, 5, latency, Some(&one)).await?;
    let shar = measure("shar-style", args.shar_servers, 5, latency, None).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { round3(a / b) } else { 0.0 };
    Ok(json!({
        "backend": "fake-transport (in-process; no HTTP)",
        "latency_ms": args.latency_ms,
        "modes": [wide, narrow, shar],
        "wall_over_ideal_20": ratio(wide.wall_s, wide.ideal_s),
        "speedup_vs_5_wide": ratio(wide.servers_per_s, narrow.servers_per_s),
        "speedup_vs_shar": ratio(wide.servers_per_s, shar.servers_per_s),
    }))
}
