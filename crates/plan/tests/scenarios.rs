//! The planner's scenario tests, on the example datacenter (feature
//! `example`), in one test binary: they build with the planner and
//! agentsadm-types alone (no simulator, no CLI, no tokio), so `cargo test
//! -p agentsadm-plan` is the planner's own test loop.
//!
//! - `plan`: update, install, remove, skips, transports, gates, marlin;
//! - `holds`: holds as a planner rule;
//! - `halfsetup`: a datacenter not set up leads with the cause;
//! - `agentsadm_first`: servers whose agentsadm cannot parse a step get it
//!   first.
//!
//! The printed plans are insta snapshots in `scenarios/snapshots/`, exact
//! (the example datacenter's UUIDs are derived from names).

#[path = "scenarios/agentsadm_first.rs"]
mod agentsadm_first;
#[path = "scenarios/halfsetup.rs"]
mod halfsetup;
#[path = "scenarios/holds.rs"]
mod holds;
#[path = "scenarios/plan.rs"]
mod plan;
#[path = "../../../tests/common/snapshot.rs"]
mod snapshot;
