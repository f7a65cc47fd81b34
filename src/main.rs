//! The `agentsadm` binary: parse the command line and run it. The
//! developer's build (feature `sim`, the default) adds the `sim`, `demo`
//! and `bench` subcommands; the server's build has only the product's.

fn main() -> std::process::ExitCode {
    #[cfg(feature = "sim")]
    return agentsadm_cli::main::<agentsadm_dev::cli::DevCommand>();
    #[cfg(not(feature = "sim"))]
    return agentsadm_cli::main::<agentsadm_cli::NoExtension>();
}
