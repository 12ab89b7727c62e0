//! Incremental sync-in: a re-sync keeps the files its target already holds
//! (same size, mtime and mode, and landed well after that mtime) and lands
//! exactly what a full sync lands: changed, added and retyped entries, no
//! stale files, modes, links and empty directories, in one exec, promoted
//! as atomically as ever.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use sandbox_sync_tests::*;

/// Writes a source file last modified an hour ago, as a workspace's
/// untouched files are.
fn write_old(sb: &Sandbox, rel: &str, data: &[u8]) {
    let p = sb.write_host(&format!("src/{rel}"), data);
    set_mtime(&p, SystemTime::now() - Duration::from_secs(3600));
}

fn seed(sb: &Sandbox) {
    for i in 0..40 {
        write_old(
            sb,
            &format!("a/f{i:02}.txt"),
            format!("file {i}\n").repeat(i + 1).as_bytes(),
        );
    }
    write_old(sb, "b/deep/x.bin", &incompressible(70_000));
    write_old(sb, "name with spaces.txt", b"spaces\n");
    write_old(sb, "back\\slash.txt", b"backslash\n");
    write_old(sb, "gone.txt", b"will be deleted\n");
    write_old(sb, "becomes-dir", b"a file first\n");
    std::fs::create_dir_all(sb.host.join("src/empty")).unwrap();
    symlink("a/f01.txt", sb.host.join("src/link")).unwrap();
    write_old(sb, "tool.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(
        sb.host.join("src/tool.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    settle();
}

fn sync(sb: &Sandbox, incremental: bool) -> SyncOutcome {
    let mut opts = sb.options();
    opts.incremental = incremental;
    let src = sb.host.join("src");
    sb.sync_in_with(&[op("in", vec![dir(&src, sb.remote("ws"))])], &opts)
        .expect("sync-in")
}

fn resync_lands_what_a_full_sync_lands(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let first = sync(&sb, true);
    assert_execs(first.execs, 1);
    let total = first.operations[0].files_transferred;

    // Nothing changed: only what is always sent is sent again.
    let same = sync(&sb, true);

    assert_execs(same.execs, 1);
    assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
    // Always sent: the backslash name and the link.
    let kept_all = same.operations[0].files_transferred == 2;

    // Changed (same size and other size), added, deleted, retyped, re-moded.
    std::fs::write(
        sb.host.join("src/a/f03.txt"),
        b"FILE 3\nFILE 3\nFILE 3\nFILE 3\n",
    )
    .unwrap();
    std::fs::write(sb.host.join("src/a/f04.txt"), b"grown\n").unwrap();
    sb.write_host("src/a/new.txt", b"new\n");
    std::fs::remove_file(sb.host.join("src/gone.txt")).unwrap();
    std::fs::remove_file(sb.host.join("src/becomes-dir")).unwrap();
    sb.write_host("src/becomes-dir/inner.txt", b"now a dir\n");
    std::fs::set_permissions(
        sb.host.join("src/a/f05.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // A file the sandbox changed is sent again.
    std::fs::write(sb.remote_on_host("ws/a/f06.txt"), b"sandbox edit\n").unwrap();
    let changed = sync(&sb, true);
    assert_execs(changed.execs, 1);
    assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
    if kept_all {
        // The changed, added, re-moded and sandbox-edited files, with the
        // backslash name and the link.
        assert_eq!(changed.operations[0].files_transferred, 8, "{changed:?}");
    } else {
        // A userland whose tar does not land mtimes keeps nothing and
        // sends everything: still exact.
        assert_eq!(same.operations[0].files_transferred, total);
    }

    // The same source, fully synced elsewhere, lands the same tree.
    let mut opts = sb.options();
    opts.incremental = false;
    let src = sb.host.join("src");
    sb.sync_in_with(&[op("full", vec![dir(&src, sb.remote("full"))])], &opts)
        .expect("full sync");
    assert_same_tree(&sb.remote_on_host("full"), &sb.remote_on_host("ws"));
}

/// Every userland here lands mtimes: an unchanged re-sync sends no file
/// but the two always sent.
fn unchanged_resync_sends_almost_nothing(u: Env) {
    if !keeps_unchanged(u) {
        return;
    }
    let sb = Sandbox::new(u);
    seed(&sb);
    sync(&sb, true);
    let inode = |rel: &str| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(sb.remote_on_host(rel)).unwrap())
    };
    let before = inode("ws/b/deep/x.bin");
    let again = sync(&sb, true);
    assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    assert!(again.operations[0].bytes_transferred <= 8192, "{again:?}");
    // The target is updated in place: a kept file is not even touched.
    assert_eq!(inode("ws/b/deep/x.bin"), before);
}

/// Read-only directories update in place like any other, as the
/// sandbox's unprivileged user too, and end with the modes a full sync
/// gives them: ones the sandbox made read-only since (as `go mod download`
/// leaves its module cache) and, where the sandbox's tar can extract them
/// at all (GNU; BusyBox's cannot as a non-root user: ARCHITECTURE.md, Known
/// gap), read-only sources.
fn read_only_directories_update_in_place(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.host.join("src");
    for rel in [
        "ro/keep.txt",
        "ro/edit.txt",
        "ro/gone.txt",
        "ro/sub/deep.txt",
        "ro/old/x",
    ] {
        write_old(&sb, rel, rel.as_bytes());
    }
    let chmod = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let lock_src = u.userland == Userland::Gnu;
    if lock_src {
        for d in ["ro/sub", "ro/old", "ro"] {
            chmod(&src.join(d), 0o555);
        }
    }
    settle();
    sync(&sb, true);
    for d in ["ro/sub", "ro/old", "ro"] {
        chmod(&sb.remote_on_host(&format!("ws/{d}")), 0o555);
    }
    chmod(&src.join("ro"), 0o755);
    chmod(&src.join("ro/old"), 0o755);
    std::fs::write(src.join("ro/edit.txt"), b"edited\n").unwrap();
    std::fs::remove_file(src.join("ro/gone.txt")).unwrap();
    std::fs::remove_dir_all(src.join("ro/old")).unwrap();
    write_old(&sb, "ro/new/y", b"new\n");
    if lock_src {
        chmod(&src.join("ro/new"), 0o500);
        chmod(&src.join("ro"), 0o550);
    }
    settle();
    let again = sync(&sb, true);
    assert_same_tree(&src, &sb.remote_on_host("ws"));
    let mode = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    for d in ["ro", "ro/sub", "ro/new"] {
        assert_eq!(
            mode(sb.remote_on_host(&format!("ws/{d}"))),
            mode(src.join(d)),
            "{d}"
        );
    }
    if keeps_unchanged(u) {
        assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    }
    // Nothing of the sync is left behind, in the sandbox's scratch either.
    let left: Vec<_> = std::fs::read_dir(sb.remote_on_host(""))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "ws")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The host's temp dir cleanup needs to write into them.
    for d in ["ro/sub", "ro/new", "ro"] {
        chmod(&src.join(d), 0o755);
    }
}

/// A directory the sandbox's user cannot read (an agent's `chmod 000`) is
/// a hole in the target's listing: what it holds was neither kept nor
/// pruned by a merge, so a file the source does not have stayed and the
/// sync said it landed. The walk's failure now fails the listing, the
/// target is replaced whole, and lands exactly the source.
fn an_unreadable_directory_leaves_nothing_stale(u: Env) {
    let sb = Sandbox::new(u);
    write_old(&sb, "keep.txt", b"kept\n");
    write_old(&sb, "locked/a.txt", b"a\n");
    settle();
    sync(&sb, true);
    let locked = sb.remote_on_host("ws/locked");
    let stale = locked.join("stale.txt");
    std::fs::write(&stale, b"left by the agent\n").unwrap();
    let owner = std::fs::metadata(&locked).unwrap();
    std::os::unix::fs::chown(&stale, Some(owner.uid()), Some(owner.gid())).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    settle();
    sync(&sb, true);
    assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
}

/// A file rewritten within the second it was synced in, at the same size,
/// keeps its mtime in whole seconds: it landed "racy" and is sent again.
fn a_racy_file_is_sent_again(u: Env) {
    let sb = Sandbox::new(u);
    let p = sb.write_host("src/hot.txt", b"version A\n");
    let t = std::fs::metadata(&p).unwrap().modified().unwrap();
    sync(&sb, true);
    std::fs::write(&p, b"version B\n").unwrap();
    set_mtime(&p, t);
    let again = sync(&sb, true);
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(
        std::fs::read(sb.remote_on_host("ws/hot.txt")).unwrap(),
        b"version B\n"
    );
}

/// The remote dir itself as the target (its contents are replaced, not
/// the directory): kept files come back, stale ones go.
fn resync_onto_the_remote_dir_itself(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let src = sb.host.join("src");
    let root = sb.remote("");
    let mut opts = sb.options();
    opts.incremental = true;
    let root = root.trim_end_matches('/').to_owned();
    let ops = [op("in", vec![dir(&src, root.clone())])];
    sb.sync_in_with(&ops, &opts).expect("first");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let before = mode(&sb.remote_on_host(""));
    std::fs::remove_file(src.join("gone.txt")).unwrap();
    let again = sb.sync_in_with(&ops, &opts).expect("again");
    assert_execs(again.execs, 1);
    assert_same_tree(&src, &sb.remote_on_host(""));
    // Updated in place, the remote dir keeps its own mode.
    assert_eq!(mode(&sb.remote_on_host("")), before);
    if keeps_unchanged(u) {
        assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    }
}

/// Another call's scratch at the top of the remote dir (one not yet an
/// hour old, so not swept) is neither listed nor walked: a directory in it
/// the sandbox's user cannot read does not fail the remote dir's listing,
/// which still keeps what it holds, and the scratch is left alone.
fn scratch_at_the_top_is_not_walked(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let src = sb.host.join("src");
    let root = sb.remote("").trim_end_matches('/').to_owned();
    let mut opts = sb.options();
    opts.incremental = true;
    let ops = [op("in", vec![dir(&src, root)])];
    sb.sync_in_with(&ops, &opts).expect("first");
    let scratch = sb.remote_on_host(".paperclip-upload-00000000000000e1");
    let locked = scratch.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::write(locked.join("x"), b"x").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::remove_file(src.join("gone.txt")).unwrap();
    let again = sb.sync_in_with(&ops, &opts).expect("again");
    assert!(!sb.remote_on_host("gone.txt").exists());
    assert!(sb.remote_on_host("a/f01.txt").exists());
    if keeps_unchanged(u) {
        assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        locked.join("x").exists(),
        "another call's scratch was touched"
    );
}

/// A tree of more members than the component walks before the program's
/// report (65536) is walked while it is sent where the sandbox's tar can
/// take an archive of unknown length (GNU, or any compressed stream), and
/// walked whole first elsewhere. Either way it lands exactly, a re-sync
/// keeps what the streamed part already holds, and a walk that fails
/// midway changes nothing.
fn a_tree_past_the_lookahead_lands_and_resyncs(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.host.join("src");
    let old = SystemTime::now() - Duration::from_secs(3600);
    let (dirs, per_dir) = (300, 234);
    for d in 0..dirs {
        let dir = src.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            let p = dir.join(format!("f{f:03}"));
            std::fs::write(&p, format!("{d} {f}\n")).unwrap();
            set_mtime(&p, old);
        }
    }
    settle();
    let first = sync(&sb, true);
    assert_execs(first.execs, big_sync_in_execs(u, true));
    assert_eq!(first.operations[0].files_transferred, dirs * per_dir);
    assert_same_tree(&src, &sb.remote_on_host("ws"));
    // Changes where the walk reaches them last: past the lookahead.
    let last = src.join(format!("d{:03}", dirs - 1));
    std::fs::write(last.join("f000"), b"changed\n").unwrap();
    std::fs::write(last.join("new"), b"added\n").unwrap();
    std::fs::remove_file(last.join("f001")).unwrap();
    let again = sync(&sb, true);
    assert_same_tree(&src, &sb.remote_on_host("ws"));
    // A tree this big is worth asking about on a toolbox sandbox too.
    if keeps_unchanged(u) || (single_exec() && u.transport == Transport::Daytona) {
        assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    }
    // A link out of the source, refused only when the walk reaches it.
    std::os::unix::fs::symlink("/etc", last.join("zz-out")).unwrap();
    let before = snapshot(&sb.remote_on_host("ws"));
    let mut m = dir(&src, sb.remote("ws"));
    m.follow_symlinks = Some(true);
    let mut opts = sb.options();
    opts.confine_followed_symlinks = true;
    let err = sb.sync_in_with(&[op("in", vec![m])], &opts).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::Confinement, "{}", err.error);
    assert_eq!(snapshot(&sb.remote_on_host("ws")), before);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A file mapping whose target already holds the source's file (same
