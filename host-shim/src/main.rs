//! The `sandbox-sync` command line.

mod cli;
mod cp;
mod demo;

fn main() -> std::process::ExitCode {
    cli::main()
}
