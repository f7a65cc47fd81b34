//! `agentsadm bench rollout` and `bench plan`: fleet rollout and planning cost.
