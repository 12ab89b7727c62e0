//! Faults on the Kubernetes exec path, injected by the protocol server.

use std::time::{Duration, Instant};

use sandbox_sync_tests::k8s_server::{Faults, Protocol};
use sandbox_sync_tests::*;

fn kube_sandbox(protocol: Protocol) -> Sandbox {
    Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Kube(protocol),
    })
}

fn server(sb: &Sandbox) -> &k8s_server::K8sExecServer {
    sb.server.as_ref().expect("kube sandbox")
}

/// The server drops the connection mid-stream: a typed transport error,
/// no target written.
#[test]
fn connection_dropped_mid_stream() {
    for protocol in [Protocol::V4, Protocol::V5] {
        let sb = kube_sandbox(protocol);
        // Incompressible, so the cut lands mid-stream on any transport.
        sb.write_remote("big.bin", &incompressible(4 << 20));
        server(&sb).set_faults(Faults {
            drop_after_stdout_bytes: Some(100_000),
            ..Faults::default()
        });
        let target = sb.host.join("t/big.bin");
        let err = sb
            .sync_out(&[op("o", vec![file_out(sb.remote("big.bin"), &target)])])
            .unwrap_err();
        assert_eq!(
            err.error.kind,
            ErrorKind::Transport,
            "{protocol:?}: {}",
            err.error
        );
        assert!(!target.exists());
        // No temp file left, nor the directory the host made for it.
        assert!(
            !sb.host.join("t").exists(),
            "the target's directory is left"
        );
        // Nothing kills a pod's process when its stream is cut: the
        // program must end by itself (its output pipe is gone).
        assert_eq!(
            server(&sb).wait_for_no_live_processes(Duration::from_secs(10)),
            0,
            "{protocol:?}: the sync's program outlived the connection"
        );
    }
}

/// The server never sends a status frame: the deadline ends the wait.
#[test]
fn status_frame_never_arrives() {
    let sb = kube_sandbox(Protocol::V5);
    server(&sb).set_faults(Faults {
        withhold_status: true,
        ..Faults::default()
    });
    let src = sb.write_host("a", b"a");
    let mut opts = sb.options();
    opts.timeout = Duration::from_secs(2);
    let t = Instant::now();
    let err = sb
        .sync_in_with(&[op("o", vec![file(&src, sb.remote("a"))])], &opts)
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert!(
        matches!(
            err.error.kind,
            ErrorKind::LimitExceeded | ErrorKind::Transport
        ),
        "{}",
        err.error
    );
}

/// A non-zero exit arrives as the kubelet's NonZeroExitCode status.
#[test]
fn non_zero_exit_status() {
    for protocol in [Protocol::V4, Protocol::V5] {
        let sb = kube_sandbox(protocol);
        let mut o = op("o", vec![]);
        o.post_upload_commands = Some(vec![cmd("exit 3", None)]);
        let err = sb.sync_in(&[o]).unwrap_err();
        assert_eq!(err.error.kind, ErrorKind::CommandFailed, "{}", err.error);
        assert_eq!(
            err.error.command.as_ref().and_then(|c| c.exit_code),
            Some(3)
        );
    }
}

/// A pod that stops reading its stdin stalls the transfer until the
/// deadline; the sync fails loud and leaves no target.
#[test]
fn stalled_stdin_times_out() {
    let sb = kube_sandbox(Protocol::V4);
    server(&sb).set_faults(Faults {
        stall_stdin_after: Some(64 * 1024),
        ..Faults::default()
    });
    let src = sb.write_host("big", &vec![1u8; 8 << 20]);
    let mut opts = sb.options();
    opts.timeout = Duration::from_secs(2);
    let err = sb
        .sync_in_with(&[op("o", vec![file(&src, sb.remote("big"))])], &opts)
        .unwrap_err();
    assert!(
        matches!(
            err.error.kind,
            ErrorKind::LimitExceeded | ErrorKind::Transport
        ),
        "{}",
        err.error
    );
    assert!(!sb.remote_on_host("big").exists());
    // The host gave up and went away; its stdin closing ends the program.
    assert_eq!(
        server(&sb).wait_for_no_live_processes(Duration::from_secs(10)),
        0,
        "the sync's program outlived the call"
    );
}

