//! The docs a newcomer reads first name only files that exist: every
//! backticked repository path in README, ARCHITECTURE, THREAT_MODEL,
//! BENCHMARKS and the Node package's README is a file or folder of this
//! repository (a module that became a folder, a test server that was
//! split, a file that was renamed: each was once left named).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const DOCS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "THREAT_MODEL.md",
    "BENCHMARKS.md",
    "js/README.md",
];

/// Paths the docs name that are not in the repository, and why.
const NOT_IN_THE_REPOSITORY: &[&str] = &[
    // Built by `npm test` / `npm pack`, not committed.
    "js/components/",
    // The orchestrator's module this package replaces.
    "file-sync.js",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."))
        .to_path_buf()
}

/// Every file and folder under `root` (relative, folders with a trailing
/// `/`), without build output and installed packages.
fn tree(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if [".git", "target", "node_modules"].contains(&name.as_str()) {
                continue;
            }
            let path = rel.join(&name);
            let shown = path.to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.insert(format!("{shown}/"));
                todo.push(path);
            } else {
                out.insert(shown);
            }
        }
    }
    out
}

/// A backticked token that names a repository path: under a top-level
/// folder of ours, or a source file by name.
fn names_a_path(token: &str, top: &BTreeSet<String>) -> bool {
    let plain = token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
    plain
        && !token.contains("..")
        && (top.iter().any(|t| token.starts_with(t.as_str()))
            || [".rs", ".sh", ".js", ".mjs", ".wit"]
                .iter()
                .any(|x| token.ends_with(x)))
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = repo();
    let all = tree(&root);
    let top: BTreeSet<String> = all
        .iter()
        .filter(|p| p.ends_with('/') && p.matches('/').count() == 1)
        .cloned()
        .collect();
    let mut missing = Vec::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root.join(doc)).unwrap_or_default();
        assert!(!text.is_empty(), "{doc} is missing");
        for (n, line) in text.lines().enumerate() {
            for token in line.split('`').skip(1).step_by(2) {
                // `path:line` references name the path.
                let token = token.split(':').next().unwrap_or(token);
                if !names_a_path(token, &top) || NOT_IN_THE_REPOSITORY.contains(&token) {
                    continue;
                }
                let found = all.iter().any(|p| {
                    p == token
                        || p.strip_suffix('/') == Some(token)
                        || p.ends_with(&format!("/{token}"))
                        || p.ends_with(&format!("/{token}/"))
                });
                if !found {
                    missing.push(format!("{doc}:{}: {token}", n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but absent:\n{}",
        missing.join("\n")
    );
}
