//! Sandbox -> host: one exec streams framed tar; the guest validates every
//! header and splices contents into host files beneath the granted targets.
//! Incremental, the program first lists the sources whose targets hold
//! files and leaves out what the host answers it already holds (see
//! [`keep`]). Offered a codec, the program names the one it uses in a
//! plain marker and compresses everything after it; the host decompresses
//! beneath the stream the guest reads.

mod keep;
mod toolbox;

use std::collections::HashMap;

use keep::Keeping;
use sandbox_sync_core::incremental::{Facts, Token};

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Marker, OutboundScript};
use sandbox_sync_core::tar_read::{Limits, Source};
use sandbox_sync_core::tar_write::BLOCK;
use sandbox_sync_core::KEEP_FILE_MIN;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::{
    EntryKind, FsError, GrantedDir,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    self, Compression, Execution,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sync_state;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::{exit, from_status, fs};
use sandbox_sync_driver::extract::{expect_empty, stage_dir, stage_file, Pending, Staged};
use sandbox_sync_driver::io::{self, GuardedInput};
use sandbox_sync_driver::plan::written_by_another;
use sandbox_sync_driver::scratch::cleanup_if_killed;

/// The program and what the host needs to read what it writes, decided
/// from the request before anything runs.
struct Prepared<'a> {
    root: String,
    scratch: String,
    /// Every mapping: (operation, index in it, mapping).
    mappings: Vec<(usize, usize, &'a FileMapping)>,
    /// The program's text.
    text: String,
    /// A codec was offered.
    offered: bool,
    /// Mappings the program lists first, in order.
    listed: Vec<usize>,
    /// The host's record of each listed mapping's target.
    facts: HashMap<usize, Facts>,
    /// The program before it was finished (a toolbox sandbox finishes it
    /// once its listings were judged).
    program: OutboundScript,
}

/// Validates the request and builds the program; `incremental`: list the
/// sources whose targets hold files, and leave out what the host keeps.
fn prepare<'a>(
    req: &'a SyncRequest,
    targets: &[&GrantedDir],
    incremental: bool,
) -> Result<Prepared<'a>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    sandbox_sync_driver::plan::check_modes(req)?;
    sandbox_sync_driver::plan::check_out_targets(req)?;
    let mappings: Vec<(usize, usize, &FileMapping)> = req
        .operations
        .iter()
        .enumerate()
        .flat_map(|(i, op)| op.files.iter().enumerate().map(move |(j, m)| (i, j, m)))
        .collect();
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
    let all_targets: Vec<&str> = mappings.iter().map(|m| m.2.target_path.as_str()).collect();
    // Directory mappings whose targets hold files: the program lists them.
    let mut listed = Vec::new();
    // The first source and whether it is a directory: `auto` samples it.
    let mut first: Option<(String, bool)> = None;
    // The mapping's index among all mappings (its grant's).
    let mut k = 0;
    for (i, op) in req.operations.iter().enumerate() {
        if !op.post_upload_commands.is_empty() {
            return Err(SyncError::InvalidRequest(format!(
                "operation {}: post-upload commands apply to sync-in only",
                op.operation_id
            )));
        }
        for (j, m) in op.files.iter().enumerate() {
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
                        script.list_file(k, &source)?;
                        listed.push(k);
                        facts.insert(k, keep::load_facts(m));
                    }
                    script.file(i, j, &source, list.then_some(k))?;
                }
                MappingKind::Directory => {
                    Excluder::new(&m.exclude)?;
                    let list = incremental && (remote || holds_files(targets[k], &m.target_path)?);
                    if list {
                        script.list_dir(k, &source)?;
                        listed.push(k);
                        facts.insert(k, keep::load_facts(m));
                    }
                    let keep = list.then_some(k);
                    script.dir(i, j, &source, m.follow_symlinks, &m.exclude, keep)?;
                }
            }
            first.get_or_insert((source, m.kind == MappingKind::Directory));
            k += 1;
        }
        script.op_done(i);
    }
    let policy = codec::policy();
    let offer = codec::preference(policy);
    if !offer.is_empty() {
        // `auto` samples the first source before it settles for gzip.
        let sample = first
            .as_ref()
            .filter(|_| policy == Compression::Auto)
            .map(|(source, dir)| (source.as_str(), *dir));
        script.offer_compression(offer, sample)?;
    }
    let program = script.clone();
    let text = script.finish()?;
    Ok(Prepared {
        root,
        scratch,
        mappings,
        text,
        offered: !offer.is_empty(),
        listed,
        facts,
        program,
    })
}

