//! Whole-archive policy for sandbox-written trees.
//!
//! [`crate::tar_read`] validates members one at a time; this module checks
//! how they relate: no duplicates (so a link can never be replaced by a file,
//! nor a directory by a link), no member written through a symlink, hard
//! links only to earlier regular files, and every symlink resolving inside
//! the tree once all members are known (chains like `l2 -> l1/..` included).
//! The check runs on the archive's own model of the tree, which is exact
//! because extraction always starts from an empty staging directory.

use std::collections::HashMap;

use crate::tar_read::{Entry, EntryKind};
use crate::SyncError;

/// Most symlinks followed while resolving one path (Linux's MAXSYMLINKS).
const MAX_LINK_HOPS: usize = 40;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir { explicit: bool },
    File,
    Symlink(String),
}

/// The tree an archive builds, as seen so far.
#[derive(Debug, Default)]
pub struct TreePolicy {
    nodes: HashMap<String, Node>,
    symlinks: Vec<String>,
}

impl TreePolicy {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `e` against the members admitted before it and records it.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for a duplicate, a member under a
    /// symlink or a file, a hard link to anything but an earlier regular file,
    /// or a symlink that escapes the tree as it stands.
    pub fn admit(&mut self, e: &Entry) -> Result<(), SyncError> {
        let mut end = 0;
        while let Some(i) = e.path[end..].find('/') {
            let ancestor = &e.path[..end + i];
            match self.nodes.get(ancestor) {
                None => {
                    self.nodes
                        .insert(ancestor.to_owned(), Node::Dir { explicit: false });
                }
                Some(Node::Dir { .. }) => {}
                Some(Node::Symlink(_)) => {
                    return Err(SyncError::unsafe_archive(format!(
                        "member {:?} is written through the symlink {ancestor:?}",
                        e.path
                    )))
                }
                Some(Node::File) => {
                    return Err(SyncError::unsafe_archive(format!(
                        "member {:?} is under the non-directory {ancestor:?}",
                        e.path
                    )))
                }
            }
            end += i + 1;
        }
        let node = match &e.kind {
            EntryKind::File => Node::File,
            EntryKind::Dir => Node::Dir { explicit: true },
            EntryKind::Symlink(t) => Node::Symlink(t.clone()),
            EntryKind::HardLink(t) => match self.nodes.get(t.as_str()) {
                Some(Node::File) => Node::File,
                _ => {
                    return Err(SyncError::unsafe_archive(format!(
                        "hard link {:?} -> {t:?} does not point to an earlier regular file",
                        e.path
                    )))
                }
            },
        };
        match self.nodes.get(e.path.as_str()) {
            None => {}
            Some(Node::Dir { explicit: false }) if node == (Node::Dir { explicit: true }) => {}
            Some(_) => {
                return Err(SyncError::unsafe_archive(format!(
                    "member {:?} appears twice (a later copy would replace the first)",
                    e.path
                )))
            }
        }
        let is_link = matches!(node, Node::Symlink(_));
        self.nodes.insert(e.path.clone(), node);
        if is_link {
            self.symlinks.push(e.path.clone());
            self.check_link(&e.path)?;
        }
        Ok(())
    }

    /// Re-checks every symlink against the complete tree.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] when a symlink, possibly through a
    /// chain of later members, resolves outside the tree.
    pub fn finish(&self) -> Result<(), SyncError> {
        for link in &self.symlinks {
            self.check_link(link)?;
        }
        Ok(())
    }

