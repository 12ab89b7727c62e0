//! The `sandbox-sync` command line: argument parsing and the stable CLI
//! contract: JSON on stdout, one typed error line on stderr, exit 0 (ok),
//! 1 (sync failed), 2 (usage). One module per command; `args` holds the
//! flags that name a sandbox.

mod args;
mod cp;
mod demo;
mod doctor;
mod hint;
mod sync;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sandbox_sync_host::provider::Direction;

#[derive(Debug, Parser)]
#[command(
    name = "sandbox-sync",
    version,
    about = "Move files between a host and a sandbox, safely and fast."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Host -> sandbox: apply operations (JSON, the seed's camelCase shape).
    SyncIn(sync::SyncArgs),
    /// Sandbox -> host.
    SyncOut(sync::SyncArgs),
    /// Create a local sandbox, sync a sample workspace in and results out.
    Demo,
    /// Serve the plugin worker protocol (JSON-RPC 2.0, NDJSON on stdin/stdout).
    Serve,
    /// Copy a file or directory to or from a sandbox, `kubectl cp` style.
    Cp(cp::CpArgs),
    /// Probe a sandbox (one exec) and report what sandbox-sync can use.
    Doctor(doctor::DoctorArgs),
}

pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.cmd {
        Cmd::SyncIn(args) => rt.block_on(sync::run(Direction::In, args)),
        Cmd::SyncOut(args) => rt.block_on(sync::run(Direction::Out, args)),
        Cmd::Serve => match rt.block_on(sandbox_sync_host::worker::serve(
            tokio::io::stdin(),
            tokio::io::stdout(),
        )) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Cmd::Cp(args) => rt.block_on(cp::run(args)),
        Cmd::Doctor(args) => rt.block_on(doctor::run(args)),
        Cmd::Demo => match rt.block_on(demo::run()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}
