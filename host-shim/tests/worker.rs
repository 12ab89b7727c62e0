//! The real `sandbox-sync serve` process spoken to over NDJSON.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Worker {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-sync"))
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).expect("every output line is JSON");
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Worker {
            child,
            stdin,
            lines: rx,
        }
    }

    fn send_raw(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn call(&mut self, id: u64, method: &str, params: Value) {
        self.send_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a response within 30 s")
    }

    fn response(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.call(id, method, params);
        let v = self.next();
        assert_eq!(v["id"], json!(id), "{v}");
        assert_eq!(v["jsonrpc"], "2.0");
        v
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sync_params(remote: &str, operations: Value) -> Value {
    json!({
        "driverKey": "sandbox-sync", "companyId": "c1", "environmentId": "e1", "issueId": null,
        "config": {},
        "lease": {"providerLeaseId": "lease-1", "metadata": {"provider": "sandbox-sync", "remoteCwd": remote}, "expiresAt": null},
        "operations": operations,
    })
}

#[test]
fn initialize_health_and_method_errors() {
    let mut w = Worker::start();
    let v = w.response(1, "initialize", json!({"manifest": {}, "config": {}, "instanceInfo": {"instanceId": "i", "hostVersion": "1"}, "apiVersion": 1}));
    assert_eq!(v["result"]["ok"], true);
    let methods: Vec<&str> = v["result"]["supportedMethods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(
        methods.contains(&"environmentSyncIn") && methods.contains(&"environmentSyncOut"),
        "{methods:?}"
    );
    assert!(!methods.contains(&"environmentExecute"));
    let v = w.response(2, "health", json!({}));
    assert_eq!(v["result"]["status"], "ok");
    let v = w.response(3, "environmentExecute", json!({}));
    assert_eq!(v["error"]["code"], -32004);
    assert_eq!(
        v["error"]["message"],
        "environmentExecute is not implemented by this plugin"
    );
    let v = w.response(4, "frobnicate", json!({}));
    assert_eq!(v["error"]["code"], -32601);
    let v = w.response(5, "environmentSyncIn", json!({"driverKey": "x"}));
    assert_eq!(v["error"]["code"], -32602);
}

#[test]
fn malformed_lines_never_kill_the_worker() {
    let mut w = Worker::start();
    w.send_raw("{not json");
    let v = w.next();
    assert_eq!(v["error"]["code"], -32700);
    assert_eq!(v["id"], Value::Null);
    w.send_raw("[1,2,3]");
    assert_eq!(w.next()["error"]["code"], -32600);
    w.send_raw(&"x".repeat(100_000));
    assert_eq!(w.next()["error"]["code"], -32700);
    // Bytes that are not UTF-8 once ended the worker (its line reader failed).
    w.stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}\n")
        .unwrap();
    w.stdin.flush().unwrap();
    assert_eq!(w.next()["error"]["code"], -32700);
    let v = w.response(9, "health", json!({}));
    assert_eq!(v["result"]["status"], "ok");
}

/// A message past the cap is refused without being buffered whole, and the
/// worker keeps serving.
#[test]
fn an_oversized_message_is_refused() {
    let mut w = Worker::start();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..(256 + 8) {
        w.stdin.write_all(&chunk).unwrap();
    }
    w.stdin.write_all(b"\n").unwrap();
    w.stdin.flush().unwrap();
    let v = w.next();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let v = w.response(2, "health", json!({}));
    assert_eq!(v["result"]["status"], "ok");
}

#[test]
fn sync_in_and_out_through_the_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::create_dir_all(tmp.path().join("ws/sub")).unwrap();
    std::fs::write(tmp.path().join("ws/sub/a.txt"), "hello").unwrap();
    let mut w = Worker::start();
    let ops = json!([{"operationId": "sync-op-1",
        "files": [{"sourcePath": tmp.path().join("ws"), "targetPath": remote.join("ws"), "kind": "directory"}],
        "postUploadCommands": [{"command": "cat ws/sub/a.txt > copied.txt"}]}]);
    let v = w.response(
        1,
        "environmentSyncIn",
        sync_params(remote.to_str().unwrap(), ops),
    );
    assert_eq!(
        v["result"]["operations"][0]["operationId"], "sync-op-1",
        "{v}"
    );
    assert_eq!(v["result"]["operations"][0]["filesTransferred"], 1);
    assert_eq!(
        std::fs::read_to_string(remote.join("copied.txt")).unwrap(),
        "hello"
    );

    // The upstream bug #13864 shape: the remote dir only under workspaceRealization.
    let mut params = sync_params(
        "",
        json!([{"operationId": "out-1",
        "files": [{"sourcePath": remote.join("copied.txt"), "targetPath": tmp.path().join("back/copied.txt"), "kind": "file"}]}]),
    );
    params["lease"]["metadata"] = json!({"workspaceRealization": {"remote": {"path": remote}}});
    let v = w.response(2, "environmentSyncOut", params);
    assert_eq!(v["result"]["operations"][0]["bytesTransferred"], 5, "{v}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("back/copied.txt")).unwrap(),
        "hello"
    );
}

