//! `agentsadm bench gate`: health gates that overlap (issue 35). One
//! compute node of the simulated datacenter updates four agents through
//! cn-agent (config-agent, vm-agent, net-agent, cn-agent), each install
//! taking a fixed injected latency, twice: with the `gz health` gate at
//! `--min-healthy 0` (the installs alone, `ungated_s`) and at
//! `--min-healthy GATE` (`gated_s`). The bound is the installs plus one
//! gate (what a server takes when every gate overlaps the installs after
//! it, the last one alone); gates one after the other would take the
//! installs plus four. `multi_agent_gated_over_bound = gated_s /
//! (ungated_s + gate)`, goal <= 1.3 (about 4 when each gate was waited
//! for before the next install).

use std::time::Duration;

use serde_json::json;

use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::report::NullReporter;
use agentsadm_plan::{HealthFlags, RolloutPolicy, ServerSelection};
use agentsadm_sim::{LatencySpec, SeedSpec, SimConfig, SimDc};

use super::SimUpdate;
use super::rollout::round3;

/// Options of `agentsadm bench gate`.
#[derive(clap::Args, Clone, Debug)]
pub struct GateBenchArgs {
    /// Injected install latency per component, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub latency_ms: u64,
    /// The gate's `--min-healthy`, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub gate_ms: u64,
}

/// The four agents a server updates, in the plan's batches:
/// config-agent (core-second), vm-agent and net-agent (parallel-safe),
/// cn-agent (core-last).
const AGENTS: [&str; 4] = ["config-agent", "vm-agent", "net-agent", "cn-agent"];

/// `update AGENTS -s cn001 -y` on a fresh simulated datacenter with the
/// gate at `min_healthy`: the wall time of the run.
async fn measure(latency: Duration, min_healthy: Duration) -> anyhow::Result<f64> {
    let config = SimConfig::default()
        .servers(1)
        .populate(SeedSpec {
            dc_newer: Some("1.1.0".to_string()),
            ..SeedSpec::default()
        })
        .cn_agent_restart(Duration::ZERO)
        // The SmartOS-like layout: its services are what `gz health`
        // watches for `--min-healthy` (the mockcloud layout has none).
        .install_latency(LatencySpec::fixed(latency.as_millis() as u64));
    let dc = SimDc::start(config).await?;
    for s in dc.servers() {
        dc.gz_report(s.uuid).await?;
    }
    let cn = dc
        .servers()
        .into_iter()
        .find(|s| !s.headnode)
        .ok_or_else(|| anyhow::anyhow!("the simulator has no compute node"))?;
    let update = SimUpdate {
        components: AGENTS.iter().map(|s| s.parse()).collect::<Result<_, _>>()?,
        servers: ServerSelection::Named(vec![cn.hostname.clone()]),
        rollout: RolloutPolicy {
            concurrency: 1,
            canary: Some(0),
            ..RolloutPolicy::default()
        },
        options: ExecOptions {
            health: Some(HealthFlags {
                min_healthy,
                timeout: Duration::from_secs(60),
            }),
            ..Default::default()
        },
        // The whole run is timed, the lock's acquisition included.
        settle: Some(Duration::from_millis(20)),
    };
    let ran = update.run(&dc, &NullReporter, "gate").await;
    dc.shutdown().await;
    let ran = ran?;
    let steps = ran.plan.step_count();
    anyhow::ensure!(
        steps == AGENTS.len(),
        "planned {steps} steps, not 4:\n{}",
        ran.plan
    );
    Ok(ran.wall_s)
}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(args: &GateBenchArgs) -> anyhow::Result<serde_json::Value> {
    let latency = Duration::from_millis(args.latency_ms.max(1));
    let gate = Duration::from_millis(args.gate_ms);
    let ungated = measure(latency, Duration::ZERO).await?;
    let gated = measure(latency, gate).await?;
    let g = gate.as_secs_f64();
    let bound = ungated + g;
    let serial = ungated + g * AGENTS.len() as f64;
    Ok(json!({
        "agents": AGENTS,
        "latency_ms": args.latency_ms,
        "gate_ms": args.gate_ms,
        "ungated_s": round3(ungated),
        "gated_s": round3(gated),
        "bound_s": round3(bound),
        "gates_in_series_s": round3(serial),
        "multi_agent_gated_over_bound": round3(gated / bound),
    }))
}
