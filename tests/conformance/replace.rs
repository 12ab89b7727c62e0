//! Destroy-then-replace is all or nothing (issue 11.3, 11.7, 11.8): the
//! landed target is exactly the validated tree, nothing old survives, a
//! failure leaves the old target exactly as it was, and the mapping's mode
//! is in place before any new entry is visible.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sandbox_sync_tests::*;

/// Every symlink under `root` resolves (lexically, from its own directory)
/// inside `root`.
fn links_stay_inside(root: &Path) {
    walk(root, &mut |p| {
        if let Ok(t) = std::fs::read_link(p) {
            let mut depth = p
                .parent()
                .unwrap()
                .strip_prefix(root)
                .unwrap()
                .components()
                .count() as i64;
            for c in t.components() {
                match c {
                    std::path::Component::ParentDir => depth -= 1,
                    std::path::Component::Normal(_) => depth += 1,
                    std::path::Component::RootDir => depth = -1000,
                    _ => {}
                }
                assert!(
                    depth >= 0,
                    "{} -> {} leaves the target",
                    p.display(),
                    t.display()
                );
            }
        }
    });
}

/// Issue 11.3: a sandbox link named like the scratch prefix once survived
/// promotion; after a later sync turned its ancestor link into a real
/// directory it resolved outside the target.
fn reserved_names_never_land_and_nothing_old_survives(u: Env) {
    let sb = Sandbox::new(u);
    std::fs::create_dir_all(sb.remote_on_host("src/sub/deeper")).unwrap();
    for d in ["src", "src/sub", "src/sub/deeper"] {
        sb.give_to_sandbox(&sb.remote_on_host(d));
    }
    sb.plant_symlink("src/x", "sub/deeper");
    sb.plant_symlink("src/.paperclip-upload-k", "x/../..");
    sb.write_remote("src/keep", b"data");
    let target = sb.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    // A stale scratch link on the host side must not survive either.
    std::os::unix::fs::symlink("/", target.join(".paperclip-upload-stale")).unwrap();
    let ops = [op("o", vec![dir_out(sb.remote("src"), &target)])];
    sb.sync_out(&ops).expect("first sync");
    let landed = snapshot(&target);
    assert!(
        landed.keys().all(|k| !k.contains(".paperclip-upload")),
        "{landed:?}"
    );
    links_stay_inside(&target);
    // The ancestor link becomes a real directory.
    std::fs::remove_file(sb.remote_on_host("src/x")).unwrap();
    std::fs::create_dir(sb.remote_on_host("src/x")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("src/x"));
    sb.sync_out(&ops).expect("second sync");
    assert!(!target.join(".paperclip-upload-k").exists());
    assert!(std::fs::symlink_metadata(target.join(".paperclip-upload-k")).is_err());
    links_stay_inside(&target);
    assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"data");
}

/// A reserved name deeper in the tree is refused outright, and the target
/// keeps its old contents.
fn nested_reserved_name_is_refused(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("src/d/.paperclip-upload-x", b"planted");
    let target = sb.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("old"), b"old").unwrap();
    let before = snapshot(&target);
    let err = sb
        .sync_out(&[op("o", vec![dir_out(sb.remote("src"), &target)])])
        .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    assert_eq!(snapshot(&target), before);
}

