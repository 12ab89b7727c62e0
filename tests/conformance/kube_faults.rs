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
