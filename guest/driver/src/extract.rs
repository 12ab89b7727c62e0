//! Validated extraction of sandbox-written tar into granted host directories.

use std::collections::BTreeSet;

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::split_parent;
use sandbox_sync_core::tar_read::{Entry, EntryKind as TarKind, Limits, Parser, Source};
use sandbox_sync_core::tar_write::padding;
use sandbox_sync_core::tree::{Escaping, TreePolicy};
use sandbox_sync_core::Error as CoreError;

use crate::bindings::sandbox_sync::provider::host_fs::{EntryKind, GrantedDir};
use crate::bindings::sandbox_sync::provider::sandbox_exec;
use crate::bindings::sandbox_sync::provider::sync_report::SkippedLink;
use crate::bindings::sandbox_sync::provider::types::{FileMapping, SyncError};
use crate::bindings::wasi::io::streams::OutputStream;
use crate::errors::fs;
use crate::io::{self, GuardedInput, NewFile};

/// Directory mode while a tree is being filled (final modes come last).
const BUILD_DIR_MODE: u32 = 0o700;
/// Bits never granted to sandbox-authored files on the host (group/other write).
pub const HOST_MASK: u32 = 0o755;

/// A regular file an incremental sync-out keeps from the target instead of
/// receiving it again: its path relative to the target, and the host
/// metadata it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Relative path, `/`-separated, as the host walk found it.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Device, with `inode` the very file that was judged unchanged.
    pub device: u64,
    /// Inode.
    pub inode: u64,
}

/// What a directory target held when its listing was judged (see
/// [`stage_dir`]): every directory below its top with its permission
/// bits, every symlink with its target, and how many regular files and
/// other entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Directories by relative path, with `mode & 0o7777`.
    pub dirs: std::collections::HashMap<String, u32>,
    /// Symlinks by relative path, with their targets.
    pub links: std::collections::HashMap<String, String>,
    /// Regular files.
    pub files: usize,
    /// Entries of any other type (FIFOs, sockets, devices).
    pub others: usize,
}

/// Where archive bytes come from: a byte source that can also move content
/// straight into a host file.
pub trait ArchiveInput: Source {
    /// Moves exactly `len` bytes into `out`.
    ///
    /// # Errors
    /// Truncation, the output guard, or a host write failure.
    fn copy_to(&mut self, out: &OutputStream, len: u64) -> Result<(), SyncError>;
    /// Discards exactly `len` bytes.
    ///
    /// # Errors
    /// Truncation or the output guard.
    fn skip(&mut self, len: u64) -> Result<(), CoreError>;
    /// Creates `f` in `grant`, holding exactly the next `f.len` bytes.
    ///
    /// # Errors
    /// Truncation, the output guard, or a host failure.
    fn write_file(&mut self, grant: &GrantedDir, f: &NewFile<'_>) -> Result<(), SyncError> {
        let out = grant
            .create_exclusive(f.path, f.mode)
            .map_err(|err| fs("create", f.shown, err))?;
        self.copy_to(&out, f.len)?;
        io::flush(&out)
            .map_err(|err| SyncError::Io(format!("failed to write {}: {err}", f.shown)))?;
        drop(out);
        grant
            .set_mtime(f.path, f.mtime, 0)
            .map_err(|err| fs("set the time of", f.shown, err))
    }
}

impl ArchiveInput for GuardedInput {
    fn copy_to(&mut self, out: &OutputStream, len: u64) -> Result<(), SyncError> {
        self.splice_to(out, len)
    }
    fn skip(&mut self, len: u64) -> Result<(), CoreError> {
        GuardedInput::skip(self, len)
    }
    fn write_file(&mut self, grant: &GrantedDir, f: &NewFile<'_>) -> Result<(), SyncError> {
        GuardedInput::write_file(self, grant, f)
    }
}

/// Skips a member's contents (an excluded member's, say).
///
/// # Errors
/// Truncation or the output guard.
pub fn consume_data<I: ArchiveInput>(input: &mut I, e: &Entry) -> Result<(), SyncError> {
    input.skip(e.data_len()).map_err(Into::into)
}

/// A mapping received into scratch beside its target, not yet visible.
#[must_use = "a staged mapping lands only when committed"]
pub struct Pending<'a> {
    grant: &'a GrantedDir,
    staged: Staged,
    target: String,
    skipped: Skipped,
}

