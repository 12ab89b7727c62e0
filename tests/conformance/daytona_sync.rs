//! Syncs with a Daytona sandbox, through the real client and the fake
//! toolbox: the HTTP calls each direction makes (counted at the server),
//! and every fault the toolbox can throw at a sync, each failing typed,
//! within its deadline, with nothing landed and no scratch left.

use std::time::{Duration, Instant};

use sandbox_sync_host::provider::Compress;
use sandbox_sync_tests::daytona_server::{Faults, ToolboxServer};
use sandbox_sync_tests::*;

fn server(sb: &Sandbox) -> &ToolboxServer {
    sb.toolbox.as_ref().expect("a Daytona sandbox")
}

/// Sync-in is two calls, whatever the number of operations: one upload
/// of the program and the archive, one command.
fn sync_in_is_two_calls(u: Env) {
    let sb = Sandbox::new(u);
    let a = sb.write_host("a.txt", b"alpha");
    sb.write_host("ws/one", b"1");
    sb.write_host("ws/sub/two", b"22");
    let mut ops = Vec::new();
    for i in 0..3 {
        let mut o = op(
            &format!("op-{i}"),
            vec![
                file(&a, sb.remote(&format!("f{i}/a.txt"))),
                dir(sb.host.join("ws"), sb.remote(&format!("d{i}"))),
            ],
        );
        o.post_upload_commands = Some(vec![cmd(&format!("echo {i} >> order"), None)]);
        ops.push(o);
    }
    let out = sb.sync_in(&ops).expect("sync-in");
    assert_eq!(
        server(&sb).calls(),
        ["POST /files/bulk-upload", "POST /process/execute"]
    );
    assert_eq!((out.toolbox_calls, out.execs), (2, 1));
    for i in 0..3 {
        assert_eq!(
            std::fs::read(sb.remote_on_host(&format!("f{i}/a.txt"))).unwrap(),
            b"alpha"
        );
        assert_same_tree(&sb.host.join("ws"), &sb.remote_on_host(&format!("d{i}")));
    }
    assert_eq!(
        std::fs::read_to_string(sb.remote_on_host("order")).unwrap(),
        "0\n1\n2\n"
    );
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Sync-out is one command and one download; the host deletes the
/// scratch file while the download streams.
fn sync_out_is_a_command_and_a_download(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("ws/x", b"x");
    sb.write_remote("ws/deep/y", b"yy");
    sb.write_remote("f.bin", &incompressible(100_000));
    let back = sb.host.join("back");
    let out = sb
        .sync_out(&[
            op("a", vec![dir_out(sb.remote("ws"), &back)]),
            op(
                "b",
                vec![file_out(sb.remote("f.bin"), sb.host.join("f.bin"))],
            ),
        ])
        .expect("sync-out");
    // Incremental (the default), the sandbox first lists what the
    // directory's source holds, in a command of its own.
    let env = Env {
        userland: sb.userland,
        transport: Transport::Daytona,
    };
    let listing = usize::from(incremental_sync_out_execs(env) > 1);
    let mut calls = vec!["POST /process/execute"; 1 + listing];
    calls.extend(["POST /files/bulk-download", "DELETE /files"]);
    assert_eq!(server(&sb).calls(), calls);
    assert_eq!(
        (out.toolbox_calls, out.execs),
        (2 + listing as u64, 1 + listing as u64)
    );
    assert_same_tree(&sb.remote_on_host("ws"), &back);
    assert_eq!(
        std::fs::read(sb.host.join("f.bin")).unwrap(),
        std::fs::read(sb.remote_on_host("f.bin")).unwrap()
    );
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A sync whose toolbox is `backend` instead of the sandbox's.
fn sync_in_via(
    sb: &Sandbox,
    backend: std::sync::Arc<dyn sandbox_sync_host::exec::ExecBackend>,
) -> SyncFailure {
    let src = sb.write_host("src/a", b"a");
    sb.sync_in_via(&[op("o", vec![file(&src, sb.remote("landed"))])], backend)
        .unwrap_err()
}

/// A refused key (401) and an unknown sandbox (404) are typed transport
/// errors that name the cause, before anything lands.
fn refusals_are_typed(u: Env) {
    let sb = Sandbox::new(u);
    let url = &server(&sb).url;
    for (id, key, says) in [
        ("sbx-conformance", "wrong-key", "401"),
        ("no-such-sandbox", "conformance-key", "not reachable"),
    ] {
        let client = sandbox_sync_host::exec::daytona::Client::new(url, id, key).unwrap();
        let backend = std::sync::Arc::new(sandbox_sync_host::exec::daytona::DaytonaBackend::new(
            client,
        ));
        let err = sync_in_via(&sb, backend);
        assert_eq!(err.error.kind, ErrorKind::Transport, "{}", err.error);
        assert!(err.error.message.contains(says), "{}", err.error);
    }
    assert!(!sb.remote_on_host("landed").exists());
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A failing status on either call of a sync-in, and on the command or
/// the download of a sync-out, fails the sync typed: nothing lands, the
/// host target keeps its old bytes, no scratch is left.
fn failing_statuses_fail_typed(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("src/a", b"new");
    sb.write_remote("out.txt", b"sandbox");
    let target = sb.write_host("back/out.txt", b"old");
    for (status, on, kind) in [
        (500, "/files/bulk-upload", ErrorKind::Transport),
        (502, "/process/execute", ErrorKind::Transport),
        (408, "/process/execute", ErrorKind::LimitExceeded),
        (503, "/files/bulk-download", ErrorKind::Transport),
    ] {
        server(&sb).set_faults(Faults {
            status: Some(status),
            status_on: Some(on),
            ..Faults::default()
        });
        let result = if on == "/files/bulk-download" {
            sb.sync_out(&[op("o", vec![file_out(sb.remote("out.txt"), &target)])])
        } else {
            sb.sync_in(&[op("o", vec![file(&src, sb.remote("landed"))])])
        };
        let err = result.unwrap_err();
        assert_eq!(err.error.kind, kind, "{status} on {on}: {}", err.error);
        server(&sb).set_faults(Faults::default());
        assert!(!sb.remote_on_host("landed").exists(), "{status} on {on}");
        assert_eq!(std::fs::read(&target).unwrap(), b"old", "{status} on {on}");
        assert!(
            sb.scratch_left().is_empty(),
            "{status} on {on}: {:?}",
            sb.scratch_left()
        );
    }
}

/// An upload cut mid-body never runs, and what the sandbox kept of it is
/// removed.
fn a_cut_upload_runs_nothing_and_leaves_nothing(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("src/big", &incompressible(300_000));
    server(&sb).set_faults(Faults {
        cut_upload_after: Some(100_000),
        ..Faults::default()
    });
    let mut o = op("o", vec![file(&src, sb.remote("big"))]);
    o.post_upload_commands = Some(vec![cmd("touch ran", None)]);
    let err = sb.sync_in(&[o]).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::Transport, "{}", err.error);
    assert!(!sb.remote_on_host("big").exists());
    assert!(!sb.remote_on_host("ran").exists());
    assert!(
        sb.scratch_left().is_empty(),
        "left {:?}; calls {:?}; {}",
        sb.scratch_left(),
        server(&sb).calls(),
        err.error
    );
}

/// A download cut before its closing boundary fails the sync-out; the
/// host target keeps its old bytes.
fn a_cut_download_lands_nothing(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("ws/big", &incompressible(300_000));
    sb.write_remote("ws/small", b"s");
    let back = sb.host.join("back");
    sb.write_host("back/old", b"old");
    server(&sb).set_faults(Faults {
        cut_download_after: Some(100_000),
        ..Faults::default()
    });
    let err = sb
        .sync_out(&[op("o", vec![dir_out(sb.remote("ws"), &back)])])
        .unwrap_err();
    assert!(
        matches!(
            err.error.kind,
            ErrorKind::Transport | ErrorKind::UnsafeArchive
        ),
        "{}",
        err.error
    );
    assert!(
        err.error.message.contains("cut") || err.error.message.contains("broke"),
        "{}",
        err.error
    );
    assert_eq!(std::fs::read(back.join("old")).unwrap(), b"old");
    assert!(!back.join("small").exists());
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A command that never returns cannot stretch either direction past its
/// deadline.
fn an_execute_that_never_returns_holds_the_deadline(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("src/a", b"a");
    sb.write_remote("out.txt", b"o");
    server(&sb).set_faults(Faults {
        execute_hangs: true,
        ..Faults::default()
    });
    let mut opts = sb.options();
    opts.timeout = Duration::from_secs(2);
    for out in [false, true] {
        let t = Instant::now();
        let err = if out {
            sb.sync_out_with(
                &[op(
                    "o",
                    vec![file_out(sb.remote("out.txt"), sb.host.join("o"))],
                )],
                &opts,
            )
        } else {
            sb.sync_in_with(&[op("o", vec![file(&src, sb.remote("landed"))])], &opts)
        }
        .unwrap_err();
        let took = t.elapsed();
        assert!(
            took < opts.timeout
                + sandbox_sync_host::provider::HOST_GRACE
                + Duration::from_millis(500),
            "out={out}: took {took:?}"
        );
        assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{}", err.error);
        assert!(!sb.remote_on_host("landed").exists());
        assert!(!sb.host.join("o").exists());
    }
}

/// An upload that cannot finish in time (a link far too slow) ends the
/// call within its deadline as `limit-exceeded`, on one line that names
/// the toolbox call that did not finish, and leaves nothing behind.
fn a_stalled_upload_is_named_and_holds_the_deadline(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("src/big.bin", &incompressible(256 << 10));
    server(&sb).set_faults(Faults {
        bytes_per_sec: Some(16 << 10),
        ..Faults::default()
    });
    let mut opts = sb.options();
    opts.timeout = Duration::from_secs(2);
    let t = Instant::now();
    let err = sb
        .sync_in_with(&[op("o", vec![file(&src, sb.remote("big.bin"))])], &opts)
        .unwrap_err();
    let took = t.elapsed();
    assert!(
        took < opts.timeout + sandbox_sync_host::provider::HOST_GRACE + Duration::from_millis(500),
        "took {took:?}"
    );
    let text = err.error.to_string();
    assert_eq!(err.error.kind, ErrorKind::LimitExceeded, "{text}");
    assert!(text.contains("bulk-upload"), "{text}");
    assert!(
        !text.contains('\n') && !text.trim_end().ends_with(':'),
        "{text}"
    );
    server(&sb).set_faults(Faults::default());
    assert!(!sb.remote_on_host("big.bin").exists());
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A big re-sync asks first what the target holds (one more call) and
/// sends only what changed; the target ends as a full sync leaves it.
/// Without incremental, or below the threshold, it is two calls.
fn a_big_resync_sends_only_what_changed(u: Env) {
    let sb = Sandbox::new(u);
    let old = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for i in 0..48 {
        let p = sb.write_host(
            &format!("ws/d{}/f{i}.bin", i % 4),
            &incompressible(32 << 10),
        );
        set_mtime(&p, old);
    }
    settle();
    let edited = sb.host.join("ws/d1/f5.bin");
    let ops = [op("o", vec![dir(sb.host.join("ws"), sb.remote("ws"))])];
    let calls = |sb: &Sandbox| server(sb).calls().len();
    let mut opts = sb.options();
    opts.incremental = true;

    let first = sb.sync_in_with(&ops, &opts).expect("first");
    assert_eq!(
        server(&sb).calls(),
        [
            "POST /process/execute",
            "POST /files/bulk-upload",
            "POST /process/execute"
        ]
    );
    assert_eq!(first.operations[0].files_transferred, 48);

    std::fs::write(&edited, incompressible(40 << 10)).unwrap();
    set_mtime(&edited, old + Duration::from_secs(60));
    std::fs::remove_file(sb.host.join("ws/d2/f6.bin")).unwrap();
    let added = sb.write_host("ws/new.bin", &incompressible(32 << 10));
    set_mtime(&added, old);
    let (before, wire) = (calls(&sb), server(&sb).wire_bytes());
    let again = sb.sync_in_with(&ops, &opts).expect("again");
    assert_eq!(calls(&sb) - before, 3);
    assert_eq!(again.operations[0].files_transferred, 2, "{again:?}");
    let moved = server(&sb).wire_bytes() - wire;
    assert!(moved < 200_000, "{moved} bytes on the wire");
    assert_same_tree(&sb.host.join("ws"), &sb.remote_on_host("ws"));
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());

    opts.incremental = false;
    let before = calls(&sb);
    let full = sb.sync_in_with(&ops, &opts).expect("full");
    assert_eq!(calls(&sb) - before, 2);
    assert_eq!(full.operations[0].files_transferred, 48);
    assert_same_tree(&sb.host.join("ws"), &sb.remote_on_host("ws"));
}

/// The report of a big re-sync starts once the walk has found enough to
/// send, while the rest is walked: a walk that fails after it started (a
/// directory nested deeper than the walk goes) fails the sync typed, lands
/// nothing, and takes the report's scratch along.
fn a_walk_failing_after_the_report_leaves_nothing(u: Env) {
    let sb = Sandbox::new(u);
    // Walked first (in name order), and more than a step of the walk.
    for i in 0..40 {
        sb.write_host(&format!("ws/a/f{i}.bin"), &incompressible(64 << 10));
    }
    let deep = sb.host.join("ws/z").join("d/".repeat(513));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("f"), b"x").unwrap();
    let ops = [op("o", vec![dir(sb.host.join("ws"), sb.remote("ws"))])];
    let mut opts = sb.options();
    opts.incremental = true;
    let err = sb.sync_in_with(&ops, &opts).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::InvalidRequest, "{}", err.error);
    assert!(err.error.message.contains("deeper than"), "{}", err.error);
    // The report ran (it started before the walk met the name), and its
    // scratch was removed with the toolbox's delete.
    let calls = server(&sb).calls();
    assert_eq!(
        calls.first().map(String::as_str),
        Some("POST /process/execute"),
        "{calls:?}"
    );
    assert!(calls.iter().any(|c| c.starts_with("DELETE")), "{calls:?}");
    assert!(!sb.remote_on_host("ws").exists());
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// A provider without the `toolbox` capability (the base64 fallback) is
/// refused on a Daytona sandbox before anything moves.
#[test]
fn refused_without_the_capability() {
    let sb = Sandbox::new(Env {
        userland: Userland::Gnu,
        transport: Transport::Daytona,
    });
    let fallback = block_on(Runtime::from_file(std::path::Path::new(
        sandbox_sync_host::runtime::FALLBACK_COMPONENT_PATH,
    )))
    .unwrap();
    let src = sb.write_host("a", b"a");
    let err = block_on(fallback.sync_in(
        &[op("o", vec![file(&src, sb.remote("a"))])],
        &sb.options(),
        sb.backend(),
    ))
    .unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::Transport, "{}", err.error);
    assert!(err.error.message.contains("toolbox"), "{}", err.error);
    assert!(server(&sb).calls().is_empty());
    assert!(!sb.remote_on_host("a").exists());
}

/// A sync-out program too long to pass as one argument (hundreds of
/// mappings) is uploaded first and read by the bootstrap: one more call,
/// and everything still lands.
fn a_long_outbound_program_is_uploaded_first(u: Env) {
    let sb = Sandbox::new(u);
    let n = 1000;
    let mut files = Vec::new();
    for i in 0..n {
        let name = format!("out/a-fairly-long-file-name-to-make-the-program-long-{i:04}.txt");
        sb.write_remote(&name, format!("{i}").as_bytes());
        files.push(file_out(
            sb.remote(&name),
            sb.host.join(format!("back/{i:04}.txt")),
        ));
    }
    let out = sb.sync_out(&[op("o", files)]).expect("sync-out");
    assert_eq!(
        server(&sb).calls(),
        [
            "POST /files/bulk-upload",
            "POST /process/execute",
            "POST /files/bulk-download",
            "DELETE /files"
        ]
    );
    assert_eq!(out.operations[0].files_transferred, n);
    for i in [0, n / 2, n - 1] {
        assert_eq!(
            std::fs::read_to_string(sb.host.join(format!("back/{i:04}.txt"))).unwrap(),
            i.to_string()
        );
    }
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Issue 23, 4: an unchanged re-sync-out of a 3 MB tree lists first (one
/// more command) and brings back nothing but its frames, where the
/// sandbox's tar can leave files out (GNU); every re-sync lands what a
/// full sync lands.
fn an_unchanged_resync_out_moves_almost_nothing(u: Env) {
    if !keeps_unchanged(GNU_LOCAL) || !sync_options("/").incremental {
        return;
    }
    let sb = Sandbox::new(u);
    for i in 0..30 {
        sb.write_remote(
            &format!("tree/d{}/f{i}.bin", i % 3),
            &incompressible(100_000 + i),
        );
    }
    settle();
    let back = sb.host.join("back");
    let ops = [op("o", vec![dir_out(sb.remote("tree"), &back)])];
    let first = sb.sync_out(&ops).expect("first");
    assert_eq!(first.operations[0].files_transferred, 30);
    let (before, wire) = (server(&sb).calls().len(), server(&sb).wire_bytes());
    let again = sb.sync_out(&ops).expect("again");
    assert_eq!(
        server(&sb).calls()[before..],
        [
            "POST /process/execute",
            "POST /process/execute",
            "POST /files/bulk-download",
            "DELETE /files"
        ]
    );
    let moved = server(&sb).wire_bytes() - wire;
    // GNU tar leaves the kept files out with -X; BusyBox tar is given the
    // others as its arguments.
    assert_eq!(again.operations[0].files_transferred, 0, "{again:?}");
    assert!(moved < 100_000, "{moved} bytes on the wire");
    assert_same_tree(&sb.remote_on_host("tree"), &back);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

for_each_userland!(
    daytona: sync_in_is_two_calls,
    an_unchanged_resync_out_moves_almost_nothing,
    a_long_outbound_program_is_uploaded_first,
    a_big_resync_sends_only_what_changed,
    a_walk_failing_after_the_report_leaves_nothing,
    sync_out_is_a_command_and_a_download,
    refusals_are_typed,
    failing_statuses_fail_typed,
    a_cut_upload_runs_nothing_and_leaves_nothing,
    a_cut_download_lands_nothing,
    an_execute_that_never_returns_holds_the_deadline,
    a_stalled_upload_is_named_and_holds_the_deadline,
);

/// A sandbox without gzip refuses the blind gzip upload before it reads a
/// byte (`NO_CODEC`), and gets the upload once more, plain: two more
/// calls, everything lands, no scratch left.
#[test]
fn a_sandbox_without_gzip_gets_the_upload_again_plain() {
    if !drives(Transport::Daytona) {
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    for dir in ["/usr/bin", "/usr/sbin"] {
        for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
            let name = e.file_name();
            if !matches!(name.to_str(), Some("gzip" | "gunzip" | "zcat")) {
                let _ = std::os::unix::fs::symlink(e.path(), tools.path().join(&name));
            }
        }
    }
    // Every host tool but gzip on PATH. (A BusyBox root will not do: its
    // shell runs its own `gzip` applet without looking at PATH.)
    let backend = WithEnv::new(
        std::sync::Arc::new(sandbox_sync_host::exec::local::LocalBackend::host()),
        "no-gzip",
        vec![format!("PATH={}", tools.path().display())],
    );
    let (server, backend) = daytona_backend(std::sync::Arc::new(backend));

    let host = tempfile::tempdir().unwrap();
    let ws = host.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let src = host.path().join("notes.txt");
    let text = "a line of text that compresses well\n".repeat(4000);
    std::fs::write(&src, &text).unwrap();
    let mut opts = sync_options(ws.display().to_string());
    opts.compress = Compress::Gzip;
    opts.incremental = false;
    let target = ws.join("notes.txt");
    let out = block_on(runtime().sync_in(
        &[op("o", vec![file(&src, target.display().to_string())])],
        &opts,
        backend,
    ))
    .expect("sync-in");
    assert_eq!(
        server.calls(),
        [
            "POST /files/bulk-upload",
            "POST /process/execute",
            "POST /files/bulk-upload",
            "POST /process/execute"
        ]
    );
    assert_eq!((out.toolbox_calls, out.execs), (4, 2));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), text);
    let left: Vec<_> = std::fs::read_dir(&ws)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with(".paperclip-upload"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
