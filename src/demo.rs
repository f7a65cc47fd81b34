//! `agentsadm demo`: the whole story on an in-process simulated datacenter.
