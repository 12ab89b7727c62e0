//! Issue 48: the host trusts only state it alone could have written. A
//! cache directory another local user owns (or could write) is not used;
//! a compiled artifact or a record without this user's seal is not
//! loaded, whoever put it there. Run as root, as CI does, with uid 65534
//! standing in for the other user.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const OTHER_UID: u32 = 65534;

/// A sync-out of `remote/out` into `target` through the CLI, with the cache
/// directory `cache`.
fn sync_out(cache: &Path, remote: &Path, target: &Path) -> Output {
    sync_out_with(cache, remote, target, &[])
}

fn sync_out_with(cache: &Path, remote: &Path, target: &Path, extra: &[&str]) -> Output {
    sync_out_command(cache, remote, target)
        .args(extra)
        .output()
        .unwrap()
}

/// The CLI's sync-out of `remote/out` into `target` (its ops file beside
/// `remote`), with the cache directory `cache`.
fn sync_out_command(cache: &Path, remote: &Path, target: &Path) -> Command {
    let ops = serde_json::json!([{"operationId": "o", "files": [
        {"sourcePath": remote.join("out"), "targetPath": target, "kind": "directory"}]}]);
    let ops_file = remote.with_extension("ops.json");
    std::fs::write(&ops_file, ops.to_string()).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_sandbox-sync"));
    c.args(["sync-out", "--remote-dir"])
        .arg(remote)
        .arg("--ops")
        .arg(&ops_file)
        .env("SANDBOX_SYNC_CACHE_DIR", cache)
        .env("RUST_LOG", "warn");
    c
}

fn ok(out: &Output) -> (serde_json::Value, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

fn workspace(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let remote = tmp.join("remote");
    std::fs::create_dir_all(remote.join("out/sub")).unwrap();
    std::fs::write(remote.join("out/a.txt"), vec![b'a'; 20_000]).unwrap();
    std::fs::write(remote.join("out/sub/b.txt"), b"b").unwrap();
    (remote, tmp.join("target"))
}

fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Another user's directory (or one under a directory others may write)
/// is not used: one warning, the sync works, nothing of ours is written
/// there.
#[test]
fn a_cache_directory_another_user_could_write_is_not_used() {
    if !running_as_root() {
        eprintln!("skipped: needs root to make a directory another user owns");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (remote, target) = workspace(tmp.path());
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    for (cache, why) in [
        (theirs.clone(), format!("owned by uid {OTHER_UID}")),
        (open.join("cache"), "writable by others".into()),
    ] {
        let (v, err) = ok(&sync_out(&cache, &remote, &target));
        assert_eq!(v["operations"][0]["filesTransferred"], 2, "{v}");
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("not using the cache directory"))
            .collect();
        assert_eq!(warnings.len(), 1, "{err}");
        assert!(
            warnings[0].contains(&why) || warnings[0].contains("others may write"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(&theirs).unwrap().count(),
            0,
            "wrote into theirs"
        );
    }
}

/// A compiled artifact planted under the embedded component's name, or a
/// record rewritten, in a private cache directory, without this user's
/// key: neither is loaded (the component is compiled anew, the record
/// reads as none so everything is sent), and each says so.
#[test]
fn unsealed_artifacts_and_records_are_not_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let (remote, target) = workspace(tmp.path());
    let cache = tmp.path().join("cache");
    // Records on the second sync-out (a local target holding nothing yet
    // records on the next), kept on the third.
    for _ in 0..2 {
        ok(&sync_out(&cache, &remote, &target));
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    let (v, _) = ok(&sync_out(&cache, &remote, &target));
    assert_eq!(v["operations"][0]["filesTransferred"], 0, "kept: {v}");
    let artifacts: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    // A forger without the key: the artifact's bytes with a seal made up,
    // and every record with its seal cut off and another appended.
    let mut forged = std::fs::read(&artifacts[0]).unwrap();
    let n = forged.len();
    forged[n - 1] ^= 0xff;
    std::fs::write(&artifacts[0], &forged).unwrap();
    for e in std::fs::read_dir(cache.join("records")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rec") {
            let mut r = std::fs::read(&p).unwrap();
            let n = r.len();
            r[n - 1] ^= 0xff;
            std::fs::write(&p, r).unwrap();
        }
    }
    let (v, err) = ok(&sync_out(&cache, &remote, &target));
    assert!(err.contains("has no valid seal: compiling anew"), "{err}");
    assert!(err.contains("has no valid seal: ignored"), "{err}");
    assert_eq!(v["operations"][0]["filesTransferred"], 2, "sent again: {v}");
    assert_eq!(std::fs::read(target.join("sub/b.txt")).unwrap(), b"b");
    // The artifact was replaced with a sealed one: no warning next time.
    let (_, err) = ok(&sync_out(&cache, &remote, &target));
    assert!(!err.contains("compiling anew"), "{err}");
    // Another component's artifact (sealed too) renamed over the embedded
    // one's: it does not pass for it (the fallback would take 3 execs).
    let fallback = sandbox_sync_host::runtime::FALLBACK_COMPONENT_PATH;
    ok(&sync_out_with(
        &cache,
        &remote,
        &target,
        &["--component", fallback],
    ));
    let other = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm") && *p != artifacts[0])
        .unwrap();
    std::fs::rename(&other, &artifacts[0]).unwrap();
    let (v, err) = ok(&sync_out(&cache, &remote, &target));
    assert!(err.contains("has no valid seal: compiling anew"), "{err}");
    assert_eq!(v["execs"], 1, "the embedded component ran: {v}");
}

/// Issue 48: eight sync-outs into one target at once, each of another
/// sandbox tree. They take turns: every call succeeds, the target ends as
/// exactly one of the trees, and no reserved name is left in the target
/// or beside it.
#[test]
fn concurrent_sync_outs_into_one_target_take_turns() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let parent = tmp.path().join("results");
    let target = parent.join("target");
    let mut children = Vec::new();
    for i in 0..8 {
        let remote = tmp.path().join(format!("remote{i}"));
        for f in 0..40 {
            let p = remote.join(format!("out/d{}/f{f}.txt", f % 4));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("tree {i} file {f}\n").repeat(200)).unwrap();
        }
        std::fs::write(remote.join(format!("out/only-{i}")), b"").unwrap();
        children.push(
            sync_out_command(&cache, &remote, &target)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        ok(&out);
    }
    let names: Vec<String> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let only: Vec<&String> = names.iter().filter(|n| n.starts_with("only-")).collect();
    assert_eq!(only.len(), 1, "not one tree: {names:?}");
    let i: usize = only[0].trim_start_matches("only-").parse().unwrap();
    for f in 0..40 {
        let p = target.join(format!("d{}/f{f}.txt", f % 4));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("tree {i} file {f}\n").repeat(200),
            "{}",
            p.display()
        );
    }
    assert_eq!(names.len(), 5, "{names:?}");
    let beside: Vec<String> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(beside, ["target"], "left beside the target");
}
