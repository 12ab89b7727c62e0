//! Issue 48: a sync killed at a random point (SIGKILL of the CLI or of the
//! JSON-RPC worker; seeded, so the same points each run), in either
//! direction, is followed by an incremental sync that lands exactly what a
//! full sync lands, and nothing reserved is left in the target or beside
//! it.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const FILES: u64 = 1500;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Direction {
    In,
    Out,
}

#[derive(Clone, Copy, Debug)]
enum Front {
    Cli,
    Worker,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::In => "sync-in",
            Direction::Out => "sync-out",
        }
    }
}

/// One sync's operations: `from` (host or sandbox dir) onto `to`.
fn operations(from: &Path, to: &Path) -> serde_json::Value {
    serde_json::json!([{"operationId": "o", "files": [
        {"sourcePath": from, "targetPath": to, "kind": "directory"}]}])
}

/// The CLI syncing `from` onto `to` in `direction`, with `remote` as the
/// sandbox's remote dir and `cache` as the host's cache directory.
fn cli(direction: Direction, cache: &Path, remote: &Path, from: &Path, to: &Path) -> Command {
    let ops_file = to.with_extension(format!("{}.ops.json", std::process::id()));
    std::fs::create_dir_all(ops_file.parent().unwrap()).unwrap();
    std::fs::write(&ops_file, operations(from, to).to_string()).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_sandbox-sync"));
    c.arg(direction.name())
        .arg("--remote-dir")
        .arg(remote)
        .arg("--ops")
        .arg(&ops_file)
        .env("SANDBOX_SYNC_CACHE_DIR", cache)
        .env("RUST_LOG", "warn");
    c
}

fn ok(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A worker (`sandbox-sync serve`) asked for one sync, not waited for.
fn worker_call(direction: Direction, cache: &Path, remote: &Path, from: &Path, to: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox-sync"))
        .arg("serve")
        .env("SANDBOX_SYNC_CACHE_DIR", cache)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let method = match direction {
        Direction::In => "environmentSyncIn",
        Direction::Out => "environmentSyncOut",
    };
    let request = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {
        "driverKey": "sandbox-sync", "companyId": "c", "environmentId": "e", "issueId": null,
        "config": {},
        "lease": {"providerLeaseId": "l", "metadata": {"remoteCwd": remote}, "expiresAt": null},
        "operations": operations(from, to),
    }});
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{request}").unwrap();
    // Kept open: a worker whose stdin ends stops after its call.
    std::mem::forget(stdin);
    child
}

