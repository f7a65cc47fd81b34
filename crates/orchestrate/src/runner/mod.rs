//! The run every changing command goes through: the datacenter lock, the
//! plan made again under it, the question, execution, history, and the
//! move of agentsadm's own SAPI services out of `sdc` and the copy of the
//! marks an earlier agentsadm kept once ([`ledger`]) that every run makes.

pub mod datacenter;
pub mod fence;
pub mod history;
pub mod ledger;
pub mod lock;
pub mod run;
pub mod shape;