/// Most skipped links a mapping names (the orchestrator's module logs as
/// many); [`Skipped::total`] counts them all.
pub const SKIPPED_NAMED: usize = 20;

/// The symlinks a directory mapping left out because they leave it
/// (see [`sandbox_sync_core::tree`]).
#[derive(Debug, Clone, Default)]
pub struct Skipped {
    /// The first [`SKIPPED_NAMED`] (paths relative to the mapping's top),
    /// in archive order, as the host's `sync-report` takes them.
    pub links: Vec<SkippedLink>,
    /// How many in all.
    pub total: u64,
}

impl Skipped {
    fn of(tree: &TreePolicy) -> Self {
        Skipped {
            links: tree
                .skipped()
                .take(SKIPPED_NAMED)
                .map(|(path, target)| SkippedLink {
                    path,
                    target: target.to_owned(),
                })
                .collect(),
            total: tree.skipped_count() as u64,
        }
    }
}

/// What the host asked sync-out to do with a symlink that leaves its
/// mapping.
pub fn escaping() -> Escaping {
    if sandbox_exec::transfer_strict_links() {
        Escaping::Refuse
    } else {
        Escaping::Skip
    }
}

/// What a [`Pending`] mapping staged.
pub enum Staged {
    /// A file staged as `tmp`, to be renamed onto `base`.
    File {
        /// The staged file's name in the grant.
        tmp: String,
        /// The target's name in the grant.
        base: String,
    },
    /// A tree staged as `staging`, to be swapped in for the whole grant.
    Dir {
        /// The staged tree's name in the grant.
        staging: String,
        /// The directories (relative to the target) the archive wrote
        /// regular files into.
        written: BTreeSet<String>,
    },
    /// Nothing: the target already is what the archive and the kept files
    /// make (see [`stage_dir`]).
    Unchanged,
}

impl<'a> Pending<'a> {
    /// The grant it lands in.
    pub fn grant(&self) -> &'a GrantedDir {
        self.grant
    }

    /// What it staged.
    pub fn staged(&self) -> &Staged {
        &self.staged
    }

    /// The links it left out.
    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    /// Makes the mapping visible: one rename, or one swap of the tree.
    ///
    /// # Errors
    /// The host's rename or swap failed (the target is then as it was).
    pub fn commit(self) -> Result<(), SyncError> {
        let done = match &self.staged {
            Staged::File { tmp, base } => self
                .grant
                .rename(tmp, base)
                .map_err(|e| fs("rename onto", &self.target, e)),
            Staged::Dir { staging, .. } => self
                .grant
                .replace_with(staging)
                .map_err(|e| fs("replace", &self.target, e)),
            Staged::Unchanged => Ok(()),
        };
        if done.is_err() {
            self.discard();
        }
        done
    }

    /// Drops the staged copy (the host also sweeps it with the grant).
    pub fn discard(self) {
        let name = match &self.staged {
            Staged::File { tmp, .. } => tmp,
            Staged::Dir { staging, .. } => staging,
            Staged::Unchanged => return,
        };
        let _ = self.grant.remove(name);
    }
}

/// A file mapping, received and made visible at once (see [`stage_file`]).
/// Returns (files, bytes).
///
/// # Errors
/// As [`stage_file`] and [`Pending::commit`].
pub fn receive_file<I: ArchiveInput>(
    input: &mut I,
    grant: &GrantedDir,
    m: &FileMapping,
    limits: Limits,
) -> Result<(u64, Option<u64>), SyncError> {
    let (files, bytes, pending) = stage_file(input, grant, m, limits)?;
    pending.commit()?;
    Ok((files, bytes))
}

/// A directory mapping of operation `op`, received and swapped in at
/// once (see [`stage_dir`]); the links it skipped are reported. Returns
/// (files, bytes).
///
/// # Errors
/// As [`stage_dir`] and [`Pending::commit`].
pub fn receive_dir<I: ArchiveInput>(
    input: &mut I,
    grant: &GrantedDir,
    op: &str,
    m: &FileMapping,
    limits: Limits,
) -> Result<(u64, Option<u64>), SyncError> {
    let (files, bytes, pending) = stage_dir(input, grant, m, limits, &[], None)?;
    crate::report::links_skipped(op, m, pending.skipped());
    pending.commit()?;
    Ok((files, bytes))
}

