//! What a run is described in: the reporter's events and report, the
//! summary, slow-server detection, the operator's consent.

pub mod confirm;
pub mod outcomes;
pub mod outlier;
pub mod report;
pub mod reporters;
pub mod summary;
