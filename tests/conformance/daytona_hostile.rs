//! A hostile Daytona toolbox: every answer the client reads is read against
//! a cap. Each flood is a gigabyte that never becomes a valid answer; the
//! `sandbox-sync` binary must end with `limit-exceeded` on one line, its
//! peak RSS under the published budget, and no host target it created.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandbox_sync_tests::daytona_server::{Faults, Flood};
use sandbox_sync_tests::*;
use serde_json::json;

/// The host's memory budget for one call (README, "Limits").
const BUDGET: u64 = 64 << 20;
/// What each flood offers: far past every cap, and past the budget.
const FLOOD: u64 = 1 << 30;

struct Run {
    ok: bool,
    stderr: String,
    peak: u64,
}

/// Runs the CLI's `verb` (`sync-in` or `sync-out`) for `ops` against `sb`'s
/// toolbox, which floods its first answer of kind `flood`.
fn flooded(sb: &Sandbox, flood: Flood, verb: &str, ops: &serde_json::Value) -> Run {
    let server = sb.toolbox.as_ref().unwrap();
    server.set_faults(Faults {
        flood: Some((flood, FLOOD)),
        ..Faults::default()
    });
    let mut child = Command::new(sandbox_sync_bin())
        .args([verb, "--remote-dir", &sb.remote, "--ops", "-"])
        .args(["--backend", "daytona", "--sandbox-id", &server.sandbox])
        .args([
            "--daytona-api-url",
            &server.api_url,
            "--timeout-ms",
            "60000",
        ])
        .env("DAYTONA_API_KEY", &server.key)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ops.to_string().as_bytes())
        .unwrap();
    let (status, peak) = wait_with_peak_rss(&mut child, Duration::from_millis(10)).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    Run {
        ok: status.success(),
        stderr,
        peak,
    }
}

fn daytona() -> Sandbox {
    Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Daytona,
    })
}

/// The run failed with `limit-exceeded`, said on one line, within budget.
fn refused(run: &Run, what: &str) {
    assert!(!run.ok, "{what}: the sync succeeded");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {}", run.stderr);
    assert!(
        lines[0].starts_with("error[limit-exceeded]: "),
        "{what}: {}",
        run.stderr
    );
    assert!(
        run.peak > 0 && run.peak < BUDGET,
        "{what}: peak RSS {} MiB",
        run.peak >> 20
    );
}

fn sync_in_ops(sb: &Sandbox) -> serde_json::Value {
    let src = sb.write_host("src/a.txt", b"alpha");
    json!([{"operationId": "o",
        "files": [{"sourcePath": src.parent().unwrap(), "targetPath": sb.remote("ws"), "kind": "directory"}]}])
}

/// A sync-out into a host directory that does not exist yet.
fn sync_out_ops(sb: &Sandbox) -> (serde_json::Value, std::path::PathBuf) {
    sb.write_remote("out/r.txt", b"result");
    let target = sb.host.join("new/deeper/out");
    let ops = json!([{"operationId": "o",
        "files": [{"sourcePath": sb.remote("out"), "targetPath": target, "kind": "directory"}]}]);
    (ops, target)
}

#[test]
fn floods_into_sync_in_are_refused_within_budget() {
    for flood in [Flood::Upload, Flood::Execute, Flood::ExecuteError] {
        let sb = daytona();
        let ops = sync_in_ops(&sb);
        let run = flooded(&sb, flood, "sync-in", &ops);
        refused(&run, &format!("{flood:?}"));
    }
}

#[test]
fn floods_into_sync_out_are_refused_within_budget_and_leave_no_target() {
    for flood in [
        Flood::Execute,
        Flood::DownloadError,
        Flood::DownloadPreamble,
        Flood::DownloadHeaders,
        Flood::DownloadErrorPart,
    ] {
        let sb = daytona();
        let (ops, target) = sync_out_ops(&sb);
        let run = flooded(&sb, flood, "sync-out", &ops);
        refused(&run, &format!("{flood:?}"));
        assert!(
            !sb.host.join("new").exists(),
            "{flood:?}: a failed sync-out left {} behind",
            target.display()
        );
    }
}

/// The delete that removes the sandbox's output file after a download:
/// a flood there fails the call too, and within budget.
#[test]
fn a_flooded_delete_is_refused_within_budget() {
    let sb = daytona();
    let (ops, _) = sync_out_ops(&sb);
    let run = flooded(&sb, Flood::Delete, "sync-out", &ops);
    refused(&run, "Delete");
}