/// A file mapping: exactly one regular member, staged beside the target.
/// Returns (files, bytes) and the staged file.
///
/// # Errors
/// A stream that is not exactly one regular member, the guards, or a host
/// write failure; nothing is left staged then.
pub fn stage_file<'a, I: ArchiveInput>(
    input: &mut I,
    grant: &'a GrantedDir,
    m: &FileMapping,
    limits: Limits,
) -> Result<(u64, Option<u64>, Pending<'a>), SyncError> {
    let mut parser = Parser::new(limits);
    let entry = parser.next_entry(input)?.ok_or_else(|| {
        SyncError::UnsafeArchive(format!("no file arrived for {}", m.source_path))
    })?;
    if entry.kind != TarKind::File || entry.path != "f" {
        return Err(SyncError::UnsafeArchive(format!(
            "expected the snapshot of {} as member \"f\", got {:?}",
            m.source_path, entry.path
        )));
    }
    let (_, base) = split_parent(&m.target_path);
    let mode = m.mode.unwrap_or(entry.mode & HOST_MASK);
    let tmp = crate::scratch::fresh();
    let written = (|| {
        let out = grant
            .create_exclusive(&tmp, mode)
            .map_err(|e| fs("create", &tmp, e))?;
        input.copy_to(&out, entry.size)?;
        io::flush(&out)
            .map_err(|e| SyncError::Io(format!("failed to write {}: {e}", m.target_path)))?;
        drop(out);
        input.skip(padding(entry.size))?;
        if parser.next_entry(input)?.is_some() {
            return Err(SyncError::UnsafeArchive(format!(
                "more than one member arrived for {}",
                m.source_path
            )));
        }
        grant
            .set_mtime(&tmp, entry.mtime, 0)
            .map_err(|e| fs("set the time of", &m.target_path, e))?;
        grant.sync(&tmp).map_err(|e| fs("sync", &m.target_path, e))
    })();
    if let Err(e) = written {
        let _ = grant.remove(&tmp);
        return Err(e);
    }
    let pending = Pending {
        grant,
        staged: Staged::File {
            tmp,
            base: base.to_owned(),
        },
        target: m.target_path.clone(),
        skipped: Skipped::default(),
    };
    Ok((1, Some(entry.size), pending))
}

/// A file mapping whose target the host keeps: the sandbox owes an empty
/// archive, and nothing is staged.
///
/// # Errors
/// A member arrived anyway (`unsafe-archive`), or the stream broke.
pub fn expect_empty<I: ArchiveInput>(
    input: &mut I,
    m: &FileMapping,
    limits: Limits,
) -> Result<(), SyncError> {
    match Parser::new(limits).next_entry(input)? {
        None => Ok(()),
        Some(e) => Err(SyncError::UnsafeArchive(format!(
            "{:?} arrived for {}, which the host keeps",
            e.path, m.source_path
        ))),
    }
}

