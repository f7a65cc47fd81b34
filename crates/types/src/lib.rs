//! Shared domain types of agentsadm, below every other layer: server,
//! image and instance ids ([`ids`]), component names and versions
//! ([`component`]), the component catalog ([`catalog`]),
//! image manifests ([`image`]), output and logging conventions
//! ([`output`], [`log`]), the error-chain printer ([`error`]) and how
//! versions order ([`version`]); [`bounded`] reads files someone else may
//! have put there (regular files only, size-bounded).

pub mod bounded;
pub mod catalog;
pub mod component;
pub mod error;
pub mod ids;
pub mod image;
pub mod log;
pub mod output;
pub mod version;