/// Most bytes read after the script could not be sent, to tell an output
/// flood (past a small guard) from a sandbox that just went away.
const SEND_FAILURE_DRAIN: u64 = 1 << 20;

pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    if crate::toolbox::available() {
        return toolbox::run(req, targets);
    }
    let Prepared {
        root,
        scratch,
        mappings,
        text,
        offered,
        listed,
        facts,
        ..
    } = prepare(req, targets, codec::incremental())?;

    let started = sandbox_sync_driver::exec::start(
        text.len(),
        req.limits.timeout_ms,
        req.limits.max_stderr_bytes,
    )?;
    let (exec, stdin) = (started.exec, started.stdin);
    let fed = io::write_all(&stdin, text.as_bytes()).and_then(|()| io::flush(&stdin));
    let mut input = GuardedInput::new(started.stdout, req.limits.max_output_bytes);
    let mut current = 0usize;
    // Every mapping is staged first and lands only once the whole stream
    // and the program's exit status are good: a stream that breaks later
    // must not leave earlier mappings replaced.
    let mut staged: Vec<Landing<'_>> = Vec::new();
    let outcome = match fed {
        Ok(()) => receive(
            req,
            targets,
            &mappings,
            Channel {
                exec: &exec,
                stdin: &stdin,
                offered,
                listed: &listed,
                facts: &facts,
                decided: None,
            },
            &mut input,
            &mut current,
            &mut staged,
        ),
        // The sandbox stopped taking the script: what it wrote before it
        // went may say why (an output flood is the guard's to report).
        Err(e) => match input.drain_arrived(SEND_FAILURE_DRAIN) {
            Err(limit) => Err(limit.into()),
            Ok(()) => Err(SyncError::Transport(format!(
                "failed to send the sync script: {e}"
            ))),
        },
    };
    let cut = input.was_cut();
    let mut stdin = Some(stdin);
    if outcome.is_err() {
        // Closing our end of stdout makes the sandbox's writer fail, and
        // closing stdin ends a wait for an answer that will never come
        // (the keep lists), so its script exits through its cleanup trap
        // instead of being killed at the deadline.
        drop(input.into_inner());
        drop(stdin.take());
    }
    let status = exec.finish();
    drop(stdin);
    if let Ok(status) = &status {
        cleanup_if_killed(status, &root, &scratch, req.limits.max_stderr_bytes);
    }
    let op = |i: usize| {
        req.operations
            .get(i)
            .map(|o| o.operation_id.as_str())
            .unwrap_or("(none)")
    };
    let results = match outcome {
        Ok(results) => match status {
            Ok(s) if exit(&s).succeeded() => Ok(results),
            Ok(s) => {
                let last = req.operations.len().saturating_sub(1);
                Err(from_status(&s, op(last), req.limits.timeout_ms))
            }
            Err(e) => Err(SyncError::Transport(e)),
        },
        // A cut stream is explained better by why it was cut: a script
        // that failed first, or an exec channel that broke.
        Err(err) if !cut => Err(err),
        Err(err) => match status {
            Ok(s) if s.exit_code != Some(0) => {
                Err(from_status(&s, op(current), req.limits.timeout_ms))
            }
            Err(transport) => Err(SyncError::Transport(format!(
                "operation {}: the exec channel broke mid-stream: {transport}",
                op(current)
            ))),
            Ok(_) => Err(err),
        },
    };
    land(results, staged)
}

