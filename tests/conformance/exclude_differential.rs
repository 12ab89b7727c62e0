//! The guest's `tar --exclude` emulation ([`Excluder`]) against the real
//! GNU tar: for every pattern in a corpus and every tree, the members tar
//! archives when run exactly as the orchestrator runs it must be exactly the
//! entries a walker keeps (skip an entry that `matches`, do not descend an
//! excluded directory), and `excludes` must reject exactly the entries tar
//! left out. Needs only `/usr/bin/tar` (GNU) and a `C.UTF-8` locale.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};

use sandbox_sync_core::exclude::Excluder;

const TAR: &str = "/usr/bin/tar";

/// Patterns applied one at a time to every tree.
const PATTERNS: &[&str] = &[
    // The brief's corpus.
    "*.log",
    "node_modules",
    "build/*",
    "*/x",
    "secret\\*",
    "[^a]*.key",
    "[!a]*.key",
    "[[:digit:]]*.key",
    "[[:upper:]]*",
    "a?c",
    "\\[x\\]",
    "[]]*",
    "[a-c]*",
    "*.[ch]",
    "dir/",
    "./a",
    "a/b",
    "*/sub/*",
    "**",
    "[",
    "a\\",
    "é*",
    "-x",
    // Literal patterns: suffixes, ancestors, escapes, odd forms.
    "x",
    "sub",
    "d/e",
    "deep/1/2",
    "2/3",
    "with space",
    "trail ",
    " lead",
    ".hidden",
    "secret",
    "q\\?",
    "x]",
    "",
    "/",
    "/a",
    "*/",
    "sub/",
    "\\",
    // Wildcards, classes, ranges, negation.
    "*",
    "?",
    "??",
    ".*",
    "*/e/*",
    "*/4",
    ".dir/*",
    "*/.inner",
    "*.key",
    "[A-Z]*",
    "[Z-a]*",
    "[0-9]*",
    "*/[0-9]*",
    "[[:alpha:]]",
    "[[:alpha:]]*",
    "[[:lower:]]*",
    "[[:space:]]*",
    "*[[:space:]]",
    "[[:punct:]]*",
    "[![:alnum:]]*",
    "[[:xdigit:]][[:xdigit:]]*",
    "[[:alnum:]_-]*",
    "[[:nope:]]*",
    "[[=é=]]*",
    "[[.-.]]*",
    "[[.ab.]]",
    "[\\]]*",
    "[a-]*",
    "[!]]*",
    // Unterminated brackets and trailing backslashes.
    "[a",
    "[[",
    "n/[",
    "*\\",
    "\\*",
    "x[*",
    // Beyond ASCII: by character, then by byte, and C.UTF-8's ranges.
    "日*",
    "*語",
    "[é]*",
    "[à-Ā]",
    "[à-ÿ]*",
    "[[:upper:]][[:lower:]]*",
    "?.key",
    "??.key",
    "-*",
    "* *",
];

/// Combinations, to check that patterns add up.
const COMBINATIONS: &[&[&str]] = &[
    &["*.log", "node_modules", "build/*", "secret\\*"],
    &["[!a]*.key", "[[:digit:]]*.key", "*/x", "dir/"],
    &["a/b", "deep/1/2", "*/sub/*", "[", "a\\"],
    &["é*", "-x", "[]]*", "\\[x\\]", "./a", "**"],
];

/// Entries of each tree: a trailing `/` makes a directory; parents are
/// created as needed. Backslashes only appear below the top level because
/// tar unquotes its command-line member names (`p\101` would name `pA`).
const TREES: &[&[&str]] = &[
    &[
        "a.log",
        "b.txt",
        "node_modules/x.js",
        "node_modules_x",
        "pkg/node_modules/dep/index.js",
        "build/out/a.o",
        "buildx",
        "src/build/x",
        "src/main.c",
        "src/main.h",
        "src/main.o",
        "x",
        "d/x",
        "d/e/x/f",
        "d/e/g",
        "secret*",
        "secret",
        "secretX",
        "d/secret*",
        "a.key",
        "b.key",
        "1.key",
        "Zeta.key",
        "d/_.key",
        "ä.key",
        "ab.key",
        "Upper/inner",
        "lower",
        "abc",
        "a/c",
        "a/b/c",
        "y/a/b",
        "[x]/y",
        "x]",
        "]x",
        "dir/sub/y",
        "x2/dir/z",
        "m/sub/n",
        "m/sub/o/p",
        "sub/q",
        "-x",
        "-dash/-x",
        "with space",
        " lead",
        "trail ",
        ".hidden",
        ".dir/.inner",
        "._x",
        "d/._y",
        "._dir/z",
        "n/a\\",
        "n/a\\b",
        "n/[x]",
        "n/q?",
        "n/q*",
        "n/[",
        "n/[[",
        "n/[a",
        "n/x[yz",
        "n/\\",
        "empty/",
    ],
    &[
        "deep/1/2/3/4/5/f",
        "deep/sub/x/sub/y",
        "deep/2/3",
        "sub/sub/sub",
        "7/8/9/0",
        "A/B/C/d",
        "a/b/c/d/e",
        "e/e/e",
        "q/1.key",
        "q/r/s.key",
        "dir/dir/dir/",
        "link-target/inside",
    ],
    &[
        "é.txt",
        "été/x",
        "Ünïcode",
        "日本/語",
        "日本語",
        "ü",
        "üb",
        "à",
        "á",
        "ÿ",
        "Ā",
        "ć",
        "=]",
        "²",
        "①",
        "Ǆ",
        "ǅ",
        "ω",
        "Ω",
        "٣",
        "12.key",
        "Ab",
        "aB",
        "_-",
        "tab\there",
    ],
];

