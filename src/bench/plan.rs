//! `agentsadm bench plan`: the planner's time and memory for a large fleet.

/// Options of `agentsadm bench plan`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PlanBenchArgs {}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(_args: &PlanBenchArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("bench plan is not implemented yet")
}
