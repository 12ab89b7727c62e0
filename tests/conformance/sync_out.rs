use std::os::unix::fs::PermissionsExt;

use sandbox_sync_tests::*;

/// Seed 10: all file mappings back over one exec, reassembled at host
/// targets with the requested mode and per-operation counts; no scratch.
fn files_back_in_one_exec(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("out/result.json", b"{\"ok\":true}");
    sb.write_remote("out/secret.key", b"k3y");
    let target = sb.host.join("results");
    let mut secret = file_out(sb.remote("out/secret.key"), target.join("keys/secret.key"));
    secret.mode = Some(0o600);
    let out = sb
        .sync_out(&[op(
            "op-out",
            vec![
                file_out(sb.remote("out/result.json"), target.join("result.json")),
                secret,
            ],
        )])
        .expect("sync-out");
    assert_execs(out.execs, 1);
    assert_eq!(
        out.operations,
        vec![OperationResult {
            operation_id: "op-out".into(),
            files_transferred: 2,
            bytes_transferred: 14,
            ..Default::default()
        }]
    );
    assert_eq!(
        std::fs::read(target.join("result.json")).unwrap(),
        b"{\"ok\":true}"
    );
    assert_eq!(
        std::fs::read(target.join("keys/secret.key")).unwrap(),
        b"k3y"
    );
    assert_eq!(mode(&target.join("keys/secret.key")), 0o600);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A file mapping replaces an existing host file (and never writes through
/// a symlink planted at the target name).
fn file_back_replaces_target_and_symlink(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("r.txt", b"fresh");
    let victim = sb.write_host("victim.txt", b"untouched");
    let target = sb.host.join("t/r.txt");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    sb.sync_out(&[op("o", vec![file_out(sb.remote("r.txt"), &target)])])
        .expect("sync-out");
    assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
    assert!(std::fs::symlink_metadata(&target).unwrap().is_file());
    assert_eq!(std::fs::read(&target).unwrap(), b"fresh");
}

/// Seed 11: a directory round-trips, symlinks preserved when not following.
fn directory_round_trip_preserves_links(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("proj/src/main.rs", b"fn main() {}");
    sb.write_remote("proj/README", b"readme");
    sb.plant_symlink("proj/link", "src/main.rs");
    std::fs::create_dir_all(sb.remote_on_host("proj/empty")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("proj/empty"));
    let exe = sb.write_remote("proj/run.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let target = sb.host.join("back");
    let out = sb
        .sync_out(&[op("o", vec![dir_out(sb.remote("proj"), &target)])])
        .expect("sync-out");
    assert_execs(out.execs, incremental_sync_out_execs(u));
    assert!(out.operations[0].files_transferred >= 2);
    assert_eq!(
        std::fs::read(target.join("src/main.rs")).unwrap(),
        b"fn main() {}"
    );
    assert_eq!(
        std::fs::read_link(target.join("link")).unwrap().to_str(),
        Some("src/main.rs")
    );
    assert!(target.join("empty").is_dir());
    assert_eq!(mode(&target.join("run.sh")), 0o755);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// followSymlinks on sync-out dereferences; exclude drops members.
fn directory_back_follow_and_exclude(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("proj/data.txt", b"data");
    sb.write_remote("proj/build/out.o", b"obj");
    sb.write_remote("proj/x.log", b"log");
    sb.plant_symlink("proj/alias", "data.txt");
    let target = sb.host.join("back");
    let mut m = dir_out(sb.remote("proj"), &target);
    m.follow_symlinks = Some(true);
    m.exclude = Some(vec!["build".into(), "*.log".into()]);
    sb.sync_out(&[op("o", vec![m])]).expect("sync-out");
    assert!(std::fs::symlink_metadata(target.join("alias"))
        .unwrap()
        .is_file());
    assert_eq!(std::fs::read(target.join("alias")).unwrap(), b"data");
    assert!(!target.join("build").exists());
    assert!(!target.join("x.log").exists());
}

/// Directory mappings replace the target's previous contents.
fn directory_back_replaces_target(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("proj/new.txt", b"new");
    sb.write_host("back/stale.txt", b"stale");
    let target = sb.host.join("back");
    sb.sync_out(&[op("o", vec![dir_out(sb.remote("proj"), &target)])])
        .expect("sync-out");
    assert!(target.join("new.txt").exists());
    assert!(!target.join("stale.txt").exists());
}

/// Several operations and mappings, in order, in one exec (after the
/// listing, on a toolbox sandbox).
fn many_operations_back_in_one_exec(u: Env) {
    let sb = Sandbox::new(u);
    let mut ops = Vec::new();
    for i in 0..10 {
        sb.write_remote(&format!("o{i}/f"), format!("{i}").as_bytes());
        ops.push(op(
            &format!("op-{i}"),
            vec![
                file_out(
                    sb.remote(&format!("o{i}/f")),
                    sb.host.join(format!("files/f{i}")),
                ),
                dir_out(
                    sb.remote(&format!("o{i}")),
                    sb.host.join(format!("dirs/{i}")),
                ),
            ],
        ));
    }
    let out = sb.sync_out(&ops).expect("sync-out");
    assert_execs(out.execs, incremental_sync_out_execs(u));
    assert_eq!(out.operations.len(), 10);
    assert_eq!(out.operations[9].files_transferred, 2);
    assert_eq!(std::fs::read(sb.host.join("files/f9")).unwrap(), b"9");
    assert_eq!(std::fs::read(sb.host.join("dirs/4/f")).unwrap(), b"4");
}

/// Seed 15: the outbound guard fails closed and writes no target.
fn outbound_guard_fails_closed(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("big.bin", &[b'A'; 4096]);
    let target = sb.host.join("t/big.bin");
    let mut opts = sb.options();
    opts.max_output_bytes = 1024;
    let err = sb
        .sync_out_with(
            &[op("o", vec![file_out(sb.remote("big.bin"), &target)])],
            &opts,
        )
        .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(err.error.message.contains("guard"), "{}", err.error);
    assert_execs(err.execs, 1);
    assert!(!target.exists());
    let mut d = dir_out(sb.remote(""), sb.host.join("d"));
    d.exclude = None;
    let err = sb.sync_out_with(&[op("o", vec![d])], &opts).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
    assert!(!sb.host.join("d").exists(), "nothing lands, no new target");
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Large payloads stream back byte-exact.
fn streams_large_payload_back(u: Env) {
    let sb = Sandbox::new(u);
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 17u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    sb.write_remote("big.bin", &data);
    let target = sb.host.join("big.bin");
    let out = sb
        .sync_out(&[op("o", vec![file_out(sb.remote("big.bin"), &target)])])
        .expect("sync-out");
    assert_eq!(out.operations[0].bytes_transferred, data.len() as u64);
    assert!(std::fs::read(&target).unwrap() == data);
}

/// Files come back with the sandbox's mtimes (whole seconds, as tar keeps
/// them), in a directory mapping and a file mapping alike.
fn mtimes_come_back(u: Env) {
    let sb = Sandbox::new(u);
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    for rel in ["tree/a.txt", "tree/sub/b.bin", "single.txt"] {
        let p = sb.write_remote(rel, rel.as_bytes());
        set_mtime(&p, when);
    }
    let out_dir = sb.host.join("back/tree");
    let out_file = sb.host.join("back/single.txt");
    sb.sync_out(&[op(
        "o",
        vec![
            dir_out(sb.remote("tree"), &out_dir),
            file_out(sb.remote("single.txt"), &out_file),
        ],
    )])
    .expect("sync-out");
    for p in [out_dir.join("a.txt"), out_dir.join("sub/b.bin"), out_file] {
        let got = std::fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(got, when, "{}", p.display());
    }
}

sandbox_sync_tests::for_each_userland!(
    mtimes_come_back,
    files_back_in_one_exec,
    file_back_replaces_target_and_symlink,
    directory_round_trip_preserves_links,
    directory_back_follow_and_exclude,
    directory_back_replaces_target,
    many_operations_back_in_one_exec,
    outbound_guard_fails_closed,
    streams_large_payload_back,
);
