//! Whole-archive policy for sandbox-written trees.
//!
//! [`crate::tar_read`] validates members one at a time; this module checks
//! how they relate: no duplicates (so a link can never be replaced by a file,
//! nor a directory by a link), no member written through a symlink or under
//! a file, hard links only to earlier regular files, no reserved scratch
//! names, and symlink targets that can never lead outside the tree.
//!
//! # Symlinks
//!
//! A target is resolved lexically from the link's own directory, as the
//! orchestrator's module judges it: one that is absolute or climbs above
//! the tree *leaves* it. Such a link is either refused
//! ([`Escaping::Refuse`]) or skipped ([`Escaping::Skip`]): it stays in
//! the tree as a node, so every rule below still holds against its name
//! (no member is written through it or below it, nothing else takes its
//! name, no hard link names it), but it is never created, and
//! [`TreePolicy::skipped`] names it.
//!
//! A target that stays inside lexically lands only where the kernel cannot
//! resolve it anywhere else. `..` components at its start climb out of the
//! link's own directory, whose ancestors are directories of the tree. A
//! `..` after a name (`x/../../a.txt`) climbs out of whatever that name is
//! when the link is followed: out of a directory of the tree it goes where
//! it reads; at a file, or a name the tree does not create (missing, or a
//! skipped link), resolution stops (the link dangles, as it would in the
//! sandbox); out of another link it would climb from wherever that link
//! points, so such a link is refused in every mode (the CVE-2019-11251
//! class, `link1/..` where `link1 -> ..`; checked once the whole archive
//! is known, [`TreePolicy::finish`]). Past the last `..`, the names only
//! descend, so the link resolves inside the tree whatever they turn out to
//! be: each of them is a directory of the tree, or a link that was held to
//! the same rule.
//!
//! Trees land whole (a sync-out swaps the target for the staged tree), so
//! what a name a link climbs out of is stays what this archive made it; a
//! nested target replaces only what lies below its own top, which is a
//! directory (made so where it was missing), never a link.
//!
//! # Memory
//!
//! The tree is an arena of nodes keyed by (parent, name): each node stores
//! only its own component, so memory grows with the bytes of names the
//! archive sent (bounded by `max-metadata-bytes`) and the node count
//! (bounded by `max-entries`, which counts the parent directories a member
//! implies as well as the members themselves).

use std::hash::{Hash, RandomState};
use std::rc::Rc;

use hashbrown::{Equivalent, HashMap};

use crate::tar_read::{Entry, EntryKind};
use crate::{Error, SCRATCH_PREFIX};

/// Index of a node in the tree; the root is [`ROOT`].
pub type NodeId = u32;

/// The tree's root: the target directory itself.
pub const ROOT: NodeId = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A directory; `mode` is set once an explicit member declared it.
    Dir {
        mode: Option<u32>,
    },
    File,
    /// A file the target already held, joined unchanged (an incremental
    /// sync-out's kept file): a file to every rule, but no member may
    /// hard-link to it, since it is the host's inode and not the archive's.
    Kept,
    Symlink(Box<str>),
    /// A symlink that leaves the tree, skipped: never created, but its
    /// name is taken like any other member's.
    Skipped(Box<str>),
}

/// What a tree does with a symlink whose target leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Escaping {
    /// Refuse the archive (`unsafe-archive`).
    #[default]
    Refuse,
    /// Leave the link out and name it in [`TreePolicy::skipped`].
    Skip,
}

#[derive(Debug)]
struct Node {
    parent: NodeId,
    depth: u32,
    name: Rc<str>,
    kind: Kind,
}

/// A node's key: its parent and its own name (shared with the node).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Key {
    parent: NodeId,
    name: Rc<str>,
}

/// A borrowed [`Key`] for lookups; hashes exactly like it.
#[derive(Hash)]
struct KeyRef<'a> {
    parent: NodeId,
    name: &'a str,
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.parent == key.parent && self.name == &*key.name
    }
}