    /// Regular files and symlinks admitted so far.
    pub fn non_directories(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| !matches!(n, Node::Dir { .. }))
            .count()
    }

    fn check_link(&self, link: &str) -> Result<(), SyncError> {
        let escape = || {
            SyncError::unsafe_archive(format!(
                "symlink {link:?} resolves outside the target directory"
            ))
        };
        let Some(Node::Symlink(target)) = self.nodes.get(link) else {
            return Ok(());
        };
        let mut stack: Vec<&str> = link.split('/').collect();
        stack.pop();
        let mut pending: Vec<&str> = target.split('/').rev().collect();
        let mut hops = 0;
        while let Some(comp) = pending.pop() {
            match comp {
                "" | "." => {}
                ".." => {
                    if stack.pop().is_none() {
                        return Err(escape());
                    }
                }
                name => {
                    stack.push(name);
                    let here = stack.join("/");
                    if let Some(Node::Symlink(t)) = self.nodes.get(&here) {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err(SyncError::unsafe_archive(format!(
                                "symlink {link:?} is part of a loop or a chain longer than {MAX_LINK_HOPS}"
                            )));
                        }
                        stack.pop();
                        pending.extend(t.split('/').rev());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, kind: EntryKind) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size: 0,
            mode: 0o644,
            mtime: 0,
        }
    }
    fn sym(path: &str, t: &str) -> Entry {
        e(path, EntryKind::Symlink(t.into()))
    }
    fn run(entries: &[Entry]) -> Result<(), SyncError> {
        let mut t = TreePolicy::new();
        for x in entries {
            t.admit(x)?;
        }
        t.finish()
    }

    #[test]
    fn accepts_in_tree_links() {
        run(&[
            e("a", EntryKind::Dir),
            e("a/f", EntryKind::File),
            sym("a/l", "f"),
            sym("b", "a/../a/f"),
            sym("node_modules/.bin/x", "../x/cli.js"),
            e("h", EntryKind::HardLink("a/f".into())),
        ])
        .unwrap();
    }

    #[test]
    fn refuses_kubectl_cp_shapes() {
        // CVE-2019-1002101: link then write through it.
        assert!(run(&[sym("d/twist", "../.."), e("d/twist/x", EntryKind::File)]).is_err());
        // CVE-2019-11246: relative escape.
        assert!(run(&[sym("l", "../../..")]).is_err());
        // CVE-2019-11249: link target resolved against its own directory.
        assert!(run(&[sym("xxx", "../abc")]).is_err());
        // CVE-2019-11251: chained links.
        assert!(run(&[sym("xxx/link1", ".."), sym("xxx/link2", "link1/..")]).is_err());
        // Reordered chain: the escape only appears once link1 exists.
        assert!(run(&[sym("xxx/link2", "link1/.."), sym("xxx/link1", "..")]).is_err());
        // jwilk dirsymlink2a.
        assert!(run(&[
            sym("cur", "."),
            sym("par", "cur/.."),
            e("par/moo", EntryKind::File)
        ])
        .is_err());
    }

    #[test]
    fn refuses_duplicates_and_replacements() {
        assert!(run(&[sym("a", "b"), e("a", EntryKind::File)]).is_err());
        assert!(run(&[e("a", EntryKind::Dir), sym("a", "b")]).is_err());
        assert!(run(&[e("a", EntryKind::File), e("a", EntryKind::File)]).is_err());
        assert!(run(&[e("a/f", EntryKind::File), e("a", EntryKind::File)]).is_err());
        // An implicit parent may be declared explicitly later.
        run(&[e("a/f", EntryKind::File), e("a", EntryKind::Dir)]).unwrap();
        assert!(run(&[e("f", EntryKind::File), e("f/x", EntryKind::File)]).is_err());
    }

    #[test]
    fn refuses_bad_hard_links() {
        assert!(run(&[e("h", EntryKind::HardLink("missing".into()))]).is_err());
        assert!(run(&[sym("s", "x"), e("h", EntryKind::HardLink("s".into()))]).is_err());
        assert!(run(&[
            e("d", EntryKind::Dir),
            e("h", EntryKind::HardLink("d".into()))
        ])
        .is_err());
    }

    #[test]
    fn refuses_loops() {
        assert!(run(&[sym("a", "b"), sym("b", "a")]).is_err());
    }

    #[test]
    fn path_max_chain_is_refused() {
        // gh-135034 shape: long directory names plus a final climbing link.
        let mut entries = Vec::new();
        let mut path = String::new();
        for i in 0..16 {
            let d = format!("{}{i}", "d".repeat(200));
            path = if path.is_empty() {
                d.clone()
            } else {
                format!("{path}/{d}")
            };
            entries.push(e(&path, EntryKind::Dir));
        }
        entries.push(sym(&format!("{path}/up"), &"../".repeat(17)));
        assert!(run(&entries).is_err());
    }
}
