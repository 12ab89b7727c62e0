//! A compromised sandbox: its `tar` ignores its arguments and writes a
//! crafted archive. Every attack class must be refused with a typed error
//! (`unsafe-archive` or `limit-exceeded`) and land nothing: no byte outside
//! the target, nothing promoted into it, no special file, no set-id bit.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_tests::hostile::{self, corpus};
use sandbox_sync_tests::*;

/// A sandbox root with the host's GNU userland bound in and a `tar` in its
/// own `/usr/local/bin` (first on PATH) that writes `./.evil.tar` whatever
/// it is asked. (BusyBox's shell runs its own applets without a PATH
/// lookup, so a BusyBox root's `tar` cannot be swapped this way.)
fn hostile_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("sandbox-sync-hostile-{}", std::process::id()));
        std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(root.join("usr/local/bin/tar"), "#!/bin/sh\n# whatever it is asked, this tar writes the crafted archive\nexec cat ./.evil.tar\n").unwrap();
        std::fs::set_permissions(root.join("usr/local/bin/tar"), std::fs::Permissions::from_mode(0o755)).unwrap();
        root
    })
}

fn hostile_backend() -> LocalBackend {
    LocalBackend::sandbox_root_with_host_userland(hostile_root())
        .unwrap()
        .user(SANDBOX_UID)
}

struct Case {
    _tmp: tempfile::TempDir,
    host: PathBuf,
    remote: String,
    base: PathBuf,
}

fn case(n: usize, archive: &[u8]) -> Case {
    let root = hostile_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().to_path_buf();
    std::fs::create_dir_all(host.join("outside")).unwrap();
    std::fs::write(host.join("outside/victim"), b"untouched").unwrap();
    let base = root.join(format!("h{n}"));
    let src = base.join("workspace/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join(".evil.tar"), archive).unwrap();
    for p in [
        base.clone(),
        base.join("workspace"),
        src.clone(),
        src.join(".evil.tar"),
    ] {
        std::os::unix::fs::lchown(&p, Some(SANDBOX_UID), Some(SANDBOX_UID)).unwrap();
    }
    Case {
        _tmp: tmp,
        host,
        remote: format!("/h{n}/workspace"),
        base,
    }
}

/// Everything under `dir` is a directory or regular file without set-id
/// bits; returns the relative paths.
fn audit(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    walk(dir, &mut |p| {
        let meta = std::fs::symlink_metadata(p).unwrap();
        let ft = meta.file_type();
        assert!(
            ft.is_dir() || ft.is_file() || ft.is_symlink(),
            "special file {}",
            p.display()
        );
        assert_eq!(
            meta.mode() & 0o7000,
            0,
            "set-id or sticky bit on {}",
            p.display()
        );
        found.push(p.strip_prefix(dir).unwrap().display().to_string());
    });
    found.sort();
    found
}

fn run(name: &str, archive: &[u8], n: usize) -> Result<SyncOutcome, Failed> {
    let c = case(n, archive);
    let backend = hostile_backend();
    let mut opts = SyncOptions::new(c.remote.clone());
    opts.max_entries = 1000;
    opts.max_metadata_bytes = 512 << 10;
    let target = c.host.join("target");
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let result = block_on(runtime().sync_out(&ops, &opts, std::sync::Arc::new(backend)));
    if result.is_err() {
        let landed = audit(&c.host);
        assert_eq!(
            landed,
            vec!["outside", "outside/victim", "target"],
            "{name}: something landed"
        );
        assert_eq!(
            std::fs::read(c.host.join("outside/victim")).unwrap(),
            b"untouched",
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&c.base);
    result
}

#[test]
fn every_attack_class_is_refused() {
    let mut wrong = Vec::new();
    for (n, (name, archive)) in corpus().into_iter().enumerate() {
        match run(name, &archive, n) {
            Ok(_) => wrong.push(format!("{name}: accepted")),
            Err(f)
                if matches!(
                    f.error.kind,
                    ErrorKind::UnsafeArchive | ErrorKind::LimitExceeded
                ) => {}
            Err(f) => wrong.push(format!(
                "{name}: {}",
                f.error.to_string().chars().take(300).collect::<String>()
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused as unsafe-archive/limit-exceeded:\n{}",
        wrong.join("\n")
    );
}

/// The hostile harness itself works: a well-formed archive from the same
/// compromised `tar` is accepted and lands.
#[test]
fn a_benign_archive_through_the_same_harness_lands() {
    let archive = hostile::end(
        [
            hostile::dir(b"d", 0o755),
            hostile::file(b"d/ok", b"fine"),
            hostile::symlink(b"l", b"d/ok"),
        ]
        .concat(),
    );
    let c = case(9999, &archive);
    let backend = hostile_backend();
    let target = c.host.join("target");
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    block_on(runtime().sync_out(
        &ops,
        &SyncOptions::new(c.remote.clone()),
        std::sync::Arc::new(backend),
    ))
    .expect("benign");
    assert_eq!(std::fs::read(target.join("d/ok")).unwrap(), b"fine");
    assert_eq!(
        std::fs::read_link(target.join("l")).unwrap().to_str(),
        Some("d/ok")
    );
}