/// What admitting a member means for extraction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The member's node.
    pub node: NodeId,
    /// Components of the member's path, counted from the start, whose
    /// directories did not exist before this member: every prefix of the
    /// path ending at component `i` for `i` in `first_new_parent..last`
    /// must be created (as a directory) before the member itself.
    pub first_new_parent: usize,
    /// For a directory member: it already existed as an implied parent,
    /// so only its mode is new.
    pub existed: bool,
}

/// The tree an archive builds, as seen so far.
#[derive(Debug)]
pub struct TreePolicy {
    nodes: Vec<Node>,
    /// Keyed with SipHash under random keys: names come from the sandbox.
    index: HashMap<Key, NodeId, RandomState>,
    max_entries: u64,
    escaping: Escaping,
    /// Links whose targets climb with `..` after a name, to check once
    /// the whole tree is known ([`Self::finish`]).
    unresolved: Vec<NodeId>,
    /// Links that leave the tree, in archive order.
    skipped: Vec<NodeId>,
}

impl TreePolicy {
    /// An empty tree that accepts at most `max_entries` nodes (members and
    /// the parent directories they imply).
    pub fn new(max_entries: u64) -> Self {
        TreePolicy {
            nodes: vec![Node {
                parent: ROOT,
                depth: 0,
                name: Rc::from(""),
                kind: Kind::Dir { mode: None },
            }],
            index: HashMap::with_hasher(RandomState::new()),
            max_entries,
            escaping: Escaping::Refuse,
            unresolved: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// The same tree, doing `escaping` with links that leave it.
    #[must_use]
    pub fn escaping(mut self, escaping: Escaping) -> Self {
        self.escaping = escaping;
        self
    }

    /// Checks `e` against the members admitted before it and records it.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for a duplicate, a member under a
    /// symlink or a file, a hard link to anything but an earlier regular
    /// file, a reserved scratch name, or (under [`Escaping::Refuse`]) a
    /// symlink target that leaves the tree;
    /// [`crate::ErrorKind::LimitExceeded`] past `max_entries` nodes.
    pub fn admit(&mut self, e: &Entry) -> Result<Admitted, Error> {
        let comps: Vec<&str> = e.path.split('/').collect();
        let Some((leaf, parents)) = comps.split_last() else {
            return Err(Error::unsafe_archive("empty member name"));
        };
        if let Some(c) = comps.iter().find(|c| c.starts_with(SCRATCH_PREFIX)) {
            return Err(Error::unsafe_archive(format!(
                "member {:?} uses the reserved scratch name {c:?}",
                e.path
            )));
        }
        let mut at = ROOT;
        let mut first_new_parent = parents.len();
        for (i, c) in parents.iter().enumerate() {
            at = match self.child(at, c) {
                Some(id) => match &self.nodes[id as usize].kind {
                    Kind::Dir { .. } => id,
                    Kind::Symlink(_) | Kind::Skipped(_) => {
                        return Err(Error::unsafe_archive(format!(
                            "member {:?} is written through the symlink {:?}",
                            e.path,
                            comps[..=i].join("/")
                        )))
                    }
                    Kind::File | Kind::Kept => {
                        return Err(Error::unsafe_archive(format!(
                            "member {:?} is under the non-directory {:?}",
                            e.path,
                            comps[..=i].join("/")
                        )))
                    }
                },
                None => {
                    first_new_parent = first_new_parent.min(i);
                    self.insert(at, c, Kind::Dir { mode: None })?
                }
            };
        }
        let mut unresolved = false;
        let kind = match &e.kind {
            EntryKind::File => Kind::File,
            EntryKind::Dir => Kind::Dir { mode: Some(e.mode) },
            EntryKind::Symlink(t) => match lexical(parents.len(), t) {
                Lexical::Leaves => match self.escaping {
                    Escaping::Refuse => {
                        return Err(Error::unsafe_archive(format!(
                            "symlink {:?} -> {t:?} resolves outside the target directory",
                            e.path
                        )))
                    }
                    Escaping::Skip => Kind::Skipped(t.as_str().into()),
                },
                Lexical::Inside { climbs_after_name } => {
                    unresolved = climbs_after_name;
                    Kind::Symlink(t.as_str().into())
                }
            },
            EntryKind::HardLink(t) => match self.lookup(t) {
                Some(id) if self.nodes[id as usize].kind == Kind::File => Kind::File,
                _ => {
                    return Err(Error::unsafe_archive(format!(
                        "hard link {:?} -> {t:?} does not point to an earlier regular file",
                        e.path
                    )))
                }
            },
        };
        let skipped = matches!(kind, Kind::Skipped(_));
        let (node, existed) = match self.child(at, leaf) {
            None => (self.insert(at, leaf, kind)?, false),
            // An implied parent may be declared explicitly later, once.
            Some(id) => match (&mut self.nodes[id as usize].kind, kind) {
                (Kind::Dir { mode: m @ None }, Kind::Dir { mode }) => {
                    *m = mode;
                    (id, true)
                }
                _ => {
                    return Err(Error::unsafe_archive(format!(
                        "member {:?} appears twice (a later copy would replace the first)",
                        e.path
                    )))
                }
            },
        };
        if skipped {
            self.skipped.push(node);
        } else if unresolved {
            self.unresolved.push(node);
        }
        Ok(Admitted {
            node,
            first_new_parent,
            existed,
        })
    }

    /// Ends the archive: a link whose target climbs with `..` after a
    /// name must not climb out of another link (see the module docs).
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for a link that does.
    pub fn finish(&mut self) -> Result<(), Error> {
        for node in std::mem::take(&mut self.unresolved) {
            let Kind::Symlink(target) = &self.nodes[node as usize].kind else {
                continue;
            };
            if self.climbs_out_of_a_link(self.nodes[node as usize].parent, target) {
                return Err(Error::unsafe_archive(format!(
                    "symlink {:?} -> {target:?} climbs with .. out of a symlink",
                    self.path(node)
                )));
            }
        }
        Ok(())
    }

    /// The links that leave the tree and were skipped, as (relative path,
    /// target), in archive order.
    pub fn skipped(&self) -> impl Iterator<Item = (String, &str)> + '_ {
        self.skipped.iter().map(|&n| {
            let target = match &self.nodes[n as usize].kind {
                Kind::Skipped(t) => &**t,
                _ => "",
            };
            (self.path(n), target)
        })
    }

    /// How many links were skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.len()
    }

