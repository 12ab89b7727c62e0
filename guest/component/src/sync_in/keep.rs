//! Incremental sync-in: which host files the targets already hold.
//!
//! A kept file leaves the archive and is named in a `k<k>` member instead,
//! which the program copies from the old target into the staged tree; a
//! file mapping whose target is kept gets an empty `kf<k>` member instead
//! of its file, and the program leaves that target as it is.
//!
//! A target file is the source's when size, mode and mtime (seconds) match
//! and it is not "racy" (as git calls it): its bytes were read at least a
//! whole second after its mtime, so a later write to the source, however
//! soon, changed the mtime. When they were read is bounded by when it
//! landed (its ctime, in the sandbox's clock, less the most the sandbox's
//! clock can be ahead of ours: its `now` against `sent_at`, our clock
//! before it ran anything) less the time bytes may be in flight
//! ([`IN_FLIGHT_SECS`]).
//!
//! Names with a newline or backslash are always sent (the program's file
//! list is one name a line, and GNU tar unquotes backslashes). A sandbox
//! that lies here can only make us skip a file whose bytes it already
//! controls: the copy comes from its own target, and every name and the
//! tree's shape still come from the plan.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sandbox_sync_core::plan::{Planned, PlannedKind};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::script::{Listed, Listing};
use sandbox_sync_core::IN_FLIGHT_SECS;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::OperationResult;

/// Decides, member by member, what the targets already hold.
pub struct Keeper<'l> {
    listing: &'l Listing,
    /// File mappings that may keep their target, with the mode it must have.
    file_modes: &'l BTreeMap<usize, u32>,
    /// File mappings whose target is kept.
    kept_files: Vec<usize>,
    /// The most the sandbox's clock can be ahead of ours; `None`: the
    /// program listed nothing, so nothing is kept.
    ahead: Option<i64>,
    /// Per directory mapping, the kept files' names (`./<rel>` lines).
    lists: BTreeMap<usize, Vec<u8>>,
    /// (mapping, archive bytes) of each kept file, for the reported totals.
    pub counted: Vec<(usize, u64)>,
    prefix: String,
}

impl<'l> Keeper<'l> {
    pub fn new(listing: &'l Listing, file_modes: &'l BTreeMap<usize, u32>, sent_at: i64) -> Self {
        // A second for each clock's rounding.
        let ahead = listing
            .now
            .filter(|_| !listing.dirs.is_empty() || !listing.files.is_empty())
            .map(|now| now.saturating_sub(sent_at).saturating_add(2));
        Keeper {
            listing,
            file_modes,
            kept_files: Vec::new(),
            ahead,
            lists: BTreeMap::new(),
            counted: Vec::new(),
            prefix: String::new(),
        }
    }

    /// True when nothing can be kept.
    pub fn is_idle(&self) -> bool {
        self.ahead.is_none()
    }

    /// Whether the target already holds `p` (then it is recorded as kept).
    pub fn keeps(&mut self, p: &Planned) -> bool {
        let Some(ahead) = self.ahead else {
            return false;
        };
        let PlannedKind::HostFile { grant, stamp, .. } = &p.kind else {
            return false;
        };
        let settled = |l: &Listed| {
            l.size == stamp.size
                && l.mtime == stamp.mtime_sec
                && l.ctime.saturating_sub(ahead)
                    > stamp.mtime_sec.saturating_add(1 + IN_FLIGHT_SECS)
        };
        if let (Some(l), Some(&mode)) = (self.listing.files.get(grant), self.file_modes.get(grant))
        {
            // A file mapping's member is f<k>; its target must already
            // have the mode the mapping gives it.
            if *p.name == *format!("f{grant}") && settled(l) && l.mode == mode {
                self.kept_files.push(*grant);
                self.counted.push((*grant, p.member().archive_len()));
                return true;
            }
            return false;
        }
        let Some(files) = self.listing.dirs.get(grant) else {
            return false;
        };
        self.prefix.clear();
        let _ = write!(self.prefix, "d{grant}/");
        let Some(rel) = p.name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        let same = files
            .get(rel)
            .is_some_and(|l| l.mode == p.mode && settled(l));
        if !same || rel.contains(['\n', '\\']) {
            return false;
        }
        let list = self.lists.entry(*grant).or_default();
        list.extend_from_slice(b"./");
        list.extend_from_slice(rel.as_bytes());
        list.push(b'\n');
        // What the results counted for it.
        self.counted.push((*grant, p.member().archive_len()));
        true
    }

    /// The `k<k>` members naming the files kept so far, and an empty
    /// `kf<k>` per file mapping whose target is kept.
    pub fn lists(&self) -> impl Iterator<Item = Planned> + '_ {
        let lists = self
            .lists
            .iter()
            .map(|(k, list)| (format!("k{k}"), list.clone()));
        let files = self
            .kept_files
            .iter()
            .map(|k| (format!("kf{k}"), Vec::new()));
        lists.chain(files).map(|(name, body)| Planned {
            name: name.into(),
            kind: PlannedKind::Inline(body),
            mode: 0o600,
            mtime: 0,
        })
    }

    /// Per planned member, whether the targets hold it (each is recorded
    /// as kept); empty when nothing can be kept.
    pub fn skips(&mut self, members: &PlanLog) -> Vec<bool> {
        if self.is_idle() {
            return Vec::new();
        }
        members.iter().map(|p| self.keeps(&p)).collect()
    }

    /// The archive bytes of a plan of `planned` bytes once the kept files
    /// so far are left out and the keep lists are in.
    pub fn archive_len(&self, planned: u64) -> u64 {
        let dropped: u64 = self.counted.iter().map(|c| c.1).sum();
        let lists: u64 = self.lists().map(|p| p.member().archive_len()).sum();
        planned - dropped + lists
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
