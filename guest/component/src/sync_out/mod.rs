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

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Marker, OutboundScript};
use sandbox_sync_core::tar_read::{Limits, Source};
use sandbox_sync_core::tar_write::BLOCK;
use sandbox_sync_core::KEEP_FILE_MIN;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::{
    EntryKind, FsError, GrantedDir,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{Compression, Execution};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::{exit, from_status, fs};
use sandbox_sync_driver::extract::{expect_empty, stage_dir, stage_file, Kept, Pending};
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
                    let list = incremental
                        && !written_by_another(&all_targets, k)
                        && holds_big_file(targets[k], base, &m.target_path)?;
                    if list {
                        script.list_file(k, &source)?;
                        listed.push(k);
                    }
                    script.file(i, j, &source, list.then_some(k))?;
                }
                MappingKind::Directory => {
                    Excluder::new(&m.exclude)?;
                    let list = incremental && holds_files(targets[k], &m.target_path)?;
                    if list {
                        script.list_dir(k, &source)?;
                        listed.push(k);
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
    let text = script.finish()?;
    Ok(Prepared {
        root,
        scratch,
        mappings,
        text,
        offered: !offer.is_empty(),
        listed,
    })
}

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
    let mut staged: Vec<Pending<'_>> = Vec::new();
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
            },
            &mut input,
            &mut current,
            &mut staged,
        ),
        Err(e) => Err(SyncError::Transport(format!(
            "failed to send the sync script: {e}"
        ))),
    };
    let cut = input.was_cut();
    if outcome.is_err() {
        // Closing our end of stdout makes the sandbox's writer fail, so its
        // script exits through its cleanup trap instead of being killed.
        drop(input.into_inner());
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

/// Commits every staged mapping when the call succeeded, in order;
/// otherwise (or from the first that fails) discards them.
fn land(
    results: Result<Vec<OperationResult>, SyncError>,
    staged: Vec<Pending<'_>>,
) -> Result<Vec<OperationResult>, SyncError> {
    let mut staged = staged.into_iter();
    if results.is_ok() {
        for pending in staged.by_ref() {
            if let Err(e) = pending.commit() {
                staged.for_each(Pending::discard);
                return Err(e);
            }
        }
    }
    staged.for_each(Pending::discard);
    results
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
    mappings: &[(usize, usize, &FileMapping)],
    channel: Channel<'_>,
    input: &mut GuardedInput,
    current: &mut usize,
    staged: &mut Vec<Pending<'a>>,
) -> Result<Vec<OperationResult>, SyncError> {
    let mut kept: HashMap<usize, Vec<Kept>> = HashMap::new();
    if !channel.listed.is_empty() {
        kept = keep::exchange(input, channel.stdin, channel.listed, targets, mappings)?;
    }
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
            staged.push(pending);
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
