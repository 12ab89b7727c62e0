//! Incremental sync-out: which files the host targets already hold, and
//! the record of what landed (see [`sandbox_sync_core::incremental`] for
//! why this is sound). A file mapping lists its source as `f`, and its
//! target is one `stat`.
//!
//! Before its archives the program frames each listed source's files with
//! their identities, and the filesystem's clock read before it listed any.
//! The component walks the host target and keeps a file only where the
//! host's record of that target (its facts, in the host's record store)
//! says the file there is, unchanged, what the sandbox sent under the
//! token the sandbox's file has now. It answers with those names, which
//! the sandbox's tar leaves out and the component links from the old
//! target into the staged tree (see
//! [`extract`](sandbox_sync_driver::extract::extract)). Once the staged
//! tree is whole, [`record`] writes the new facts.
//!
//! The host never sends what it holds: the sandbox learns, for the names it
//! lists, which the target holds exactly as the sandbox's current file was
//! sent before. A sandbox that lies can only make the host keep a file a
//! sync of it landed there before, at a path the archive still has to
//! bring the directory of. Names with a newline or backslash, or ending
//! in white space, are always sent (see [`listable`]).

use std::collections::{BTreeSet, HashMap};

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::incremental::{self, Fact, Facts, Token};
use sandbox_sync_core::sandbox_path::split_parent;
use sandbox_sync_core::script::{
    ranges, Decoder, Encoding, Listed, Marker, Named, OutboundSink, TooManyListed,
};
use sandbox_sync_core::tar_read::Source;
use sandbox_sync_core::tar_write::padding;
use sandbox_sync_core::SCRATCH_PREFIX;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::{
    DirEntryChange, EntryKind, FsError, GrantedDir,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sync_state;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, SyncError,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::fs;
use sandbox_sync_driver::extract::{Held, Kept, HOST_MASK};
use sandbox_sync_driver::io::{self, GuardedInput};
use sandbox_sync_driver::request::Mapping;

/// The most listing bytes held, all mappings together (about a million
/// files); a listing past it is skipped and its files are all sent.
pub const MAX_LISTING: u64 = 64 << 20;

/// The record store's key for a mapping's host target.
pub fn record_key(m: &FileMapping) -> String {
    format!("sync-out 1 {}", m.target_path)
}

/// The host's facts for mapping `m`'s target (none recorded: no facts).
pub fn load_facts(m: &FileMapping) -> Facts {
    sync_state::load(&record_key(m))
        .map(|b| Facts::decode(&b))
        .unwrap_or_default()
}

/// The ctimes whose files the sandbox digests as it lists: the racy
/// window of the sync `facts` were recorded by (none: nothing to digest);
/// with `--checksum`, every ctime (`%z` output sorts between these two).
pub fn window(facts: &Facts) -> Option<(String, String)> {
    if facts.is_empty() {
        return None;
    }
    if codec::checksum() {
        return Some((String::new(), "~".to_owned()));
    }
    incremental::racy_window(facts.probe.as_deref()?)
}

/// What the exchange settled, per listed mapping.
#[derive(Default)]
pub struct Keeping {
    /// The files each target keeps.
    pub kept: HashMap<usize, Vec<Kept>>,
    /// The sandbox's token for each listed file whose identity counts, by
    /// path relative to the source (`f` for a file mapping).
    pub tokens: HashMap<usize, Named>,
    /// What each directory target held, where the walk took stock of it.
    pub held: HashMap<usize, Held>,
}

/// Reads the listing of each of `listed` (indices into `targets` and
/// `mappings`, each an operation index, a mapping index and the mapping),
/// in order, answers the program on `stdin` with the names each target
/// already holds (see [`decide`]), and returns those files and the listed
/// tokens.
///
/// # Errors
/// A stream that is not the listings the program was asked for, more
/// listed files than `max_files`, a host walk failure, or a broken stdin.
pub fn exchange(
    input: &mut GuardedInput,
    stdin: &OutputStream,
    listed: &[usize],
    targets: &[&GrantedDir],
    mappings: &[Mapping<'_>],
    facts: &HashMap<usize, Facts>,
    max_files: u64,
) -> Result<Keeping, SyncError> {
    // The host's side is walked while the sandbox lists its own.
    let walked = prewalk(listed, targets, mappings)?;
    let mut listings = Vec::with_capacity(listed.len());
    let mut room = usize::try_from(max_files).unwrap_or(usize::MAX);
    // MAX_LISTING bounds all the listings together, inflated.
    let mut bytes_left = MAX_LISTING;
    let mut chunk = vec![0; 64 << 10];
    for &k in listed {
        let (len, probe, zipped) = match super::receive::read_marker(input)? {
            Marker::Listing {
                mapping,
                len,
                probe,
                zipped,
            } if mapping == k => (len, probe, zipped),
            m => {
                return Err(SyncError::UnsafeArchive(format!(
                    "expected the listing of mapping {k}, the sandbox sent {m:?}"
                )))
            }
        };
        // Read as it comes: nothing of it is held but the table.
        let encoding = if zipped {
            Encoding::Gzip
        } else {
            Encoding::Plain
        };
        let mut decoder = Decoder::new(encoding, bytes_left, OutboundSink::new(probe, room));
        let mut left = len;
        while left > 0 {
            // At most the chunk's length: the cast is lossless.
            let n = left.min(chunk.len() as u64) as usize;
            input.read_exact(&mut chunk[..n])?;
            decoder.push(&chunk[..n]);
            left -= n as u64;
        }
        input.skip(padding(len))?;
        bytes_left = bytes_left.saturating_sub(decoder.produced());
        // One that is not what it says, or inflates past the bound, is no
        // listing: all its files are sent.
        let files = match decoder.finish() {
            Some(sink) => sink.files().map_err(too_many)?,
            None => Named::default(),
        };
        room -= files.len();
        listings.push((k, files));
    }
    let (answer, keeping) = decide(listings, targets, mappings, facts, walked)?;
    io::write_all(stdin, &answer)
        .and_then(|()| io::flush(stdin))
        .map_err(|e| SyncError::Transport(format!("failed to send the keep lists: {e}")))?;
    Ok(keeping)
}

/// A listing of more files than the request's `--max-entries`.
pub fn too_many(e: TooManyListed) -> SyncError {
    SyncError::LimitExceeded(format!(
        "the sandbox listed more than {} files (--max-entries)",
        e.0
    ))
}

/// Judges each listing (mapping index, what it names) against its target
/// and the host's facts of it (`facts`, per mapping): the
/// answer the program reads (per listing a length line, then that many
/// bytes of `<first> <last>` lines: the ascending ranges of the listing's
/// lines whose files to leave out), and what that keeps. A directory
/// target [`prewalk`] walked is not walked again.
///
/// # Errors
/// More listed files, all listings together, than `max_files`; a host
/// walk failure or a bad exclude pattern.
pub fn decide(
    listings: Vec<(usize, Named)>,
    targets: &[&GrantedDir],
    mappings: &[Mapping<'_>],
    facts: &HashMap<usize, Facts>,
    mut walked: Prewalked,
) -> Result<(Vec<u8>, Keeping), SyncError> {
    let mut keeping = Keeping::default();
    let mut answer = Vec::new();
    let checksum = codec::checksum();
    let none = Facts::new();
    for (k, listed) in listings {
        let m = mappings[k].spec;
        let excluder = Excluder::new(&m.exclude)?;
        let facts = facts.get(&k).unwrap_or(&none);
        let held = match m.kind {
            MappingKind::Directory => {
                let (files, all) = match walked.remove(&k) {
                    Some(w) => w.join(&listed),
                    None => held(targets[k], &listed, &m.target_path)?,
                };
                if let Some(all) = all {
                    keeping.held.insert(k, all);
                }
                files
            }
            MappingKind::File => held_file(targets[k], &listed, &m.target_path)?,
        };
        // A file mapping's target must also have the mode the mapping
        // gives it now.
        let mode_ok = |mode: u32| {
            m.kind == MappingKind::Directory || m.mode.is_none_or(|w| w == mode & 0o777)
        };
        let mut lines = Vec::new();
        let mut keep = Vec::new();
        for (path, listed, h) in held {
            let meta = &h.metadata;
            let fact = facts.current(
                meta.device,
                meta.inode,
                meta.size,
                (h.ctime_sec, h.ctime_nsec),
            );
            // A fact of a settled file names its identity, one of a racy
            // file (every file, with `--checksum`) its content too.
            let by_identity = !checksum && fact == Some(listed.token);
            let unchanged = fact.is_some() && (by_identity || fact == listed.content);
            if unchanged && mode_ok(meta.mode) && listable(&path) && !excluder.excludes(&path) {
                lines.push(listed.line);
                keep.push(Kept {
                    path,
                    size: meta.size,
                    mode: meta.mode & HOST_MASK,
                    mtime: meta.mtime_sec,
                    mtime_nsec: meta.mtime_nsec,
                    device: meta.device,
                    inode: meta.inode,
                });
            }
        }
        let ranges = ranges(lines);
        answer.extend_from_slice(format!("{}\n", ranges.len()).as_bytes());
        answer.extend_from_slice(&ranges);
        keeping.kept.insert(k, keep);
        keeping.tokens.insert(k, listed);
    }
    Ok((answer, keeping))
}

/// Whether the sandbox's tar can leave `path` out by name: the keep list
/// is one name a line (no newline), GNU tar unquotes backslashes in it
/// and trims trailing white space off each line (gnulib's exclude file
/// reader), so such names are always sent.
fn listable(path: &str) -> bool {
    !path.contains(['\n', '\\']) && !path.ends_with([' ', '\t', '\x0b', '\x0c', '\r'])
}

/// Target files at listed paths: path, what the listing said of it, what
/// the walk found there.
type Found = Vec<(String, Listed, DirEntryChange)>;

/// A file mapping's target, when the sandbox listed its source (as `f`)
/// and the target is a regular file on the grant's own filesystem.
fn held_file(parent: &GrantedDir, listed: &Named, target: &str) -> Result<Found, SyncError> {
    let Some(t) = listed.get("f") else {
        return Ok(Vec::new());
    };
    let (_, base) = split_parent(target);
    let e = match parent.stat_change(base, false) {
        Ok(e) => e,
        Err(FsError::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(fs("stat", target, e)),
    };
    if e.metadata.kind != EntryKind::File {
        return Ok(Vec::new());
    }
    Ok(vec![("f".to_owned(), t, e)])
}

/// Directory targets walked before their listings arrived, by mapping.
pub type Prewalked = HashMap<usize, Walk>;

/// The most entries a walk ahead of the listing holds per target (~200
/// bytes each in guest memory: ~20 MB); a bigger target is walked once its
/// listing came, for the listed paths alone.
const PREWALK_MAX: usize = 100_000;

/// Walks the directory targets of `listed` (mapping indices) ahead of
/// their listings, so the host's walk runs while the sandbox lists (on a
/// stream, or in a toolbox report command). A target past
/// [`PREWALK_MAX`] entries is left out.
///
/// # Errors
/// A host walk failure.
pub fn prewalk(
    listed: &[usize],
    targets: &[&GrantedDir],
    mappings: &[Mapping<'_>],
) -> Result<Prewalked, SyncError> {
    let mut walked = HashMap::new();
    for &k in listed {
        let m = mappings[k].spec;
        if m.kind != MappingKind::Directory {
            continue;
        }
        if let Some(w) = walk(targets[k], &m.target_path, None)? {
            walked.insert(k, w);
        }
    }
    Ok(walked)
}

/// What a walk of a target found: its regular files on the grant's own
/// filesystem (a kept file is hard-linked), all it holds (see [`Held`];
/// `None` where a mount inside leaves that unknown), and how many entries
/// it met.
pub struct Walk {
    files: Vec<(String, DirEntryChange)>,
    held: Option<Held>,
    entries: usize,
}

impl Walk {
    /// The walked files at paths `listed` names, and what the target
    /// holds, within the bound [`held`] keeps (past it, unknown).
    fn join(self, listed: &Named) -> (Found, Option<Held>) {
        let held = self.held.filter(|_| self.entries < stock_bound(listed));
        let found = self
            .files
            .into_iter()
            .filter_map(|(path, e)| listed.get(&path).map(|l| (path, l, e)))
            .collect();
        (found, held)
    }
}

/// Past this many entries, a walk for `listed` stops taking stock of what
/// the target holds: twice the files it lists, and 10,000 more.
fn stock_bound(listed: &Named) -> usize {
    listed.len().saturating_mul(2).saturating_add(10_000)
}

/// The regular files of `grant` (the target) at paths `listed` names, on
/// the grant's own filesystem, and all the target holds, within
/// [`stock_bound`].
fn held(
    grant: &GrantedDir,
    listed: &Named,
    target: &str,
) -> Result<(Found, Option<Held>), SyncError> {
    let walk = walk(grant, target, Some(listed))?;
    Ok(walk.map(|w| w.join(listed)).unwrap_or_default())
}

/// Walks `grant` (the target), never following a symlink nor entering
/// another filesystem. With `listed` it keeps only the files at paths it
/// names and stops taking stock past [`stock_bound`] (it always answers);
/// without, it keeps every file and gives up (`None`) past
/// [`PREWALK_MAX`] entries. A directory holding a name (or a link target)
/// the host cannot hand over as UTF-8 ends the walk with `None` too: the
/// mapping keeps nothing, and its whole tree is sent and swapped in, as a
/// full sync does, rather than the sync failing.
fn walk(
    grant: &GrantedDir,
    target: &str,
    listed: Option<&Named>,
) -> Result<Option<Walk>, SyncError> {
    let device = grant
        .stat_change("", false)
        .map_err(|e| fs("stat", target, e))?
        .metadata
        .device;
    let bound = listed.map_or(PREWALK_MAX, stock_bound);
    let mut seen = 0usize;
    let mut all = Some(Held::default());
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let entries = match grant.read_dir_change(&dir) {
            Ok(entries) => entries,
            Err(FsError::InvalidName(_)) => return Ok(None),
            Err(e) => return Err(fs("list", &format!("{target}/{dir}"), e)),
        };
        seen = seen.saturating_add(entries.len());
        if seen >= bound {
            if listed.is_none() {
                return Ok(None);
            }
            all = None;
        }
        for e in entries {
            if is_scratch(&dir, &e.name) {
                // Never the target's and never kept; but a target holding
                // scratch (a killed call's staging) is not the tree over
                // again, so it is replaced whole and the scratch goes with
                // the old tree.
                if let Some(h) = all.as_mut() {
                    h.others += 1;
                }
                continue;
            }
            let path = child(&dir, &e.name);
            let m = &e.metadata;
            if let Some(h) = all.as_mut() {
                match m.kind {
                    EntryKind::Directory => {
                        h.dirs.insert(path.clone(), m.mode & 0o7777);
                    }
                    EntryKind::Symlink => {
                        let t = m.link_target.clone().unwrap_or_default();
                        h.links.insert(path.clone(), t);
                    }
                    EntryKind::File => h.files += 1,
                    EntryKind::Other => h.others += 1,
                }
            }
            match m.kind {
                EntryKind::Directory if m.device == device => stack.push(path),
                EntryKind::Directory => all = None,
                EntryKind::File
                    if m.device == device && listed.is_none_or(|l| l.get(&path).is_some()) =>
                {
                    files.push((path, e));
                }
                _ => {}
            }
        }
    }
    Ok(Some(Walk {
        files,
        held: all,
        entries: seen,
    }))
}

/// `name` in `dir` of a walk (`""`: its top), as a path from the top.
fn child(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Whether `name` in `dir` of a walk of a target is scratch (only ever at
/// the top), which is never the target's.
fn is_scratch(dir: &str, name: &str) -> bool {
    dir.is_empty() && name.starts_with(SCRATCH_PREFIX)
}

/// What a landed file must still be once its mapping committed: its
/// device, inode, size and mtime (the commit unlinks the old tree, which
/// moves a kept file's ctime, so facts are read after it; this is what
/// ties them to the files this sync put there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    device: u64,
    inode: u64,
    size: u64,
    mtime: (i64, u32),
}

impl Landed {
    fn of(e: &DirEntryChange) -> Self {
        let m = &e.metadata;
        Landed {
            device: m.device,
            inode: m.inode,
            size: m.size,
            mtime: (m.mtime_sec, m.mtime_nsec),
        }
    }
}

/// The regular files under `base` in `grant` (`""`: the grant itself) at
/// the paths `tokens` lists, with their metadata: a walk that never
/// follows a symlink.
fn files_under(
    grant: &GrantedDir,
    base: &str,
    tokens: &Named,
    shown: &str,
) -> Result<Vec<(String, DirEntryChange)>, SyncError> {
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let at = match (base.is_empty(), dir.is_empty()) {
            (true, _) => dir.clone(),
            (false, true) => base.to_owned(),
            (false, false) => format!("{base}/{dir}"),
        };
        let entries = grant
            .read_dir_change(&at)
            .map_err(|e| fs("list", shown, e))?;
        for e in entries {
            if base.is_empty() && is_scratch(&dir, &e.name) {
                continue;
            }
            let path = child(&dir, &e.name);
            match e.metadata.kind {
                EntryKind::Directory => stack.push(path),
                EntryKind::File if tokens.get(&path).is_some() => out.push((path, e)),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// What a staged tree `staging` in `grant` holds at the listed paths,
/// before it is swapped in: each of `kept` as judged (it is linked in only
/// once checked to be that very file; a later change to it shows after
/// the commit, and the file is not recorded), and the listed files the
/// archive wrote, from one listing of each directory in `written`.
///
/// # Errors
/// A failed listing of the staged tree.
pub fn staged_tree(
    grant: &GrantedDir,
    staging: &str,
    tokens: &Named,
    kept: &[Kept],
    written: &BTreeSet<String>,
    shown: &str,
) -> Result<HashMap<String, Landed>, SyncError> {
    let mut was: HashMap<String, Landed> = kept
        .iter()
        .map(|k| {
            let landed = Landed {
                device: k.device,
                inode: k.inode,
                size: k.size,
                mtime: (k.mtime, k.mtime_nsec),
            };
            (k.path.clone(), landed)
        })
        .collect();
    for dir in written {
        let at = if dir.is_empty() {
            staging.to_owned()
        } else {
            format!("{staging}/{dir}")
        };
        let entries = grant
            .read_dir_change(&at)
            .map_err(|e| fs("list", shown, e))?;
        for e in entries {
            let path = child(dir, &e.name);
            if e.metadata.kind == EntryKind::File && tokens.get(&path).is_some() {
                was.insert(path, Landed::of(&e));
            }
        }
    }
    Ok(was)
}

/// What a staged file `tmp` in `grant` is, before it is renamed into place.
pub fn staged_file(grant: &GrantedDir, tmp: &str) -> Option<Landed> {
    let e = grant.stat_change(tmp, false).ok()?;
    (e.metadata.kind == EntryKind::File).then(|| Landed::of(&e))
}

/// The facts of a committed directory target (the grant itself): every
/// file still exactly as `landed` says this sync put it, under its listed
/// token, once its identity lies before the filesystem's clock (probed
/// after [`wait_a_tick`]).
///
/// # Errors
/// A failed walk of the target.
pub fn tree_facts(
    grant: &GrantedDir,
    tokens: &Named,
    landed: &HashMap<String, Landed>,
    shown: &str,
) -> Result<Facts, SyncError> {
    let mut facts = Facts::new();
    let Some(clock) = probe(grant) else {
        return Ok(facts);
    };
    let checksum = codec::checksum();
    for (path, e) in files_under(grant, "", tokens, shown)? {
        if let (Some(l), Some(&was)) = (tokens.get(&path), landed.get(&path)) {
            if let Some(token) = landed_token(grant, &path, l, checksum) {
                insert_fact(&mut facts, &e, token, was, clock);
            }
        }
    }
    facts.probe.clone_from(&tokens.probe);
    Ok(facts)
}

/// What a landed file's fact names: the sandbox file's identity, or where
/// that was racy as the sandbox listed it, its content too, digested off
/// the landed file (what a writer through a mapping does to the sandbox's
/// file after that shows as another digest); every file's with
/// `checksum`. None where it cannot be read.
fn landed_token(grant: &GrantedDir, path: &str, l: Listed, checksum: bool) -> Option<Token> {
    if !l.racy && !checksum {
        return Some(l.token);
    }
    let md5 = io::digest(grant, path)?;
    Some(incremental::outbound_content(l.token, &md5))
}

/// The fact of a file mapping's target `base` in `grant`, just landed as
/// `was` from the sandbox's file listed as `listed`, made before the
/// sandbox's clock read `probe`.
pub fn file_fact(
    grant: &GrantedDir,
    base: &str,
    listed: Listed,
    was: Landed,
    probe: Option<&str>,
) -> Facts {
    let mut facts = Facts::new();
    if let (Some(clock), Ok(e)) = (self::probe(grant), grant.stat_change(base, false)) {
        if e.metadata.kind == EntryKind::File {
            if let Some(token) = landed_token(grant, base, listed, codec::checksum()) {
                insert_fact(&mut facts, &e, token, was, clock);
            }
        }
    }
    facts.probe = probe.map(str::to_owned);
    facts
}

fn insert_fact(
    facts: &mut Facts,
    e: &DirEntryChange,
    token: Token,
    was: Landed,
    clock: (u64, (i64, u32)),
) {
    let m = &e.metadata;
    let (device, at) = clock;
    if Landed::of(e) == was && m.device == device && (e.ctime_sec, e.ctime_nsec) < at {
        facts.insert(
            m.device,
            m.inode,
            Fact {
                size: m.size,
                ctime_sec: e.ctime_sec,
                ctime_nsec: e.ctime_nsec,
                token,
            },
        );
    }
}

/// Waits until the filesystem's clock in each of `grants` reads later than it did
/// on entry, so a probe after it comes after anything changed before: at
/// once where the kernel stamps files fine-grained (multigrain), within a
/// tick on a coarse clock (4 ms at `HZ=250`, 10 at `HZ=100`), not a fixed
/// 20 ms. Gives up after ~30 ms (then fewer files count, which only makes
/// the next sync send more).
pub fn wait_a_tick(grants: &[&GrantedDir]) {
    // Every clock read first: one tick then serves them all.
    let before: Vec<_> = grants.iter().map(|g| probe(g)).collect();
    for (grant, before) in grants.iter().zip(before) {
        let Some((_, before)) = before else { continue };
        for _ in 0..15 {
            match probe(grant) {
                Some((_, now)) if now > before => break,
                Some(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
                None => break,
            }
        }
    }
}

/// The filesystem's clock in `grant`: the device and ctime of a file made
/// there now (a scratch name, removed at once).
fn probe(grant: &GrantedDir) -> Option<(u64, (i64, u32))> {
    let name = sandbox_sync_driver::scratch::fresh();
    drop(grant.create_exclusive(&name, 0o600).ok()?);
    let e = grant.stat_change(&name, false);
    let _ = grant.remove(&name);
    let e = e.ok()?;
    Some((e.metadata.device, (e.ctime_sec, e.ctime_nsec)))
}

/// Stores `facts` as the record of mapping `m`'s target (best effort: a
/// host that cannot keep it only makes the next sync send more).
pub fn store_facts(m: &FileMapping, facts: &Facts) {
    let bytes = facts.encode();
    if (bytes.len() as u64) <= sync_state::max_record_bytes() {
        let _ = sync_state::store(&record_key(m), &bytes);
    } else {
        // Too big to keep: the old record no longer describes the target.
        let _ = sync_state::store(&record_key(m), &[]);
    }
}
