//! The commands, one module each (issue 31). Each declares its own clap
//! arguments and a `run` taking the [`crate::settings::Settings`]
//! resolved before it; none uses another (what several share is beside
//! this directory: the arguments in `args`, the run of a change in
//! `change`, how runs end in `execution`, the marks in `marking`, the
//! updates server in `updates`, the pictures in `pictures`).
//! `tests/architecture/cli.rs` keeps it so.

pub mod adopt;
pub mod avail;
pub mod check;
pub mod disable;
pub mod enable;
pub mod gz;
pub mod history;
pub mod hold;
pub mod install;
pub mod installer;
pub mod list;
pub mod plan;
pub mod release;
pub mod remove;
pub mod revert;
pub mod self_update;
pub mod server;
pub mod update;