/// A mapping staged, and what to record of it once it landed.
struct Landing<'a> {
    pending: Pending<'a>,
    mapping: &'a FileMapping,
    /// The listed sandbox files' tokens, by path (none: it was not listed).
    tokens: Option<HashMap<String, Token>>,
}

/// Commits every staged mapping when the call succeeded, in order;
/// otherwise (or from the first that fails) discards them. Then records
/// what the listed ones landed (see [`keep`]): what each staged tree or
/// file is is read before the commit (nothing else can reach it there),
/// and the facts after it (the commit unlinks the old tree, which moves
/// the ctime of a file kept by a link), for the files still exactly as
/// this sync put them, one clock tick later, so the probe's tick comes
/// after every change the commit made.
fn land(
    results: Result<Vec<OperationResult>, SyncError>,
    staged: Vec<Landing<'_>>,
) -> Result<Vec<OperationResult>, SyncError> {
    if results.is_err() {
        staged.into_iter().for_each(|l| l.pending.discard());
        return results;
    }
    let mut before = Vec::with_capacity(staged.len());
    for l in &staged {
        let grant = l.pending.grant();
        before.push(match (&l.tokens, &l.pending.staged()) {
            (None, _) => None,
            (Some(tokens), Staged::Dir { staging }) => {
                keep::staged_tree(grant, staging, tokens, &l.mapping.target_path)
                    .ok()
                    .map(Before::Tree)
            }
            (Some(_), Staged::File { tmp, .. }) => keep::staged_file(grant, tmp).map(Before::File),
        });
    }
    let mut landed = Vec::with_capacity(staged.len());
    let mut staged = staged.into_iter();
    for l in staged.by_ref() {
        let (grant, mapping, tokens) = (l.pending.grant(), l.mapping, l.tokens);
        if let Err(e) = l.pending.commit() {
            staged.for_each(|l| l.pending.discard());
            return Err(e);
        }
        landed.push((grant, mapping, tokens));
    }
    if landed.iter().any(|(_, _, t)| t.is_some()) {
        keep::wait_a_tick();
    }
    for ((grant, m, tokens), before) in landed.into_iter().zip(before) {
        let Some(tokens) = tokens else { continue };
        let facts = match before {
            Some(Before::Tree(was)) => {
                keep::tree_facts(grant, &tokens, &was, &m.target_path).unwrap_or_default()
            }
            Some(Before::File(was)) => {
                let (_, base) = split_parent(&m.target_path);
                tokens
                    .get("f")
                    .map(|&t| keep::file_fact(grant, base, t, was))
                    .unwrap_or_default()
            }
            None => Facts::new(),
        };
        keep::store_facts(m, &facts);
    }
    results
}

/// What a listed mapping's staged tree or file was before its commit.
enum Before {
    Tree(HashMap<String, keep::Landed>),
    File(keep::Landed),
}

/// The exec, and what the program was asked to do besides streaming.
struct Channel<'a> {
    exec: &'a Execution,
    /// Takes the keep lists.
    stdin: &'a OutputStream,
    /// A codec was offered.
    offered: bool,
    /// Directory mappings the program lists first, in order.
    listed: &'a [usize],
    /// The host's record of each listed mapping's target.
    facts: &'a HashMap<usize, Facts>,
    /// What was kept, where the listings were judged before the program
    /// ran (a toolbox sandbox's report).
    decided: Option<Keeping>,
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

/// Whether a target holds anything a re-sync could keep (not scratch).
fn holds_files(target: &GrantedDir, shown: &str) -> Result<bool, SyncError> {
    Ok(target
        .read_dir("")
        .map_err(|e| fs("list", shown, e))?
        .iter()
        .any(|e| !e.name.starts_with(sandbox_sync_core::SCRATCH_PREFIX)))
}

