//! Reading a sync-out's framed stream into staged targets, and landing
//! them once the sync's verdict is known; both transports read through
//! here.

use std::collections::HashMap;

use sandbox_sync_core::incremental::Facts;
use sandbox_sync_core::outcome::{Blame, Read};
use sandbox_sync_core::sandbox_path::split_parent;
use sandbox_sync_core::script::{self, Marker, Named};
use sandbox_sync_core::tar_read::{Limits, Source};
use sandbox_sync_core::tar_write::BLOCK;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::Execution;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::extract::{expect_empty, stage_dir, stage_file, Kept, Pending, Staged};
use sandbox_sync_driver::io::{self, GuardedInput};
use sandbox_sync_driver::request::{self, Mapping};

use super::keep::{self, Keeping};

/// The exec, and what the program was asked to do besides streaming.
pub struct Channel<'a> {
    pub exec: &'a Execution,
    /// Takes the keep lists.
    pub stdin: &'a OutputStream,
    /// A codec was offered.
    pub offered: bool,
    /// The program may send a probe of the link before its codec frame.
    pub probes: bool,
    /// Directory mappings the program lists first, in order.
    pub listed: &'a [usize],
    /// The host's record of each listed mapping's target.
    pub facts: &'a HashMap<usize, Facts>,
    /// What was kept, where the listings were judged before the program
    /// ran (a toolbox sandbox's report).
    pub decided: Option<Keeping>,
}

/// Reads a sync-out's framed stream: the keep exchange, the codec frame,
/// then each mapping's archive, staged beneath its target.
pub struct Receiver<'r, 'a> {
    req: &'a SyncRequest,
    targets: &'r [&'a GrantedDir],
    mappings: &'r [Mapping<'a>],
    input: GuardedInput,
    /// The operation whose part of the stream is being read.
    current: usize,
    staged: Landings<'a>,
}

impl<'r, 'a> Receiver<'r, 'a> {
    /// Reads `stdout`, guarded by the request's output limit.
    pub fn new(
        req: &'a SyncRequest,
        targets: &'r [&'a GrantedDir],
        mappings: &'r [Mapping<'a>],
        stdout: InputStream,
    ) -> Self {
        Receiver {
            req,
            targets,
            mappings,
            input: GuardedInput::new(stdout, req.limits.max_output_bytes),
            current: 0,
            staged: Landings::default(),
        }
    }

    /// The stream, for what arrived before it failed.
    pub fn input(&mut self) -> &mut GuardedInput {
        &mut self.input
    }

    /// Ends the read, dropping the stream (a sandbox still writing then
    /// fails): whether it was cut short, whom a failure names, and what
    /// was staged.
    pub fn end(self) -> (bool, Blame<'a>, Landings<'a>) {
        let req: &'a SyncRequest = self.req;
        let op = |i: usize| {
            req.operations
                .get(i)
                .map_or("(none)", |o| o.operation_id.as_str())
        };
        let blame = Blame {
            current: op(self.current),
            last: op(req.operations.len().saturating_sub(1)),
        };
        (self.input.was_cut(), blame, self.staged)
    }

    /// Reads the whole stream; the results count what it brought.
    pub fn receive(&mut self, channel: Channel<'_>) -> Result<Vec<OperationResult>, SyncError> {
        let mut keeping = match channel.decided {
            Some(keeping) => keeping,
            None if !channel.listed.is_empty() => keep::exchange(
                &mut self.input,
                channel.stdin,
                channel.listed,
                self.targets,
                self.mappings,
                channel.facts,
                self.req.limits.max_entries,
            )?,
            None => Keeping::default(),
        };
        let mut kept = std::mem::take(&mut keeping.kept);
        let held = std::mem::take(&mut keeping.held);
        if channel.offered {
            let mut marker = read_marker(&mut self.input)?;
            if let Marker::Probe(len) = marker {
                // Only the probe this program was written to send.
                if !channel.probes || len != codec::LINK_PROBE {
                    return Err(SyncError::UnsafeArchive(format!(
                        "the sandbox sent a {len}-byte probe it was not asked for"
                    )));
                }
                let rate = self.input.skip_timed(len)?;
                io::write_all(channel.stdin, format!("{rate}\n").as_bytes())
                    .and_then(|()| io::flush(channel.stdin))
                    .map_err(|e| {
                        SyncError::Transport(format!("failed to answer the sandbox's probe: {e}"))
                    })?;
                marker = read_marker(&mut self.input)?;
            }
            match marker {
                Marker::Codec(None) => {}
                Marker::Codec(Some(c)) => channel
                    .exec
                    .decompress_stdout(codec::to_wit(c), self.req.limits.max_output_bytes)
                    .map_err(SyncError::Transport)?,
                m => {
                    return Err(SyncError::UnsafeArchive(format!(
                        "expected the codec frame, the sandbox sent {m:?}"
                    )))
                }
            }
        }
        let limits = Limits {
            max_entries: self.req.limits.max_entries,
            max_metadata_bytes: self.req.limits.max_metadata_bytes,
            max_payload_bytes: self.req.limits.max_output_bytes,
        };
        let req = self.req;
        let mut results: Vec<OperationResult> = req
            .operations
            .iter()
            .map(|o| OperationResult {
                operation_id: o.operation_id.clone(),
                files_transferred: 0,
                bytes_transferred: 0,
            })
            .collect();
        for (i, _, op_mappings) in request::operations(req) {
            self.current = i;
            for Mapping {
                index: j,
                grant: k,
                spec: m,
                ..
            } in op_mappings
            {
                expect_marker(&mut self.input, &Marker::Mapping { op: i, map: j })?;
                let before = self.input.total();
                let here = kept.remove(&k).unwrap_or_default();
                let (files, bytes, pending) = match m.kind {
                    // The target stays as it is; nothing moved.
                    MappingKind::File if !here.is_empty() => {
                        expect_empty(&mut self.input, m, limits)?;
                        continue;
                    }
                    MappingKind::File => stage_file(&mut self.input, self.targets[k], m, limits)?,
                    MappingKind::Directory => stage_dir(
                        &mut self.input,
                        self.targets[k],
                        m,
                        limits,
                        &here,
                        held.get(&k),
                    )?,
                };
                sandbox_sync_driver::report::links_skipped(
                    &req.operations[i].operation_id,
                    m,
                    pending.skipped(),
                );
                self.staged.0.push(Landing {
                    pending,
                    mapping: m,
                    tokens: keeping.tokens.remove(&k),
                    kept: here,
                });
                results[i].files_transferred += files;
                results[i].bytes_transferred += bytes.unwrap_or(self.input.total() - before);
            }
            expect_marker(&mut self.input, &Marker::OpDone(i))?;
        }
        expect_marker(&mut self.input, &Marker::End)?;
        if !self.input.at_end()? {
            return Err(SyncError::UnsafeArchive(
                "the sandbox wrote data after the end marker".into(),
            ));
        }
        Ok(results)
    }
}

