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
use sandbox_sync_core::script::Listing;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::OperationResult;

/// Most bytes of tokens sent per call (about 700k files); past it files
/// land without a record and are sent again next time.
const MAX_TOKEN_BYTES: usize = 32 << 20;

/// Decides, member by member, what the targets already hold.
pub struct Keeper<'l> {
    listing: &'l Listing,
    /// File mappings that may keep their target, with the mode it lands with.
    file_modes: &'l BTreeMap<usize, u32>,
    /// The host's clock before the walk read any identity.
    walked_at: (i64, u32),
    /// The sandbox records facts: send the tokens of what is sent.
    records: bool,
    /// Per listed directory mapping, the listing's lines kept.
    kept: BTreeMap<usize, Vec<u32>>,
    /// File mappings whose target is kept.
    kept_files: Vec<usize>,
    /// Per directory mapping, `<token> ./<rel>` lines of what is sent.
    tokens: BTreeMap<usize, Vec<u8>>,
    token_bytes: usize,
    /// Per file mapping sent, its token.
    file_tokens: BTreeMap<usize, Token>,
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
        file_modes: &'l BTreeMap<usize, u32>,
        walked_at: (i64, u32),
        records: bool,
    ) -> Self {
        Keeper {
            listing,
            file_modes,
            walked_at,
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

    /// The token `p` lands under with `mode`, if its identity counts.
    fn token(&self, p: &Planned, mode: u32) -> Option<Token> {
        let PlannedKind::HostFile { stamp, .. } = &p.kind else {
            return None;
        };
        let id = stamp.host_id();
        id.settled(self.walked_at)
            .then(|| incremental::inbound(&id, mode, p.mtime))
    }

    /// Whether the target already holds `p` (then it is recorded as kept;
    /// otherwise its token is noted for the sandbox's records).
    pub fn keeps(&mut self, p: &Planned) -> bool {
        let PlannedKind::HostFile { grant, stamp, .. } = &p.kind else {
            return false;
        };
        let grant = *grant;
        if let Some(&mode) = self.file_modes.get(&grant) {
            // A file mapping's member is f<k>.
            let mine = self.token(p, mode);
            if mine.is_some() && self.listing.files.get(&grant) == mine.as_ref() {
                self.kept_files.push(grant);
                // File mappings count content bytes, as the seed does.
                self.counted.push((grant, stamp.size));
                self.dropped += p.member().archive_len();
                return true;
            }
            if let Some(t) = mine.filter(|_| self.records) {
                self.file_tokens.insert(grant, t);
            }
            return false;
        }
        self.prefix.clear();
        let _ = write!(self.prefix, "d{grant}/");
        let Some(rel) = p.name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        let mine = self.token(p, p.mode);
        let plain = !rel.contains(['\n', '\\']);
        let listed = self.listing.dirs.get(&grant).and_then(|f| f.get(rel));
        if let Some(l) = listed.filter(|l| plain && mine == Some(l.token)) {
            self.kept.entry(grant).or_default().push(l.line);
            // Directory mappings count archive bytes.
            self.counted.push((grant, p.member().archive_len()));
            self.dropped += p.member().archive_len();
            return true;
        }
        if self.listing.dirs.contains_key(&grant) {
            self.sent.insert(grant);
        }
        if let Some(t) = mine.filter(|_| self.records && plain) {
            if self.token_bytes < MAX_TOKEN_BYTES {
                let line = self.tokens.entry(grant).or_default();
                let before = line.len();
                line.extend_from_slice(t.hex().as_bytes());
                line.extend_from_slice(b" ./");
                // The sandbox records the name's own bytes (its listing
                // names them so: see `byte_name`).
                let raw = sandbox_sync_core::byte_name::decode_path(rel);
                line.extend_from_slice(raw.as_deref().unwrap_or(rel.as_bytes()));
                line.push(b'\n');
                self.token_bytes += line.len() - before;
            }
        }
        false
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
            .map(|(k, t)| (format!("tf{k}"), format!("{}\n", t.hex()).into_bytes()));
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
