//! The `agentsadm` binary: parse the command line and run it.

fn main() -> std::process::ExitCode {
    agentsadm::cli::main()
}