/// size, mtime and the mode the mapping gives it) leaves it as it is; a
/// changed source, another mode or a racy target sends it again.
fn a_file_mapping_resync_keeps_its_target(u: Env) {
    let sb = Sandbox::new(u);
    write_old(&sb, "big.bin", &incompressible(300_000));
    settle();
    let src = sb.host.join("src/big.bin");
    let sync_file = |mode: Option<u32>| {
        let mut m = file(&src, sb.remote("ws/big.bin"));
        m.mode = mode;
        let mut opts = sb.options();
        opts.incremental = true;
        sb.sync_in_with(&[op("in", vec![m])], &opts)
            .expect("sync-in")
    };
    let target = sb.remote_on_host("ws/big.bin");
    let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&target).unwrap());
    sync_file(None);
    let before = inode();
    let again = sync_file(None);
    assert_execs(again.execs, 1);
    if keeps_unchanged(u) {
        assert_eq!(again.operations[0].files_transferred, 0, "{again:?}");
        assert!(again.operations[0].bytes_transferred < 4096, "{again:?}");
        assert_eq!(inode(), before, "the target was left as it is");
    }
    // Another mode: sent again, and the target gets it.
    let moded = sync_file(Some(0o600));
    assert_eq!(moded.operations[0].files_transferred, 1, "{moded:?}");
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A changed source at the same size: sent again.
    let mut changed = std::fs::read(&src).unwrap();
    changed[0] ^= 0xff;
    std::fs::write(&src, &changed).unwrap();
    set_mtime(&src, SystemTime::now() - Duration::from_secs(1800));
    let again = sync_file(Some(0o600));
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(std::fs::read(&target).unwrap(), changed);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A file mapping into a directory mapping's target is never kept: the
/// directory lands wholesale, so every re-sync must bring the file again.
fn a_file_inside_a_directory_target_lands_on_every_resync(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let extra = sb.host.join("extra.bin");
    std::fs::write(&extra, incompressible(100_000)).unwrap();
    set_mtime(&extra, SystemTime::now() - Duration::from_secs(3600));
    let mut opts = sb.options();
    opts.incremental = true;
    let ops = [op(
        "in",
        vec![
            dir(sb.host.join("src"), sb.remote("ws")),
            file(&extra, sb.remote("ws/extra.bin")),
        ],
    )];
    for _ in 0..2 {
        sb.sync_in_with(&ops, &opts).expect("sync-in");
        assert_eq!(
            std::fs::read(sb.remote_on_host("ws/extra.bin")).unwrap(),
            std::fs::read(&extra).unwrap()
        );
    }
}

