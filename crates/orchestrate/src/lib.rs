//! The headnode orchestrator: gathers intent (SAPI) and reality (CNAPI),
//! plans, and carries out a confirmed plan across the fleet.
//!
//! The parts, in the order a run uses them:
//!
//! - [`gather`]: one ServerList, one ListServices, one ListInstances (I/O).
//! - [`images`]: `--image` / `--latest` / `--channel` resolution and imports
//!   into the datacenter IMGAPI (I/O, before planning).
//! - the pure planner is the `agentsadm_plan` crate; [`session`] gathers,
//!   resolves and plans for `update`, `install` and `remove`, [`adopt`]
//!   plans adoption.
//! - [`run`]: the one run every changing command goes through: the lock,
//!   the plan made again under it, the question (or `-y`) and the
//!   [`confirm::Confirmed`] token it yields, the plan made again after the
//!   answer ([`fence`]), imports, execution, the report.
//! - [`lock`]: one orchestrator per datacenter (SAPI application metadata),
//!   held through the run and confirmed before each change ([`guard`]);
//!   a failure while an API does not answer is the outage's, not the
//!   server's ([`guard::ApiProbe`]).
//! - [`execute`]: runs a confirmed plan: service defaults, [`records`]
//!   (CNAPI and SAPI record changes), then the servers in the plan's
//!   [`waves`], each server's turn in [`turn`], through a
//!   [`transport::Transport`] (CNAPI install-agent tasks or `agentsadm gz`
//!   via CNAPI execute) and an [`store::IntentStore`] (SAPI), reporting to
//!   a [`report::Reporter`]; [`outlier`] decides about slow servers
//!   (against [`baseline`]'s expected times before there is a median) and
//!   [`summary`] renders the end of a run. The library draws nothing: the
//!   command line turns the reporter's events into progress.
//!   [`execmode`] tells how CNAPI execute reaches each server, and
//!   [`recover`] settles tasks whose result CNAPI lost.
//! - [`marks`]: `disable`/`enable` planned for the run, `hold`/`release`
//!   written to SAPI (issue 25).
//! - [`history`]: every run the [`run`] executes is recorded (the headnode's
//!   journals and SAPI); `agentsadm history` and `revert` read it back,
//!   and the planner schedules from what servers took before; [`revert`]
//!   plans putting back what a recorded run changed.

// The layers, bottom up: a module imports only from its own layer and
// the layers below it (tests/architecture.rs keeps it so).
mod carriers;
mod commands;
mod executor;
mod runner;
mod vocabulary;

// The modules at the crate's root, as before the layers: the other
// crates' paths (`agentsadm_orchestrate::report::…`) stay as they were.
pub use carriers::{execmode, gather, images, records, recover, store, transport};
pub use commands::{adopt, marks, revert, session, shape};
pub use executor::{baseline, execute, guard, waves};
pub use runner::{fence, history, lock, run};
pub use vocabulary::{confirm, outlier, report, summary};

pub use agentsadm_plan::intent::Intent;
pub use agentsadm_plan::reality::Reality;
pub use agentsadm_plan::{Plan, PlanningInput, plan};
pub use executor::execute::{ExecOptions, Executor};
