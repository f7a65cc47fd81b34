//! `agentsadm bench rollout`: a one-component upgrade across a simulated fleet
//! at 20-wide, 5-wide and shar-style, against the ideal for the concurrency.

/// Options of `agentsadm bench rollout`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RolloutBenchArgs {}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(_args: &RolloutBenchArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("bench rollout is not implemented yet")
}
