//! The GZ installer: installs, upgrades, removes and reports components on
//! one server, atomically, with rollback.

pub mod fetch;
pub mod fsutil;
pub mod hooks;
pub mod lock;
pub mod package;
pub mod paths;
pub mod platform;
pub mod unpack;
