//! A compromised sandbox: its `tar` ignores its arguments and writes a
//! crafted archive. Every attack class must be refused with a typed error
//! (`unsafe-archive` or `limit-exceeded`) and land nothing: no byte outside
//! the target, nothing promoted into it, no special file, no set-id bit.
//! Under the default link policy, an archive whose only fault is symlinks
//! that leave the target lands without them instead, and names them.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_tests::hostile::{self, corpus};
use sandbox_sync_tests::*;

/// A sandbox root with the host's GNU userland bound in and a `tar` in its
/// own `/usr/local/bin` (first on PATH) that passes for GNU tar and writes
/// `./.evil.tar` whatever it is asked. (BusyBox's shell runs its own
/// applets without a PATH lookup, so a BusyBox root's `tar` cannot be
/// swapped this way.) Its `find` hangs where asked to.
fn hostile_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        // A test process cannot remove its root when it exits (statics are
        // never dropped), so each removes those of processes now gone.
        sweep_roots_of_gone_processes("sandbox-sync-hostile-");
        let root = std::env::temp_dir().join(format!("sandbox-sync-hostile-{}", std::process::id()));
        std::fs::create_dir_all(root.join("usr/local/bin")).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        sandbox_sync_tests::write_executable(&root.join("usr/local/bin/tar"), "#!/bin/sh\n# It passes for GNU tar (the program then trusts it most: excludes,\n# keep lists), and whatever it is asked, it writes the crafted archive\n# (unless its case is marked honest for now: then it is the real tar).\ncase $1 in --version) echo 'tar (GNU tar) 1.35'; exit 0 ;; esac\n[ ! -e ../../honest ] || exec /usr/bin/tar \"$@\"\n[ ! -e ../../slow ] || { sleep 1; exec /usr/bin/tar \"$@\"; }\nexec cat ./.evil.tar\n");
        // A `find` that never returns in a directory holding `.hang`: an
        // incremental listing that never comes; in one holding `.flood`
        // ("N" or "N DEPTH"), a listing of N made-up files, each DEPTH
        // ten-byte directories deep.
        sandbox_sync_tests::write_executable(&root.join("usr/local/bin/find"), "#!/bin/sh
[ ! -e ./.hang ] || exec sleep 600
[ ! -e ./.flood ] || { read -r n deep <./.flood; p=$(seq \"${deep:-0}\" | sed 's|.*|ddddddddd/|' | tr -d '\\n'); d=$(stat -c %d .); seq \"$n\" | exec sed \"s|.*|$d & 1 2000-01-01 00:00:00.000000000 +0000 ./$p&|\"; }
exec /usr/bin/find \"$@\"\n");
        // A `zstd` that asks for a 128 MiB window where the case its input
        // comes from holds `bigwindow` (the host accepts 8 MiB).
        sandbox_sync_tests::write_executable(&root.join("usr/local/bin/zstd"), "#!/bin/sh
z=$(readlink /proc/self/fd/0); b=${z%%/workspace/*}
[ ! -e \"$b/bigwindow\" ] || exec /usr/bin/zstd --long=27 \"$@\"
exec /usr/bin/zstd \"$@\"\n");
        root
    })
}

/// How the hostile sandbox is reached.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The local exec backend.
    Exec,
    /// The Daytona client and the fake toolbox, which runs each request
    /// through the local backend.
    Daytona,
}

/// The hostile sandbox as `uid`, reached `via`; the fake toolbox, if any,
/// serves while the first value lives.
fn hostile_via(
    uid: Option<u32>,
    via: Via,
) -> (
    Option<sandbox_sync_tests::daytona_server::ToolboxServer>,
    std::sync::Arc<dyn sandbox_sync_host::exec::ExecBackend>,
) {
    let local = std::sync::Arc::new(hostile_backend(uid));
    match via {
        Via::Exec => (None, local),
        Via::Daytona => {
            let (server, backend) = daytona_backend(local);
            (Some(server), backend)
        }
    }
}

/// The hostile sandbox as `uid` (`None`: as root, uid 0).
fn hostile_backend(uid: Option<u32>) -> LocalBackend {
    let b = LocalBackend::sandbox_root_with_host_userland(hostile_root()).unwrap();
    match uid {
        Some(uid) => b.user(uid),
        None => b,
    }
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

fn run(
    name: &str,
    archive: &[u8],
    n: usize,
    uid: Option<u32>,
    via: Via,
    strict_links: bool,
) -> Result<SyncOutcome, SyncFailure> {
    run_with(name, archive, n, uid, via, |o| {
        o.max_entries = 1000;
        o.max_metadata_bytes = 512 << 10;
        o.strict_links = strict_links;
    })
}

/// The corpus entries whose only fault is symlinks that leave the target
/// (absolute, or climbing above its top): skipped, not refused, unless
/// `strict_links`.
const ONLY_LINKS_THAT_LEAVE: &[&str] = &[
    "lone-escaping-symlink",
    "cve-2019-11249-own-dir",
    "absolute-symlink",
    "proc-self-root-symlink",
    "path-max-chain",
    "pax-linkpath-absolute",
    "backslash-dotdot-link",
    "climb-after-a-name",
];

/// Syncs `archive` out of a hostile sandbox; on failure, nothing may have
/// landed on the host and no staging may be left.
fn run_with(
    name: &str,
    archive: &[u8],
    n: usize,
    uid: Option<u32>,
    via: Via,
    tune: impl FnOnce(&mut SyncOptions),
) -> Result<SyncOutcome, SyncFailure> {
    let c = case(n, archive);
    let (_server, backend) = hostile_via(uid, via);
    let mut opts = sandbox_sync_tests::sync_options(c.remote.clone());
    tune(&mut opts);
    let target = c.host.join("target");
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let result = block_on(runtime().sync_out(&ops, &opts, backend));
    if result.is_ok() {
        // What landed holds no link that leads out of the target.
        for rel in audit(&target) {
            let p = target.join(&rel);
            if std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
            {
                if let Ok(resolved) = std::fs::canonicalize(&p) {
                    assert!(
                        resolved.starts_with(std::fs::canonicalize(&target).unwrap()),
                        "{name}: {rel} leads to {}",
                        resolved.display()
                    );
                }
                let t = std::fs::read_link(&p).unwrap();
                assert!(t.is_relative(), "{name}: {rel} -> {}", t.display());
            }
        }
        assert_eq!(
            std::fs::read(c.host.join("outside/victim")).unwrap(),
            b"untouched",
            "{name}"
        );
    }
    if result.is_err() {
        let landed = audit(&c.host);
        assert_eq!(
            landed,
            // Not even the target directory the host made for the call.
            vec!["outside", "outside/victim"],
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

/// Issue 11.1: the hostile suite runs with the sandbox as root (uid 0) and
/// as an unprivileged uid.
#[test]
fn every_attack_class_is_refused_as_root() {
    every_attack_class_is_refused(None, 0, Via::Exec);
}

#[test]
fn every_attack_class_is_refused_unprivileged() {
    every_attack_class_is_refused(Some(SANDBOX_UID), 5000, Via::Exec);
}

/// The same corpus downloaded from a Daytona sandbox (root, as Daytona's
/// daemon usually runs) into the same validating reader.
#[test]
fn every_attack_class_is_refused_over_daytona() {
    every_attack_class_is_refused(None, 7000, Via::Daytona);
}

fn every_attack_class_is_refused(uid: Option<u32>, base: usize, via: Via) {
    if via == Via::Daytona && !drives(Transport::Daytona) {
        return;
    }
    let mut wrong = Vec::new();
    for (n, (name, archive)) in corpus().into_iter().enumerate() {
        // Skipping links that leave: only those are accepted, named.
        let skipping = run(name, &archive, base + n, uid, via, false);
        match (&skipping, ONLY_LINKS_THAT_LEAVE.contains(&name)) {
            (Ok(o), true) if o.operations[0].skipped_link_count > 0 => {}
            (Ok(o), true) => wrong.push(format!("{name}: accepted, none skipped: {o:?}")),
            (Ok(_), false) => wrong.push(format!("{name}: accepted skipping links")),
            (Err(f), true) => wrong.push(format!("{name}: refused skipping links: {}", f.error)),
            (Err(_), false) => {}
        }
        match run(name, &archive, base + n, uid, via, true) {
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
    a_benign_archive_lands(Via::Exec);
}

#[test]
fn a_benign_archive_through_the_same_harness_lands_over_daytona() {
    a_benign_archive_lands(Via::Daytona);
}

fn a_benign_archive_lands(via: Via) {
    if via == Via::Daytona && !drives(Transport::Daytona) {
        return;
    }
    let archive = hostile::end(
        [
            hostile::dir(b"d", 0o755),
            hostile::file(b"d/ok", b"fine"),
            hostile::symlink(b"l", b"d/ok"),
        ]
        .concat(),
    );
    let c = case(if via == Via::Daytona { 9998 } else { 9999 }, &archive);
    let (_server, backend) = hostile_via(Some(SANDBOX_UID), via);
    let target = c.host.join("target");
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    block_on(runtime().sync_out(
        &ops,
        &sandbox_sync_tests::sync_options(c.remote.clone()),
        backend,
    ))
    .expect("benign");
    assert_eq!(std::fs::read(target.join("d/ok")).unwrap(), b"fine");
    assert_eq!(
        std::fs::read_link(target.join("l")).unwrap().to_str(),
        Some("d/ok")
    );
}

/// For an incremental sync-out of `c`'s `src` (holding `ok`, "fine") into
/// the host's `target`: two honest syncs first (the real tar, while the
/// sandbox holds `honest`), so the second (the target then holds files)
/// lists and records what landed, and the next keeps `ok`.
fn kept_by_honest_syncs(
    c: &Case,
) -> (
    PathBuf,
    [SyncOperation; 1],
    SyncOptions,
    std::sync::Arc<LocalBackend>,
) {
    let listed = c.base.join("workspace/src/ok");
    std::fs::write(&listed, b"fine").unwrap();
    std::os::unix::fs::lchown(&listed, Some(SANDBOX_UID), Some(SANDBOX_UID)).unwrap();
    let target = c.host.join("target");
    let mut opts = sandbox_sync_tests::sync_options(c.remote.clone());
    opts.incremental = true;
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let backend = std::sync::Arc::new(hostile_backend(Some(SANDBOX_UID)));
    std::fs::write(c.base.join("honest"), b"").unwrap();
    settle();
    for _ in 0..2 {
        block_on(runtime().sync_out(&ops, &opts, backend.clone())).expect("an honest sync-out");
    }
    std::fs::remove_file(c.base.join("honest")).unwrap();
    (target, ops, opts, backend)
}

/// Incremental sync-out: a sandbox whose `tar` ignores the keep list and
/// sends a file the host kept anyway is refused (the file would land
/// twice), and the target is left as it was.
#[test]
fn a_kept_file_sent_anyway_is_refused() {
    refused_over_a_kept_file(9998, hostile::file(b"ok", b"sandbox bytes"), false, "ok");
}

/// Incremental sync-out: an archive member that hard-links to a file the
/// host kept is refused (the kept file is the host's inode, which the new
/// tree must not grow another name for), whenever the kept file joined
/// the staged tree, and the target is left as it was.
#[test]
fn a_hard_link_to_a_kept_file_is_refused() {
    refused_over_a_kept_file(9994, hostile::hardlink(b"h", b"ok"), true, "hard link");
}

/// Syncs case `n` out again once honest syncs made `ok` a file the next
/// re-sync keeps, with `member` as the sandbox's whole archive; with
/// `host_only`, the target also holds a file the sandbox does not list
/// (the new tree cannot be the old one, so kept files join as their
/// directory is made, before any member). The sync must fail
/// `unsafe-archive` with `says` in its message, the host as it was.
fn refused_over_a_kept_file(n: usize, member: Vec<u8>, host_only: bool, says: &str) {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    let c = case(n, &hostile::end(member));
    let (target, ops, opts, backend) = kept_by_honest_syncs(&c);
    let mut held = vec!["outside", "outside/victim", "target", "target/.evil.tar"];
    if host_only {
        std::fs::write(target.join("host-only"), b"gone after a sync").unwrap();
        held.push("target/host-only");
    }
    held.push("target/ok");
    let err = block_on(runtime().sync_out(&ops, &opts, backend)).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    assert!(err.error.to_string().contains(says), "{}", err.error);
    assert_eq!(audit(&c.host), held);
    assert_eq!(std::fs::read(target.join("ok")).unwrap(), b"fine");
    let _ = std::fs::remove_dir_all(&c.base);
}

/// Issue 23, 5: a kept host file swapped for a symlink (to a file outside
/// the target) after the host judged it unchanged and before it is linked
/// into the new tree fails the call: nothing lands, no symlink, the file
/// outside untouched.
#[test]
fn a_kept_file_swapped_for_a_symlink_fails_loud() {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    let archive = hostile::end(hostile::file(b"ok", b"unused"));
    let c = case(9996, &archive);
    let (target, ops, opts, backend) = kept_by_honest_syncs(&c);
    // The real tar, a second late: the host swaps the file meanwhile.
    std::fs::write(c.base.join("slow"), b"").unwrap();
    let swap = {
        let (kept, victim) = (target.join("ok"), c.host.join("outside/victim"));
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            std::fs::remove_file(&kept).unwrap();
            symlink(&victim, &kept).unwrap();
        })
    };
    let err = block_on(runtime().sync_out(&ops, &opts, backend)).unwrap_err();
    swap.join().unwrap();
    assert_eq!(err.error.kind, ErrorKind::SourceChanged, "{}", err.error);
    assert!(
        std::fs::symlink_metadata(target.join("ok"))
            .unwrap()
            .is_symlink(),
        "the host's own swap stays"
    );
    assert_eq!(
        std::fs::read(c.host.join("outside/victim")).unwrap(),
        b"untouched"
    );
    let staged: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".paperclip-upload"))
        .collect();
    assert!(staged.is_empty(), "{staged:?}");
    let _ = std::fs::remove_dir_all(&c.base);
}

/// An incremental sync-out of hostile case `n` into a target that holds a
/// file, its sandbox `find` steered by `marker` (see `hostile_root`): the
/// error, how long the call took, and what the host holds after it.
fn listing_sync_out(
    n: usize,
    marker: (&str, &[u8]),
    tune: impl FnOnce(&mut SyncOptions),
) -> (SyncFailure, std::time::Duration, Vec<String>) {
    let archive = hostile::end(hostile::file(b"ok", b"sandbox bytes"));
    let c = case(n, &archive);
    std::fs::write(c.base.join("workspace/src").join(marker.0), marker.1).unwrap();
    let target = c.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("old"), b"old").unwrap();
    let mut opts = sandbox_sync_tests::sync_options(c.remote.clone());
    opts.incremental = true;
    tune(&mut opts);
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let backend = std::sync::Arc::new(hostile_backend(Some(SANDBOX_UID)));
    let started = std::time::Instant::now();
    let err = block_on(runtime().sync_out(&ops, &opts, backend)).unwrap_err();
    let took = started.elapsed();
    let held = audit(&c.host);
    let _ = std::fs::remove_dir_all(&c.base);
    (err, took, held)
}

/// Incremental sync-out: a listing that never comes (the sandbox's `find`
/// hangs) cannot stretch the call past its deadline, and the target stays
/// as it was.
#[test]
fn a_listing_that_never_comes_holds_the_deadline() {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    let (err, took, held) = listing_sync_out(9997, (".hang", b""), |o| {
        o.timeout = std::time::Duration::from_secs(2);
    });
    assert!(
        took < std::time::Duration::from_secs(4),
        "{took:?}: {}",
        err.error
    );
    assert!(
        matches!(
            err.error.kind,
            ErrorKind::LimitExceeded | ErrorKind::Transport
        ),
        "{}",
        err.error
    );
    assert_eq!(held, ["outside", "outside/victim", "target", "target/old"]);
}

/// Incremental sync-out: a listing of more files than `max-entries` is
/// refused as that limit (it once grew the guest's tables until the
/// store's memory cap trapped it, reported as a wasm backtrace).
#[test]
fn a_listing_flood_trips_max_entries() {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    let (err, took, held) = listing_sync_out(9995, (".flood", b"300000"), |o| {
        o.max_entries = 100_000;
        o.timeout = std::time::Duration::from_secs(60);
    });
    // The program, left waiting for its keep lists, is told there are
    // none: the call ends now, not at its deadline.
    assert!(took < std::time::Duration::from_secs(30));
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(err.error.message.contains("max-entries"), "{}", err.error);
    assert_eq!(held, ["outside", "outside/victim", "target", "target/old"]);
}

/// Incremental sync-out: a listing within every limit but of long names
/// (40,000 files each 1 KB deep: 41 MB of text) costs the guest a table
/// of 24 bytes a file, never the names: the sync lands in 32 MiB of guest
/// memory (holding the names took more than their 41 MB).
#[test]
fn a_listing_of_long_names_fits_in_guest_memory() {
    if keeps_unchanged(GNU_LOCAL) {
        long_names_listed(9994, Some(32 << 20));
    }
}

/// The same flood in a test process of its own, the guest at its default
/// cap: the whole process (runtime, compiled component, guest, listing)
/// peaks under the 64 MiB README publishes for any flood.
#[test]
fn a_listing_of_long_names_keeps_the_host_under_budget() {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    if std::env::var_os("SANDBOX_SYNC_RSS_CHILD").is_some() {
        long_names_listed(9992, None);
        // The kernel's high-water mark of this whole process.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let hwm = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .unwrap();
        println!("peak-rss-kb={}", hwm.trim().trim_end_matches("kB").trim());
        return;
    }
    let name = "hostile::a_listing_of_long_names_keeps_the_host_under_budget";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads", "1", "--nocapture"])
        .env("SANDBOX_SYNC_RSS_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // libtest prints it after the test's name, on the same line.
    let peak: u64 = text
        .split("peak-rss-kb=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the child reported no peak: {text}"))
        * 1024;
    eprintln!("peak RSS {} MiB", peak >> 20);
    assert!(
        peak > 0 && peak < 64 << 20,
        "peak RSS {} MiB for a 41 MB listing",
        peak >> 20
    );
}

/// Syncs out 40,000 made-up names of ~1 KB (case `n`), the guest's memory
/// capped at `guest_memory` bytes (else the default), and checks it lands.
fn long_names_listed(n: usize, guest_memory: Option<usize>) {
    let c = case(n, &hostile::end(Vec::new()));
    let src = c.base.join("workspace/src");
    std::fs::write(src.join(".flood"), b"40000 100\n").unwrap();
    std::fs::write(src.join("real.txt"), b"real bytes").unwrap();
    std::fs::write(c.base.join("honest"), b"").unwrap();
    let target = c.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("old"), b"old").unwrap();
    let mut opts = sandbox_sync_tests::sync_options(c.remote.clone());
    opts.incremental = true;
    if let Some(bytes) = guest_memory {
        opts.guest_memory_bytes = bytes;
    }
    opts.timeout = std::time::Duration::from_secs(120);
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let backend = std::sync::Arc::new(hostile_backend(Some(SANDBOX_UID)));
    let out = block_on(runtime().sync_out(&ops, &opts, backend));
    let _ = std::fs::remove_dir_all(&c.base);
    let out = out.unwrap_or_else(|e| panic!("{}", e.error));
    assert_eq!(
        std::fs::read(target.join("real.txt")).unwrap(),
        b"real bytes"
    );
    assert!(!target.join("old").exists());
    assert_eq!(out.operations[0].files_transferred, 3);
}

/// A compressed sync-out whose zstd frame asks for a window past the
/// host's 8 MiB is refused as that limit, in one line naming it (it was
/// `transport`), and the target is as it was.
#[test]
fn a_zstd_window_past_the_host_limit_is_limit_exceeded() {
    if !compresses() {
        return;
    }
    let c = case(9993, &hostile::end(Vec::new()));
    let src = c.base.join("workspace/src");
    std::fs::write(src.join("text.txt"), "compressible ".repeat(400_000)).unwrap();
    std::fs::write(c.base.join("honest"), b"").unwrap();
    std::fs::write(c.base.join("bigwindow"), b"").unwrap();
    let target = c.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("old"), b"old").unwrap();
    let mut opts = sandbox_sync_tests::sync_options(c.remote.clone());
    opts.compress = sandbox_sync_host::provider::Compress::Zstd;
    let ops = [op("o", vec![dir_out(format!("{}/src", c.remote), &target)])];
    let backend = std::sync::Arc::new(hostile_backend(Some(SANDBOX_UID)));
    let err = block_on(runtime().sync_out(&ops, &opts, backend)).unwrap_err();
    let held = audit(&c.host);
    let _ = std::fs::remove_dir_all(&c.base);
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(
        err.error.message.contains("window over 8 MiB"),
        "{}",
        err.error
    );
    assert!(!err.error.to_string().contains('\n'), "{}", err.error);
    assert_eq!(held, ["outside", "outside/victim", "target", "target/old"]);
}

/// Issue 11.9: deep member paths imply one directory per component; the
/// guest keeps one small node per directory, so a stream well within the
/// default limits fits in a modest guest memory (it once needed memory
/// quadratic in the name's length and trapped, leaving the staging).
#[test]
fn deep_paths_fit_in_guest_memory() {
    let archive = hostile::deep_members(24, 1800);
    let out = run_with("deep", &archive, 9001, Some(SANDBOX_UID), Via::Exec, |o| {
        o.guest_memory_bytes = 48 << 20;
    })
    .expect("deep paths within the limits land");
    assert_eq!(out.operations[0].files_transferred, 24);
}

/// Issue 11.9: the parent directories a member implies count against
/// `max-entries` (one deep member once created 1,900 under a limit of 2).
#[test]
fn implied_parents_count_against_max_entries() {
    let archive = hostile::deep_members(1, 1900);
    let err = run_with(
        "implied",
        &archive,
        9002,
        Some(SANDBOX_UID),
        Via::Exec,
        |o| {
            o.max_entries = 2;
        },
    )
    .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
}

/// Issue 11.9: a guest trap (here: out of memory, the entry limit set far
/// above what the memory holds) leaves nothing: the host removes the
/// staging the trapped component had filled. The memory the store refused
/// is what ended the call: `limit-exceeded`, one line, no wasm backtrace.
#[test]
fn a_guest_trap_leaves_no_staging() {
    let archive = hostile::many_files(60_000);
    let err = run_with("trap", &archive, 9003, Some(SANDBOX_UID), Via::Exec, |o| {
        o.guest_memory_bytes = 6 << 20;
        o.max_entries = 10_000_000;
    })
    .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(
        err.error.message.contains("more than its 6 MiB of memory")
            && !err.error.message.contains('\n'),
        "{}",
        err.error
    );
}

/// Issue 11.10: link checks cost their target's length, so a stream of
/// links with long targets is decided well within a short timeout (it once
/// ran 32 s past a 2 s one).
#[test]
fn long_link_targets_are_checked_within_the_deadline() {
    let archive = hostile::long_link_targets(1000);
    let timeout = std::time::Duration::from_secs(2);
    let started = std::time::Instant::now();
    let r = run_with("links", &archive, 9004, Some(SANDBOX_UID), Via::Exec, |o| {
        o.timeout = timeout;
    });
    let took = started.elapsed();
    assert!(
        took < timeout + std::time::Duration::from_secs(2),
        "{took:?}"
    );
    let out = r.expect("normalized links inside the tree are accepted");
    assert_eq!(out.operations[0].files_transferred, 1000);
}
