use std::collections::BTreeMap;

use sandbox_sync_tests::*;

/// Names a file system allows and real trees hold (macOS's `Icon\r`, a
/// tab from a spreadsheet export, a newline from a careless script, an
/// escape sequence, NEL, shell metacharacters), as files and directories.
const NAMES: &[&str] = &[
    "Icon\r",
    "tab\there",
    "new\nline",
    "esc\u{1b}[2Jx",
    "nel\u{85}x",
    "bell\u{7}",
    " spaced ",
    "quote'\"$(x)`y`;|&",
    "back\\slash",
    "-dash",
    "*?[glob]",
    "日本語",
];

/// Every entry under `root`: its kind and contents or link target (modes
/// are another test's business).
fn tree(root: &std::path::Path) -> BTreeMap<String, String> {
    snapshot(root)
        .into_iter()
        .map(|(path, node)| {
            let what = match node {
                Node::File { data, .. } => format!("file {}", String::from_utf8_lossy(&data)),
                Node::Dir { .. } => "dir".to_owned(),
                Node::Link(t) => format!("link {t}"),
            };
            (path, what)
        })
        .collect()
}

/// Such names travel both ways inside directory mappings (and as a host
/// path; a sandbox path in a request still refuses them, THREAT_MODEL D1),
/// and an incremental re-sync updates a same-size rewrite of them.
fn control_character_names_travel_both_ways(u: Env) {
    let sb = Sandbox::new(u);
    for (i, n) in NAMES.iter().enumerate() {
        sb.write_host(&format!("src/{n}"), format!("{i:02} {n}").as_bytes());
        sb.write_host(&format!("src/dir {n}/in {n}"), b"inner");
    }
    std::os::unix::fs::symlink("tab\there", sb.host.join("src/link\tto\ntab")).unwrap();
    let single = sb.write_host("single", b"one file");
    let src = sb.host.join("src");
    let into = |sb: &Sandbox| {
        sb.sync_in(&[op(
            "in",
            vec![dir(&src, sb.remote("ws")), file(&single, sb.remote("one"))],
        )])
        .expect("sync-in")
    };
    let out = into(&sb);
    assert_eq!(
        out.operations[0].files_transferred,
        2 * NAMES.len() as u64 + 2
    );
    assert_eq!(tree(&sb.remote_on_host("ws")), tree(&src));
    assert_eq!(
        std::fs::read(sb.remote_on_host("one")).unwrap(),
        b"one file"
    );

    let back = sb.host.join("back");
    let outof = |sb: &Sandbox| {
        sb.sync_out(&[op(
            "out",
            vec![
                dir_out(sb.remote("ws"), &back),
                file_out(sb.remote("one"), sb.host.join("single\nback")),
            ],
        )])
        .expect("sync-out")
    };
    outof(&sb);
    assert_eq!(tree(&back), tree(&src));
    assert_eq!(
        std::fs::read(sb.host.join("single\nback")).unwrap(),
        b"one file"
    );

    // Same-size rewrites on either side, then re-syncs (incremental where
    // the environment has it): each lands.
    sb.write_host("src/new\nline", b"02 NEW\nLINE");
    sb.write_host("src/dir Icon\r/in Icon\r", b"INNER");
    into(&sb);
    assert_eq!(tree(&sb.remote_on_host("ws")), tree(&src));
    sb.write_remote("ws/tab\there", b"01 TAB\tHERE");
    sb.write_remote("ws/esc\u{1b}[2Jx", b"03 ESC\x1b[2JX");
    outof(&sb);
    assert_eq!(tree(&back), tree(&sb.remote_on_host("ws")));
    assert_eq!(
        std::fs::read(back.join("tab\there")).unwrap(),
        b"01 TAB\tHERE"
    );
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

sandbox_sync_tests::for_each_userland!(control_character_names_travel_both_ways);
