//! Hard deadlines (issue 11.10): a call returns within its timeout plus a
//! small fixed grace, whatever the sandbox does.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_host::exec::ExecBackend;
use sandbox_sync_tests::*;

/// The most a call may take beyond its timeout.
const GRACE: Duration = Duration::from_secs(2);

/// A BusyBox root whose `/bin/sh` ignores every catchable signal and never
/// reads its input: the sandbox at its most obstinate.
fn stubborn_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        sweep_roots_of_gone_processes("sandbox-sync-stubborn-");
        let root = std::env::temp_dir().join(format!("sandbox-sync-stubborn-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        sandbox_sync_tests::install_executable(Path::new("/bin/busybox"), &root.join("bin/busybox"));
        for applet in ["sleep", "cat", "ls"] {
            let _ = symlink("busybox", root.join("bin").join(applet));
        }
        sandbox_sync_tests::write_executable(
            &root.join("bin/sh"),
            "#!/bin/busybox sh\ntrap '' TERM INT HUP USR1 USR2 PIPE QUIT ALRM\nwhile :; do /bin/busybox sleep 1; done\n",
        );
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        root
    })
}

fn stubborn(uid: Option<u32>) -> LocalBackend {
    let b = LocalBackend::sandbox_root(stubborn_root()).unwrap();
    match uid {
        Some(u) => b.user(u),
        None => b,
    }
}

fn assert_on_time(what: &str, timeout: Duration, backend: Arc<dyn ExecBackend>) {
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("f"), b"x").unwrap();
    let mut opts = sandbox_sync_tests::sync_options("/w");
    opts.timeout = timeout;
    for (dir, ops) in [
        ("in", [op("o", vec![file(host.path().join("f"), "/w/f")])]),
        (
            "out",
            [op("o", vec![dir_out("/w/src", host.path().join("t"))])],
        ),
    ] {
        let rt = runtime();
        let started = Instant::now();
        let r = block_on(async {
            if dir == "in" {
                rt.sync_in(&ops, &opts, Arc::clone(&backend)).await
            } else {
                rt.sync_out(&ops, &opts, Arc::clone(&backend)).await
            }
        });
        let took = started.elapsed();
        let err = r.expect_err("the sandbox never answers");
        assert!(
            took <= timeout + GRACE,
            "{what}, sync-{dir}: {took:?} for a {timeout:?} timeout ({})",
            err.error
        );
        assert!(
            matches!(
                err.error.kind,
                ErrorKind::LimitExceeded | ErrorKind::Transport
            ),
            "{what}, sync-{dir}: {}",
            err.error
        );
    }
}

/// A sandbox whose `sh` ignores TERM once made a 1 s call take 15 s (TERM
/// grace, then a cleanup exec with its own 10 s budget).
#[test]
fn a_sandbox_that_ignores_term_cannot_stretch_the_call() {
    for uid in [None, Some(SANDBOX_UID)] {
        assert_on_time(
            &format!("local, uid {uid:?}"),
            Duration::from_secs(1),
            Arc::new(stubborn(uid)),
        );
    }
}

#[test]
fn a_sandbox_that_ignores_term_cannot_stretch_the_call_over_kube() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, backend) = kube_backend(
        stubborn(Some(SANDBOX_UID)),
        sandbox_sync_tests::k8s_server::Protocol::V5,
        dir.path(),
    );
    assert_on_time("kube v5", Duration::from_secs(1), backend);
}
