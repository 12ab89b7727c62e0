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
    let again = outof(&sb);
    assert_eq!(tree(&back), tree(&sb.remote_on_host("ws")));
    // A tar without -X (BusyBox's) cannot leave kept files out of a tree
    // holding a name with a newline: it is sent whole, and the result
    // says why; GNU tar keeps what it can.
    let said = again
        .degraded
        .iter()
        .any(|d| d.feature == "incremental-out" && d.missing == ["tar"]);
    let lists = sb.options().incremental
        && has_capability("incremental")
        && !has_capability("base64-chunks");
    assert_eq!(
        said,
        lists && matches!(u.userland, Userland::BusyBox),
        "{:?}",
        again.degraded
    );
    assert_eq!(
        std::fs::read(back.join("tab\there")).unwrap(),
        b"01 TAB\tHERE"
    );
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

/// Every entry under `root` by its bytes: kind and contents, or link
/// target, name by name.
fn byte_tree(root: &std::path::Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_symlink() {
                [
                    b"link ",
                    std::fs::read_link(&p).unwrap().as_os_str().as_bytes(),
                ]
                .concat()
            } else if m.is_dir() {
                stack.push(p);
                b"dir".to_vec()
            } else {
                [&b"file "[..], &std::fs::read(&p).unwrap()].concat()
            };
            out.insert(rel, what);
        }
    }
    out
}

/// Issue 48: names that are not UTF-8 (Latin-1 from an old archive, a
/// stray byte), as files, directories and link targets, travel both ways
/// inside directory mappings, excluded by bytes as tar excludes them, and
/// incremental re-syncs keep and update them.
fn names_that_are_not_utf8_travel_both_ways(u: Env) {
    use std::os::unix::ffi::OsStrExt;
    let os = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_owned();
    let sb = Sandbox::new(u);
    let src = sb.host.join("src");
    std::fs::create_dir_all(src.join(os(b"\xff\xfe dir"))).unwrap();
    std::fs::write(src.join(os(b"caf\xe9.txt")), b"latin-1").unwrap();
    std::fs::write(src.join(os(b"\xff\xfe dir/in\xe9")), b"inner").unwrap();
    std::fs::write(src.join(os(b"caf\xe9.log")), b"excluded").unwrap();
    std::fs::write(src.join("plain.txt"), b"plain").unwrap();
    std::os::unix::fs::symlink(os(b"caf\xe9.txt"), src.join(os(b"l\xe9"))).unwrap();
    let mut m = dir(&src, sb.remote("ws"));
    m.exclude = Some(vec!["*.log".into()]);
    // Incremental whatever the run's default (SANDBOX_SYNC_INCREMENTAL).
    let into = |sb: &Sandbox| {
        let mut opts = sb.options();
        opts.incremental = true;
        sb.sync_in_with(&[op("in", vec![m.clone()])], &opts)
            .expect("sync-in")
    };
    let expected = |root: &std::path::Path| {
        let mut t = byte_tree(root);
        t.remove(&b"caf\xe9.log"[..]);
        t
    };
    let first = into(&sb);
    assert_eq!(first.operations[0].files_transferred, 4);
    assert_eq!(byte_tree(&sb.remote_on_host("ws")), expected(&src));

    // A same-size rewrite lands; unchanged re-syncs keep every file where
    // this sandbox keeps files: all but the link (always sent). The file
    // rewritten just before the last sync is racy, and kept by its
    // content: the sandbox digested what landed under its own name's bytes.
    settle();
    std::fs::write(src.join(os(b"caf\xe9.txt")), b"LATIN-1").unwrap();
    into(&sb);
    assert_eq!(byte_tree(&sb.remote_on_host("ws")), expected(&src));
    for sent in [1, 1] {
        settle();
        let again = into(&sb);
        if keeps_unchanged(u) {
            assert_eq!(again.operations[0].files_transferred, sent, "{again:?}");
        }
    }
    assert_eq!(byte_tree(&sb.remote_on_host("ws")), expected(&src));

    // Back out, with one more such name made in the sandbox.
    sb.write_remote("ws/plain.txt", b"PLAIN");
    let made = sb.remote_on_host("ws").join(os(b"made \xe8"));
    std::fs::write(&made, b"by the agent").unwrap();
    sb.give_to_sandbox(&made);
    let back = sb.host.join("back");
    let mut m = dir_out(sb.remote("ws"), &back);
    m.exclude = Some(vec!["*.log".into()]);
    let outof = |sb: &Sandbox| {
        sb.sync_out(&[op("out", vec![m.clone()])])
            .expect("sync-out")
    };
    outof(&sb);
    assert_eq!(byte_tree(&back), byte_tree(&sb.remote_on_host("ws")));
    assert_eq!(
        std::fs::read(back.join(os(b"made \xe8"))).unwrap(),
        b"by the agent"
    );
    settle();
    std::fs::write(&made, b"BY THE AGENT").unwrap();
    outof(&sb);
    outof(&sb);
    assert_eq!(byte_tree(&back), byte_tree(&sb.remote_on_host("ws")));
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

sandbox_sync_tests::for_each_userland!(
    control_character_names_travel_both_ways,
    names_that_are_not_utf8_travel_both_ways
);