/// Every entry under `root`: relative path, and for files their bytes and
/// mode, for links their targets.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
                out.push((rel, b"dir".to_vec()));
            } else if m.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push((rel, t.into_os_string().into_encoded_bytes()));
            } else {
                let mut bytes = std::fs::read(&p).unwrap();
                bytes.extend(format!(" {:o}", m.permissions().mode()).bytes());
                out.push((rel, bytes));
            }
        }
    }
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `FILES` small files in 30 directories, a link, an executable.
fn fill(dir: &Path) {
    for f in 0..FILES {
        let p = dir.join(format!("many/d{}/f{f}.txt", f % 30));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("{f}\n").repeat(50)).unwrap();
    }
    std::os::unix::fs::symlink("many/d1/f1.txt", dir.join("link")).unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn killed_then_exact(direction: Direction, front: Front, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let remote = tmp.path().join("remote");
    // Sync-in: the host's `src` onto the sandbox's `remote/ws`. Sync-out: the
    // sandbox's `remote/out` onto the host's `results/target`.
    let (source, target) = match direction {
        Direction::In => (tmp.path().join("src"), remote.join("ws")),
        Direction::Out => (remote.join("out"), tmp.path().join("results/target")),
    };
    std::fs::create_dir_all(&source).unwrap();
    std::fs::create_dir_all(&remote).unwrap();
    fill(&source);
    let parent = target.parent().unwrap().to_path_buf();
    let mut seed = seed;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    ok(&cli(direction, &cache, &remote, &source, &target)
        .output()
        .unwrap());
    for round in 0..6 {
        // The source changes a little between rounds: a file rewritten, one
        // added, one removed.
        let f = next() % FILES;
        std::fs::write(
            source.join(format!("many/d{}/f{f}.txt", f % 30)),
            format!("round {round}\n"),
        )
        .unwrap();
        std::fs::write(source.join(format!("new{round}")), "n").unwrap();
        if round > 0 {
            std::fs::remove_file(source.join(format!("new{}", round - 1))).unwrap();
        }
        let delay = Duration::from_millis(next() % 300);
        let mut child = match front {
            Front::Cli => cli(direction, &cache, &remote, &source, &target)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
            Front::Worker => worker_call(direction, &cache, &remote, &source, &target),
        };
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let at = format!("{direction:?} {front:?}, round {round}, killed after {delay:?}");
        // The sandbox program the killed process started ends with its pipes.
        std::thread::sleep(Duration::from_millis(300));
        ok(&cli(direction, &cache, &remote, &source, &target)
            .output()
            .unwrap());
        // The same sync, full, onto a fresh target.
        let full = match direction {
            Direction::In => tmp.path().join(format!("remote-full{round}")),
            Direction::Out => tmp.path().join(format!("full{round}")),
        };
        let full_target = match direction {
            Direction::In => full.join("ws"),
            Direction::Out => full.clone(),
        };
        let full_remote = if direction == Direction::In {
            &full
        } else {
            &remote
        };
        std::fs::create_dir_all(full_remote).unwrap();
        ok(&cli(direction, &cache, full_remote, &source, &full_target)
            .args(["--incremental", "false"])
            .output()
            .unwrap());
        assert!(
            tree(&target) == tree(&full_target),
            "{at}: not what a full sync lands"
        );
        assert_eq!(tree(&target), tree(&source), "{at}");
        let beside: Vec<String> = names(&parent)
            .into_iter()
            .filter(|n| !n.ends_with(".ops.json"))
            .collect();
        let expected: &[&str] = match direction {
            Direction::In => &["ws"],
            Direction::Out => &["target"],
        };
        assert_eq!(beside, expected, "{at}: left beside the target");
        let reserved: Vec<String> = tree(&target)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.contains(".paperclip-upload"))
            .collect();
        assert!(reserved.is_empty(), "{at}: {reserved:?}");
        std::fs::remove_dir_all(&full).unwrap();
    }
}

#[test]
fn a_killed_cli_sync_out_is_followed_by_an_exact_one() {
    killed_then_exact(Direction::Out, Front::Cli, 0x005e_ed48);
}

#[test]
fn a_killed_worker_sync_out_is_followed_by_an_exact_one() {
    killed_then_exact(Direction::Out, Front::Worker, 0x0077_0a48);
}

#[test]
fn a_killed_cli_sync_in_is_followed_by_an_exact_one() {
    killed_then_exact(Direction::In, Front::Cli, 0x0051_1748);
}

#[test]
fn a_killed_worker_sync_in_is_followed_by_an_exact_one() {
    killed_then_exact(Direction::In, Front::Worker, 0x00e1_1a48);
}

/// What a process killed while removing a replaced tree leaves beside the
/// target (named for its pid, gone: none is this high) goes with the next
/// sync-out.
#[test]
fn a_replaced_tree_a_killed_process_left_beside_the_target_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let remote = tmp.path().join("remote");
    fill(&remote.join("out"));
    let target: PathBuf = tmp.path().join("results/target");
    ok(&cli(
        Direction::Out,
        &cache,
        &remote,
        &remote.join("out"),
        &target,
    )
    .output()
    .unwrap());
    let parent = target.parent().unwrap();
    for name in [
        ".paperclip-upload-replace-4194305-0",
        ".paperclip-upload-old-4194305-7",
        // As the Node package names them.
        ".paperclip-upload-old-4194306-0a1b2c3d4e5f",
    ] {
        std::fs::create_dir_all(parent.join(name).join("old")).unwrap();
    }
    // Another process's, still running: kept.
    let live = format!(
        ".paperclip-upload-old-{}-0",
        std::os::unix::process::parent_id()
    );
    std::fs::create_dir_all(parent.join(&live)).unwrap();
    ok(&cli(
        Direction::Out,
        &cache,
        &remote,
        &remote.join("out"),
        &target,
    )
    .output()
    .unwrap());
    let beside: Vec<String> = names(parent)
        .into_iter()
        .filter(|n| !n.ends_with(".ops.json"))
        .collect();
    assert_eq!(beside, [live.as_str(), "target"]);
}
