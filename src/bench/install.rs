//! `agentsadm bench install`: agentsadm against cn-agent's download path and a
//! bare `tar -xzf`.

/// Options of `agentsadm bench install`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct InstallBenchArgs {}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(_args: &InstallBenchArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("bench install is not implemented yet")
}
