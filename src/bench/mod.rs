//! Benchmarks (`agentsadm bench ...`). Each prints ratios measured in the same
//! run, never absolute goals checked against a clock.
//!
//! Every benchmark module exposes a clap `Args` struct and
//! `async fn run(args) -> anyhow::Result<serde_json::Value>` returning the one
//! JSON object it prints; `bench all` runs them in turn and prints a table.

pub mod install;
pub mod plan;
pub mod rollout;