/// A directory mapping: extract into a fresh staging dir inside the target,
/// add the `kept` files from the target (see [`extract`]) and give it the
/// mapping's mode; committing has the host swap it in for the target all
/// at once (destroy-then-replace, all or nothing). On any failure the
/// target is untouched and the staging dir removed. The files counted are
/// those the archive brought.
///
/// Where the target `held` (when judged) exactly what the swap would put
/// there (see [`extract`]), and has the mode it would get, nothing is
/// staged ([`Staged::Unchanged`]): an unchanged tree is not linked anew,
/// swapped and unlinked file by file.
///
/// # Errors
/// The archive's policy, the guards, or a host write failure.
pub fn stage_dir<'a, I: ArchiveInput>(
    input: &mut I,
    grant: &'a GrantedDir,
    m: &FileMapping,
    limits: Limits,
    kept: &[Kept],
    held: Option<&Held>,
) -> Result<(u64, Option<u64>, Pending<'a>), SyncError> {
    let excluder = Excluder::new(&m.exclude)?;
    // The target keeps its mode unless the mapping names one.
    let top = grant
        .stat("")
        .map(|meta| meta.mode & 0o777)
        .map_err(|e| fs("stat", &m.target_path, e))?;
    let mode = m.mode.unwrap_or(top);
    let held = held.filter(|_| mode == top);
    let staging = crate::scratch::fresh();
    grant
        .mkdir(&staging, BUILD_DIR_MODE)
        .map_err(|e| fs("create staging in", &m.target_path, e))?;
    let into = Staging {
        grant,
        dir: &staging,
        target: &m.target_path,
    };
    let links = escaping();
    let result = extract(input, &into, &excluder, limits, links, kept, held).and_then(|x| {
        // The mode is on the staged tree before the tree is visible.
        if !x.unchanged {
            grant
                .set_mode(&staging, mode)
                .map_err(|e| fs("chmod", &m.target_path, e))?;
        }
        Ok(x)
    });
    match result {
        Ok(Extracted {
            files,
            unchanged: true,
            skipped,
            ..
        }) => {
            let _ = grant.remove(&staging);
            Ok((
                files,
                None,
                Pending {
                    grant,
                    staged: Staged::Unchanged,
                    target: m.target_path.clone(),
                    skipped,
                },
            ))
        }
        Ok(Extracted {
            files,
            written,
            skipped,
            ..
        }) => Ok((
            files,
            None,
            Pending {
                grant,
                staged: Staged::Dir { staging, written },
                target: m.target_path.clone(),
                skipped,
            },
        )),
        Err(e) => {
            let _ = grant.remove(&staging);
            Err(e)
        }
    }
}

/// A fresh, empty directory inside a grant that an archive is extracted
/// into, and the target it stands for (in messages).
pub struct Staging<'s> {
    /// The grant it lies in.
    pub grant: &'s GrantedDir,
    /// Its name in the grant.
    pub dir: &'s str,
    /// The target's path as the request names it.
    pub target: &'s str,
}

impl Staging<'_> {
    /// `rel` in the target, as messages show it.
    fn shown(&self, rel: &str) -> String {
        join(self.target, rel)
    }
}

