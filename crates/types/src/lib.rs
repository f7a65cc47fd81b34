//! Shared domain types of agentsadm, below every other layer: server,
//! image and instance ids ([`ids`]), component names and versions
//! ([`component`]), the component catalog ([`catalog`]),
//! image manifests ([`image`]), output and logging conventions
//! ([`output`], [`log`]), the error-chain printer ([`error`]) and how
//! versions order ([`version`]); [`bounded`] reads files someone else may
//! have put there (regular files only, size-bounded).
//!
//! The wire types the planner reads live here too, below it, so that the
//! planner builds and tests without the HTTP clients: the CNAPI server
//! record ([`cnapi`]) and its `server.agents` entries ([`agents`]), SAPI's
//! objects ([`sapi`]) and the command contract of `agentsadm gz`
//! ([`compat`]). `agentsadm-api` re-exports them where they were.

pub mod agents;
pub mod bounded;
pub mod catalog;
pub mod cnapi;
pub mod compat;
pub mod component;
pub mod error;
pub mod ids;
pub mod image;
pub mod log;
pub mod output;
pub mod sapi;
pub mod version;