    /// Whether `target`, followed from directory `from`, climbs with `..`
    /// out of a symlink the tree creates (its lexical resolution is known
    /// to stay inside). Through directories it resolves as it reads; at a
    /// name the tree creates nothing for (none, a skipped link) or a file,
    /// it ends there, dangling; past a link it stays inside only if it
    /// only descends from there.
    fn climbs_out_of_a_link(&self, from: NodeId, target: &str) -> bool {
        let comps: Vec<&str> = target
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let mut at = from;
        for (i, c) in comps.iter().enumerate() {
            if *c == ".." {
                // Lexically inside: never above the root.
                at = self.nodes[at as usize].parent;
                continue;
            }
            match self
                .child(at, c)
                .map(|id| (id, &self.nodes[id as usize].kind))
            {
                Some((id, Kind::Dir { .. })) => at = id,
                Some((_, Kind::Symlink(_))) => return comps[i + 1..].contains(&".."),
                _ => return false,
            }
        }
        false
    }

    /// Admits `e`, a regular file the target already held, as kept: a
    /// file under every rule above, which no later member may hard-link to.
    ///
    /// # Errors
    /// As [`Self::admit`].
    pub fn admit_kept(&mut self, e: &Entry) -> Result<Admitted, Error> {
        let admitted = self.admit(e)?;
        if let Some(n) = self.nodes.get_mut(admitted.node as usize) {
            n.kind = Kind::Kept;
        }
        Ok(admitted)
    }

    /// Nodes admitted so far, implied directories included (not the root).
    pub fn len(&self) -> usize {
        self.nodes.len() - 1
    }

