use std::os::unix::fs::symlink;

use sandbox_sync_tests::*;

/// Seed 3: all file mappings of an operation in one exec, staged then moved,
/// the secret at 0600, no scratch left, counts reported.
fn file_mappings_single_exec_secret_mode(u: Env) {
    let sb = Sandbox::new(u);
    let a = sb.write_host("src/a.txt", b"alpha\n");
    let s = sb.write_host("src/secret", b"token-123\n");
    let mut secret = file(&s, sb.remote("conf/creds/secret"));
    secret.mode = Some(0o600);
    let out = sb
        .sync_in(&[op("op-1", vec![file(&a, sb.remote("a.txt")), secret])])
        .expect("sync-in");
    assert_execs(out.execs, 1);
    assert_eq!(
        out.operations,
        vec![OperationResult {
            operation_id: "op-1".into(),
            files_transferred: 2,
            bytes_transferred: 16,
            ..Default::default()
        }]
    );
    assert_eq!(
        std::fs::read(sb.remote_on_host("a.txt")).unwrap(),
        b"alpha\n"
    );
    let secret_path = sb.remote_on_host("conf/creds/secret");
    assert_eq!(std::fs::read(&secret_path).unwrap(), b"token-123\n");
    assert_eq!(mode(&secret_path), 0o600);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// File mappings replace an existing target atomically and keep the source's mode.
fn file_mapping_replaces_existing_target(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("bin/tool", b"old");
    let src = sb.write_host("tool", b"#!/bin/sh\necho new\n");
    std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sb.sync_in(&[op("o", vec![file(&src, sb.remote("bin/tool"))])])
        .expect("sync-in");
    let t = sb.remote_on_host("bin/tool");
    assert_eq!(std::fs::read(&t).unwrap(), b"#!/bin/sh\necho new\n");
    assert_eq!(mode(&t), 0o755);
}

/// Seed 4: a directory mapping honours exclude and followSymlinks=true dereferences.
fn directory_mapping_exclude_and_follow(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_host("ws/keep.txt", b"keep");
    sb.write_host("ws/debug.log", b"drop");
    sb.write_host("ws/sub/deep.log", b"drop");
    sb.write_host("ws/node_modules/x/index.js", b"drop");
    sb.write_host("ws/real.txt", b"real bytes");
    symlink("real.txt", sb.host.join("ws/link.txt")).unwrap();
    let mut m = dir(sb.host.join("ws"), sb.remote("proj"));
    m.exclude = Some(vec!["*.log".into(), "node_modules".into()]);
    m.follow_symlinks = Some(true);
    let out = sb.sync_in(&[op("o", vec![m])]).expect("sync-in");
    assert_execs(out.execs, 1);
    let p = sb.remote_on_host("proj");
    assert!(p.join("keep.txt").exists());
    assert!(!p.join("debug.log").exists());
    assert!(!p.join("sub/deep.log").exists());
    assert!(p.join("sub").is_dir(), "the directory itself stays");
    assert!(!p.join("node_modules").exists());
    let l = std::fs::symlink_metadata(p.join("link.txt")).unwrap();
    assert!(l.file_type().is_file(), "followSymlinks dereferences");
    assert_eq!(std::fs::read(p.join("link.txt")).unwrap(), b"real bytes");
    assert_eq!(out.operations[0].files_transferred, 3);
}

/// Seed 5: symlinks stay links when followSymlinks is falsy; modes, empty
/// directories and odd names survive.
fn directory_mapping_preserves_links_modes_and_names(u: Env) {
    let sb = Sandbox::new(u);
    let names = [
        "a b",
        "it's",
        "$(id)",
        "`id`",
        "-rf",
        "{a,b}",
        "ünïcødé",
        " lead",
    ];
    for n in names {
        sb.write_host(&format!("ws/{n}"), n.as_bytes());
    }
    sb.write_host("ws/bin/run.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(
        sb.host.join("ws/bin/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    sb.write_host("ws/private/key", b"k");
    std::fs::set_permissions(
        sb.host.join("ws/private/key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(
        sb.host.join("ws/private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::create_dir_all(sb.host.join("ws/empty/nested")).unwrap();
    symlink("bin/run.sh", sb.host.join("ws/run")).unwrap();
    symlink("/etc/hostname", sb.host.join("ws/abs-link")).unwrap();
    sb.sync_in(&[op("o", vec![dir(sb.host.join("ws"), sb.remote("proj"))])])
        .expect("sync-in");
    let p = sb.remote_on_host("proj");
    for n in names {
        assert_eq!(std::fs::read(p.join(n)).unwrap(), n.as_bytes(), "{n}");
    }
    assert_eq!(
        std::fs::read_link(p.join("run")).unwrap().to_str(),
        Some("bin/run.sh")
    );
    assert_eq!(
        std::fs::read_link(p.join("abs-link")).unwrap().to_str(),
        Some("/etc/hostname")
    );
    assert_eq!(mode(&p.join("bin/run.sh")), 0o750);
    assert_eq!(mode(&p.join("private/key")), 0o600);
    assert_eq!(mode(&p.join("private")), 0o700);
    assert!(p.join("empty/nested").is_dir());
}

/// Directory mappings are destroy-then-replace: stale files disappear.
fn directory_mapping_replaces_target(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("proj/stale.txt", b"stale");
    sb.write_remote("proj/keep/old.txt", b"old");
    sb.write_host("ws/new.txt", b"new");
    sb.sync_in(&[op("o", vec![dir(sb.host.join("ws"), sb.remote("proj"))])])
        .expect("sync-in");
    let p = sb.remote_on_host("proj");
    assert!(p.join("new.txt").exists());
    assert!(!p.join("stale.txt").exists());
    assert!(!p.join("keep").exists());
    assert!(sb.scratch_left().is_empty());
}

/// Seed 2 (directory form): the remote dir itself may be the target; its
/// contents are replaced in place.
fn directory_mapping_onto_remote_dir(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("old.txt", b"old");
    sb.write_host("ws/a/b.txt", b"b");
    let out = sb
        .sync_in(&[op("o", vec![dir(sb.host.join("ws"), sb.remote(""))])])
        .expect("sync-in");
    assert_execs(out.execs, 1);
    assert!(sb.remote_on_host("a/b.txt").exists());
    assert!(!sb.remote_on_host("old.txt").exists());
    assert!(sb.scratch_left().is_empty());
}

/// Seed 9: a 2 MiB payload streams through one exec, byte-exact.
fn streams_large_payload(u: Env) {
    let sb = Sandbox::new(u);
    let data: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let src = sb.write_host("big.bin", &data);
    let out = sb
        .sync_in(&[op("o", vec![file(&src, sb.remote("big.bin"))])])
        .expect("sync-in");
    assert_execs(out.execs, big_sync_in_execs(u, sb.options().incremental));
    assert_eq!(out.operations[0].bytes_transferred, data.len() as u64);
    assert!(std::fs::read(sb.remote_on_host("big.bin")).unwrap() == data);
}

/// One exec per sync call whatever the number of operations; operations
/// apply in order and each reports its own counts.
fn many_operations_one_exec(u: Env) {
    let sb = Sandbox::new(u);
    let mut ops = Vec::new();
    for i in 0..20 {
        let s = sb.write_host(&format!("f{i}"), format!("{i}").as_bytes());
        sb.write_host(&format!("d{i}/x"), b"x");
        ops.push(op(
            &format!("op-{i}"),
            vec![
                file(&s, sb.remote(&format!("files/f{i}"))),
                dir(
                    sb.host.join(format!("d{i}")),
                    sb.remote(&format!("dirs/d{i}")),
                ),
            ],
        ));
    }
    // A later operation overwrites an earlier one's file: order matters.
    let last = sb.write_host("last", b"last");
    ops.push(op("op-last", vec![file(&last, sb.remote("files/f0"))]));
    let out = sb.sync_in(&ops).expect("sync-in");
    assert_execs(out.execs, 1);
    assert_eq!(out.operations.len(), 21);
    assert_eq!(out.operations[3].operation_id, "op-3");
    assert_eq!(out.operations[3].files_transferred, 2);
    assert_eq!(
        std::fs::read(sb.remote_on_host("files/f0")).unwrap(),
        b"last"
    );
    assert_eq!(std::fs::read(sb.remote_on_host("files/f7")).unwrap(), b"7");
    assert!(sb.remote_on_host("dirs/d19/x").exists());
}

/// An operation with no mappings and no commands still succeeds.
fn empty_operations(u: Env) {
    let sb = Sandbox::new(u);
    let out = sb.sync_in(&[op("empty", vec![])]).expect("sync-in");
    assert_eq!(out.operations[0].files_transferred, 0);
    let out = sb.sync_in(&[]).expect("sync-in");
    assert!(out.operations.is_empty());
}

/// Empty source directories are valid and produce an empty target.
fn empty_directory_mapping(u: Env) {
    let sb = Sandbox::new(u);
    std::fs::create_dir_all(sb.host.join("empty")).unwrap();
    let out = sb
        .sync_in(&[op("o", vec![dir(sb.host.join("empty"), sb.remote("e"))])])
        .expect("sync-in");
    assert!(sb.remote_on_host("e").is_dir());
    assert_eq!(
        std::fs::read_dir(sb.remote_on_host("e")).unwrap().count(),
        0
    );
    assert_eq!(out.operations[0].files_transferred, 0);
}

sandbox_sync_tests::for_each_userland!(
    file_mappings_single_exec_secret_mode,
    file_mapping_replaces_existing_target,
    directory_mapping_exclude_and_follow,
    directory_mapping_preserves_links_modes_and_names,
    directory_mapping_replaces_target,
    directory_mapping_onto_remote_dir,
    streams_large_payload,
    many_operations_one_exec,
    empty_operations,
    empty_directory_mapping,
);

/// GNU tar reads options from `TAR_OPTIONS`; a pod environment that sets
/// `--exclude` must not make a sync silently drop files in either direction.
#[test]
fn pod_tar_options_cannot_drop_files() {
    let sb = Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Local,
    });
    let backend: std::sync::Arc<dyn sandbox_sync_host::exec::ExecBackend> =
        std::sync::Arc::new(WithEnv::new(
            sb.backend(),
            "tar-options",
            vec!["TAR_OPTIONS=--exclude=*.txt".into()],
        ));
    sb.write_host("ws/notes.txt", b"notes");
    sb.write_host("ws/data.bin", b"data");
    sb.sync_in_via(
        &[op("in", vec![dir(sb.host.join("ws"), sb.remote("ws"))])],
        std::sync::Arc::clone(&backend),
    )
    .expect("sync-in");
    assert_eq!(
        std::fs::read(sb.remote_on_host("ws/notes.txt")).unwrap(),
        b"notes"
    );

    let back = sb.host.join("back");
    block_on(runtime().sync_out(
        &[op("out", vec![dir_out(sb.remote("ws"), &back)])],
        &sb.options(),
        backend,
    ))
    .expect("sync-out");
    assert_eq!(std::fs::read(back.join("notes.txt")).unwrap(), b"notes");
    assert_eq!(std::fs::read(back.join("data.bin")).unwrap(), b"data");
}