/// An unchanged re-sync leaves its target as it was: no entry rewritten,
/// not even a directory's attributes set again (its ctime stays). Every
/// change of shape that leaves each file as it was still lands as a full
/// sync lands it: a host directory's mode, an empty directory added or
/// removed, a symlink retargeted, and a symlink, a FIFO and a directory
/// the sandbox added.
fn an_unchanged_tree_is_left_untouched(u: Env) {
    if !keeps_unchanged(u) {
        return;
    }
    let sb = Sandbox::new(u);
    for i in 0..5 {
        write_old(
            &sb,
            &format!("a/f{i}.txt"),
            format!("file {i}\n").as_bytes(),
        );
    }
    write_old(&sb, "b/deep/x.bin", &incompressible(20_000));
    std::fs::create_dir_all(sb.host.join("src/empty")).unwrap();
    symlink("a/f1.txt", sb.host.join("src/link")).unwrap();
    settle();
    let ctimes = || {
        let c = |rel: &str| {
            let m = std::fs::symlink_metadata(sb.remote_on_host(rel)).unwrap();
            (m.ctime(), m.ctime_nsec())
        };
        ["ws", "ws/a", "ws/b/deep", "ws/a/f1.txt", "ws/link"].map(c)
    };
    let full = |sb: &Sandbox| {
        let mut opts = sb.options();
        opts.incremental = false;
        let src = sb.host.join("src");
        sb.sync_in_with(&[op("full", vec![dir(&src, sb.remote("full"))])], &opts)
            .expect("full sync");
        assert_eq!(
            shape(&sb.remote_on_host("ws")),
            shape(&sb.remote_on_host("full"))
        );
    };
    sync(&sb, true);
    let before = ctimes();
    let again = sync(&sb, true);
    // The link is always sent (it is no file); nothing else.
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(ctimes(), before, "an unchanged re-sync touched its target");
    full(&sb);

    let edits: [Edit<'_>; 5] = [
        ("a host directory's mode", &|sb| {
            let a = sb.host.join("src/a");
            std::fs::set_permissions(a, std::fs::Permissions::from_mode(0o700)).unwrap();
        }),
        ("an empty directory added", &|sb| {
            std::fs::create_dir(sb.host.join("src/b/new")).unwrap();
        }),
        ("an empty directory removed", &|sb| {
            std::fs::remove_dir(sb.host.join("src/empty")).unwrap();
        }),
        ("a symlink retargeted", &|sb| {
            let l = sb.host.join("src/link");
            std::fs::remove_file(&l).unwrap();
            symlink("a/f2.txt", l).unwrap();
        }),
        (
            "a symlink, a FIFO and a directory the sandbox added",
            &|sb| {
                let extra = sb.remote_on_host("ws/a/extra");
                symlink("f1.txt", &extra).unwrap();
                sb.give_to_sandbox(&extra);
                let fifo = sb.remote_on_host("ws/b/fifo");
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &fifo,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o644),
                    0,
                )
                .unwrap();
                sb.give_to_sandbox(&fifo);
                let stray = sb.remote_on_host("ws/stray");
                std::fs::create_dir(&stray).unwrap();
                sb.give_to_sandbox(&stray);
            },
        ),
    ];
    for (what, edit) in edits {
        edit(&sb);
        sync(&sb, true);
        assert_eq!(
            shape(&sb.host.join("src")),
            shape(&sb.remote_on_host("ws")),
            "after {what}"
        );
        full(&sb);
    }
    let before = ctimes();
    sync(&sb, true);
    assert_eq!(ctimes(), before, "an unchanged re-sync touched its target");
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// npm's fixed mtime: every file it unpacks is stamped 1985-10-26.
fn npm_time() -> SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(499_162_500)
}

