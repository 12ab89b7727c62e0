use sandbox_sync_tests::*;

fn with_cmds(mut o: SyncOperation, cmds: Vec<PostUploadCommand>) -> SyncOperation {
    o.post_upload_commands = Some(cmds);
    o
}

/// Seed 16: commands run after the upload, in order, verbatim, in the same
/// single exec (the seed needed one exec per command).
fn commands_run_in_order_after_upload(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("hello.txt", b"hello");
    let o = with_cmds(
        op("o", vec![file(&src, sb.remote("in.txt"))]),
        vec![
            cmd("cat in.txt > out.txt", None),
            cmd("printf DONE >> out.txt", None),
        ],
    );
    let out = sb.sync_in(&[o]).expect("sync-in");
    assert_execs(out.execs, 1);
    assert_eq!(
        std::fs::read(sb.remote_on_host("out.txt")).unwrap(),
        b"helloDONE"
    );
}

/// Commands are passed verbatim: quotes, globs and `$` reach `sh -c` as written.
fn commands_are_verbatim(u: Env) {
    let sb = Sandbox::new(u);
    let c = r#"printf '%s|' "$0" 'a b' "it's" '$(id)' > args.txt; echo "${HOME+set}" >/dev/null"#;
    sb.sync_in(&[with_cmds(op("o", vec![]), vec![cmd(c, None)])])
        .expect("sync-in");
    assert_eq!(
        std::fs::read_to_string(sb.remote_on_host("args.txt")).unwrap(),
        "sandbox-sync-post-upload|a b|it's|$(id)|"
    );
}

/// Seed 17: an explicit cwd is confined and used (`pwd -P` is its realpath).
fn command_in_explicit_cwd(u: Env) {
    let sb = Sandbox::new(u);
    std::fs::create_dir_all(sb.remote_on_host("sub/dir")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("sub"));
    sb.give_to_sandbox(&sb.remote_on_host("sub/dir"));
    sb.sync_in(&[with_cmds(
        op("o", vec![]),
        vec![cmd("pwd -P > where.txt", Some(sb.remote("sub/dir")))],
    )])
    .expect("sync-in");
    let got = std::fs::read_to_string(sb.remote_on_host("sub/dir/where.txt")).unwrap();
    assert_eq!(got.trim(), sb.remote("sub/dir"));
}

/// Seed 18: a non-zero exit fails the operation loud and skips the rest.
fn failing_command_stops_the_rest(u: Env) {
    let sb = Sandbox::new(u);
    let o = with_cmds(
        op("op-a", vec![]),
        vec![
            cmd("echo oops >&2; exit 3", None),
            cmd("touch second-ran", None),
        ],
    );
    let later = with_cmds(op("op-b", vec![]), vec![cmd("touch later-ran", None)]);
    let err = sb.sync_in(&[o, later]).unwrap_err();
    assert_eq!(err.error.kind, ErrorKind::CommandFailed, "{}", err.error);
    assert!(
        err.error
            .message
            .contains("post-upload command failed (exit 3)"),
        "{}",
        err.error
    );
    let details = err.error.command.clone().expect("details");
    assert_eq!(details.operation_id, "op-a");
    assert_eq!(details.exit_code, Some(3));
    assert!(details.stderr.contains("oops"), "{details:?}");
    assert!(!sb.remote_on_host("second-ran").exists());
    assert!(!sb.remote_on_host("later-ran").exists());
    assert!(sb.scratch_left().is_empty());
}

/// A failure in a later operation names that operation; earlier ones applied.
fn failure_names_the_failing_operation(u: Env) {
    let sb = Sandbox::new(u);
    let a = sb.write_host("a", b"a");
    let ok = op("first", vec![file(&a, sb.remote("a"))]);
    let bad = with_cmds(op("second", vec![]), vec![cmd("exit 7", None)]);
    let err = sb.sync_in(&[ok, bad]).unwrap_err();
    assert!(err.error.message.contains("second"), "{}", err.error);
    assert!(
        sb.remote_on_host("a").exists(),
        "the first operation completed"
    );
}

/// Per-command timeoutMs stops a command that runs too long.
fn command_timeout(u: Env) {
    let sb = Sandbox::new(u);
    let mut c = cmd("sleep 30", None);
    c.timeout_ms = Some(300);
    let t = std::time::Instant::now();
    let err = sb
        .sync_in(&[with_cmds(op("o", vec![]), vec![c])])
        .unwrap_err();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(err.error.kind, ErrorKind::CommandFailed, "{}", err.error);
    assert!(
        err.error.command.as_ref().is_some_and(|c| c.timed_out),
        "{}",
        err.error
    );
}

