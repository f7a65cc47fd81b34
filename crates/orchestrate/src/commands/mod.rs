//! The commands' planners: what `update`, `install`, `remove`, `adopt`,
//! `disable`/`enable`/`hold`/`release`, `revert` and the services' move plan.

pub mod adopt;
pub mod marks;
pub mod revert;
pub mod session;
pub mod shape;