/// Rewrites `p` with `data` (the same size as before) and puts its mtime
/// back to `t`, as npm, `tar -x`, `cp -p` and `rsync -t` do.
fn rewrite_keeping_mtime(p: &Path, data: &[u8], t: SystemTime) {
    assert_eq!(std::fs::metadata(p).unwrap().len(), data.len() as u64);
    std::fs::write(p, data).unwrap();
    set_mtime(p, t);
}

/// Issue 23, 1: a dependency bumped 1.2.3 -> 1.2.4 keeps its size and npm's
/// mtime; the re-sync must bring the new bytes, in a directory and as a
/// 300 KB file mapping.
fn fixed_mtimes_never_hide_new_bytes(u: Env) {
    let sb = Sandbox::new(u);
    let pkg = sb.write_host(
        "src/node_modules/dep/package.json",
        br#"{"version":"1.2.3"}"#,
    );
    let big = sb.write_host("map.bin", &incompressible(300_000));
    for p in [&pkg, &big] {
        set_mtime(p, npm_time());
    }
    settle();
    let ops = [op(
        "in",
        vec![
            dir(sb.host.join("src"), sb.remote("ws")),
            file(&big, sb.remote("map/map.bin")),
        ],
    )];
    let mut opts = sb.options();
    opts.incremental = true;
    sb.sync_in_with(&ops, &opts).expect("first");
    sb.sync_in_with(&ops, &opts).expect("unchanged");
    settle();
    rewrite_keeping_mtime(&pkg, br#"{"version":"1.2.4"}"#, npm_time());
    let mut bumped = std::fs::read(&big).unwrap();
    bumped[150_000] ^= 1;
    rewrite_keeping_mtime(&big, &bumped, npm_time());
    let again = sb.sync_in_with(&ops, &opts).expect("again");
    assert_eq!(
        std::fs::read(sb.remote_on_host("ws/node_modules/dep/package.json")).unwrap(),
        br#"{"version":"1.2.4"}"#
    );
    assert_eq!(
        std::fs::read(sb.remote_on_host("map/map.bin")).unwrap(),
        bumped
    );
    assert!(again.operations[0].files_transferred >= 2, "{again:?}");
}

/// Issue 23, 2: a file rewritten at the same size within the second it was
/// synced in, its mtime put back, then synced out of the sandbox (which
/// once moved the sandbox file's ctime and so made it look settled): the
/// next sync-in still brings the new bytes. So after a post-upload
/// `chmod -R go-w` that changes no mode.
fn ctime_churn_after_landing_never_hides_new_bytes(u: Env) {
    let sb = Sandbox::new(u);
    let p = sb.write_host("src/cfg.txt", b"version A\n");
    let q = sb.write_host("src/other.txt", b"version A\n");
    let t = std::fs::metadata(&p).unwrap().modified().unwrap();
    let mut o = op("in", vec![dir(sb.host.join("src"), sb.remote("ws"))]);
    o.post_upload_commands = Some(vec![PostUploadCommand {
        command: "chmod -R go-w .".into(),
        cwd: Some(sb.remote("ws")),
        timeout_ms: None,
    }]);
    let mut opts = sb.options();
    opts.incremental = true;
    sb.sync_in_with(std::slice::from_ref(&o), &opts)
        .expect("first");
    rewrite_keeping_mtime(&p, b"version B\n", t);
    rewrite_keeping_mtime(&q, b"version B\n", t);
    let out = op("out", vec![dir_out(sb.remote("ws"), sb.host.join("back"))]);
    sb.sync_out(&[out]).expect("sync-out of the same paths");
    settle();
    sb.sync_in_with(std::slice::from_ref(&o), &opts)
        .expect("again");
    for f in ["ws/cfg.txt", "ws/other.txt"] {
        assert_eq!(
            std::fs::read(sb.remote_on_host(f)).unwrap(),
            b"version B\n",
            "{f}"
        );
    }
    // And once more, everything settled: still exact.
    rewrite_keeping_mtime(&p, b"version C\n", t);
    sb.sync_in_with(&[o], &opts).expect("once more");
    assert_eq!(
        std::fs::read(sb.remote_on_host("ws/cfg.txt")).unwrap(),
        b"version C\n"
    );
}

/// Issue 23, 3: a file mapping through an in-root symlink (`alias ->
/// real`) into a directory mapping's target, and two file mappings of the
/// same file through the alias: an unchanged re-sync lands what a full
/// sync lands (the file is there; the second mapping's bytes win).
fn aliased_targets_land_as_a_full_sync_lands(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_host("tree/a.txt", b"a\n");
    let cfg = sb.write_host("cfg.bin", &incompressible(40_000));
    let first = sb.write_host("first.bin", &incompressible(50_000));
    let second = sb.write_host(
        "second.bin",
        &incompressible(50_000)
            .iter()
            .map(|b| b ^ 0x5a)
            .collect::<Vec<_>>(),
    );
    std::fs::create_dir_all(sb.remote_on_host("ws/real")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("ws"));
    sb.give_to_sandbox(&sb.remote_on_host("ws/real"));
    sb.plant_symlink("ws/alias", "real");
    settle();
    let ops = [op(
        "in",
        vec![
            dir(sb.host.join("tree"), sb.remote("ws/real")),
            file(&cfg, sb.remote("ws/alias/cfg.bin")),
            file(&first, sb.remote("ws/real/x.bin")),
            file(&second, sb.remote("ws/alias/x.bin")),
        ],
    )];
    let check = |what: &str| {
        assert_eq!(
            std::fs::read(sb.remote_on_host("ws/real/cfg.bin")).unwrap(),
            std::fs::read(&cfg).unwrap(),
            "{what}: cfg.bin"
        );
        assert_eq!(
            std::fs::read(sb.remote_on_host("ws/real/x.bin")).unwrap(),
            std::fs::read(&second).unwrap(),
            "{what}: x.bin"
        );
        assert_eq!(
            std::fs::read(sb.remote_on_host("ws/real/a.txt")).unwrap(),
            b"a\n"
        );
    };
    let mut full = sb.options();
    full.incremental = false;
    sb.sync_in_with(&ops, &full).expect("full");
    check("full");
    let mut opts = sb.options();
    opts.incremental = true;
    for what in ["first incremental", "unchanged", "unchanged again"] {
        sb.sync_in_with(&ops, &opts).expect(what);
        check(what);
    }
}

/// Issue 23, 6: a kept file mapping takes its own bytes out of the count,
/// not its archive member's: a kept 96 KiB file and a sent 64 KiB one
/// report 65,536 bytes.
fn kept_file_mappings_are_counted_in_content_bytes(u: Env) {
    if !keeps_unchanged(u) {
        return;
    }
    let sb = Sandbox::new(u);
    let kept = sb.write_host("kept.bin", &incompressible(96 << 10));
    let sent = sb.write_host("sent.bin", &incompressible(64 << 10));
    settle();
    let ops = |sent_target: &str| {
        [op(
            "in",
            vec![
                file(&kept, sb.remote("k/kept.bin")),
                file(&sent, sb.remote(sent_target)),
            ],
        )]
    };
    let mut opts = sb.options();
    opts.incremental = true;
    sb.sync_in_with(&ops("s/one.bin"), &opts).expect("first");
    let again = sb.sync_in_with(&ops("s/two.bin"), &opts).expect("again");
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(again.operations[0].bytes_transferred, 65_536, "{again:?}");
}

for_each_userland!(
    a_source_written_through_a_mapping_is_never_stale,
    a_source_on_a_coarse_filesystem_is_never_stale,
    an_unchanged_tree_is_left_untouched,
    fixed_mtimes_never_hide_new_bytes,
    ctime_churn_after_landing_never_hides_new_bytes,
    aliased_targets_land_as_a_full_sync_lands,
    kept_file_mappings_are_counted_in_content_bytes,
    a_file_inside_a_directory_target_lands_on_every_resync,
    a_file_mapping_resync_keeps_its_target,
    a_tree_past_the_lookahead_lands_and_resyncs,
    resync_lands_what_a_full_sync_lands,
    unchanged_resync_sends_almost_nothing,
    read_only_directories_update_in_place,
    an_unreadable_directory_leaves_nothing_stale,
    a_racy_file_is_sent_again,
    resync_onto_the_remote_dir_itself,
    scratch_at_the_top_is_not_walked
);

/// A loop-mounted ext4 with 128-byte inodes: timestamps in whole seconds,
/// as ext3, FAT, sshfs and many NFS setups keep them. Unmounted on drop.
struct CoarseFs {
    at: std::path::PathBuf,
    _image: tempfile::NamedTempFile,
}

impl CoarseFs {
    fn mount(at: &Path) -> Option<CoarseFs> {
        let image = tempfile::NamedTempFile::new().ok()?;
        image.as_file().set_len(16 << 20).ok()?;
        let made = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-I", "128"])
            .arg(image.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        std::fs::create_dir_all(at).ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-o", "loop"])
            .arg(image.path())
            .arg(at)
            .status()
            .ok()?;
        (made.success() && mounted.success()).then(|| CoarseFs {
            at: at.to_path_buf(),
            _image: image,
        })
    }
}

impl Drop for CoarseFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.at).status();
    }
}

