//! Issue 46: what agents leave behind comes back whole. A symlink that
//! leaves its mapping (a virtualenv's interpreter, a package manager's
//! link into a global store, a link to `/tmp`) is left out of a sync-out
//! and named in the result, as the orchestrator's own module now does;
//! everything else lands, links that stay inside (`..` chains included)
//! as links. `strict_links` keeps the old refusal.

use std::collections::BTreeSet;
use std::path::Path;

use sandbox_sync_tests::*;

/// What an agent's output directory holds after a run: a venv, a
/// `node_modules/.bin`, links to the system, `..` chains in and out.
fn plant_workspace(sb: &Sandbox) {
    sb.write_remote("out/report.md", b"# results\n");
    sb.write_remote("out/venv/lib/python3.11/site-packages/pkg/__init__.py", b"");
    sb.write_remote("out/venv/pyvenv.cfg", b"home = /usr/bin\n");
    sb.plant_symlink("out/venv/bin/python3", "/usr/bin/python3");
    sb.plant_symlink("out/venv/bin/python", "python3");
    sb.plant_symlink("out/venv/lib64", "lib");
    sb.write_remote(
        "out/node_modules/typescript/bin/tsc",
        b"#!/usr/bin/env node\n",
    );
    sb.plant_symlink("out/node_modules/.bin/tsc", "../typescript/bin/tsc");
    sb.plant_symlink("out/node_modules/.store", "/root/.local/share/pnpm/store");
    sb.plant_symlink("out/usr-share", "/usr/share");
    sb.plant_symlink("out/scratch", "/tmp");
    sb.write_remote("out/d/x/a.txt", b"a");
    std::fs::create_dir_all(sb.remote_on_host("out/d/x/y/x")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("out/d/x/y/x"));
    sb.give_to_sandbox(&sb.remote_on_host("out/d/x/y"));
    sb.plant_symlink("out/d/x/y/link", "x/../../a.txt");
    sb.plant_symlink("out/d/top", "../report.md");
    sb.plant_symlink("out/d/up", "../../outside");
    sb.plant_symlink("out/d/around", "../../out/report.md");
}

/// The links `plant_workspace` makes that leave `out/`.
const LEAVING: &[&str] = &[
    "venv/bin/python3",
    "node_modules/.store",
    "usr-share",
    "scratch",
    "d/up",
    "d/around",
];

/// Every symlink under `root`, relative, with its target.
fn links_under(root: &Path) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    walk(root, &mut |p| {
        if std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_symlink()
        {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let target = std::fs::read_link(p).unwrap().display().to_string();
            found.insert((rel, target));
        }
    });
    found
}

fn skipped_of(sb: &Sandbox, out: &SyncOutcome) -> BTreeSet<String> {
    let prefix = format!("{}/", sb.remote("out"));
    out.operations[0]
        .skipped_links
        .iter()
        .map(|p| p.strip_prefix(&prefix).unwrap_or(p).to_owned())
        .collect()
}

