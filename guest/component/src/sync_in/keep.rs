//! Incremental sync-in: which host files the targets already hold, and
//! what the sandbox records for the next sync (see
//! [`sandbox_sync_core::incremental`] for why this is sound).
//!
//! The program lists each target's files that are still exactly as a
//! sync-in landed them, each with the token it was landed under. A host
//! file is kept when its own token now, taken from the identity the walk
//! read, is the listed one. The archive then carries, per listed
//! directory mapping, a `k<k>` member naming, as ranges of the listing's
//! lines, the listed files kept (the program keeps those, once checked
//! unchanged, and nothing else: a line the host did not read is never
//! kept), and per file mapping kept an empty `kf<k>` instead of its file;
//! and, where the sandbox records, the tokens of what it sends (`t<k>`,
//! `tf<k>`).
//!
//! A racy host file (changed within [`incremental::RACY_NS`] of the walk)
//! goes under a racy token instead, which the sandbox records with the
//! digest of what it landed; a re-sync keeps it only where the host's file
//! digests the same now, and once it has settled names it by its identity
//! again (its token goes in `t<k>` though it is kept: the sandbox records
//! it over the racy one).
//!
//! Names with a newline or backslash are always sent (the program's file
//! list is one name a line, and GNU tar unquotes backslashes). A sandbox
//! that lies here can only make us skip a file whose bytes it already
//! controls: the copy comes from its own target, and every name and the
//! tree's shape still come from the plan.

use std::collections::BTreeMap;

use sandbox_sync_core::script::ranges;
use std::fmt::Write as _;

use sandbox_sync_core::incremental::{self, Token};
use sandbox_sync_core::plan::{Planned, PlannedKind};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::script::{Listed, Listing};
use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::OperationResult;

/// Most bytes of tokens sent per call (about 700k files); past it files
/// land without a record and are sent again next time.
const MAX_TOKEN_BYTES: usize = 32 << 20;

/// What a host file is sent under.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mine {
    /// Settled: its identity's token.
    Identity(Token),
    /// Racy: its racy token (the sandbox adds its digest).
    Racy(String),
}

impl Mine {
    fn text(&self) -> String {
        match self {
            Mine::Identity(t) => t.hex(),
            Mine::Racy(r) => r.clone(),
        }
    }
}

/// Decides, member by member, what the targets already hold.
pub struct Keeper<'l> {
    listing: &'l Listing,
    /// The grants, by index: a racy file is digested through its own.
    sources: &'l [&'l GrantedDir],
    /// File mappings that may keep their target, with the mode it lands with.
    file_modes: &'l BTreeMap<usize, u32>,
    /// The host's clock before the walk read any identity.
    walked_at: (i64, u32),
    /// Every file is judged by its content (`--checksum`).
    checksum: bool,
    /// The sandbox records facts: send the tokens of what is sent.
    records: bool,
    /// Per listed directory mapping, the listing's lines kept.
    kept: BTreeMap<usize, Vec<u32>>,
    /// File mappings whose target is kept.
    kept_files: Vec<usize>,
    /// Per directory mapping, `<token> ./<rel>` lines of what is sent.
    tokens: BTreeMap<usize, Vec<u8>>,
    token_bytes: usize,
    /// Per file mapping sent (or kept and settled since), its token.
    file_tokens: BTreeMap<usize, String>,
    /// Listed directory mappings the archive brings a regular file for:
    /// their merge changes something, so the sandbox need not look.
    sent: std::collections::BTreeSet<usize>,
    /// (mapping, bytes as the results counted them) of each kept file.
    pub counted: Vec<(usize, u64)>,
    /// Archive bytes of the members left out.
    dropped: u64,
    prefix: String,
}