/// Issue 47: a host source on a filesystem with whole-second timestamps,
/// rewritten in place twice within one second with a sync between: the
/// second rewrite moves no identity, so the first sync must not have
/// recorded one that can still change. Every re-sync lands what the
/// source holds.
fn a_source_on_a_coarse_filesystem_is_never_stale(u: Env) {
    let sb = Sandbox::new(u);
    let Some(fs) = CoarseFs::mount(&sb.host.join("src")) else {
        eprintln!("skipped: no loop-mounted ext4 here (needs root, mkfs.ext4, a loop device)");
        return;
    };
    let f = fs.at.join("a.bin");
    std::fs::write(&f, vec![b'0'; 32 << 10]).unwrap();
    sync(&sb, true);
    settle();
    sync(&sb, true);
    for round in 0..3u8 {
        // Early in a second, so both rewrites and the sync fall within it.
        while SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis()
            > 300
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let write = |b: u8| {
            use std::io::Write as _;
            let mut w = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
            w.write_all(&vec![b; 32 << 10]).unwrap();
        };
        write(b'a' + round);
        std::thread::sleep(Duration::from_millis(150));
        sync(&sb, true);
        write(b'A' + round);
        sync(&sb, true);
        assert_eq!(
            std::fs::read(sb.remote_on_host("ws/a.bin")).unwrap(),
            vec![b'A' + round; 32 << 10],
            "round {round}: stale in the sandbox"
        );
    }
    drop(fs);
}

