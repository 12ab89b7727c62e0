//! Incremental sync-out: a re-sync leaves out the files the host target
//! already holds (same size, mtime and mode, landed well after that
//! mtime), links them from the old target into the new one, and lands
//! exactly what a full sync-out lands, in one exec, all or nothing. GNU
//! tar leaves them out with `-X`; BusyBox tar, which has no `-X`, is given
//! its members as arguments.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sandbox_sync_tests::*;

/// True when this sandbox's re-sync leaves unchanged files out: every
/// transport, a toolbox sandbox too (it lists in a command of its own),
/// GNU and BusyBox.
fn keeps(_: Env) -> bool {
    keeps_unchanged(GNU_LOCAL)
}

/// Writes a sandbox file last modified an hour ago.
fn write_old(sb: &Sandbox, rel: &str, data: &[u8]) {
    let p = sb.write_remote(&format!("proj/{rel}"), data);
    set_mtime(&p, SystemTime::now() - Duration::from_secs(3600));
}

fn seed(sb: &Sandbox) {
    for i in 0..30 {
        write_old(
            sb,
            &format!("a/f{i:02}.txt"),
            format!("line {i}\n").repeat(i + 1).as_bytes(),
        );
    }
    write_old(sb, "b/deep/x.bin", &incompressible(300_000));
    write_old(sb, "name with spaces.txt", b"spaces\n");
    write_old(sb, "back\\slash.txt", b"backslash\n");
    write_old(sb, "gone.txt", b"will be deleted\n");
    write_old(sb, "becomes-dir", b"a file first\n");
    write_old(sb, "skip.log", b"excluded\n");
    std::fs::create_dir_all(sb.remote_on_host("proj/empty")).unwrap();
    sb.plant_symlink("proj/link", "a/f01.txt");
    write_old(sb, "tool.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(
        sb.remote_on_host("proj/tool.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

fn mapping(sb: &Sandbox, target: &Path) -> FileMapping {
    let mut m = dir_out(sb.remote("proj"), target);
    m.exclude = Some(vec!["*.log".into()]);
    m
}

fn sync(sb: &Sandbox, target: &Path, incremental: bool) -> SyncOutcome {
    let mut opts = sb.options();
    opts.incremental = incremental;
    sb.sync_out_with(&[op("out", vec![mapping(sb, target)])], &opts)
        .expect("sync-out")
}

/// What a full sync-out of the sandbox's tree lands now (into a fresh
/// directory each time).
fn full(sb: &Sandbox) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fresh = sb.host.join(format!("full-{n}"));
    sync(sb, &fresh, false);
    fresh
}

/// A sandbox seeded with [`seed`], synced out incrementally into a fresh
/// target until the next re-sync can keep (see
/// [`records_first_sync_out`]): the sandbox, the target and the first
/// sync's outcome.
fn recorded(u: Env) -> (Sandbox, std::path::PathBuf, SyncOutcome) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let target = sb.host.join("back");
    let first = sync(&sb, &target, true);
    if !records_first_sync_out(u) {
        sync(&sb, &target, true);
    }
    (sb, target, first)
}

fn resync_out_lands_what_a_full_sync_lands(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let target = sb.host.join("back");
    let first = sync(&sb, &target, true);
    assert_execs(first.execs, sync_out_execs(u, true));
    let total = first.operations[0].files_transferred;
    assert_same_tree(&full(&sb), &target);
    if !records_first_sync_out(u) {
        let recorded = sync(&sb, &target, true);
        assert_eq!(
            recorded.operations[0].files_transferred, total,
            "{recorded:?}"
        );
    }

    // Nothing changed: only what is always sent comes back.
    let same = sync(&sb, &target, true);
    assert_execs(same.execs, sync_out_execs(u, true));
    assert_same_tree(&full(&sb), &target);
    let sent_again = if keeps(u) { 2 } else { total };
    // Always sent: the backslash name and the link.
    assert_eq!(same.operations[0].files_transferred, sent_again, "{same:?}");

    // Changed (same size and other size), added, deleted, retyped and
    // re-moded in the sandbox; a target file edited on the host.
    let p = sb.remote_on_host("proj/a/f03.txt");
    let t = std::fs::metadata(&p).unwrap().modified().unwrap();
    std::fs::write(&p, b"LINE 3\nLINE 3\nLINE 3\nLINE 3\n").unwrap();
    set_mtime(&p, t + Duration::from_secs(7));
    std::fs::write(sb.remote_on_host("proj/a/f04.txt"), b"grown\n").unwrap();
    sb.write_remote("proj/a/new.txt", b"new\n");
    std::fs::remove_file(sb.remote_on_host("proj/gone.txt")).unwrap();
    std::fs::remove_file(sb.remote_on_host("proj/becomes-dir")).unwrap();
    sb.write_remote("proj/becomes-dir/inner.txt", b"now a dir\n");
    std::fs::set_permissions(
        sb.remote_on_host("proj/a/f05.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(target.join("a/f06.txt"), b"host edit\n").unwrap();
    let changed = sync(&sb, &target, true);
    assert_execs(changed.execs, sync_out_execs(u, true));
    assert_same_tree(&full(&sb), &target);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
    if keeps(u) {
        // f03-f06, new.txt and inner.txt, with the backslash name and link.
        assert_eq!(changed.operations[0].files_transferred, 8, "{changed:?}");
    }
}

/// An unchanged re-sync leaves the host target as it was: nothing linked
/// anew, swapped or unlinked (no ctime moves) and its record kept, so the
/// next one keeps as much. Every change of shape that leaves each file as
/// it was still lands as a full sync-out lands it: a sandbox directory's
/// mode, an empty directory added or removed, a symlink retargeted, and a
/// symlink, a FIFO and a directory added, or a directory's mode changed,
/// in the host target.
fn an_unchanged_target_is_left_untouched(u: Env) {
    if !keeps(u) {
        return;
    }
    let sb = Sandbox::new(u);
    for i in 0..5 {
        write_old(
            &sb,
            &format!("a/f{i}.txt"),
            format!("line {i}\n").as_bytes(),
        );
    }
    write_old(&sb, "b/deep/x.bin", &incompressible(40_000));
    std::fs::create_dir_all(sb.remote_on_host("proj/empty")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("proj/empty"));
    sb.plant_symlink("proj/link", "a/f1.txt");
    settle();
    let target = sb.host.join("back");
    let m = dir_out(sb.remote("proj"), &target);
    let out = |sb: &Sandbox| {
        let mut opts = sb.options();
        opts.incremental = true;
        sb.sync_out_with(&[op("out", vec![m.clone()])], &opts)
            .expect("sync-out")
    };
    let full = |sb: &Sandbox| {
        let fresh = sb.host.join("full");
        let _ = std::fs::remove_dir_all(&fresh);
        let mut opts = sb.options();
        opts.incremental = false;
        sb.sync_out_with(
            &[op("full", vec![dir_out(sb.remote("proj"), &fresh)])],
            &opts,
        )
        .expect("full sync-out");
        assert_eq!(shape(&target), shape(&fresh));
    };
    // The target itself is not swapped; its staging dir comes and goes
    // inside it, which moves its own ctime.
    let ctimes = || {
        let c = |rel: &str| {
            let m = std::fs::symlink_metadata(target.join(rel)).unwrap();
            (m.ino(), m.ctime(), m.ctime_nsec())
        };
        let top = std::fs::metadata(&target).unwrap().ino();
        (
            top,
            ["a", "b/deep", "a/f1.txt", "b/deep/x.bin", "link"].map(c),
        )
    };
    // The first sync-out into an empty local target records on the next.
    for _ in 0..2 {
        out(&sb);
    }
    let before = ctimes();
    let again = out(&sb);
    // The link is always sent (it is no file); nothing else.
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(ctimes(), before, "an unchanged re-sync touched its target");
    full(&sb);

    let edits: [Edit<'_>; 6] = [
        ("a sandbox directory's mode", &|sb| {
            let a = sb.remote_on_host("proj/a");
            std::fs::set_permissions(a, std::fs::Permissions::from_mode(0o700)).unwrap();
        }),
        ("an empty directory added", &|sb| {
            let d = sb.remote_on_host("proj/b/new");
            std::fs::create_dir(&d).unwrap();
            sb.give_to_sandbox(&d);
        }),
        ("an empty directory removed", &|sb| {
            std::fs::remove_dir(sb.remote_on_host("proj/empty")).unwrap();
        }),
        ("a symlink retargeted", &|sb| {
            std::fs::remove_file(sb.remote_on_host("proj/link")).unwrap();
            sb.plant_symlink("proj/link", "a/f2.txt");
        }),
        ("a symlink, a FIFO and a directory the host added", &|sb| {
            let back = sb.host.join("back");
            symlink("f1.txt", back.join("a/extra")).unwrap();
            rustix::fs::mknodat(
                rustix::fs::CWD,
                back.join("b/fifo"),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
            std::fs::create_dir(back.join("stray")).unwrap();
        }),
        ("a host directory's mode", &|sb| {
            let d = sb.host.join("back/b");
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }),
    ];
    for (what, edit) in edits {
        edit(&sb);
        out(&sb);
        assert_eq!(
            shape(&sb.remote_on_host("proj")),
            shape(&target),
            "after {what}"
        );
        full(&sb);
    }
    out(&sb);
    let before = ctimes();
    let again = out(&sb);
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(ctimes(), before, "an unchanged re-sync touched its target");
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// An unchanged re-sync moves no file but those always sent, and the kept
/// files are the old target's, linked (no byte copied).
fn unchanged_resync_out_moves_almost_nothing(u: Env) {
    if !keeps(u) {
        return;
    }
    let (sb, target, first) = recorded(u);
    let before = std::fs::metadata(target.join("b/deep/x.bin"))
        .unwrap()
        .ino();
    let again = sync(&sb, &target, true);
    assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    assert!(
        again.operations[0].bytes_transferred * 10 < first.operations[0].bytes_transferred,
        "{again:?} vs {first:?}"
    );
    assert_eq!(
        std::fs::metadata(target.join("b/deep/x.bin"))
            .unwrap()
            .ino(),
        before
    );
    assert_same_tree(&full(&sb), &target);
}

/// A sandbox file rewritten within the second it was synced out, at the
/// same size and mtime, landed "racy" and comes back again.
fn a_racy_file_comes_back_again(u: Env) {
    let sb = Sandbox::new(u);
    let p = sb.write_remote("proj/hot.txt", b"version A\n");
    let t = std::fs::metadata(&p).unwrap().modified().unwrap();
    let target = sb.host.join("back");
    sync(&sb, &target, true);
    std::fs::write(&p, b"version B\n").unwrap();
    set_mtime(&p, t);
    let again = sync(&sb, &target, true);
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(
        std::fs::read(target.join("hot.txt")).unwrap(),
        b"version B\n"
    );
}

/// The host walk never follows a symlink: a target whose directory was
/// swapped for a link out of it keeps nothing through the link, and the
/// new tree has the sandbox's files, not the host's the link reaches.
fn a_listed_path_through_a_host_symlink_is_never_kept(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let target = sb.host.join("back");
    sync(&sb, &target, true);
    // Outside the target: a directory with a file that matches the
    // sandbox's b/deep/x.bin in size, mtime and mode, but not in bytes.
    let outside = sb.host.join("outside/deep");
    std::fs::create_dir_all(&outside).unwrap();
    let meta = std::fs::metadata(target.join("b/deep/x.bin")).unwrap();
    std::fs::write(outside.join("x.bin"), vec![b'!'; meta.len() as usize]).unwrap();
    std::fs::set_permissions(outside.join("x.bin"), meta.permissions()).unwrap();
    set_mtime(&outside.join("x.bin"), meta.modified().unwrap());
    std::fs::remove_dir_all(target.join("b")).unwrap();
    symlink(sb.host.join("outside"), target.join("b")).unwrap();
    sync(&sb, &target, true);
    assert!(std::fs::symlink_metadata(target.join("b"))
        .unwrap()
        .is_dir());
    assert_eq!(
        std::fs::read(target.join("b/deep/x.bin")).unwrap(),
        std::fs::read(sb.remote_on_host("proj/b/deep/x.bin")).unwrap()
    );
    assert_eq!(std::fs::read(outside.join("x.bin")).unwrap()[0], b'!');
    assert_same_tree(&full(&sb), &target);
}

/// Files of the target the sandbox does not have go, whatever they are
/// called: nothing of the host's survives that the sandbox did not list.
fn host_only_files_do_not_survive(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    let target = sb.host.join("back");
    sync(&sb, &target, true);
    sb.write_host("back/host-secret.txt", b"not the sandbox's\n");
    sb.write_host("back/a/extra.txt", b"not the sandbox's\n");
    sync(&sb, &target, true);
    assert!(!target.join("host-secret.txt").exists());
    assert!(!target.join("a/extra.txt").exists());
    assert_same_tree(&full(&sb), &target);
}

/// A file mapping whose host target already holds the sandbox's file
/// (16 KiB and more) is left as it is; a changed source comes back, and a
/// mapping mode the target lacks sends it again.
fn a_file_mapping_resync_out_keeps_its_target(u: Env) {
    let sb = Sandbox::new(u);
    write_old(&sb, "big.bin", &incompressible(100_000));
    let target = sb.host.join("back/big.bin");
    let sync_file = |mode: Option<u32>| {
        let mut m = file_out(sb.remote("proj/big.bin"), &target);
        m.mode = mode;
        let mut opts = sb.options();
        opts.incremental = true;
        sb.sync_out_with(&[op("out", vec![m])], &opts)
            .expect("sync-out")
    };
    // A file mapping is listed once its target holds a big file: the
    // second sync-out records what it landed.
    sync_file(None);
    sync_file(None);
    let before = std::fs::metadata(&target).unwrap().ino();
    let again = sync_file(None);
    assert_execs(again.execs, sync_out_execs(u, true));
    if keeps(u) {
        assert_eq!(again.operations[0].files_transferred, 0, "{again:?}");
        assert_eq!(std::fs::metadata(&target).unwrap().ino(), before);
    } else {
        assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    }
    let moded = sync_file(Some(0o600));
    assert_eq!(moded.operations[0].files_transferred, 1, "{moded:?}");
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let p = sb.remote_on_host("proj/big.bin");
    let mut changed = std::fs::read(&p).unwrap();
    changed[7] ^= 0xff;
    std::fs::write(&p, &changed).unwrap();
    set_mtime(&p, SystemTime::now() - Duration::from_secs(1800));
    let again = sync_file(Some(0o600));
    assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    assert_eq!(std::fs::read(&target).unwrap(), changed);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Issue 23, 1, sync-out: a report the sandbox rewrote at the same size
/// with a fixed mtime (npm's, a reproducible build's) comes back, in a
/// directory and as a file mapping.
fn fixed_mtimes_in_the_sandbox_never_hide_new_bytes(u: Env) {
    let sb = Sandbox::new(u);
    let fixed = std::time::UNIX_EPOCH + Duration::from_secs(499_162_500);
    let report = sb.write_remote("proj/report.json", br#"{"passed":10}"#);
    let big = sb.write_remote("big/out.bin", &incompressible(100_000));
    for p in [&report, &big] {
        set_mtime(p, fixed);
    }
    settle();
    let target = sb.host.join("back");
    let ops = [op(
        "out",
        vec![
            dir_out(sb.remote("proj"), &target),
            file_out(sb.remote("big/out.bin"), sb.host.join("big/out.bin")),
        ],
    )];
    let mut opts = sb.options();
    opts.incremental = true;
    for _ in 0..3 {
        sb.sync_out_with(&ops, &opts).expect("sync-out");
    }
    std::fs::write(&report, br#"{"passed":11}"#).unwrap();
    set_mtime(&report, fixed);
    let mut changed = std::fs::read(&big).unwrap();
    changed[50_000] ^= 1;
    std::fs::write(&big, &changed).unwrap();
    set_mtime(&big, fixed);
    sb.sync_out_with(&ops, &opts).expect("again");
    assert_eq!(
        std::fs::read(target.join("report.json")).unwrap(),
        br#"{"passed":11}"#
    );
    assert_eq!(std::fs::read(sb.host.join("big/out.bin")).unwrap(), changed);
}

/// A host target file edited on the host at the same size, its mtime put
/// back, is replaced by the sandbox's again (a full sync-out would).
fn a_host_edit_that_hides_is_replaced(u: Env) {
    let sb = Sandbox::new(u);
    seed(&sb);
    settle();
    let target = sb.host.join("back");
    for _ in 0..2 {
        sync(&sb, &target, true);
    }
    let p = target.join("a/f07.txt");
    let m = std::fs::metadata(&p).unwrap();
    std::fs::write(&p, vec![b'!'; m.len() as usize]).unwrap();
    set_mtime(&p, m.modified().unwrap());
    sync(&sb, &target, true);
    assert_eq!(
        std::fs::read(&p).unwrap(),
        std::fs::read(sb.remote_on_host("proj/a/f07.txt")).unwrap()
    );
    assert_same_tree(&full(&sb), &target);
}

/// A listing too big to send plain over a link (over 16 KiB) goes gzipped
/// where the sandbox has gzip, and keeps as well; a re-sync lands what a
/// full sync lands.
fn a_big_listing_keeps_as_well(u: Env) {
    let sb = Sandbox::new(u);
    for i in 0..600 {
        sb.write_remote(
            &format!("proj/d{}/file-with-a-longish-name-{i:04}.txt", i % 7),
            format!("{i}\n").as_bytes(),
        );
    }
    settle();
    let target = sb.host.join("back");
    for _ in 0..2 {
        sync(&sb, &target, true);
    }
    std::fs::write(
        sb.remote_on_host("proj/d3/file-with-a-longish-name-0003.txt"),
        b"changed\n",
    )
    .unwrap();
    let again = sync(&sb, &target, true);
    if keeps(u) {
        assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
    }
    assert_same_tree(&full(&sb), &target);
}

/// A directory the sandbox cannot read (a pod's uid, mode 000): a full
/// sync-out fails (its tar cannot enter it), and so must a re-sync that
/// keeps other files, leaving the target as it was. A walk that skipped it
/// would send the directory empty and delete what the host holds in it.
fn an_unreadable_directory_fails_the_resync_as_it_fails_a_full_sync(u: Env) {
    let (sb, target, first) = recorded(u);
    // A re-sync keeps files here (on BusyBox its archive names its members).
    let again = sync(&sb, &target, true);
    if keeps(u) {
        assert!(
            again.operations[0].files_transferred < first.operations[0].files_transferred,
            "{again:?}"
        );
    }
    let before = snapshot(&target);
    let locked = sb.remote_on_host("proj/a");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let attempt = |sb: &Sandbox, to: &Path, incremental: bool| {
        let mut opts = sb.options();
        opts.incremental = incremental;
        sb.sync_out_with(&[op("out", vec![mapping(sb, to)])], &opts)
    };
    let fresh = sb.host.join("full");
    let full = attempt(&sb, &fresh, false);
    let again = attempt(&sb, &target, true);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    match (full, again) {
        (Ok(_), Ok(_)) => assert_same_tree(&fresh, &target),
        (Err(_), Err(e)) => assert_eq!(snapshot(&target), before, "{e:?}"),
        (full, again) => panic!("full sync {full:?}, re-sync {again:?}"),
    }
}

/// Issue 48: a killed sync-out's staging (a reserved name at the target's
/// top, full of sandbox bytes) does not make an incremental re-sync judge
/// the target unchanged: the target is replaced whole, and the leftover
/// goes with the old tree.
fn a_killed_syncs_staging_goes_with_the_next_resync(u: Env) {
    let (sb, target, _) = recorded(u);
    let stale = target.join(".paperclip-upload-00000000deadbeef");
    std::fs::create_dir_all(stale.join("a")).unwrap();
    std::fs::write(stale.join("a/f01.txt"), vec![b'x'; 526_848]).unwrap();
    sync(&sb, &target, true);
    assert!(!stale.exists(), "the stale staging survived");
    assert_same_tree(&full(&sb), &target);
}

/// Issue 48: a name that is not UTF-8 in the host target (at the top,
/// below, or as a link target) fails no incremental sync-out: the mapping
/// keeps nothing and lands what a full sync lands.
fn a_name_that_is_not_utf8_in_the_target_is_replaced(u: Env) {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"odd-\xff\xfe");
    for at in [target_top as fn(&Path) -> PathBuf, target_sub, target_link] {
        let (sb, target, _) = recorded(u);
        at(&target.join(odd));
        sync(&sb, &target, true);
        assert_same_tree(&full(&sb), &target);
    }
}

fn target_top(p: &Path) -> PathBuf {
    std::fs::write(p, b"host only").unwrap();
    p.to_path_buf()
}

fn target_sub(p: &Path) -> PathBuf {
    let below = p.parent().unwrap().join("a").join(p.file_name().unwrap());
    std::fs::write(&below, b"host only").unwrap();
    below
}

fn target_link(p: &Path) -> PathBuf {
    let l = p.parent().unwrap().join("link-to-odd");
    symlink(p.file_name().unwrap(), &l).unwrap();
    l
}

for_each_userland!(
    a_sandbox_file_written_through_a_mapping_is_never_stale,
    a_killed_syncs_staging_goes_with_the_next_resync,
    a_name_that_is_not_utf8_in_the_target_is_replaced,
    an_unchanged_target_is_left_untouched,
    a_big_listing_keeps_as_well,
    fixed_mtimes_in_the_sandbox_never_hide_new_bytes,
    a_host_edit_that_hides_is_replaced,
    a_file_mapping_resync_out_keeps_its_target,
    resync_out_lands_what_a_full_sync_lands,
    unchanged_resync_out_moves_almost_nothing,
    a_racy_file_comes_back_again,
    a_listed_path_through_a_host_symlink_is_never_kept,
    host_only_files_do_not_survive,
    an_unreadable_directory_fails_the_resync_as_it_fails_a_full_sync,
);

/// Issue 47: a sandbox file a writer keeps mapped (a database the agent
/// started). Its second write to a page it already dirtied moves no
/// ctime; the sandbox digests the files the last sync found racy, and
/// every re-sync lands what the file holds.
fn a_sandbox_file_written_through_a_mapping_is_never_stale(u: Env) {
    let sb = Sandbox::new(u);
    let f = sb.write_remote("proj/db.bin", &vec![b'a'; 8192]);
    sb.write_remote("proj/other.txt", b"unchanged\n");
    let target = sb.host.join("back");
    let mut w = MappedWriter::open(&f);
    sync(&sb, &target, true);
    sync(&sb, &target, true);
    w.write(0, b"ONE!");
    // Past the clock tick a plain rewrite needs to show.
    settle();
    sync(&sb, &target, true);
    assert_eq!(
        std::fs::read(target.join("db.bin")).unwrap()[..8],
        *b"ONE!aaaa"
    );
    // The same page again: no stamp.
    let before = std::fs::metadata(&f).unwrap();
    w.write(4, b"TWO!");
    assert_eq!(
        std::fs::metadata(&f).unwrap().ctime_nsec(),
        before.ctime_nsec()
    );
    let again = sync(&sb, &target, true);
    assert_eq!(
        std::fs::read(target.join("db.bin")).unwrap()[..8],
        *b"ONE!TWO!",
        "stale on the host"
    );
    assert_same_tree(&full(&sb), &target);
    if keeps(u) && keeps_unchanged(u) {
        // What did not change is still kept, by its content.
        assert_eq!(again.operations[0].files_transferred, 1, "{again:?}");
        let same = sync(&sb, &target, true);
        assert_eq!(same.operations[0].files_transferred, 0, "{same:?}");
    }
}
