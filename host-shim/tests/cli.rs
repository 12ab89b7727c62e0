//! The `sandbox-sync` CLI contract: JSON on stdout, `error[kind]: …` on
//! stderr, exit 0 / 1 (sync failed) / 2 (usage).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-sync"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A usage error exits before reading stdin: a broken pipe is expected.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sync_in_and_out_print_results_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let src = tmp.path().join("a.txt");
    std::fs::write(&src, "hello").unwrap();
    let ops = serde_json::json!([{
        "operationId": "op-1",
        "files": [{"sourcePath": src, "targetPath": remote.join("x/a.txt"), "kind": "file", "mode": 0o640}],
        "postUploadCommands": [{"command": "cp x/a.txt copy.txt"}]
    }]);
    let out = run(
        &[
            "sync-in",
            "--remote-dir",
            remote.to_str().unwrap(),
            "--ops",
            "-",
        ],
        &ops.to_string(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "operations": [{"operationId": "op-1", "filesTransferred": 1, "bytesTransferred": 5}],
            "execs": 1,
            "toolboxCalls": 0,
            // The local backend is never worth compressing for.
            "compression": [],
            // This machine has every tool.
            "degraded": [],
        })
    );
    assert_eq!(
        std::fs::read_to_string(remote.join("copy.txt")).unwrap(),
        "hello"
    );

    let back = tmp.path().join("back.txt");
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": remote.join("copy.txt"), "targetPath": back, "kind": "file"}]}]);
    let ops_file = tmp.path().join("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    let out = run(
        &[
            "sync-out",
            "--remote-dir",
            remote.to_str().unwrap(),
            "--ops",
            ops_file.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "hello");
}

#[test]
fn malformed_ops_is_a_usage_error() {
    for bad in [
        "not json",
        "{\"operationId\": 1}",
        "[{\"operationId\": \"o\"}]",
    ] {
        let out = run(&["sync-in", "--remote-dir", "/tmp/x", "--ops", "-"], bad);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error[invalid-request]") && err.contains("--ops"),
            "{err}"
        );
    }
}

#[test]
fn missing_arguments_are_usage_errors() {
    let out = run(&["sync-in", "--ops", "-"], "[]");
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["frobnicate"], "");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn escaping_target_fails_with_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("a");
    std::fs::write(&src, "x").unwrap();
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": src, "targetPath": "/workspace/../etc/passwd", "kind": "file"}]}]);
    let out = run(
        &["sync-in", "--remote-dir", "/workspace", "--ops", "-"],
        &ops.to_string(),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error[confinement]: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn incompatible_component_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("bogus.wasm");
    std::fs::write(&bogus, b"\0asm\x0d\0\x01\0garbage").unwrap();
    let out = run(
        &[
            "sync-in",
            "--remote-dir",
            "/w",
            "--ops",
            "-",
            "--component",
            bogus.to_str().unwrap(),
        ],
        "[]",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed to load component"));
}

#[test]
fn demo_runs() {
    let out = run(&["demo"], "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sync-in: 1 exec(s)") && text.contains("sync-out: 1 exec(s)"),
        "{text}"
    );
}

#[test]
fn the_same_binary_loads_the_fallback_component_at_run_time() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::create_dir_all(tmp.path().join("ws/d")).unwrap();
    std::fs::write(tmp.path().join("ws/d/f"), "payload").unwrap();
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": tmp.path().join("ws"), "targetPath": remote.join("ws"), "kind": "directory"}]}]);
    let fallback = sandbox_sync_host::runtime::FALLBACK_COMPONENT_PATH;
    let out = run(
        &[
            "sync-in",
            "--remote-dir",
            remote.to_str().unwrap(),
            "--ops",
            "-",
            "--component",
            fallback,
        ],
        &ops.to_string(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(remote.join("ws/d/f")).unwrap(),
        "payload"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["operations"][0]["filesTransferred"], 1);
}

#[test]
fn limits_are_configurable_on_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(remote.join("many")).unwrap();
    for i in 0..20 {
        std::fs::write(remote.join(format!("many/f{i}")), "x").unwrap();
    }
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": remote.join("many"), "targetPath": tmp.path().join("back"), "kind": "directory"}]}]);
    let args = [
        "sync-out",
        "--remote-dir",
        remote.to_str().unwrap(),
        "--ops",
        "-",
    ];
    let out = run(
        &[&args[..], &["--max-entries", "5"]].concat(),
        &ops.to_string(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("error[limit-exceeded]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        &[&args[..], &["--max-output-bytes", "4096"]].concat(),
        &ops.to_string(),
    );
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error[limit-exceeded]"));
    let out = run(&args, &ops.to_string());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(tmp.path().join("back")).unwrap().count(),
        20
    );
}

#[test]
fn checksum_re_syncs_keep_what_is_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..3 {
        std::fs::write(src.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": src, "targetPath": remote.join("ws"), "kind": "directory"}]}]);
    let args = [
        "sync-in",
        "--remote-dir",
        remote.to_str().unwrap(),
        "--ops",
        "-",
        "--checksum",
    ];
    let sent = |out: Output| {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["operations"][0]["filesTransferred"].as_u64().unwrap()
    };
    assert_eq!(sent(run(&args, &ops.to_string())), 3);
    std::fs::write(src.join("f1"), "FILE 1").unwrap();
    assert_eq!(sent(run(&args, &ops.to_string())), 1);
    assert_eq!(sent(run(&args, &ops.to_string())), 0);
    assert_eq!(
        std::fs::read_to_string(remote.join("ws/f1")).unwrap(),
        "FILE 1"
    );
}