/// Issue 47: a host source a writer keeps mapped (numpy.memmap, LMDB, a
/// database). Its second write to a page it already dirtied moves no
/// ctime, so a file changed within the writeback window of a sync is
/// named by its content: every re-sync lands what the source holds.
fn a_source_written_through_a_mapping_is_never_stale(u: Env) {
    let sb = Sandbox::new(u);
    let f = sb.write_host("src/db.bin", &vec![b'a'; 8192]);
    // Enough to send that a toolbox sandbox lists its target first.
    sb.write_host("src/other.bin", &incompressible(1 << 20));
    let mut w = MappedWriter::open(&f);
    let first = sync(&sb, true);
    w.write(0, b"ONE!");
    // Past the clock tick a plain rewrite needs to show.
    settle();
    sync(&sb, true);
    assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
    // The same page again: no stamp.
    let before = std::fs::metadata(&f).unwrap();
    w.write(4, b"TWO!");
    assert_eq!(
        std::fs::metadata(&f).unwrap().ctime_nsec(),
        before.ctime_nsec()
    );
    let again = sync(&sb, true);
    assert_eq!(
        std::fs::read(sb.remote_on_host("ws/db.bin")).unwrap()[..8],
        *b"ONE!TWO!",
        "stale in the sandbox"
    );
    assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
    // What did not change is still kept, by its content.
    if keeps_unchanged(u) {
        assert!(
            again.operations[0].files_transferred < first.operations[0].files_transferred,
            "{again:?}"
        );
        let same = sync(&sb, true);
        assert_eq!(same.operations[0].files_transferred, 0, "{same:?}");
    }
}