fn receive<'a>(
    req: &SyncRequest,
    targets: &[&'a GrantedDir],
    mappings: &[(usize, usize, &'a FileMapping)],
    channel: Channel<'_>,
    input: &mut GuardedInput,
    current: &mut usize,
    staged: &mut Vec<Landing<'a>>,
) -> Result<Vec<OperationResult>, SyncError> {
    let mut keeping = match channel.decided {
        Some(keeping) => keeping,
        None if !channel.listed.is_empty() => keep::exchange(
            input,
            channel.stdin,
            channel.listed,
            targets,
            mappings,
            channel.facts,
            req.limits.max_entries,
        )?,
        None => Keeping::default(),
    };
    let kept = std::mem::take(&mut keeping.kept);
    if channel.offered {
        match read_marker(input)? {
            Marker::Codec(None) => {}
            Marker::Codec(Some(c)) => channel
                .exec
                .decompress_stdout(codec::to_wit(c), req.limits.max_output_bytes)
                .map_err(SyncError::Transport)?,
            m => {
                return Err(SyncError::UnsafeArchive(format!(
                    "expected the codec frame, the sandbox sent {m:?}"
                )))
            }
        }
    }
    let limits = Limits {
        max_entries: req.limits.max_entries,
        max_metadata_bytes: req.limits.max_metadata_bytes,
        max_payload_bytes: req.limits.max_output_bytes,
    };
    let mut results: Vec<OperationResult> = req
        .operations
        .iter()
        .map(|o| OperationResult {
            operation_id: o.operation_id.clone(),
            files_transferred: 0,
            bytes_transferred: 0,
        })
        .collect();
    let mut k = 0;
    for (i, op) in req.operations.iter().enumerate() {
        *current = i;
        for j in 0..op.files.len() {
            expect_marker(input, &Marker::Mapping { op: i, map: j })?;
            let (_, _, m) = mappings[k];
            let before = input.total();
            let keeps = kept.get(&k).is_some_and(|v| !v.is_empty());
            let (files, bytes, pending) = match m.kind {
                MappingKind::File if keeps => {
                    // The target stays as it is; nothing moved.
                    expect_empty(input, m, limits)?;
                    k += 1;
                    continue;
                }
                MappingKind::File => stage_file(input, targets[k], m, limits)?,
                MappingKind::Directory => {
                    let kept = kept.get(&k).map_or(&[][..], Vec::as_slice);
                    stage_dir(input, targets[k], m, limits, kept)?
                }
            };
            staged.push(Landing {
                pending,
                mapping: m,
                tokens: keeping.tokens.remove(&k),
            });
            results[i].files_transferred += files;
            results[i].bytes_transferred += bytes.unwrap_or(input.total() - before);
            k += 1;
        }
        expect_marker(input, &Marker::OpDone(i))?;
    }
    expect_marker(input, &Marker::End)?;
    if !input.at_end()? {
        return Err(SyncError::UnsafeArchive(
            "the sandbox wrote data after the end marker".into(),
        ));
    }
    Ok(results)
}

/// Checks that the next marker is `want`.
fn expect_marker(input: &mut GuardedInput, want: &Marker) -> Result<(), SyncError> {
    match read_marker(input)? {
        m if &m == want => Ok(()),
        m => Err(SyncError::UnsafeArchive(format!(
            "expected frame {want:?}, the sandbox sent {m:?}"
        ))),
    }
}

/// Skips zero padding between frames and reads the next marker.
pub(crate) fn read_marker(input: &mut GuardedInput) -> Result<Marker, SyncError> {
    let mut block = [0u8; BLOCK as usize];
    loop {
        input.read_exact(&mut block)?;
        if block.iter().any(|&b| b != 0) {
            break;
        }
    }
    script::parse_marker(&block).ok_or_else(|| {
        SyncError::UnsafeArchive("the sandbox's output is not a framed tar stream".into())
    })
}