#[test]
fn sync_errors_carry_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, "x").unwrap();
    let mut w = Worker::start();
    let ops = json!([{"operationId": "o", "files": [{"sourcePath": src, "targetPath": "/etc/passwd", "kind": "file"}]}]);
    let v = w.response(
        1,
        "environmentSyncIn",
        sync_params("/workspace", ops.clone()),
    );
    assert_eq!(v["error"]["code"], -32002, "{v}");
    assert_eq!(v["error"]["data"]["kind"], "confinement");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("error[confinement]"));
    let mut params = sync_params("", ops);
    params["lease"]["metadata"] = json!({});
    let v = w.response(2, "environmentSyncIn", params);
    assert_eq!(v["error"]["code"], -32602);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("remoteCwd"),
        "{v}"
    );
    let mut params = sync_params("/w", json!([]));
    params["config"] = json!({"backend": "teleport"});
    let v = w.response(3, "environmentSyncIn", params);
    assert_eq!(v["error"]["code"], -32602);
}

/// A sync knob of the wrong type or value is refused as invalid params,
/// naming the key, before any exec; it is never silently ignored.
#[test]
fn a_mistyped_config_is_refused_by_name() {
    let mut w = Worker::start();
    let cases = [
        (json!({"timeoutMs": "500"}), "timeoutMs"),
        (json!({"incremental": "no"}), "incremental"),
        (json!({"checksum": 1}), "checksum"),
        (json!({"maxEntries": -1}), "maxEntries"),
        (json!({"compress": 3}), "compress"),
        (json!({"compress": "lzma"}), "lzma"),
    ];
    for (n, (config, named)) in cases.into_iter().enumerate() {
        let mut params = sync_params("/w", json!([]));
        params["config"] = config;
        let v = w.response(n as u64 + 1, "environmentSyncIn", params);
        assert_eq!(v["error"]["code"], -32602, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{named}: {message}");
    }
}

#[test]
fn overlapping_requests_and_draining_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let mut w = Worker::start();
    let slow = json!([{"operationId": "slow", "files": [], "postUploadCommands": [{"command": "sleep 1; touch slow-done"}]}]);
    w.call(
        1,
        "environmentSyncIn",
        sync_params(remote.to_str().unwrap(), slow.clone()),
    );
    w.call(2, "health", json!({}));
    let first = w.next();
    assert_eq!(
        first["id"], 2,
        "the fast request overtakes the slow one: {first}"
    );
    let second = w.next();
    assert_eq!(second["id"], 1);
    assert!(second["result"].is_object(), "{second}");

    w.call(3, "environmentSyncIn", sync_params(remote.to_str().unwrap(), json!([{"operationId": "slow2", "files": [], "postUploadCommands": [{"command": "sleep 1; touch slow2-done"}]}])));
    w.call(4, "shutdown", json!({}));
    let a = w.next();
    let b = w.next();
    assert_eq!(
        a["id"], 3,
        "in-flight work finishes before shutdown answers: {a}"
    );
    assert_eq!(b["id"], 4);
    assert!(remote.join("slow2-done").exists());
    let status = w.child.wait().unwrap();
    assert!(status.success());
}

/// A timeout no clock can add (u64::MAX ms) is a long wait, not a crash.
#[test]
fn an_absurd_timeout_does_not_crash_the_worker() {
    let mut w = Worker::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let mut params = sync_params(
        remote.to_str().unwrap(),
        json!([{"operationId": "o", "files": [{"sourcePath": src, "targetPath": format!("{}/f", remote.display()), "kind": "file"}]}]),
    );
    params["config"]["timeoutMs"] = json!(u64::MAX);
    let v = w.response(1, "environmentSyncIn", params);
    assert!(v.get("result").is_some(), "{v}");
    assert_eq!(std::fs::read(remote.join("f")).unwrap(), b"x");
    let v = w.response(2, "health", json!({}));
    assert_eq!(v["result"]["status"], "ok");
}
