//! Benchmarks (`agentsadm bench ...`). Each prints ratios measured in the same
//! run, never absolute goals checked against a clock.

pub mod install;
pub mod rollout;
