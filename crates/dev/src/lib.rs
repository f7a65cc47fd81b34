//! Beside the product, never in the server's build: the demo's script, the
//! benchmarks, and the `sim`, `demo` and `bench` subcommands that the
//! developer's binary adds to the command line.

pub mod bench;
pub mod cli;
pub mod demo;
