//! Carrying out a confirmed plan: the waves, each server's turn, the checks
//! before each change, expected durations.

pub mod baseline;
pub mod execute;
pub(crate) mod gate;
pub(crate) mod turn;
pub mod waves;
