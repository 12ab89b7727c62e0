//! The `sandbox-sync` binary's front ends on a Daytona sandbox: the sync
//! verbs (the toolbox URL looked up through the API), `cp`, `doctor`, and
//! the plugin worker, against the fake toolbox.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};

use sandbox_sync_tests::*;
use serde_json::{json, Value};

/// `out`, once its command succeeded (else its output is the message).
fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn daytona_sandbox() -> Sandbox {
    Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Daytona,
    })
}

fn cli(sb: &Sandbox, args: &[&str]) -> Command {
    let server = sb.toolbox.as_ref().unwrap();
    let mut c = Command::new(sandbox_sync_bin());
    c.args(args)
        .args(["--backend", "daytona", "--sandbox-id", &server.sandbox])
        .args(["--daytona-api-url", &server.api_url])
        .env("DAYTONA_API_KEY", &server.key);
    c
}

/// The sync verbs find the toolbox through the API and report their calls.
#[test]
fn sync_verbs_find_the_toolbox_through_the_api() {
    let sb = daytona_sandbox();
    let src = sb.write_host("ws/a.txt", b"alpha");
    let ops = json!([{"operationId": "o",
        "files": [{"sourcePath": src.parent().unwrap(), "targetPath": sb.remote("ws"), "kind": "directory"}],
        "postUploadCommands": [{"command": "cat ws/a.txt > copied.txt"}]}]);
    let ops_file = sb.host.join("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    let ops_file = ops_file.to_str().unwrap();
    let out = succeeded(
        cli(
            &sb,
            &["sync-in", "--remote-dir", &sb.remote, "--ops", ops_file],
        )
        .output()
        .unwrap(),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["toolboxCalls"], 2, "{v}");
    assert_eq!(v["execs"], 1, "{v}");
    assert_eq!(
        std::fs::read(sb.remote_on_host("copied.txt")).unwrap(),
        b"alpha"
    );
    let calls = sb.toolbox.as_ref().unwrap().calls();
    assert_eq!(calls[0], "GET /toolbox-proxy-url", "{calls:?}");

    let back = sb.host.join("back");
    let ops = json!([{"operationId": "o",
        "files": [{"sourcePath": sb.remote("ws"), "targetPath": back, "kind": "directory"}]}]);
    let out = cli(&sb, &["sync-out", "--remote-dir", &sb.remote, "--ops", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .unwrap()
                .write_all(ops.to_string().as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    succeeded(out);
    assert_eq!(std::fs::read(back.join("a.txt")).unwrap(), b"alpha");
}

/// Without a key, or with the wrong one, the CLI says so.
#[test]
fn a_missing_or_refused_key_is_reported() {
    let sb = daytona_sandbox();
    let out = cli(&sb, &["doctor", "--remote-dir", &sb.remote])
        .env_remove("DAYTONA_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DAYTONA_API_KEY"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&sb, &["doctor", "--remote-dir", &sb.remote])
        .env("DAYTONA_API_KEY", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("401") || err.contains("refused"), "{err}");
    assert!(!err.contains("wrong"), "the key is never printed: {err}");
}

/// A refusal the toolbox gives during a sync reaches the CLI typed: the
/// hint says what to check on Daytona (not the kube hint), the sync verbs
/// keep their one error line, and `cp --json` names the cause.
#[test]
fn a_refusal_during_a_sync_reaches_the_cli_typed() {
    let sb = daytona_sandbox();
    let server = sb.toolbox.as_ref().unwrap();
    let src = sb.write_host("ws/a.txt", b"alpha");
    let ops = json!([{"operationId": "o",
        "files": [{"sourcePath": src.parent().unwrap(), "targetPath": sb.remote("ws"), "kind": "directory"}]}]);
    let ops_file = sb.host.join("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    // The toolbox URL given, so the first refusal comes from a sync's call.
    let sync_in = |sandbox: &str, key: &str| {
        let out = Command::new(sandbox_sync_bin())
            .args(["sync-in", "--remote-dir", &sb.remote, "--ops"])
            .arg(&ops_file)
            .args(["--backend", "daytona", "--sandbox-id", sandbox])
            .args(["--daytona-toolbox-url", &server.url])
            .env("DAYTONA_API_KEY", key)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = sync_in(&server.sandbox, "wrong");
    assert!(err.starts_with("error[transport]: "), "{err}");
    assert!(
        err.contains("(hint: the Daytona toolbox refused DAYTONA_API_KEY"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    let err = sync_in("no-such-sandbox", &server.key);
    assert!(
        err.contains("hint: check the Daytona sandbox id and that the sandbox is started"),
        "{err}"
    );
    assert!(!sb.remote_on_host("ws").exists());

    let spec = format!("daytona:{}:{}", server.sandbox, sb.remote("a.txt"));
    let out = Command::new(sandbox_sync_bin())
        .arg("cp")
        .arg(&src)
        .arg(&spec)
        .args(["--daytona-toolbox-url", &server.url, "--json"])
        .env("DAYTONA_API_KEY", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "transport", "{v}");
    assert_eq!(v["error"]["cause"], "unauthorized", "{v}");
}

/// `cp` and `doctor` work on Daytona too.
#[test]
fn cp_and_doctor() {
    let sb = daytona_sandbox();
    let server = sb.toolbox.as_ref().unwrap();
    let src = sb.write_host("notes.txt", b"notes");
    let spec = format!("daytona:{}:{}", server.sandbox, sb.remote("notes.txt"));
    let cp = |from: &std::ffi::OsStr, to: &std::ffi::OsStr, flag: &str| {
        let out = Command::new(sandbox_sync_bin())
            .arg("cp")
            .arg(from)
            .arg(to)
            .args(["--daytona-toolbox-url", &server.url, flag])
            .env("DAYTONA_API_KEY", &server.key)
            .output()
            .unwrap();
        succeeded(out);
    };
    cp(src.as_os_str(), spec.as_ref(), "--json");
    assert_eq!(
        std::fs::read(sb.remote_on_host("notes.txt")).unwrap(),
        b"notes"
    );
    let back = sb.host.join("back.txt");
    cp(spec.as_ref(), back.as_os_str(), "--quiet");
    assert_eq!(std::fs::read(&back).unwrap(), b"notes");

    let out = succeeded(
        cli(&sb, &["doctor", "--remote-dir", &sb.remote])
            .output()
            .unwrap(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ready"), "{text}");
}

/// The plugin worker takes `config.backend: "daytona"`, the sandbox id from
/// the lease's `providerLeaseId` and the key from `config.apiKey`.
#[test]
fn the_worker_drives_a_daytona_sandbox() {
    let sb = daytona_sandbox();
    let server = sb.toolbox.as_ref().unwrap();
    let src = sb.write_host("f.txt", b"from the worker");
    let mut child = Command::new(sandbox_sync_bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env_remove("DAYTONA_API_KEY")
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let params = json!({
        "driverKey": "sandbox-sync", "companyId": "c1", "environmentId": "e1", "issueId": null,
        "config": {"backend": "daytona", "toolboxUrl": server.url, "apiKey": server.key},
        "lease": {"providerLeaseId": server.sandbox, "metadata": {"remoteCwd": sb.remote}, "expiresAt": null},
        "operations": [{"operationId": "w",
            "files": [{"sourcePath": src, "targetPath": sb.remote("f.txt"), "kind": "file"}]}],
    });
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "environmentSyncIn", "params": params});
    writeln!(stdin, "{msg}").unwrap();
    let line = lines.next().unwrap().unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["result"]["operations"][0]["filesTransferred"], 1, "{v}");
    assert_eq!(
        std::fs::read(sb.remote_on_host("f.txt")).unwrap(),
        b"from the worker"
    );
    let _ = child.kill();
    let _ = child.wait();
}