/// Extracts one archive into `into`. Directories are built `0700` and get
/// their modes last, symlinks are created only once the whole tree passed
/// policy, and those that leave it are refused or left out, as `links`
/// says. Returns the files the archive brought.
///
/// Each of `kept` (files of the old target, beside the staging dir in the
/// grant) joins the tree, hard-linked and checked to be still the file
/// judged, where the archive brought its directory: the archive, not the
/// listing the sandbox gave before it, decides the tree's shape, and a
/// kept file passes the same policy as a member (a duplicate is refused,
/// and no member may hard-link to it). Where the staged tree cannot turn
/// out to be the target over again (below), a directory's kept files join
/// as soon as the directory is made, while the rest of the stream is still
/// on its way; otherwise once the stream ended.
///
/// Unless the target `held` something else: where it held exactly the
/// archive's directories (with the modes they would get) and symlinks,
/// the archive brought nothing else, and every regular file it held is
/// kept (each checked to be still the file judged), the staged tree would
/// be the target over again: then nothing is linked, and the staged tree
/// is left as it is, `unchanged`, to be removed.
pub fn extract<I: ArchiveInput>(
    input: &mut I,
    into: &Staging<'_>,
    excluder: &Excluder,
    limits: Limits,
    links: Escaping,
    kept: &[Kept],
    held: Option<&Held>,
) -> Result<Extracted, SyncError> {
    let Staging {
        grant,
        dir: staging,
        target: _,
    } = *into;
    // Names that are not UTF-8 land where the host takes them back.
    let mut parser = Parser::new(limits).with_byte_names(grant.byte_names());
    let mut tree = TreePolicy::new(limits.max_entries).escaping(links);
    let at = |p: &str| format!("{staging}/{p}");
    let joining = Joining::new(kept, held);
    let mut written = BTreeSet::new();
    if joining.early {
        joining.join(into, &mut tree, "")?;
    }
    while let Some(e) = parser.next_entry(input)? {
        if excluder.excludes(&e.path) {
            consume_data(input, &e)?;
            continue;
        }
        let admitted = tree.admit(&e)?;
        // Parent directories this member implies, shallowest first.
        let ends: Vec<usize> = e.path.match_indices('/').map(|(i, _)| i).collect();
        for &end in &ends[admitted.first_new_parent..] {
            let dir = &e.path[..end];
            grant
                .mkdir(&at(dir), BUILD_DIR_MODE)
                .map_err(|err| fs("create", &into.shown(dir), err))?;
            if joining.early {
                joining.join(into, &mut tree, dir)?;
            }
        }
        match &e.kind {
            TarKind::File => {
                input.write_file(
                    grant,
                    &NewFile {
                        path: &at(&e.path),
                        shown: &into.shown(&e.path),
                        mode: e.mode & HOST_MASK,
                        mtime: e.mtime,
                        len: e.size,
                    },
                )?;
                input.skip(padding(e.size))?;
                note_written(&mut written, &e.path);
            }
            TarKind::Dir => {
                if !admitted.existed {
                    grant
                        .mkdir(&at(&e.path), BUILD_DIR_MODE)
                        .map_err(|err| fs("create", &into.shown(&e.path), err))?;
                    if joining.early {
                        joining.join(into, &mut tree, &e.path)?;
                    }
                }
            }
            // Created once the whole tree is known (below).
            TarKind::Symlink(_) => {}
            TarKind::HardLink(t) => {
                grant
                    .hard_link(&at(t), &at(&e.path))
                    .map_err(|err| fs("link", &into.shown(&e.path), err))?;
                note_written(&mut written, &e.path);
            }
        }
    }
    tree.finish()?;
    let brought = tree.non_directories();
    if !joining.early {
        let mut placed = 0;
        for (parent, files) in &joining.by_parent {
            if tree.is_dir(parent) {
                joining.admit(&mut tree, files)?;
                placed += files.len();
            }
        }
        if placed == kept.len() && held.is_some_and(|h| holds_all(h, &tree, brought, placed)) {
            for (parent, files) in &joining.by_parent {
                if let Some(k) = changed_kept(grant, parent, &into.shown(parent), files)? {
                    return Err(changed(into.target, k));
                }
            }
            return Ok(Extracted {
                files: brought as u64,
                unchanged: true,
                written,
                skipped: Skipped::of(&tree),
            });
        }
        for (parent, files) in &joining.by_parent {
            if tree.is_dir(parent) {
                joining.link(into, parent, files)?;
            }
        }
    }
    for (node, t) in tree.symlinks() {
        let path = tree.path(node);
        grant
            .symlink(t, &at(&path))
            .map_err(|err| fs("create symlink", &into.shown(&path), err))?;
    }
    for (node, mode) in tree.dir_modes() {
        let path = tree.path(node);
        grant
            .set_mode(&at(&path), (mode & HOST_MASK) | BUILD_DIR_MODE)
            .map_err(|err| fs("chmod", &into.shown(&path), err))?;
    }
    Ok(Extracted {
        files: brought as u64,
        unchanged: false,
        written,
        skipped: Skipped::of(&tree),
    })
}

/// The kept files of an extraction, by parent directory.
struct Joining<'k> {
    by_parent: std::collections::BTreeMap<&'k str, Vec<&'k Kept>>,
    /// Whether each directory's kept files join as it is made: where the
    /// target held a regular file that is not kept, the staged tree cannot
    /// be the target over again, so linking cannot be wasted.
    early: bool,
}

impl<'k> Joining<'k> {
    fn new(kept: &'k [Kept], held: Option<&Held>) -> Self {
        let mut by_parent: std::collections::BTreeMap<&str, Vec<&Kept>> = Default::default();
        for k in kept {
            by_parent
                .entry(split_parent_rel(&k.path))
                .or_default()
                .push(k);
        }
        Joining {
            by_parent,
            early: !kept.is_empty() && held.is_none_or(|h| h.files != kept.len()),
        }
    }

    /// Joins the kept files of `dir` (just made in the staged tree).
    fn join(&self, into: &Staging<'_>, tree: &mut TreePolicy, dir: &str) -> Result<(), SyncError> {
        match self.by_parent.get(dir) {
            Some(files) => {
                self.admit(tree, files)?;
                self.link(into, dir, files)
            }
            None => Ok(()),
        }
    }

    fn admit(&self, tree: &mut TreePolicy, files: &[&Kept]) -> Result<(), SyncError> {
        for k in files {
            tree.admit_kept(&Entry {
                path: k.path.clone(),
                kind: TarKind::File,
                size: k.size,
                mode: k.mode,
                mtime: k.mtime,
            })?;
        }
        Ok(())
    }

