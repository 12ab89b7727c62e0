use sandbox_sync_tests::*;

fn assert_confinement(err: &SyncFailure, execs: u64) {
    assert_eq!(err.error.kind, ErrorKind::Confinement, "{}", err.error);
    assert_execs(err.execs, execs);
}

/// Seeds 1, 6: escaping or relative targets fail before any exec.
fn rejects_escaping_targets_before_exec(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("f", b"x");
    for bad in [
        format!("{}/../etc/passwd", sb.remote),
        "/etc/passwd".to_string(),
        "relative/path".to_string(),
        format!("{}x/a", sb.remote),
    ] {
        let err = sb
            .sync_in(&[op("o", vec![file(&src, bad.clone())])])
            .unwrap_err();
        assert_confinement(&err, 0);
        assert!(
            err.error.message.contains("escapes") || err.error.message.contains("not a confined"),
            "{}",
            err.error
        );
        let err = sb
            .sync_in(&[op("o", vec![dir(&sb.host, bad)])])
            .unwrap_err();
        assert_confinement(&err, 0);
    }
    assert!(sb.outside_entries().is_empty());
}

/// Seed 2: targets inside the remote dir, and the remote dir itself, are accepted.
fn accepts_targets_inside(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("f", b"x");
    sb.sync_in(&[op("o", vec![file(&src, sb.remote("a/b.txt"))])])
        .expect("inside");
    std::fs::create_dir_all(sb.host.join("d")).unwrap();
    sb.sync_in(&[op("o", vec![dir(sb.host.join("d"), sb.remote(""))])])
        .expect("the remote dir itself");
}

/// Seed 7: a sandbox-planted symlink ancestor is refused before `mkdir -p`
/// can create anything outside the root.
fn refuses_mkdir_through_planted_symlink(u: Env) {
    let sb = Sandbox::new(u);
    sb.plant_symlink("planted", &sb.outside);
    let src = sb.write_host("f", b"x");
    let err = sb
        .sync_in(&[op("o", vec![file(&src, sb.remote("planted/sub/deeper/f"))])])
        .unwrap_err();
    assert_confinement(&err, 1);
    assert!(err.error.message.contains("ESCAPE"), "{}", err.error);
    assert!(
        sb.outside_entries().is_empty(),
        "{:?}",
        sb.outside_entries()
    );
    assert!(sb.scratch_left().is_empty());
}

/// Seed 8: a directory mapping through a symlink ancestor mutates nothing outside.
fn refuses_directory_through_planted_symlink(u: Env) {
    let sb = Sandbox::new(u);
    sb.plant_symlink("planted", &sb.outside);
    sb.write_host("d/f", b"x");
    let err = sb
        .sync_in(&[op(
            "o",
            vec![dir(sb.host.join("d"), sb.remote("planted/sub"))],
        )])
        .unwrap_err();
    assert_confinement(&err, 1);
    let err = sb
        .sync_in(&[op("o", vec![dir(sb.host.join("d"), sb.remote("planted"))])])
        .unwrap_err();
    assert!(
        matches!(err.error.kind, ErrorKind::Confinement),
        "{}",
        err.error
    );
    assert!(
        sb.outside_entries().is_empty(),
        "{:?}",
        sb.outside_entries()
    );
}

/// A symlink-to-directory planted at a file target's own name is replaced
/// (or refused), never followed.
fn never_moves_into_a_planted_directory_link(u: Env) {
    let sb = Sandbox::new(u);
    sb.plant_symlink("target", &sb.outside);
    let src = sb.write_host("f", b"x");
    let _ = sb.sync_in(&[op("o", vec![file(&src, sb.remote("target"))])]);
    assert!(
        sb.outside_entries().is_empty(),
        "{:?}",
        sb.outside_entries()
    );
}

