//! What a sync-out does, decided from the request before anything runs:
//! the sandbox program, which mappings it lists for keeping, and the
//! host's records of their targets.

use std::collections::HashMap;

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::incremental::Facts;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::OutboundScript;
use sandbox_sync_core::KEEP_FILE_MIN;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::{
    EntryKind, FsError, GrantedDir,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{self, Compression};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sync_state;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    MappingKind, SyncError, SyncRequest,
};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::fs;
use sandbox_sync_driver::plan::written_by_another;
use sandbox_sync_driver::request::{self, Mapping};

use super::keep;

/// The program and what the host needs to read what it writes.
pub struct Prepared<'a> {
    pub root: String,
    pub scratch: String,
    /// Every mapping, in grant order.
    pub mappings: Vec<Mapping<'a>>,
    /// The program's text.
    pub text: String,
    /// A codec was offered.
    pub offered: bool,
    /// The program may send a probe of the link before its codec frame.
    pub probes: bool,
    /// Mappings the program lists first, in order.
    pub listed: Vec<usize>,
    /// The host's record of each listed mapping's target.
    pub facts: HashMap<usize, Facts>,
    /// The program before it was finished (a toolbox sandbox finishes it
    /// once its listings were judged).
    pub program: OutboundScript,
}

/// Validates the request and builds the program; `incremental`: list the
/// sources whose targets hold files, and leave out what the host keeps;
/// `probe`: the host can answer on stdin, so `auto` may choose gzip by
/// the link's speed ([`codec::LINK_PROBE`]).
pub fn prepare<'a>(
    req: &'a SyncRequest,
    targets: &[&GrantedDir],
    incremental: bool,
    probe: bool,
) -> Result<Prepared<'a>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    sandbox_sync_driver::plan::check_modes(req)?;
    sandbox_sync_driver::plan::check_out_targets(req)?;
    let mappings: Vec<Mapping<'a>> = request::mappings(req).collect();
    if mappings.len() != targets.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} target directories for {} mappings",
            targets.len(),
            mappings.len()
        )));
    }
    let scratch = sandbox_sync_driver::scratch::fresh();
    let mut script = OutboundScript::new(&root, req.limits.timeout_ms, &scratch);
    // Keeping takes the host's records. A directory is listed where its
    // target holds anything, or where bytes cost a network link (the
    // listing then makes the record the next sync keeps by).
    let incremental = incremental && sync_state::max_record_bytes() > 0;
    let remote = sandbox_exec::transfer_remote();
    if remote {
        script.zip_listings();
    }
    let mut facts = HashMap::new();
    // Every mapping's target: a file target that another mapping also
    // writes (a directory around it lands wholesale, or the same path
    // twice) is never kept, since what lands there depends on the order.
    let all_targets: Vec<&str> = mappings
        .iter()
        .map(|m| m.spec.target_path.as_str())
        .collect();
    // Directory mappings whose targets hold files: the program lists them.
    let mut listed = Vec::new();
    for (i, op, op_mappings) in request::operations(req) {
        if !op.post_upload_commands.is_empty() {
            return Err(SyncError::InvalidRequest(format!(
                "operation {}: post-upload commands apply to sync-in only",
                op.operation_id
            )));
        }
        for Mapping {
            index: j,
            grant: k,
            spec: m,
            ..
        } in op_mappings
        {
            let source = confine(&root, &m.source_path, "source")?;
            match m.kind {
                MappingKind::File => {
                    let (_, base) = split_parent(&m.target_path);
                    // Only a target big enough to be worth keeping: a
                    // record a file costs a listing line and a stat.
                    let list = incremental
                        && !written_by_another(&all_targets, k)
                        && holds_big_file(targets[k], base, &m.target_path)?;
                    if list {
                        let f = keep::load_facts(m);
                        script.list_file(k, &source, keep::window(&f).as_ref().map(pair))?;
                        listed.push(k);
                        facts.insert(k, f);
                    }
                    script.file(i, j, &source, list.then_some(k))?;
                }
                MappingKind::Directory => {
                    Excluder::new(&m.exclude)?;
                    let list = incremental && (remote || holds_files(targets[k], &m.target_path)?);
                    if list {
                        let f = keep::load_facts(m);
                        let window = keep::window(&f);
                        script.list_dir(
                            k,
                            &source,
                            m.follow_symlinks,
                            window.as_ref().map(pair),
                        )?;
                        listed.push(k);
                        facts.insert(k, f);
                    }
                    let keep = list.then_some(k);
                    script.dir(i, j, &source, m.follow_symlinks, &m.exclude, keep)?;
                }
            }
        }
        script.op_done(i);
    }
    let policy = codec::policy();
    let offer = codec::preference(policy);
    let auto = policy == Compression::Auto;
    let probes = probe && auto && !offer.is_empty();
    if !offer.is_empty() {
        // `auto` samples the first mapping's archive before it settles
        // for gzip.
        script.offer_compression(offer, auto, probes.then_some(codec::LINK_PROBE));
    }
    let program = script.clone();
    let text = script.finish()?;
    Ok(Prepared {
        root,
        scratch,
        mappings,
        text,
        offered: !offer.is_empty(),
        probes,
        listed,
        facts,
        program,
    })
}

/// A window's ends as the script takes them.
fn pair(w: &(String, String)) -> (&str, &str) {
    (&w.0, &w.1)
}

/// Whether a file mapping's target `base` (in its parent's grant) is a
/// regular file big enough to be worth keeping.
fn holds_big_file(parent: &GrantedDir, base: &str, shown: &str) -> Result<bool, SyncError> {
    match parent.stat_times(base) {
        Ok(e) => Ok(e.metadata.kind == EntryKind::File && e.metadata.size >= KEEP_FILE_MIN),
        Err(FsError::NotFound(_)) => Ok(false),
        Err(e) => Err(fs("stat", shown, e)),
    }
}

/// Whether a target holds anything a re-sync could keep (not scratch). A
/// name the host cannot hand over as UTF-8 is something: the walk then
/// keeps nothing (see `keep::walk`), but the sync goes on.
fn holds_files(target: &GrantedDir, shown: &str) -> Result<bool, SyncError> {
    match target.read_dir("") {
        Ok(entries) => Ok(entries
            .iter()
            .any(|e| !e.name.starts_with(sandbox_sync_core::SCRATCH_PREFIX))),
        Err(FsError::InvalidName(_)) => Ok(true),
        Err(e) => Err(fs("list", shown, e)),
    }
}