    /// True before the first member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Regular files (hard links included) and symlinks admitted so far,
    /// kept files not counted.
    pub fn non_directories(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::File | Kind::Symlink(_)))
            .count()
    }

    /// True when `path` (relative; `""` is the root) is a directory of the
    /// tree.
    pub fn is_dir(&self, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        self.lookup(path)
            .is_some_and(|id| matches!(self.nodes[id as usize].kind, Kind::Dir { .. }))
    }

    /// The relative path of `node`.
    pub fn path(&self, node: NodeId) -> String {
        let mut names = Vec::new();
        let mut at = node;
        while at != ROOT {
            let n = &self.nodes[at as usize];
            names.push(&*n.name);
            at = n.parent;
        }
        names.reverse();
        names.join("/")
    }

    /// Every symlink as (node, target), in archive order.
    pub fn symlinks(&self) -> impl Iterator<Item = (NodeId, &str)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                Kind::Symlink(t) => Some((i as NodeId, &**t)),
                _ => None,
            })
    }

    /// Every directory but the root, with the mode an explicit member
    /// declared (none: only implied by the members under it).
    pub fn dirs(&self) -> impl Iterator<Item = (NodeId, Option<u32>)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(i, n)| match n.kind {
                Kind::Dir { mode } => Some((i as NodeId, mode)),
                _ => None,
            })
    }

    /// Every explicitly declared directory with its mode, deepest first (so
    /// a directory made read-only never blocks setting its children).
    pub fn dir_modes(&self) -> Vec<(NodeId, u32)> {
        let mut dirs: Vec<(NodeId, u32, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(i, n)| match n.kind {
                Kind::Dir { mode: Some(m) } => Some((i as NodeId, m, n.depth)),
                _ => None,
            })
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.2));
        dirs.into_iter().map(|(id, m, _)| (id, m)).collect()
    }

    fn child(&self, parent: NodeId, name: &str) -> Option<NodeId> {
        self.index.get(&KeyRef { parent, name }).copied()
    }

    fn lookup(&self, path: &str) -> Option<NodeId> {
        path.split('/').try_fold(ROOT, |at, c| self.child(at, c))
    }

    fn insert(&mut self, parent: NodeId, name: &str, kind: Kind) -> Result<NodeId, Error> {
        if self.len() as u64 >= self.max_entries {
            return Err(Error::limit(format!(
                "archive has more than {} entries (counting the parent directories members imply)",
                self.max_entries
            )));
        }
        let id = NodeId::try_from(self.nodes.len())
            .map_err(|_| Error::limit("archive has too many entries"))?;
        let name: Rc<str> = Rc::from(name);
        let depth = self.nodes[parent as usize].depth + 1;
        self.index.insert(
            Key {
                parent,
                name: Rc::clone(&name),
            },
            id,
        );
        self.nodes.push(Node {
            parent,
            depth,
            name,
            kind,
        });
        Ok(id)
    }
}

/// Where a symlink target leads, resolved lexically from the link's own
/// directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lexical {
    /// Absolute, or climbs above the root.
    Leaves,
    /// Stays inside; `climbs_after_name`: a `..` follows a name (see
    /// [`TreePolicy::finish`]).
    Inside { climbs_after_name: bool },
}

