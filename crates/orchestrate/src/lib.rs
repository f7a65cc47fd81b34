//! The headnode orchestrator: gathers intent (SAPI) and reality (CNAPI),
//! plans, and carries out a confirmed plan across the fleet.
//!
//! The modules sit in five layers (directories), bottom up; a module
//! imports only from the layers below its own and from its own layer's
//! modules, with no cycle (`tests/architecture.rs` checks it, issue 31):
//!
//! 1. vocabulary: what a run is described in. [`report`] (the
//!    [`report::Reporter`]'s events and the [`report::ExecReport`]),
//!    [`outcomes`] (a step's failure, a record change's outcome, the lock's
//!    loss: what the parts below report back), [`outlier`] (slow
//!    servers), [`summary`] (the end of a run), [`reporters`] (the run's
//!    log) and [`confirm`] (the [`confirm::Confirmed`] token).
//! 2. carriers: what carries a change and reads the datacenter.
//!    [`transport`] (CNAPI install-agent tasks or `agentsadm gz` through
//!    CNAPI execute; [`execmode`] tells how execute reaches each server,
//!    [`recover`] settles tasks whose result CNAPI lost), [`store`] (SAPI
//!    intent), [`records`] (CNAPI and SAPI record changes), [`guard`] (the
//!    lock confirmed before each change, and whether an API stopped
//!    answering), [`gather`] (one ServerList, ListServices,
//!    ListInstances) and [`images`] (`--image` / `--latest` / `--channel`
//!    and imports into the datacenter IMGAPI).
//! 3. executor: [`execute`] runs a confirmed plan: service defaults, the
//!    records, then the servers in the plan's [`waves`], each server's
//!    turn; [`baseline`] gives the expected times before there is a
//!    median.
//! 4. runner: [`run`], the one run every changing command goes through:
//!    the [`lock`] (one orchestrator per datacenter, SAPI application
//!    metadata), the plan made again under it, the question (or `-y`),
//!    the plan made again after the answer ([`fence`]), imports,
//!    execution, the report, and the [`history`] entry; [`shape`] moves
//!    agentsadm's own SAPI services out of `sdc` on the way;
//!    [`datacenter`] is what a run works on (the APIs, or a test's fake
//!    datacenter, which then goes through the same run).
//! 5. commands: the planners of the commands: [`session`] gathers,
//!    resolves and plans `update`, `install` and `remove`; [`adopt`],
//!    [`marks`] (`disable`/`enable`, `hold`/`release`) and [`revert`]
//!    (putting back what a recorded run changed).
//!
//! The pure planner is the `agentsadm_plan` crate. The library draws
//! nothing: the command line turns the reporter's events into progress.

// The layers, bottom up: a module imports only from its own layer and
// the layers below it (tests/architecture.rs keeps it so).
mod carriers;
mod commands;
mod executor;
mod runner;
mod vocabulary;

// The modules at the crate's root, as before the layers: the other
// crates' paths (`agentsadm_orchestrate::report::…`) stay as they were.
// Inside this crate paths name the layer (`crate::vocabulary::report`),
// so that the architecture test sees every arrow.
pub use carriers::{execmode, gather, guard, images, records, recover, store, transport};
pub use commands::{adopt, marks, revert, session};
pub use executor::{baseline, execute, waves};
pub use runner::{datacenter, fence, history, ledger, lock, run, shape};
pub use vocabulary::{confirm, outcomes, outlier, report, reporters, summary};

pub use agentsadm_plan::intent::Intent;
pub use agentsadm_plan::reality::Reality;
pub use agentsadm_plan::{Plan, PlanningInput, plan};
pub use executor::execute::{ExecOptions, Executor};