impl<'l> Keeper<'l> {
    /// A keeper for what the program listed; `walked_at` is the host's
    /// clock before the walk began, `records` whether the sandbox records.
    pub fn new(
        listing: &'l Listing,
        sources: &'l [&'l GrantedDir],
        file_modes: &'l BTreeMap<usize, u32>,
        walked_at: (i64, u32),
        records: bool,
    ) -> Self {
        Keeper {
            listing,
            sources,
            file_modes,
            walked_at,
            checksum: sandbox_sync_driver::codec::checksum(),
            records,
            kept: BTreeMap::new(),
            kept_files: Vec::new(),
            tokens: BTreeMap::new(),
            token_bytes: 0,
            file_tokens: BTreeMap::new(),
            sent: std::collections::BTreeSet::new(),
            counted: Vec::new(),
            dropped: 0,
            prefix: String::new(),
        }
    }

    /// True when nothing can be kept and nothing is recorded.
    pub fn is_idle(&self) -> bool {
        !self.records && self.listing.dirs.is_empty() && self.listing.files.is_empty()
    }

    /// What `p` lands under with `mode`.
    fn token(&self, p: &Planned, mode: u32) -> Option<Mine> {
        let PlannedKind::HostFile { stamp, .. } = &p.kind else {
            return None;
        };
        let id = stamp.host_id();
        Some(if !self.checksum && id.settled(self.walked_at) {
            Mine::Identity(incremental::inbound(&id, mode, p.mtime))
        } else {
            Mine::Racy(incremental::inbound_racy(stamp.size, mode, p.mtime))
        })
    }

    /// Whether the target's file, `listed`, is what `p` would land with
    /// `mode` now: by identity, or for a racy fact by the host file's size,
    /// mode, mtime and digest (with `--checksum`, only so: a fact of an
    /// identity is not enough).
    fn holds(&self, p: &Planned, mode: u32, mine: &Mine, listed: &Listed) -> bool {
        let PlannedKind::HostFile {
            grant, path, stamp, ..
        } = &p.kind
        else {
            return false;
        };
        if !listed.racy {
            return *mine == Mine::Identity(listed.token);
        }
        let racy = incremental::inbound_racy(stamp.size, mode, p.mtime);
        self.sources
            .get(*grant)
            .and_then(|g| sandbox_sync_driver::io::digest(g, path))
            .is_some_and(|md5| incremental::inbound_fact(&racy, &md5) == listed.token)
    }

    /// Whether the target already holds `p` (then it is recorded as kept;
    /// otherwise its token is noted for the sandbox's records).
    pub fn keeps(&mut self, p: &Planned) -> bool {
        let PlannedKind::HostFile { grant, stamp, .. } = &p.kind else {
            return false;
        };
        let grant = *grant;
        // A file mapping's target lands with the mapping's mode.
        let file_mode = self.file_modes.get(&grant).copied();
        let Some(mine) = self.token(p, file_mode.unwrap_or(p.mode)) else {
            return false;
        };
        if let Some(mode) = file_mode {
            // A file mapping's member is f<k>.
            let listed = self.listing.files.get(&grant);
            if listed.is_some_and(|l| self.holds(p, mode, &mine, l)) {
                self.kept_files.push(grant);
                // File mappings count content bytes, as the seed does.
                self.counted.push((grant, stamp.size));
                self.dropped += p.member().archive_len();
                // A racy fact of a file settled since is recorded anew.
                if self.records && listed.is_some_and(|l| l.racy) {
                    if let Mine::Identity(t) = mine {
                        self.file_tokens.insert(grant, t.hex());
                    }
                }
                return true;
            }
            if self.records {
                self.file_tokens.insert(grant, mine.text());
            }
            return false;
        }
        self.prefix.clear();
        let _ = write!(self.prefix, "d{grant}/");
        let Some(rel) = p.name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        let plain = !rel.contains(['\n', '\\']);
        let listed = self.listing.dirs.get(&grant).and_then(|f| f.get(rel));
        if let Some(l) = listed.filter(|l| plain && self.holds(p, p.mode, &mine, l)) {
            self.kept.entry(grant).or_default().push(l.line);
            // Directory mappings count archive bytes.
            self.counted.push((grant, p.member().archive_len()));
            self.dropped += p.member().archive_len();
            // A racy fact of a file settled since is recorded anew.
            if self.records && l.racy && matches!(mine, Mine::Identity(_)) {
                self.note(grant, rel, &mine);
            }
            return true;
        }
        if self.listing.dirs.contains_key(&grant) {
            self.sent.insert(grant);
        }
        if self.records && plain {
            self.note(grant, rel, &mine);
        }
        false
    }

    /// Adds `<token> ./<rel>` to directory mapping `grant`'s `t<k>`.
    fn note(&mut self, grant: usize, rel: &str, mine: &Mine) {
        if self.token_bytes >= MAX_TOKEN_BYTES {
            return;
        }
        let line = self.tokens.entry(grant).or_default();
        let before = line.len();
        line.extend_from_slice(mine.text().as_bytes());
        line.extend_from_slice(b" ./");
        // The sandbox records the name's own bytes (its listing names
        // them so: see `byte_name`).
        let raw = sandbox_sync_core::byte_name::decode_path(rel);
        line.extend_from_slice(raw.as_deref().unwrap_or(rel.as_bytes()));
        line.push(b'\n');
        self.token_bytes += line.len() - before;
    }

    /// The members that say what was kept and what the sandbox records:
    /// per listed directory mapping its `k<k>` (ranges of the lines kept)
    /// and an empty `s<k>` where a file of it is sent, an empty `kf<k>` per
    /// file mapping whose target is kept, and the tokens `t<k>` and `tf<k>`
    /// of what was sent (only of files whose identity counts).
    pub fn lists(&self) -> impl Iterator<Item = Planned> + '_ {
        let kept = self.listing.dirs.keys().map(|k| {
            let lines = self.kept.get(k).cloned().unwrap_or_default();
            (format!("k{k}"), ranges(lines))
        });
        let sent = self.sent.iter().map(|k| (format!("s{k}"), Vec::new()));
        let files = self
            .kept_files
            .iter()
            .map(|k| (format!("kf{k}"), Vec::new()));
        let tokens = self
            .tokens
            .iter()
            .map(|(k, lines)| (format!("t{k}"), lines.clone()));
        let file_tokens = self
            .file_tokens
            .iter()
            .map(|(k, t)| (format!("tf{k}"), format!("{t}\n").into_bytes()));
        kept.chain(sent)
            .chain(files)
            .chain(tokens)
            .chain(file_tokens)
            .map(|(name, body)| Planned {
                name: name.into(),
                kind: PlannedKind::Inline(body),
                mode: 0o600,
                mtime: 0,
            })
    }

    /// Per planned member, whether the targets hold it (each is recorded
    /// as kept); empty when nothing can be kept or recorded.
    pub fn skips(&mut self, members: &PlanLog) -> Vec<bool> {
        if self.is_idle() {
            return Vec::new();
        }
        members.iter().map(|p| self.keeps(&p)).collect()
    }

    /// The archive bytes of a plan of `planned` bytes once the kept files
    /// so far are left out and the keeper's members are in.
    pub fn archive_len(&self, planned: u64) -> u64 {
        let lists: u64 = self.lists().map(|p| p.member().archive_len()).sum();
        planned - self.dropped + lists
    }

    /// Takes the kept files out of what `results` count (they were not
    /// transferred); `mapping_op` gives each mapping's operation.
    pub fn uncount(kept: &[(usize, u64)], mapping_op: &[usize], results: &mut [OperationResult]) {
        for &(k, bytes) in kept {
            if let Some(r) = mapping_op.get(k).and_then(|&i| results.get_mut(i)) {
                r.files_transferred = r.files_transferred.saturating_sub(1);
                r.bytes_transferred = r.bytes_transferred.saturating_sub(bytes);
            }
        }
    }
}
