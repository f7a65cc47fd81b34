//! The commands' planners: what `update`, `install`, `remove`, `adopt`,
//! `disable`/`enable`/`hold`/`release` and `revert`.

pub mod adopt;
pub mod marks;
pub mod revert;
pub mod session;