/// Seed 12: an outbound source outside the remote dir fails before any exec.
fn rejects_outbound_source_escape_before_exec(u: Env) {
    let sb = Sandbox::new(u);
    for bad in [
        "/etc/passwd".to_string(),
        format!("{}/../outside", sb.remote),
    ] {
        let err = sb
            .sync_out(&[op("o", vec![file_out(bad.clone(), sb.host.join("t"))])])
            .unwrap_err();
        assert_confinement(&err, 0);
        let err = sb
            .sync_out(&[op("o", vec![dir_out(bad, sb.host.join("t"))])])
            .unwrap_err();
        assert_confinement(&err, 0);
    }
    assert!(
        !sb.host.join("t").exists() || std::fs::read_dir(sb.host.join("t")).unwrap().count() == 0
    );
}

/// Seed 14: an outbound source that is a symlink resolving outside the root
/// is refused in the sandbox and writes no target.
fn rejects_outbound_symlink_source(u: Env) {
    let sb = Sandbox::new(u);
    let secret = sb.on_host(&format!("{}/secret", sb.outside));
    std::fs::write(&secret, b"outside secret").unwrap();
    sb.plant_symlink("link", &format!("{}/secret", sb.outside));
    sb.plant_symlink("dirlink", &sb.outside);
    let target = sb.host.join("t/stolen");
    let err = sb
        .sync_out(&[op("o", vec![file_out(sb.remote("link"), &target)])])
        .unwrap_err();
    assert_confinement(&err, 1);
    assert!(err.error.message.contains("ESCAPE"), "{}", err.error);
    assert!(!target.exists());
    let err = sb
        .sync_out(&[op(
            "o",
            vec![dir_out(sb.remote("dirlink"), sb.host.join("d"))],
        )])
        .unwrap_err();
    // A toolbox sandbox lists first (the listing finds nothing to list).
    assert_confinement(&err, incremental_sync_out_execs(u));
    assert!(!sb.host.join("d").exists(), "nothing lands, no new target");
}

/// Seed 19: a command cwd that escapes lexically fails before any exec.
fn rejects_command_cwd_escape_before_exec(u: Env) {
    let sb = Sandbox::new(u);
    for bad in [
        format!("{}/../escape", sb.remote),
        "/etc".into(),
        "rel".into(),
    ] {
        let mut o = op("o", vec![]);
        o.post_upload_commands = Some(vec![cmd("touch ran", Some(bad))]);
        let err = sb.sync_in(&[o]).unwrap_err();
        assert_confinement(&err, 0);
    }
    assert!(!sb.remote_on_host("ran").exists());
}

/// Seed 20: a command cwd resolving outside through a symlink is refused in
/// the sandbox; the command never runs.
fn rejects_command_cwd_through_symlink(u: Env) {
    let sb = Sandbox::new(u);
    sb.plant_symlink("cwdlink", &sb.outside);
    let mut o = op("o", vec![]);
    o.post_upload_commands = Some(vec![cmd("touch ran", Some(sb.remote("cwdlink")))]);
    let err = sb.sync_in(&[o]).unwrap_err();
    assert_confinement(&err, 1);
    assert!(
        sb.outside_entries().is_empty(),
        "{:?}",
        sb.outside_entries()
    );
}

/// Shell metacharacters in every interpolated path are literal (T1.8).
fn metacharacters_in_paths_are_literal(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("a'b;touch pwned", b"x");
    let name = "x'; touch pwned; echo '$(touch pwned2)`touch pwned3`";
    sb.sync_in(&[op("o", vec![file(&src, sb.remote(name))])])
        .expect("sync-in");
    assert_eq!(std::fs::read(sb.remote_on_host(name)).unwrap(), b"x");
    let mut found = Vec::new();
    walk(&sb.remote_on_host(""), &mut |p| {
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pwned"))
        {
            found.push(p.to_path_buf());
        }
    });
    assert!(found.is_empty(), "{found:?}");
    let back = sb.host.join("back");
    sb.sync_out(&[op("o", vec![file_out(sb.remote(name), back.join("copy"))])])
        .expect("sync-out");
    assert_eq!(std::fs::read(back.join("copy")).unwrap(), b"x");
}

