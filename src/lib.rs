//! agentsadm: per-component installation and tracking of Triton global-zone
//! agents, replacing the agentsshar.
//!
//! - [`gz`]: the installer that runs in one server's global zone.
//! - [`orchestrate`]: the headnode planner and executor across servers.
//! - [`flows`]: setup, adoption, server delete / factory reset, drift checks.
//! - [`sim`]: a simulated datacenter (IMGAPI, SAPI, CNAPI, mock servers).
//! - [`api`]: the IMGAPI, SAPI and CNAPI clients.
//! - [`catalog`], [`image`], [`ids`]: shared domain types.

pub mod api;
pub mod bench;
pub mod catalog;
pub mod cli;
pub mod demo;
pub mod flows;
pub mod gz;
pub mod ids;
pub mod image;
pub mod imagebuild;
pub mod log;
pub mod orchestrate;
pub mod output;
pub mod platform;
pub mod remote;
pub mod sim;
