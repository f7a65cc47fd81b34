//! What carries a change to the datacenter's services and servers: the
//! transports (CNAPI tasks, `agentsadm gz` through CNAPI execute), the SAPI
//! intent store, the CNAPI/SAPI record writes, gathering and images.

pub mod execmode;
pub mod gather;
pub mod guard;
pub mod images;
pub mod records;
pub mod recover;
pub mod store;
pub mod transport;