/// How the read of `received` stopped (`cut`: the stream ended in the
/// middle of the archive): a host-side failure to read or write the stream
/// is the stream's, any other error a verdict on what it carried.
pub fn how_read<T>(received: &Result<T, SyncError>, cut: bool) -> Read {
    match received {
        _ if cut => Read::Cut,
        Err(SyncError::Io(_) | SyncError::Transport(_)) => Read::Failed,
        _ => Read::Judged,
    }
}

/// What a read staged, in order, to land or discard once the sync's
/// verdict is known (see [`land`]).
#[derive(Default)]
pub struct Landings<'a>(Vec<Landing<'a>>);

/// A mapping staged, and what to record of it once it landed.
struct Landing<'a> {
    pending: Pending<'a>,
    mapping: &'a FileMapping,
    /// The listed sandbox files' tokens, by path (none: it was not listed).
    tokens: Option<Named>,
    /// The target's files it kept.
    kept: Vec<Kept>,
}

/// Commits every staged mapping when the call succeeded, in order;
/// otherwise (or from the first that fails) discards them. Then records
/// what the listed ones landed (see [`keep`]): what each staged tree or
/// file is is read before the commit (nothing else can reach it there),
/// and the facts after it (the commit unlinks the old tree, which moves
/// the ctime of a file kept by a link), for the files still exactly as
/// this sync put them, one clock tick later, so the probe's tick comes
/// after every change the commit made. A target left unchanged keeps its
/// record.
pub fn land(
    results: Result<Vec<OperationResult>, SyncError>,
    staged: Landings<'_>,
) -> Result<Vec<OperationResult>, SyncError> {
    let staged = staged.0;
    if results.is_err() {
        staged.into_iter().for_each(|l| l.pending.discard());
        return results;
    }
    let mut before = Vec::with_capacity(staged.len());
    for l in &staged {
        let grant = l.pending.grant();
        before.push(match (&l.tokens, &l.pending.staged()) {
            (None, _) => None,
            (Some(tokens), Staged::Dir { staging, written }) => keep::staged_tree(
                grant,
                staging,
                tokens,
                &l.kept,
                written,
                &l.mapping.target_path,
            )
            .ok()
            .map(Before::Tree),
            (Some(_), Staged::File { tmp, .. }) => keep::staged_file(grant, tmp).map(Before::File),
            (Some(_), Staged::Unchanged) => None,
        });
    }
    let mut landed = Vec::with_capacity(staged.len());
    let mut staged = staged.into_iter();
    for l in staged.by_ref() {
        // An unchanged target's record still says what it is.
        let tokens = l
            .tokens
            .filter(|_| !matches!(l.pending.staged(), Staged::Unchanged));
        let (grant, mapping) = (l.pending.grant(), l.mapping);
        if let Err(e) = l.pending.commit() {
            staged.for_each(|l| l.pending.discard());
            return Err(e);
        }
        landed.push((grant, mapping, tokens));
    }
    let recorded: Vec<&GrantedDir> = landed
        .iter()
        .filter(|(_, _, t)| t.is_some())
        .map(|(g, _, _)| *g)
        .collect();
    keep::wait_a_tick(&recorded);
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
                    .map(|l| keep::file_fact(grant, base, l, was, tokens.probe.as_deref()))
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