/// A venv and friends sync out whole but for the links that leave, which
/// are named; a re-sync (incremental, the target then unchanged) names
/// them again and lands the same tree.
fn links_that_leave_are_skipped_and_named(u: Env) {
    let sb = Sandbox::new(u);
    plant_workspace(&sb);
    let target = sb.host.join("results");
    let ops = [op("o", vec![dir_out(sb.remote("out"), &target)])];
    for round in 0..2 {
        let out = sb.sync_out(&ops).expect("sync-out");
        let want: BTreeSet<String> = LEAVING.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(skipped_of(&sb, &out), want, "round {round}");
        assert_eq!(out.operations[0].skipped_link_count, LEAVING.len() as u64);
        let landed = links_under(&target);
        let expect: BTreeSet<(String, String)> = [
            ("venv/bin/python", "python3"),
            ("venv/lib64", "lib"),
            ("node_modules/.bin/tsc", "../typescript/bin/tsc"),
            ("d/x/y/link", "x/../../a.txt"),
            ("d/top", "../report.md"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
        assert_eq!(landed, expect, "round {round}");
        assert_eq!(std::fs::read(target.join("d/x/y/link")).unwrap(), b"a");
        assert_eq!(
            std::fs::read(target.join("report.md")).unwrap(),
            b"# results\n"
        );
        assert!(target
            .join("venv/lib/python3.11/site-packages/pkg/__init__.py")
            .is_file());
        for gone in LEAVING {
            assert!(
                std::fs::symlink_metadata(target.join(gone)).is_err(),
                "{gone} landed"
            );
        }
        assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
    }
}

/// `strict_links` refuses the same tree as before issue 46, landing
/// nothing.
fn strict_links_refuse(u: Env) {
    let sb = Sandbox::new(u);
    plant_workspace(&sb);
    let target = sb.host.join("results");
    let ops = [op("o", vec![dir_out(sb.remote("out"), &target)])];
    let mut opts = sb.options();
    opts.strict_links = true;
    let err = sb.sync_out_with(&ops, &opts).expect_err("refused");
    assert_eq!(err.error.kind, ErrorKind::UnsafeArchive, "{}", err.error);
    assert!(
        err.error
            .to_string()
            .contains("outside the target directory"),
        "{}",
        err.error
    );
    assert!(!target.exists(), "the target was created");
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Incremental model actions: a link that leaves appears, and a file the
/// last sync landed is replaced by one; each re-sync lands what a full
/// sync lands and names the link.
fn escaping_links_between_resyncs(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("out/keep.txt", b"keep");
    sb.write_remote("out/sub/was-a-file", b"file");
    let target = sb.host.join("results");
    let full = sb.host.join("full");
    let ops = [op("o", vec![dir_out(sb.remote("out"), &target)])];
    let full_ops = [op("o", vec![dir_out(sb.remote("out"), &full)])];
    let mut plain = sb.options();
    plain.incremental = false;
    sb.sync_out(&ops).expect("first");
    settle();
    sb.sync_out(&ops).expect("recorded");
    sb.plant_symlink("out/new-link", "/etc/passwd");
    std::fs::remove_file(sb.remote_on_host("out/sub/was-a-file")).unwrap();
    sb.plant_symlink("out/sub/was-a-file", "../../../etc");
    settle();
    let out = sb.sync_out(&ops).expect("incremental");
    sb.sync_out_with(&full_ops, &plain).expect("full");
    assert_same_tree(&target, &full);
    let want: BTreeSet<String> = ["new-link", "sub/was-a-file"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(skipped_of(&sb, &out), want);
    assert!(std::fs::symlink_metadata(target.join("sub/was-a-file")).is_err());
    assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"keep");
}

/// The names at the top of the remote dir, sorted.
fn remote_top(sb: &Sandbox) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(sb.remote_on_host(""))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Issue 46: the remote dir is the agent's working directory. After every
/// kind of sync (a first sync-in, an incremental one that keeps files, a
/// sync-out, one whose command fails) it holds only what the mappings
/// landed and what the commands wrote: the incremental record lives
/// elsewhere, and still makes the re-sync keep what it can.
fn nothing_of_ours_in_the_remote_dir(u: Env) {
    let sb = Sandbox::new(u);
    let src = sb.host.join("ws");
    for i in 0..3 {
        sb.write_host(&format!("ws/f{i}.txt"), format!("file {i}").as_bytes());
    }
    let big = sb.write_host("big.bin", &vec![7u8; 64 << 10]);
    let ops = [SyncOperation {
        post_upload_commands: Some(vec![cmd("echo ran > cmd.out", None)]),
        ..op(
            "o",
            vec![dir(&src, sb.remote("ws")), file(&big, sb.remote("big.bin"))],
        )
    }];
    let want = ["big.bin", "cmd.out", "ws"];
    sb.sync_in(&ops).expect("first sync-in");
    assert_eq!(remote_top(&sb), want);
    settle();
    sb.sync_in(&ops).expect("records");
    settle();
    let again = sb.sync_in(&ops).expect("keeps");
    assert_eq!(remote_top(&sb), want);
    if keeps_unchanged(u) && sb.options().incremental {
        assert_eq!(again.operations[0].files_transferred, 0, "{again:?}");
    }
    let back = sb.host.join("back");
    sb.sync_out(&[op("o", vec![dir_out(sb.remote("ws"), &back)])])
        .expect("sync-out");
    assert_eq!(remote_top(&sb), want);
    // A small file written just now (sent with no token: too new to
    // record) and a command that fails: the failure's stderr holds the
    // command's words only, no noise of ours.
    let small = sb.write_host("small.txt", b"new");
    let failing = [SyncOperation {
        post_upload_commands: Some(vec![cmd("echo boom >&2; exit 3", None)]),
        ..op(
            "o",
            vec![
                dir(&src, sb.remote("ws")),
                file(&small, sb.remote("small.txt")),
            ],
        )
    }];
    let err = sb.sync_in(&failing).expect_err("the command fails");
    let stderr = err.error.command.map(|c| c.stderr).unwrap_or_default();
    assert!(stderr.contains("boom"), "{stderr:?}");
    assert!(!stderr.contains("cannot open"), "{stderr:?}");
    assert_eq!(remote_top(&sb), ["big.bin", "cmd.out", "small.txt", "ws"]);
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

sandbox_sync_tests::for_each_userland!(
    links_that_leave_are_skipped_and_named,
    strict_links_refuse,
    escaping_links_between_resyncs,
    nothing_of_ours_in_the_remote_dir,
);
