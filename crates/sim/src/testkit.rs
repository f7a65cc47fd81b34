//! The example datacenter, re-exported from the planner
//! ([`agentsadm_plan::example`], feature `example`), where its scenario
//! tests use it without the simulator; kept under this name so the fake
//! datacenter, the benchmarks and the suites need not change.

pub use agentsadm_plan::example::*;