/// Reserved scratch names cannot be targets.
fn reserved_scratch_names_are_refused(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("f", b"x");
    let err = sb
        .sync_in(&[op("o", vec![file(&src, sb.remote(".paperclip-upload-x"))])])
        .unwrap_err();
    assert_confinement(&err, 0);
}

/// Issue 11.4: a control character in any sandbox path is an
/// `invalid-request` before any exec (a `$(...)` would strip a trailing
/// newline and the sync would write to another directory).
fn control_characters_in_sandbox_paths_are_refused(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.write_host("f", b"x");
    let assert_invalid = |r: Result<SyncOutcome, SyncFailure>, what: &str| {
        let err = r.expect_err(what);
        assert_eq!(
            err.error.kind,
            ErrorKind::InvalidRequest,
            "{what}: {}",
            err.error
        );
        assert_eq!(err.execs, 0, "{what}");
    };
    let mut opts = sb.options();
    opts.remote_dir = format!("{}\n", sb.remote);
    assert_invalid(
        sb.sync_in_with(
            &[op("o", vec![file(&src, format!("{}\n/f", sb.remote))])],
            &opts,
        ),
        "remote dir with a trailing newline",
    );
    for bad in ["a\nb", "tab\there", "del\u{7f}", "c1\u{85}", "cr\r"] {
        assert_invalid(
            sb.sync_in(&[op("o", vec![file(&src, sb.remote(bad))])]),
            "target",
        );
        assert_invalid(
            sb.sync_out(&[op(
                "o",
                vec![file_out(sb.remote(bad), sb.host.join("back"))],
            )]),
            "sync-out source",
        );
        let mut c = cmd("true", Some(sb.remote(bad)));
        c.timeout_ms = None;
        assert_invalid(
            sb.sync_in(&[SyncOperation {
                post_upload_commands: Some(vec![c]),
                ..op("o", vec![])
            }]),
            "command cwd",
        );
    }
    let landed: Vec<_> = std::fs::read_dir(sb.remote_on_host(""))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(landed.is_empty(), "{landed:?}");
    assert!(sb
        .on_host(&format!("{}\n", sb.remote))
        .symlink_metadata()
        .is_err());
}

/// Issue 11.4: a remote dir that resolves (through a sandbox symlink) to a
/// directory whose name ends in a newline is used exactly; the `$(...)`
/// around `realpath` must not strip it into a sibling directory.
fn resolved_paths_keep_trailing_newlines(u: Env) {
    let sb = Sandbox::new(u);
    for d in ["nl\n", "nl"] {
        let p = sb.remote_on_host(d);
        std::fs::create_dir_all(&p).unwrap();
        sb.give_to_sandbox(&p);
    }
    sb.plant_symlink("link", "nl\n");
    let src = sb.write_host("f", b"exact");
    let mut opts = sb.options();
    opts.remote_dir = sb.remote("link");
    sb.sync_in_with(&[op("o", vec![file(&src, sb.remote("link/f"))])], &opts)
        .expect("sync-in");
    assert_eq!(
        std::fs::read(sb.remote_on_host("nl\n/f")).unwrap(),
        b"exact"
    );
    assert!(
        !sb.remote_on_host("nl/f").exists(),
        "the stripped path was written"
    );
}

sandbox_sync_tests::for_each_userland!(
    control_characters_in_sandbox_paths_are_refused,
    resolved_paths_keep_trailing_newlines,
    rejects_escaping_targets_before_exec,
    accepts_targets_inside,
    refuses_mkdir_through_planted_symlink,
    refuses_directory_through_planted_symlink,
    never_moves_into_a_planted_directory_link,
    rejects_outbound_source_escape_before_exec,
    rejects_outbound_symlink_source,
    rejects_command_cwd_escape_before_exec,
    rejects_command_cwd_through_symlink,
    metacharacters_in_paths_are_literal,
    reserved_scratch_names_are_refused,
);