/// Issue 11.8: a directory mapping's mode is in place before any new entry
/// is visible (a 0700 target was once seen 0755 holding promoted files).
fn mode_is_in_place_before_contents_are_visible(u: Env) {
    let sb = Sandbox::new(u);
    for i in 0..1500 {
        sb.write_remote(&format!("src/f{i:04}"), b"secret");
    }
    let target = sb.host.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (done, target) = (Arc::clone(&done), target.clone());
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !done.load(Ordering::SeqCst) {
                // One handle for both looks: the mode and the entries of
                // the same directory, whatever the target path names now.
                let Ok(handle) = std::fs::File::open(&target) else {
                    continue;
                };
                let Ok(meta) = handle.metadata() else {
                    continue;
                };
                let fd = std::os::fd::AsRawFd::as_raw_fd(&handle);
                let visible = std::fs::read_dir(format!("/proc/self/fd/{fd}"))
                    .map(|d| {
                        d.flatten()
                            .any(|e| e.file_name().to_string_lossy().starts_with('f'))
                    })
                    .unwrap_or(false);
                let mode = meta.permissions().mode() & 0o777;
                if visible && mode != 0o700 {
                    bad.push(mode);
                }
            }
            bad
        })
    };
    let mut m = dir_out(sb.remote("src"), &target);
    m.mode = Some(0o700);
    let out = sb.sync_out(&[op("o", vec![m])]);
    done.store(true, Ordering::SeqCst);
    let bad = watcher.join().unwrap();
    out.expect("sync-out");
    assert_eq!(mode(&target), 0o700);
    assert!(
        bad.is_empty(),
        "new files were visible under mode(s) {bad:?}"
    );
}

/// Sync-in onto the remote dir itself is all or nothing too: an old entry
/// that cannot be moved (a mount point) fails the sync with every old entry
/// still in place (the old code removed entries until it hit that one).
fn remote_dir_replacement_is_all_or_nothing(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("a", b"old a");
    sb.write_remote("z", b"old z");
    let mnt = sb.remote_on_host("mnt");
    let _mounted = Tmpfs::mount(&mnt, "mode=777");
    std::fs::write(mnt.join("x"), b"in the mount").unwrap();
    sb.write_host("new/b", b"new");
    let before = snapshot(&sb.remote_on_host(""));
    let err = sb
        .sync_in(&[op("o", vec![dir(sb.host.join("new"), sb.remote(""))])])
        .unwrap_err();
    assert!(
        matches!(err.error.kind, ErrorKind::CommandFailed | ErrorKind::Io),
        "{}",
        err.error
    );
    let after = snapshot(&sb.remote_on_host(""));
    assert_eq!(after, before, "{}", err.error);
}

#[test]
fn remote_dir_replacement_is_all_or_nothing_gnu() {
    remote_dir_replacement_is_all_or_nothing(Env {
        userland: Userland::Gnu,
        transport: Transport::Local,
    });
}

#[test]
fn remote_dir_replacement_is_all_or_nothing_busybox() {
    remote_dir_replacement_is_all_or_nothing(Env {
        userland: Userland::BusyBox,
        transport: Transport::Local,
    });
}

/// Sync-in lands a mapping's staged entry by renaming it onto its target:
/// straight from the scratch dir where the target's parent is the remote
/// dir itself (the scratch dir is its entry: one filesystem), through a
/// pending name in the parent elsewhere, a mount point below the remote
/// dir too (a rename there would fail, and mv would copy in view). Both
/// replace what was there with exactly the new file or tree, its mode set,
/// and leave no pending, old or scratch name behind.
fn targets_land_beside_and_across_the_scratch_filesystem(u: Env) {
    let sb = Sandbox::new(u);
    let mnt = sb.remote_on_host("mnt");
    let _mounted = Tmpfs::mount(&mnt, "mode=777");
    for at in ["", "mnt/"] {
        sb.write_remote(&format!("{at}f"), b"old file");
        sb.write_remote(&format!("{at}d/old"), b"old tree");
        sb.write_remote(&format!("{at}d/sub/x"), b"old x");
    }
    sb.write_host("src/f", b"new file");
    sb.write_host("src/tree/a", b"new a");
    sb.write_host("src/tree/sub/b", b"new b");
    let mut f = file(sb.host.join("src/f"), sb.remote("f"));
    f.mode = Some(0o640);
    let mut fm = file(sb.host.join("src/f"), sb.remote("mnt/f"));
    fm.mode = Some(0o640);
    sb.sync_in(&[op(
        "o",
        vec![
            f,
            dir(sb.host.join("src/tree"), sb.remote("d")),
            fm,
            dir(sb.host.join("src/tree"), sb.remote("mnt/d")),
        ],
    )])
    .unwrap();
    let want = snapshot(&sb.host.join("src/tree"));
    for at in ["", "mnt/"] {
        let f = sb.remote_on_host(&format!("{at}f"));
        assert_eq!(std::fs::read(&f).unwrap(), b"new file", "{at}f");
        assert_eq!(mode(&f), 0o640, "{at}f");
        assert_eq!(
            snapshot(&sb.remote_on_host(&format!("{at}d"))),
            want,
            "{at}d"
        );
    }
    let mut names: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "f"], "only the targets in the mount");
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

