//! agentsadm: per-component installation and tracking of Triton global-zone
//! agents, replacing the agentsshar.
//!
//! - [`gz`]: the installer that runs in one server's global zone.
//! - [`orchestrate`]: the headnode planner and executor across servers.
//! - [`flows`]: setup, adoption, server delete / factory reset, drift checks.
//! - [`api`]: the IMGAPI, SAPI and CNAPI clients.
//! - [`catalog`], [`image`], [`ids`]: shared domain types.
//!
//! Beside the product, behind the default cargo feature `sim` (the build
//! that ships to a server turns it off: `--no-default-features`):
//! - `sim`: a simulated datacenter (IMGAPI, SAPI, CNAPI, mock servers) and
//!   the installer's stand-in IMGAPI;
//! - `imagebuild`: format-correct synthetic component images;
//! - `demo`, `bench`: the demo's script and the benchmarks.
//!
//! Dependencies point one way: the CLI uses the orchestrator and the
//! flows, which use the API clients and the installer, which use the
//! platform, the catalog and the ids. The simulator and its tools use the
//! product; the product never uses them (`tests/architecture.rs` checks).

pub mod api;
pub mod catalog;
pub mod cli;
pub mod error;
pub mod flows;
pub mod gz;
pub mod ids;
pub mod image;
pub mod log;
pub mod orchestrate;
pub mod output;
pub mod platform;
pub mod remote;

#[cfg(feature = "sim")]
pub mod bench;
#[cfg(feature = "sim")]
pub mod demo;
#[cfg(feature = "sim")]
pub mod imagebuild;
#[cfg(feature = "sim")]
pub mod sim;
