//! The local backend's sandbox root is a jail (issue 11.1, 11.2): nothing
//! inside it, uid 0 included, reaches the host's filesystem, and preparing
//! it never follows a link the sandbox planted.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_tests::*;

/// A host file the sandbox must never see, and a host path it must never
/// create; both outside any sandbox root.
struct Host {
    _dir: tempfile::TempDir,
    marker: PathBuf,
    plant: PathBuf,
}

fn host_paths() -> Host {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-sync-host-secret-")
        .tempdir()
        .unwrap();
    let marker = dir.path().join("marker");
    std::fs::write(&marker, b"host only").unwrap();
    let plant = dir.path().join("planted");
    Host {
        _dir: dir,
        marker,
        plant,
    }
}

fn run_in(backend: &LocalBackend, script: &[&str]) -> std::process::Output {
    let argv: Vec<String> = script.iter().map(|s| s.to_string()).collect();
    block_on(async { backend.command(&argv).unwrap().output().await }).unwrap()
}

/// Runs the escape probe (every known way out: /proc/N/root and cwd, the
/// chroot walk, open_by_handle_at, mount, mknod, core_pattern, /proc/1/exe)
/// inside a GNU root, as `uid`.
fn probe(uid: Option<u32>) {
    let root = tempfile::Builder::new()
        .prefix("sandbox-sync-jail-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    sandbox_sync_tests::install_executable(
        Path::new(env!("CARGO_BIN_EXE_sandbox-escape-probe")),
        &root.path().join("probe"),
    );
    let host = host_paths();
    let mut backend = LocalBackend::sandbox_root_with_host_userland(root.path()).unwrap();
    if let Some(uid) = uid {
        backend = backend.user(uid);
    }
    let out = run_in(
        &backend,
        &[
            "/probe",
            host.marker.to_str().unwrap(),
            host.plant.to_str().unwrap(),
        ],
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !report.contains("ESCAPED"),
        "uid {uid:?}:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("blocked /proc/1/root"), "{report}");
    assert!(!host.plant.exists(), "a host path was created");
    assert_eq!(std::fs::read(&host.marker).unwrap(), b"host only");
}

#[test]
fn uid0_in_a_sandbox_root_cannot_reach_the_host() {
    probe(None);
}

#[test]
fn an_unprivileged_sandbox_cannot_reach_the_host() {
    probe(Some(SANDBOX_UID));
}

/// The reviewer's reproduction: a uid-0 BusyBox sandbox whose `sh` reads
/// and writes through `/proc/1/root` (once the host's `/`).
#[test]
fn proc_1_root_is_the_sandbox_root() {
    let root = tempfile::Builder::new()
        .prefix("sandbox-sync-jail-")
        .tempdir()
        .unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    sandbox_sync_tests::install_executable(
        Path::new("/bin/busybox"),
        &root.path().join("bin/busybox"),
    );
    for a in ["sh", "cat", "ls", "echo"] {
        symlink("busybox", root.path().join("bin").join(a)).unwrap();
    }
    std::fs::write(root.path().join("inside"), b"sandbox").unwrap();
    let host = host_paths();
    let backend = LocalBackend::sandbox_root(root.path()).unwrap();
    let out = run_in(
        &backend,
        &[
            "/bin/sh",
            "-c",
            "cat /proc/1/root/inside; cat \"/proc/1/root$1\" && echo LEAKED; echo x > \"/proc/1/root$2\" && echo PLANTED; true",
            "sh",
            host.marker.to_str().unwrap(),
            host.plant.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("sandbox"), "{stdout}");
    assert!(
        !stdout.contains("LEAKED") && !stdout.contains("PLANTED"),
        "{stdout}"
    );
    assert!(!host.plant.exists());
}

/// Issue 11.2: the sandbox replaced `/dev` and `/proc` with links to host
/// directories; the next call must create and mount nothing there.
#[test]
fn planted_dev_and_proc_links_are_not_followed() {
    let host_dev = tempfile::tempdir().unwrap();
    let host_proc = tempfile::tempdir().unwrap();
    let root = tempfile::Builder::new()
        .prefix("sandbox-sync-jail-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    sandbox_sync_tests::install_busybox(&root.path().join("bin"));
    symlink(host_dev.path(), root.path().join("dev")).unwrap();
    symlink(host_proc.path(), root.path().join("proc")).unwrap();
    std::fs::create_dir_all(root.path().join("w")).unwrap();
    let backend = Arc::new(LocalBackend::sandbox_root(root.path()).unwrap());
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), b"in").unwrap();
    let out = block_on(runtime().sync_in(
        &[op("o", vec![file(src.path().join("f"), "/w/f")])],
        &sandbox_sync_tests::sync_options("/w"),
        backend,
    ));
    assert!(out.is_ok(), "{}", out.unwrap_err().error);
    assert_eq!(std::fs::read(root.path().join("w/f")).unwrap(), b"in");
    for d in [host_dev.path(), host_proc.path()] {
        let entries: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
        assert!(entries.is_empty(), "{}: {entries:?}", d.display());
    }
    assert!(!is_mount_point(host_proc.path()));
}

fn is_mount_point(p: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()))
}
