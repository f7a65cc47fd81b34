//! The pictures a run or the fleet is drawn as (issue 33): a run's
//! [`timeline`] (text and SVG) and the [`racks`] map, shared by `history`
//! and `list`.

pub mod racks;
pub mod timeline;
