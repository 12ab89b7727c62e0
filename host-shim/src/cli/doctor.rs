//! `sandbox-sync doctor`: the one-exec probe, printed.

use std::process::ExitCode;

use clap::Args;

use super::args::{backend_failure, BackendArgs};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The remote dir to check for writability.
    #[arg(long)]
    pub(super) remote_dir: String,
    #[command(flatten)]
    pub(super) backend: BackendArgs,
    /// Print the findings as JSON.
    #[arg(long)]
    pub(super) json: bool,
}

pub async fn run(args: DoctorArgs) -> ExitCode {
    let backend = match args.backend.backend().await {
        Ok(b) => b,
        Err(e) => return backend_failure(&e),
    };
    match sandbox_sync_host::doctor::probe(backend.as_ref(), &args.remote_dir).await {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::json!(report));
            } else {
                print!("{}", report.render(&args.remote_dir));
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error[transport]: {e:#}");
            ExitCode::from(1)
        }
    }
}