/// Resolves `target` lexically from a directory `depth` components below
/// the tree's root.
fn lexical(depth: usize, target: &str) -> Lexical {
    if target.starts_with('/') {
        return Lexical::Leaves;
    }
    let mut at = depth;
    let mut descended = false;
    let mut climbs_after_name = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if at == 0 {
                    return Lexical::Leaves;
                }
                at -= 1;
                climbs_after_name |= descended;
            }
            _ => {
                at += 1;
                descended = true;
            }
        }
    }
    Lexical::Inside { climbs_after_name }
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
    fn run(entries: &[Entry]) -> Result<TreePolicy, Error> {
        run_with(Escaping::Refuse, entries)
    }
    fn run_with(escaping: Escaping, entries: &[Entry]) -> Result<TreePolicy, Error> {
        let mut t = TreePolicy::new(1_000_000).escaping(escaping);
        for x in entries {
            t.admit(x)?;
        }
        t.finish()?;
        Ok(t)
    }

    #[test]
    fn accepts_in_tree_links() {
        let t = run(&[
            e("a", EntryKind::Dir),
            e("a/f", EntryKind::File),
            sym("a/l", "f"),
            sym("b", "./a/f"),
            sym("up", "a/../.."),
        ]);
        assert!(t.is_err(), "a .. after a name is refused");
        let t = run(&[
            e("a", EntryKind::Dir),
            e("a/f", EntryKind::File),
            sym("a/l", "f"),
            sym("b", "./a/f"),
            sym("node_modules/.bin/x", "../x/cli.js"),
            sym("node_modules/.bin/top", "../../a"),
            sym("self", "."),
            // Dangling but inside, and loops, cannot lead anywhere.
            sym("dangling", "nowhere/x"),
            sym("loop1", "loop2"),
            sym("loop2", "loop1"),
            e("h", EntryKind::HardLink("a/f".into())),
        ])
        .unwrap();
        assert_eq!(t.non_directories(), 10);
        assert_eq!(t.len(), 13);
    }

    #[test]
    fn refuses_kubectl_cp_shapes() {
        // CVE-2019-1002101: link then write through it.
        assert!(run(&[sym("d/twist", "../.."), e("d/twist/x", EntryKind::File)]).is_err());
        assert!(run(&[sym("d/twist", "."), e("d/twist/x", EntryKind::File)]).is_err());
        // CVE-2019-11246: relative escape.
        assert!(run(&[sym("l", "../../..")]).is_err());
        // CVE-2019-11249: link target resolved against its own directory.
        assert!(run(&[sym("xxx", "../abc")]).is_err());
        // CVE-2019-11251: chained links.
        assert!(run(&[sym("xxx/link1", ".."), sym("xxx/link2", "link1/..")]).is_err());
        assert!(run(&[sym("xxx/link2", "link1/.."), sym("xxx/link1", "..")]).is_err());
        // jwilk dirsymlink2a.
        assert!(run(&[
            sym("cur", "."),
            sym("par", "cur/.."),
            e("par/moo", EntryKind::File)
        ])
        .is_err());
        assert!(run(&[sym("abs", "/etc")]).is_err());
    }

    /// Skipping links that leave changes none of the kubectl cp refusals:
    /// members through links, chained links.
    #[test]
    fn skipping_still_refuses_kubectl_cp_shapes() {
        let refused: [&[Entry]; 5] = [
            &[sym("d/twist", "../.."), e("d/twist/x", EntryKind::File)],
            &[sym("d/twist", "/"), e("d/twist/x", EntryKind::File)],
            &[sym("xxx/link1", ".."), sym("xxx/link2", "link1/..")],
            &[sym("xxx/link2", "link1/.."), sym("xxx/link1", "..")],
            &[
                sym("cur", "."),
                sym("par", "cur/.."),
                e("par/moo", EntryKind::File),
            ],
        ];
        for entries in refused {
            assert!(run_with(Escaping::Skip, entries).is_err(), "{entries:?}");
        }
        for escape in ["../../..", "../abc", "/etc"] {
            let t = run_with(Escaping::Skip, &[sym("xxx", escape)]).unwrap();
            assert_eq!(t.skipped_count(), 1, "{escape}");
            assert_eq!(t.symlinks().count(), 0, "{escape}");
        }
    }

    /// Issue 46: what agents leave behind (a venv's interpreter, links to
    /// the system) is skipped and named, and the rest lands.
    #[test]
    fn skips_links_that_leave_and_names_them() {
        let t = run_with(
            Escaping::Skip,
            &[
                e("venv/bin", EntryKind::Dir),
                sym("venv/bin/python3", "/usr/bin/python3"),
                sym("venv/bin/python", "python3"),
                sym("venv/lib64", "lib"),
                sym("tmp", "/tmp"),
                sym("up", "../../.."),
                sym("around", "../out/x"),
                sym("inside", "venv/../venv/bin/python"),
                e("f", EntryKind::File),
            ],
        )
        .unwrap();
        let skipped: Vec<(String, &str)> = t.skipped().collect();
        assert_eq!(
            skipped,
            [
                ("venv/bin/python3".to_owned(), "/usr/bin/python3"),
                ("tmp".to_owned(), "/tmp"),
                ("up".to_owned(), "../../.."),
                ("around".to_owned(), "../out/x"),
            ]
        );
        assert_eq!(t.skipped_count(), 4);
        let landing: Vec<&str> = t.symlinks().map(|(_, target)| target).collect();
        assert_eq!(landing, ["python3", "lib", "venv/../venv/bin/python"]);
        assert_eq!(t.non_directories(), 4, "skipped links are not brought");
        // Refused, not skipped, under the strict policy.
        let err = run(&[sym("venv/bin/python3", "/usr/bin/python3")]).unwrap_err();
        assert!(
            err.message.contains("outside the target directory"),
            "{err}"
        );
    }

    /// A skipped link's name is taken: nothing is written through it,
    /// below it, in its place, or linked to it.
    #[test]
    fn a_skipped_link_keeps_its_name() {
        for later in [
            e("l/x", EntryKind::File),
            e("l/d/x", EntryKind::File),
            e("l", EntryKind::File),
            e("l", EntryKind::Dir),
            sym("l", "x"),
            e("h", EntryKind::HardLink("l".into())),
        ] {
            let err = run_with(Escaping::Skip, &[sym("l", "/etc"), later.clone()]).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::UnsafeArchive, "{later:?}");
        }
    }

    /// `..` after a name lands unless it climbs out of a link.
    #[test]
    fn climbs_after_a_name_unless_out_of_a_link() {
        let base = [
            e("d/x/y/x", EntryKind::Dir),
            e("d/x/a.txt", EntryKind::File),
            sym("d/x/y/link", "x/../../a.txt"),
        ];
        for escaping in [Escaping::Refuse, Escaping::Skip] {
            let t = run_with(escaping, &base).unwrap();
            assert_eq!(t.symlinks().count(), 1);
            assert_eq!(t.skipped_count(), 0);
        }
        // The directory may come after the link in the archive; a missing
        // name, a file or a skipped link there leaves it dangling.
        let later = [
            sym("d/x/y/link", "x/../../a.txt"),
            e("d/x/y/x", EntryKind::Dir),
        ];
        assert!(run(&later).is_ok());
        for x in [
            None,
            Some(e("d/x/y/x", EntryKind::File)),
            Some(sym("d/x/y/x", "/etc")),
        ] {
            let entries: Vec<Entry> = x
                .into_iter()
                .chain([sym("d/x/y/link", "x/../../a.txt")])
                .collect();
            let t = run_with(Escaping::Skip, &entries).unwrap();
            assert_eq!(t.symlinks().count(), 1, "{entries:?}");
        }
        // Out of a link, whatever it points at: refused in both modes, as
        // the chained-link class is.
        for escaping in [Escaping::Refuse, Escaping::Skip] {
            let err = run_with(
                escaping,
                &[sym("d/x/y/x", "."), sym("d/x/y/link", "x/../../a.txt")],
            )
            .unwrap_err();
            assert!(err.message.contains("out of a symlink"), "{err}");
        }
        // Past the last `..` the names may be anything.
        assert!(run(&[sym("d/l", "../d/l2/f"), sym("d/l2", ".")]).is_ok());
        // Lexically above the root: leaves, whatever lies between.
        let t = run_with(
            Escaping::Skip,
            &[e("a", EntryKind::Dir), sym("l", "a/../../x")],
        )
        .unwrap();
        assert_eq!(t.skipped_count(), 1);
    }

    /// Issue 11.3: `x/../..` resolves inside while `x` is a link two deep,
    /// and outside once a later sync makes `x` a real directory.
    #[test]
    fn refuses_climbing_after_a_name_even_when_inside_today() {
        assert!(run(&[
            e("sub/deeper", EntryKind::Dir),
            sym("x", "sub/deeper"),
            sym("y", "x/../..")
        ])
        .is_err());
    }

    #[test]
    fn refuses_reserved_scratch_names_anywhere() {
        for name in [
            ".paperclip-upload-k",
            "d/.paperclip-upload",
            "d/.paperclip-upload-x/f",
        ] {
            let err = run(&[e(name, EntryKind::File)]).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::UnsafeArchive, "{name}");
        }
        assert!(run(&[sym(".paperclip-upload-k", "x")]).is_err());
    }

    #[test]
    fn refuses_duplicates_and_replacements() {
        assert!(run(&[sym("a", "b"), e("a", EntryKind::File)]).is_err());
        assert!(run(&[e("a", EntryKind::Dir), sym("a", "b")]).is_err());
        assert!(run(&[e("a", EntryKind::File), e("a", EntryKind::File)]).is_err());
        assert!(run(&[e("a/f", EntryKind::File), e("a", EntryKind::File)]).is_err());
        assert!(run(&[e("a", EntryKind::Dir), e("a", EntryKind::Dir)]).is_err());
        // An implicit parent may be declared explicitly later.
        let mut t = TreePolicy::new(10);
        t.admit(&e("a/f", EntryKind::File)).unwrap();
        let a = t.admit(&e("a", EntryKind::Dir)).unwrap();
        assert!(a.existed);
        assert!(run(&[e("f", EntryKind::File), e("f/x", EntryKind::File)]).is_err());
    }

    #[test]
    fn a_kept_file_is_a_file_no_member_may_link_to() {
        let mut t = TreePolicy::new(100);
        t.admit(&e("d", EntryKind::Dir)).unwrap();
        t.admit_kept(&e("d/k", EntryKind::File)).unwrap();
        assert_eq!(t.non_directories(), 0);
        for later in [
            e("d/k", EntryKind::File),
            e("d/k/x", EntryKind::File),
            e("d/k", EntryKind::Dir),
            sym("d/k", "x"),
            e("h", EntryKind::HardLink("d/k".into())),
        ] {
            let err = t.admit(&later).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::UnsafeArchive, "{later:?}");
        }
        // A member first, then a kept file at its path: refused as well.
        let mut t = run(&[e("d/k", EntryKind::File)]).unwrap();
        assert!(t.admit_kept(&e("d/k", EntryKind::File)).is_err());
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
    fn implied_parents_count_against_max_entries() {
        let deep = vec!["d"; 1900].join("/");
        let mut t = TreePolicy::new(2);
        let err = t.admit(&e(&deep, EntryKind::File)).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::LimitExceeded);
        assert!(t.len() <= 2);
        let mut t = TreePolicy::new(3);
        let a = t.admit(&e("x/y/f", EntryKind::File)).unwrap();
        assert_eq!(a.first_new_parent, 0);
        assert_eq!(t.path(a.node), "x/y/f");
        let b = t.admit(&e("x/z/g", EntryKind::File));
        assert_eq!(b.unwrap_err().kind, crate::ErrorKind::LimitExceeded);
    }

    #[test]
    fn reports_which_parents_are_new() {
        let mut t = TreePolicy::new(100);
        assert_eq!(
            t.admit(&e("a/b/f", EntryKind::File))
                .unwrap()
                .first_new_parent,
            0
        );
        assert_eq!(
            t.admit(&e("a/b/c/d/g", EntryKind::File))
                .unwrap()
                .first_new_parent,
            2
        );
        assert_eq!(
            t.admit(&e("a/h", EntryKind::File))
                .unwrap()
                .first_new_parent,
            1
        );
        let modes = {
            t.admit(&e("a/b/c", EntryKind::Dir)).unwrap();
            t.admit(&e("a", EntryKind::Dir)).unwrap();
            t.dir_modes()
        };
        let paths: Vec<String> = modes.iter().map(|(id, _)| t.path(*id)).collect();
        assert_eq!(paths, ["a/b/c", "a"]);
    }

    #[test]
    fn long_targets_are_checked_locally() {
        // Thousands of links with long climbing-then-descending targets, the
        // shape that made resolution quadratic: each is checked on its own
        // (the end-to-end deadline test measures the time).
        let mut entries = vec![e("d", EntryKind::Dir)];
        let t = format!("{}x", "a/".repeat(1000));
        for i in 0..5000 {
            entries.push(sym(&format!("d/l{i}"), &format!("../{t}")));
        }
        assert_eq!(run(&entries).unwrap().non_directories(), 5000);
        entries.push(sym("d/up", &format!("../../{t}")));
        assert!(run(&entries).is_err());
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
        entries.pop();
        entries.push(sym(&format!("{path}/up"), &"../".repeat(16)));
        assert!(run(&entries).is_ok());
    }
}
