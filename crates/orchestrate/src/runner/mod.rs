//! The run every changing command goes through: the datacenter lock, the
//! plan made again under it, the question, execution, history.

pub mod fence;
pub mod history;
pub(crate) mod holding;
pub mod lock;
pub mod run;
