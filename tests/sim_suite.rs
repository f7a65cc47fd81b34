//! The simulator's and the API clients' integration tests, in one test
//! binary (linking is the slow part of CI, so one binary instead of one per
//! file).
//!
//! - `quirks`, `quirks_imgapi`, `quirks_sapi`: every simulated wire quirk,
//!   through the real clients (CNAPI's in `quirks`);
//! - `api_faults`: the clients' retries, timeouts and error bodies against
//!   injected faults;
//! - `gz`: the real GZ installer behind the simulator (both layouts);
//! - `outages`: CNAPI restarts, cn-agent's task history and restarts, Ur
//!   down and Ur's reports, VMAPI down (issue 20);
//! - `real_refusals`: refusals the real services showed in the real-Triton
//!   harness (CNAPI's parameter types, 405 MethodNotAllowedError);
//! - `serve`: `agentsadm sim serve` / `sim publish`, persistence, scale;
//! - `strict`: where the simulator is as strict as the real services
//!   (issue 13).

/// How long a test waits for what must happen (a task ending, a job
/// reporting, a restart) before it calls it hung: only a hang bound, far
/// above what a loaded 2-core CI machine takes.
pub(crate) const HANG_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

#[path = "common/flows.rs"]
mod flows_common;
#[path = "common/sim.rs"]
mod sim_common;

#[path = "sim_suite/api_faults.rs"]
mod api_faults;
#[path = "sim_suite/gz.rs"]
mod gz;
#[path = "sim_suite/outages.rs"]
mod outages;
#[path = "sim_suite/quirks.rs"]
mod quirks;
#[path = "sim_suite/quirks_imgapi.rs"]
mod quirks_imgapi;
#[path = "sim_suite/quirks_sapi.rs"]
mod quirks_sapi;
#[path = "sim_suite/real_refusals.rs"]
mod real_refusals;
#[path = "sim_suite/serve.rs"]
mod serve;
#[path = "sim_suite/strict.rs"]
mod strict;