    /// Links `files` (kept, in `parent` of the target) into the staged
    /// tree with one host call, and checks each is still the file judged.
    fn link(&self, into: &Staging<'_>, parent: &str, files: &[&Kept]) -> Result<(), SyncError> {
        let names: Vec<String> = files
            .iter()
            .map(|k| split_parent(&k.path).1.to_owned())
            .collect();
        let staged = if parent.is_empty() {
            into.dir.to_owned()
        } else {
            format!("{}/{parent}", into.dir)
        };
        into.grant
            .link_files(parent, &staged, &names)
            .map_err(|err| fs("link the kept files into", &into.shown(parent), err))?;
        if let Some(k) = changed_kept(into.grant, &staged, &into.shown(parent), files)? {
            // What was linked may be a symlink now: it goes first.
            let _ = into.grant.remove(&format!("{}/{}", into.dir, k.path));
            return Err(changed(into.target, k));
        }
        Ok(())
    }
}

/// What [`extract`] did.
pub struct Extracted {
    /// The files (and symlinks) the archive brought.
    pub files: u64,
    /// The target already is the staged tree (see [`extract`]).
    pub unchanged: bool,
    /// The directories (relative to the target; `""` its top) it wrote
    /// regular files into.
    pub written: BTreeSet<String>,
    /// The links it left out.
    pub skipped: Skipped,
}

/// Whether the target, as `held`, is exactly the `tree` an archive brought
/// (`brought` non-directories) with `kept` regular files added: the same
/// directories with the modes extraction gives them, the same symlinks,
/// nothing else, and every regular file kept.
fn holds_all(held: &Held, tree: &TreePolicy, brought: usize, kept: usize) -> bool {
    let links = tree.symlinks().count();
    if held.others != 0
        || held.files != kept
        || brought != links
        || held.links.len() != links
        || held.dirs.len() != tree.dirs().count()
    {
        return false;
    }
    let dirs_same = tree.dirs().all(|(node, mode)| {
        let made = mode.map_or(BUILD_DIR_MODE, |m| (m & HOST_MASK) | BUILD_DIR_MODE);
        held.dirs.get(&tree.path(node)) == Some(&made)
    });
    dirs_same
        && tree
            .symlinks()
            .all(|(node, t)| held.links.get(&tree.path(node)).map(String::as_str) == Some(t))
}

fn changed(target: &str, k: &Kept) -> SyncError {
    SyncError::SourceChanged(format!(
        "the host target file {} changed during the sync",
        join(target, &k.path)
    ))
}

/// The first of `files` (kept, all in directory `dir` of the grant: in
/// a staged tree, or in the target itself) that is no longer the very
/// file judged unchanged. Kept files are put in the staged tree as hard
/// links to the old target's (no byte moves; kept files lie on the
/// grant's filesystem); a host process that swapped one meanwhile (for a
/// symlink, say, which a link would copy as a link) fails the call: the
/// sandbox did not send it. One listing per directory rather than a stat
/// a file.
fn changed_kept<'k>(
    grant: &GrantedDir,
    dir: &str,
    shown: &str,
    files: &[&'k Kept],
) -> Result<Option<&'k Kept>, SyncError> {
    let entries = grant
        .read_dir_change(dir)
        .map_err(|err| fs("list the kept files in", shown, err))?;
    let by_name: std::collections::HashMap<&str, _> = entries
        .iter()
        .map(|e| (e.name.as_str(), &e.metadata))
        .collect();
    Ok(files.iter().copied().find(|k| {
        let (_, name) = split_parent(&k.path);
        !by_name.get(name).is_some_and(|m| {
            m.kind == EntryKind::File
                && m.device == k.device
                && m.inode == k.inode
                && m.size == k.size
        })
    }))
}

/// Adds the directory of `path` to `written`, allocating only for a
/// directory not in it yet (this runs for every member).
fn note_written(written: &mut BTreeSet<String>, path: &str) {
    let dir = split_parent_rel(path);
    if !written.contains(dir) {
        written.insert(dir.to_owned());
    }
}

/// The directory of `path` in a tree (`""`: its top).
fn split_parent_rel(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

fn join(base: &str, rel: &str) -> String {
    format!("{}/{rel}", base.trim_end_matches('/'))
}