/// A timed-out command ends with everything it started (its children
/// hold the exec's pipes otherwise, and run on): the call returns within
/// the timeout and a small grace, and no process of it is left.
fn a_timed_out_command_ends_with_all_it_started(u: Env) {
    let sb = Sandbox::new(u);
    // Durations no other test sleeps, to find its processes by.
    let tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut c = cmd(
        &format!("sleep 313.{tag} & sleep 317.{tag}; echo never"),
        None,
    );
    c.timeout_ms = Some(500);
    let t = std::time::Instant::now();
    let err = sb
        .sync_in(&[with_cmds(op("o", vec![]), vec![c])])
        .unwrap_err();
    let took = t.elapsed();
    assert!(took < std::time::Duration::from_secs(4), "took {took:?}");
    assert_eq!(err.error.kind, ErrorKind::CommandFailed, "{}", err.error);
    assert!(
        err.error.command.as_ref().is_some_and(|c| c.timed_out),
        "{}",
        err.error
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("^sleep 31[37]\\.{tag}$")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// A command that starts a background process and exits succeeds without
/// waiting for it: the child must not hold the exec's output open (over a
/// kubelet the exec stays open until every holder lets go).
fn a_command_that_leaves_a_child_running_does_not_hold_the_sync(u: Env) {
    let sb = Sandbox::new(u);
    let tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let src = sb.write_host("a", b"a");
    let o = with_cmds(
        op("o", vec![file(&src, sb.remote("a"))]),
        vec![cmd(&format!("sleep 29.{tag} & echo started"), None)],
    );
    let t = std::time::Instant::now();
    sb.sync_in(&[o]).expect("sync-in");
    let took = t.elapsed();
    // A hang bound, not a speed figure: the child sleeps 29 s.
    assert!(took < std::time::Duration::from_secs(15), "took {took:?}");
    assert_eq!(std::fs::read(sb.remote_on_host("a")).unwrap(), b"a");
    let _ = std::process::Command::new("pkill")
        .args(["-f", &format!("^sleep 29\\.{tag}$")])
        .status();
}

/// Commands read /dev/null, never the sync stream.
fn command_stdin_is_dev_null(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("f", &[b'x'; 100_000]);
    let o = with_cmds(
        op("o", vec![file(&src, sb.remote("f"))]),
        vec![cmd("cat > stdin.txt", None)],
    );
    sb.sync_in(&[o]).expect("sync-in");
    assert_eq!(std::fs::read(sb.remote_on_host("stdin.txt")).unwrap(), b"");
}

/// Seed 21: no commands means no extra exec.
fn no_extra_exec_without_commands(u: Env) {
    let sb = Sandbox::new(u);
    let a = sb.write_host("a", b"a");
    let out = sb
        .sync_in(&[with_cmds(op("o", vec![file(&a, sb.remote("a"))]), vec![])])
        .expect("sync-in");
    assert_execs(out.execs, 1);
    let out = sb
        .sync_in(&[op("o", vec![file(&a, sb.remote("a"))])])
        .expect("sync-in");
    assert_execs(out.execs, 1);
}

/// Issue 11.11: the watchdog of a quick command is stopped reliably. A TERM
/// sent right after forking the watcher was sometimes lost (dash, BusyBox
/// sh): the quick command was reported timed out, or the sync hung for the
/// command's whole timeout. `WATCHDOG_RUNS` (default 3) syncs of 150 quick
/// commands with a 60 s timeout each: none may time out, none may hang.
fn quick_commands_never_time_out_falsely(u: Env) {
    let runs: usize = std::env::var("WATCHDOG_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let sb = Sandbox::new(u);
    let cmds: Vec<PostUploadCommand> = (0..150)
        .map(|_| PostUploadCommand {
            command: "true".into(),
            cwd: None,
            timeout_ms: Some(60_000),
        })
        .collect();
    let mut opts = sb.options();
    opts.timeout = std::time::Duration::from_secs(50);
    for run in 0..runs {
        let started = std::time::Instant::now();
        let out = sb.sync_in_with(&[with_cmds(op("o", vec![]), cmds.clone())], &opts);
        let took = started.elapsed();
        assert!(out.is_ok(), "run {run}: {}", out.unwrap_err().error);
        assert!(
            took < std::time::Duration::from_secs(30),
            "run {run} took {took:?}"
        );
    }
}

sandbox_sync_tests::for_each_userland!(
    a_timed_out_command_ends_with_all_it_started,
    quick_commands_never_time_out_falsely,
    commands_run_in_order_after_upload,
    commands_are_verbatim,
    command_in_explicit_cwd,
    failing_command_stops_the_rest,
    failure_names_the_failing_operation,
    command_timeout,
    a_command_that_leaves_a_child_running_does_not_hold_the_sync,
    command_stdin_is_dev_null,
    no_extra_exec_without_commands,
);