fn build(root: &Path, entries: &[&str]) {
    for e in entries {
        let p = root.join(e.trim_end_matches('/'));
        if e.ends_with('/') {
            std::fs::create_dir_all(&p).unwrap();
        } else {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, e.as_bytes()).unwrap();
        }
    }
}

/// Top-level entries, sorted by bytes as the orchestrator sorts them.
fn top_level(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The member names of the archive GNU tar creates, run as the
/// orchestrator runs it, listed by `tar -t`.
fn tar_members(root: &Path, patterns: &[&str]) -> BTreeSet<String> {
    let mut c = Command::new(TAR);
    c.env("LC_ALL", "C.UTF-8")
        .env_remove("POSIXLY_CORRECT")
        .env_remove("TAR_OPTIONS")
        .args(["-c", "--no-xattrs", "-f", "-", "-C"])
        .arg(root)
        .args(["--exclude", "._*"]);
    for p in patterns {
        c.arg("--exclude").arg(p);
    }
    c.arg("--").args(top_level(root));
    let created = c.output().unwrap();
    assert!(
        created.status.success(),
        "tar -c with {patterns:?}: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let mut t = Command::new(TAR)
        .env("LC_ALL", "C.UTF-8")
        .env_remove("TAR_OPTIONS")
        .args(["-t", "--quoting-style=literal", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = t.stdin.take().unwrap();
    let feed = std::thread::spawn(move || {
        std::io::Write::write_all(&mut stdin, &created.stdout).unwrap();
    });
    let listed = t.wait_with_output().unwrap();
    feed.join().unwrap();
    assert!(listed.status.success(), "tar -t");
    String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect()
}

/// Every entry under `root` as a relative path, as the guest's walker keeps
/// them with `ex` (skip an entry that matches, do not descend an excluded
/// directory), or all of them without.
fn walk_members(root: &Path, dir: &str, ex: Option<&Excluder>, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(root.join(dir)).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let rel = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        if ex.is_some_and(|ex| ex.matches(&rel)) {
            continue;
        }
        out.insert(rel.clone());
        if e.file_type().unwrap().is_dir() {
            walk_members(root, &rel, ex, out);
        }
    }
}

fn check(root: &Path, patterns: &[&str], failures: &mut Vec<String>) {
    let tar = tar_members(root, patterns);
    let ex = Excluder::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{patterns:?} refused: {e}"));
    let mut ours = BTreeSet::new();
    walk_members(root, "", Some(&ex), &mut ours);
    if tar != ours {
        failures.push(format!(
            "{patterns:?} in {}: only tar kept {:?}; only we kept {:?}",
            root.display(),
            tar.difference(&ours).collect::<Vec<_>>(),
            ours.difference(&tar).collect::<Vec<_>>(),
        ));
    }
    // The flat-list form (extraction) rejects exactly what tar left out.
    let mut all = BTreeSet::new();
    walk_members(root, "", None, &mut all);
    for rel in all {
        if ex.excludes(&rel) == tar.contains(&rel) {
            failures.push(format!(
                "{patterns:?}: excludes({rel:?}) = {} but tar {} it",
                ex.excludes(&rel),
                if tar.contains(&rel) {
                    "kept"
                } else {
                    "left out"
                }
            ));
        }
    }
}

#[test]
fn exclude_differential_against_gnu_tar() {
    let version = Command::new(TAR).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with("tar (GNU tar)"),
        "{TAR} is not GNU tar: {version}"
    );
    assert!(PATTERNS.len() >= 40);
    let dirs: Vec<tempfile::TempDir> = TREES
        .iter()
        .map(|entries| {
            let d = tempfile::tempdir().unwrap();
            build(d.path(), entries);
            d
        })
        .collect();
    // A symlink to a directory is archived as a link, never descended.
    symlink("link-target", dirs[1].path().join("link")).unwrap();

    let mut failures = Vec::new();
    for d in &dirs {
        // With no user pattern only `._*` applies.
        check(d.path(), &[], &mut failures);
        for p in PATTERNS {
            check(d.path(), &[p], &mut failures);
        }
        for combo in COMBINATIONS {
            check(d.path(), combo, &mut failures);
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements with {}:\n{}",
        failures.len(),
        version.lines().next().unwrap_or_default(),
        failures.join("\n")
    );
}
