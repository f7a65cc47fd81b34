//! The headnode orchestrator: gathers intent (SAPI) and reality (CNAPI), plans
//! per-server steps, and converges the fleet with bounded parallelism.