/// 1 GiB through a pod that reads at 256 MB/s, via the real CLI in its own
/// process: backpressure holds end to end, so the host never buffers the
/// payload and its peak RSS stays small.
#[test]
fn one_gib_through_a_slow_reader_keeps_host_memory_bounded() {
    let sb = kube_sandbox(Protocol::V5);
    let srv = server(&sb);
    srv.set_faults(Faults {
        stdin_bytes_per_sec: Some(256 << 20),
        ..Faults::default()
    });
    let src = sb.host.join("sparse.bin");
    std::fs::File::create(&src)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let kubeconfig = sb.host.join("kubeconfig");
    std::fs::write(&kubeconfig, srv.kubeconfig()).unwrap();
    let ops = serde_json::json!([{"operationId": "big", "files": [{"sourcePath": src, "targetPath": sb.remote("big.bin"), "kind": "file"}],
        "postUploadCommands": [{"command": "rm -f big.bin"}]}]);
    let ops_file = sb.host.join("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    let mut child = std::process::Command::new(sandbox_sync_bin())
        .args([
            "sync-in",
            "--backend",
            "kube",
            "--pod",
            "agent-pod",
            "--namespace",
            "sandboxes",
            "--container",
            "agent",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--remote-dir")
        .arg(&sb.remote)
        .arg("--ops")
        .arg(&ops_file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, peak) = wait_with_peak_rss(&mut child, Duration::from_millis(20)).unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{out}");
    assert!(out.contains("\"bytesTransferred\":1073741824"), "{out}");
    assert!(
        peak > 0 && peak < 96 << 20,
        "host peak RSS {} MiB",
        peak >> 20
    );
}

/// A pod that is not there reaches the CLI as kube's typed error: the sync
/// verb's one error line carries the hint for it, not a generic one.
#[test]
fn a_missing_pod_reaches_the_cli_typed() {
    let sb = kube_sandbox(Protocol::V5);
    let kubeconfig = sb.host.join("kubeconfig");
    std::fs::write(&kubeconfig, server(&sb).kubeconfig()).unwrap();
    let ops = serde_json::json!([{"operationId": "o", "files": [{"sourcePath": sb.write_host("a.txt", b"a"), "targetPath": sb.remote("a.txt"), "kind": "file"}]}]);
    let ops_file = sb.host.join("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    let out = std::process::Command::new(sandbox_sync_bin())
        .args(["sync-in", "--backend", "kube", "--pod", "no-such-pod"])
        .args(["--namespace", "sandboxes", "--container", "agent"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--remote-dir")
        .arg(&sb.remote)
        .arg("--ops")
        .arg(&ops_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error[transport]: "), "{err}");
    assert!(
        err.contains("(hint: check the pod name and --namespace"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
}

/// The frames of one exec, read until the status frame, from a client
/// that is not kube-rs: the server must behave as a kubelet to any client.
mod raw {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::http::{HeaderValue, Response};
    use tokio_tungstenite::tungstenite::Message;

    pub type Ws = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    /// Opens `sh -c script` in the test pod, offering `protocols` (in that
    /// order) and permessage-deflate.
    pub async fn open(
        server: &super::k8s_server::K8sExecServer,
        protocols: &str,
        script: &str,
    ) -> (Response<Option<Vec<u8>>>, Ws) {
        let command: String = form_urlencoded::byte_serialize(script.as_bytes()).collect();
        let url = format!(
            "ws://{}/api/v1/namespaces/sandboxes/pods/agent-pod/exec?stdin=true&stdout=true&stderr=true&container=agent&command=sh&command=-c&command={command}",
            server.addr()
        );
        let mut req = url.into_client_request().expect("request");
        let headers = req.headers_mut();
        headers.insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_str(protocols).expect("header"),
        );
        headers.insert(
            "Sec-WebSocket-Extensions",
            HeaderValue::from_static("permessage-deflate; client_max_window_bits"),
        );
        let (ws, resp) = tokio_tungstenite::connect_async(req)
            .await
            .expect("exec upgrade");
        (resp, ws)
    }

    /// Every binary frame up to and including the status frame.
    pub async fn frames(ws: &mut Ws) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        while let Some(message) = ws.next().await {
            match message.expect("read a frame") {
                Message::Binary(data) => {
                    let status = data.first() == Some(&3);
                    frames.push(data.to_vec());
                    if status {
                        break;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        frames
    }

    /// The payload of every frame on `channel`, joined.
    pub fn channel(frames: &[Vec<u8>], channel: u8) -> String {
        let bytes: Vec<u8> = frames
            .iter()
            .filter(|f| f.first() == Some(&channel))
            .flat_map(|f| f[1..].to_vec())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The handshake and the opening as a kubelet's: the client's first
/// acceptable subprotocol, no WebSocket extension (exec streams are not
/// compressed), one empty stdout frame before any output.
#[test]
fn the_exec_handshake_and_opening_are_a_kubelets() {
    let sb = kube_sandbox(Protocol::V5);
    let server = server(&sb);
    for (offered, chosen) in [
        ("v4.channel.k8s.io, v5.channel.k8s.io", "v4.channel.k8s.io"),
        ("v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"),
    ] {
        let (resp, mut ws) = block_on(raw::open(server, offered, "echo hi"));
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(header("sec-websocket-protocol").as_deref(), Some(chosen));
        assert_eq!(header("sec-websocket-extensions"), None);
        let frames = block_on(raw::frames(&mut ws));
        assert_eq!(frames.first(), Some(&vec![1u8]), "{offered}: {frames:?}");
        assert_eq!(frames.iter().filter(|f| f.len() == 1).count(), 1);
        assert_eq!(raw::channel(&frames, 1), "hi\n");
        assert!(raw::channel(&frames, 3).contains("Success"), "{frames:?}");
    }
}

/// A background child that keeps the exec's stdout open keeps the exec
/// open: its output arrives before the status, as on a kubelet, so a test
/// sees a sync that would hang on a real cluster.
#[test]
fn a_child_holding_the_output_keeps_the_exec_open() {
    let sb = kube_sandbox(Protocol::V5);
    let (_, mut ws) = block_on(raw::open(
        server(&sb),
        "v5.channel.k8s.io",
        "(sleep 1; echo late) & echo early",
    ));
    let frames = block_on(raw::frames(&mut ws));
    assert_eq!(raw::channel(&frames, 1), "early\nlate\n");
    assert_eq!(frames.last().and_then(|f| f.first()), Some(&3));
}

/// A client that goes away closes the process's stdin and leaves it
/// running, as a kubelet does: the process finishes what it does.
#[test]
fn a_client_that_goes_away_leaves_the_process_running() {
    let sb = kube_sandbox(Protocol::V5);
    let marker = sb.host.join("finished");
    let script = format!("cat >/dev/null; echo done > '{}'", marker.display());
    let (_, ws) = block_on(raw::open(server(&sb), "v5.channel.k8s.io", &script));
    // Gone once the process runs (the upgrade answers before it starts).
    let started = Instant::now();
    while server(&sb).live_processes() == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(ws);
    assert_eq!(
        server(&sb).wait_for_no_live_processes(Duration::from_secs(10)),
        0
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "done\n");
}