#[test]
fn targets_land_beside_and_across_the_scratch_filesystem_gnu() {
    targets_land_beside_and_across_the_scratch_filesystem(Env {
        userland: Userland::Gnu,
        transport: Transport::Local,
    });
}

#[test]
fn targets_land_beside_and_across_the_scratch_filesystem_busybox() {
    targets_land_beside_and_across_the_scratch_filesystem(Env {
        userland: Userland::BusyBox,
        transport: Transport::Local,
    });
}

sandbox_sync_tests::for_each_userland!(
    reserved_names_never_land_and_nothing_old_survives,
    nested_reserved_name_is_refused,
    mode_is_in_place_before_contents_are_visible,
);

/// Issue 11.7: a replacement that fails leaves the previous target exactly
/// as it was. A compromised `tar` sends a valid tree plus a member whose
/// name collides with a scratch directory the old promotion kept; the old
/// code removed the old files, then failed renaming, leaving half a target.
#[test]
fn a_failed_replacement_leaves_the_old_target() {
    use sandbox_sync_tests::hostile;
    let sb = Sandbox::new(GNU_LOCAL);
    let target = sb.host.join("target");
    std::fs::create_dir_all(target.join(".paperclip-upload-z")).unwrap();
    std::fs::write(target.join(".paperclip-upload-z/x"), b"kept").unwrap();
    std::fs::write(target.join("old1"), b"1").unwrap();
    std::fs::write(target.join("old2"), b"2").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o750)).unwrap();
    let before = snapshot(&target);
    let archive = hostile::end(
        [
            hostile::file(b"new", b"n"),
            hostile::dir(b".paperclip-upload-z", 0o755),
            hostile::file(b".paperclip-upload-z/y", b"collides"),
        ]
        .concat(),
    );
    let stream = hostile::framed_one(&archive);
    let backend = Arc::new(sandbox_sync_host::exec::scripted::ScriptedBackend::new(
        stream, 0,
    ));
    let tar_stream = block_on(Runtime::embedded()).unwrap();
    let err = block_on(tar_stream.sync_out(
        &[op("o", vec![dir_out("/ws/d", &target)])],
        &sandbox_sync_tests::sync_options("/ws"),
        backend,
    ))
    .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    assert_eq!(snapshot(&target), before, "the old target changed");
    assert_eq!(mode(&target), 0o750);
}

/// A target that is a mount point cannot be renamed: its contents are
/// swapped in place, still ending exactly as the validated tree.
#[test]
fn a_mount_point_target_is_replaced_in_place() {
    let sb = Sandbox::new(GNU_LOCAL);
    sb.write_remote("src/a", b"a");
    sb.write_remote("src/d/b", b"b");
    let target = sb.host.join("mnt");
    let _mounted = Tmpfs::mount(&target, "");
    std::fs::write(target.join("old"), b"old").unwrap();
    let mut m = dir_out(sb.remote("src"), &target);
    m.mode = Some(0o711);
    sb.sync_out(&[op("o", vec![m])])
        .expect("sync-out into a mount point");
    let landed = snapshot(&target);
    assert_eq!(
        landed.keys().cloned().collect::<Vec<_>>(),
        ["a", "d", "d/b"],
        "{landed:?}"
    );
    assert_eq!(mode(&target), 0o711);
}
