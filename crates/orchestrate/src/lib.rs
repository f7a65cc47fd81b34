//! The headnode orchestrator: gathers intent (SAPI) and reality (CNAPI), plans
//! per-server steps, and converges the fleet with bounded parallelism.
//!
//! The parts, in the order a run uses them:
//!
//! - [`gather`]: one ServerList, one ListServices, one ListInstances (I/O).
//! - [`reality`], [`intent`]: those answers indexed by server and component.
//! - [`images`]: `--image` / `--latest` / `--channel` resolution and imports
//!   into the datacenter IMGAPI (I/O, before planning).
//! - [`mod@plan`]: the pure planner, and [`display`] for humans.
//! - [`lock`]: one orchestrator per datacenter (SAPI application metadata).
//! - [`execute`]: runs a plan through a [`transport::Transport`] (CNAPI
//!   install-agent tasks or `agentsadm gz` via CNAPI execute) and an
//!   [`store::IntentStore`] (SAPI), reporting to a [`report::Reporter`];
//!   [`outlier`] decides about slow servers. The library draws nothing:
//!   the command line turns the reporter's events into progress.
//!   [`execmode`] tells how CNAPI execute reaches each server, and
//!   [`recover`] settles tasks whose result CNAPI lost.
//! - [`session`]: the above as one library call (CLI, demo, tests).
//! - [`fence`]: execute only the plan that was shown and confirmed.
//! - [`adopt`]: create agent services and instances for what servers report.
//! - [`testkit`] and [`fake`]: a deterministic example datacenter and an
//!   in-memory transport / SAPI for tests and benchmarks.

pub mod adopt;
pub mod execmode;
pub mod execute;
pub mod fence;
pub mod gather;
pub mod images;
pub mod lock;
pub mod outlier;
pub mod recover;
pub mod report;
pub mod session;
pub mod store;
pub mod transport;

pub use agentsadm_plan::intent::Intent;
pub use agentsadm_plan::reality::Reality;
pub use agentsadm_plan::{Plan, PlanningInput, plan};
pub use execute::{ExecOptions, Executor};
