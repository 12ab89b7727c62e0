//! Host -> sandbox: one exec. The program starts first; the host walks its
//! sources while the program starts and reports (what its targets hold,
//! which codecs it has, whether its tar can take an archive of unknown
//! length), then answers with the codec and, where needed, the archive's
//! length, and sends the archive: headers from the guest, contents spliced
//! host-side. When the sandbox's tar stops at the end marker by itself, the
//! rest of a big tree is walked while it is sent.

mod archive;
mod keep;
mod report;
mod toolbox;

use std::collections::BTreeMap;

use sandbox_sync_core::outcome::{self, Operation};
use sandbox_sync_core::plan::{file_source, mtime, DirWalk, Planned, PlannedKind, Stamp};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Codec, InboundScript};
use sandbox_sync_core::tar_write;
use sandbox_sync_core::KEEP_FILE_MIN;
use sandbox_sync_driver::codec::{self, AUTO_MIN_BYTES};
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::plan::{check_modes, command_cwd};
use sandbox_sync_driver::scratch::cleanup_if_killed;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    self, Compression, Execution,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::io::{self, StreamError};

use archive::ArchiveWriter;
use keep::Keeper;
use report::{read_report, read_status};

/// Members walked before the program's report is read (about 2 MiB of
/// plan). When its tar can take an archive of unknown length the rest is
/// walked while sending, so a plan never holds more; otherwise the whole
/// tree is walked first (its length goes first).
///
/// Walking and sending take turns on the guest's one thread (the host
/// sends a batch of files per call), so streaming bounds memory but does
/// not by itself overlap the walk with the sandbox's extraction; walking a
/// typical tree whole while the program starts is faster.
const LOOKAHEAD: usize = 1 << 16;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    if crate::toolbox::available() {
        return toolbox::run(req, sources);
    }
    // Before any identity is read: what the host sends is named by
    // identities settled against this clock.
    let walked_at = io::now();
    let mut plan = prepare(req, sources, codec::incremental(), false)?;
    plan.walked_at = walked_at;
    let started = sandbox_sync_driver::exec::start(
        plan.program.len(),
        req.limits.timeout_ms,
        req.limits.max_stderr_bytes,
    )?;
    let (exec, stdin, stdout) = (started.exec, started.stdin, started.stdout);
    let (root, scratch) = (plan.root.clone(), plan.scratch.clone());
    let cleanup = |status| {
        cleanup_if_killed(status, &root, &scratch, req.limits.max_stderr_bytes);
    };

    // A failure to feed stdin usually means the program stopped early; its
    // exit status explains why, so keep it and decide after `finish`.
    let mut early = Vec::new();
    match send(&exec, &stdin, &stdout, &mut plan, &mut early) {
        sent @ (Ok(_) | Err(Sent::Stream(_))) => {
            let mut results = std::mem::take(&mut plan.results);
            if let Ok(s) = &sent {
                Keeper::uncount(&s.kept, &plan.mapping_op, &mut results);
            }
            // Plain, stdin stays open until the status (the sandbox never
            // needs EOF); a compressed archive ends with stdin.
            let stdin = match &sent {
                Ok(Delivery { codec: Some(_), .. }) => {
                    drop(stdin);
                    None
                }
                _ => Some(stdin),
            };
            let statuses = read_status(&stdout, early);
            let status = exec.finish().map_err(SyncError::Transport)?;
            drop(stdin);
            cleanup(&status);
            let stdin_failed = match &sent {
                Err(Sent::Stream(e)) => Some(e.to_string()),
                _ => None,
            };
            conclude(req, &statuses, &status, stdin_failed.as_deref())?;
            Ok(results)
        }
        Err(Sent::Refused(e)) => {
            // The walk failed before any archive byte: the program was
            // told so and stops (its trap removes its scratch); let it.
            drop(stdin);
            let _ = read_status(&stdout, early);
            drop(stdout);
            if let Ok(status) = exec.finish() {
                cleanup(&status);
            }
            Err(e)
        }
        Err(Sent::SourceChanged(e) | Sent::Fatal(e)) => {
            // The program never sees its commit marker, so it cannot apply
            // anything; stop it now (any transport) and sweep its scratch.
            exec.abort();
            drop(stdin);
            drop(stdout);
            if let Ok(status) = exec.finish() {
                cleanup(&status);
            }
            Err(e)
        }
    }
}

/// Judges the call by how the program ended and the status lines it
/// printed.
fn conclude(
    req: &SyncRequest,
    statuses: &[sandbox_sync_core::script::Status],
    status: &sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus,
    stdin_failed: Option<&str>,
) -> Result<(), SyncError> {
    let ops: Vec<Operation<'_>> = req
        .operations
        .iter()
        .map(|o| Operation {
            id: &o.operation_id,
            command_timeouts: o
                .post_upload_commands
                .iter()
                .map(|c| c.timeout_ms)
                .collect(),
        })
        .collect();
    outcome::conclude_inbound(
        &ops,
        statuses,
        &exit(status),
        stdin_failed,
        req.limits.timeout_ms,
    )?;
    Ok(())
}

/// The call: the program, decided from the request alone before the exec
/// starts, and the archive's members, the directory walks' among them
/// added while the program starts.
struct Plan<'a> {
    root: String,
    scratch: String,
    /// The program's text.
    program: String,
    /// The report as a program of its own (a toolbox sandbox, where the
    /// report must come before the program starts); none when nothing
    /// is listed.
    report_program: Option<String>,
    /// Archive members in order, but for the commit token.
    members: PlanLog,
    /// The commit token's member, the archive's last (none: no archive).
    commit: Option<Planned>,
    /// The host's grants, one per mapping.
    sources: &'a [&'a GrantedDir],
    /// Directory mappings still to walk, each with its operation.
    walks: Vec<(usize, DirWalk<'a, GrantedDir>)>,
    /// What the call reports on success.
    results: Vec<OperationResult>,
    /// Codecs the program offers, most wanted first; empty: no compression.
    offer: &'static [Codec],
    /// The operation of each mapping.
    mapping_op: Vec<usize>,
    /// File mappings whose target may be kept, with the mode it lands with.
    file_modes: BTreeMap<usize, u32>,
    /// The report program's scratch dir, which it leaves to the program.
    report_scratch: String,
    /// The host's clock before any source identity was read.
    walked_at: (i64, u32),
}

impl Plan<'_> {
    /// The members' bytes in the archive (the commit token's included, the
    /// end marker and padding not).
    fn members_len(&self) -> u64 {
        self.members.tally().archive_bytes
            + self.commit.as_ref().map_or(0, |c| c.member().archive_len())
    }
}

/// Validates every path and builds the program before the exec starts.
/// Directory sources are checked here ([`DirWalk::new`]: they exist, are
/// directories, their excludes parse) but walked only once the program
/// runs ([`Walker`]).
fn prepare<'a>(
    req: &'a SyncRequest,
    sources: &'a [&'a GrantedDir],
    incremental: bool,
    report_apart: bool,
) -> Result<Plan<'a>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    check_modes(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != sources.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} source directories for {mappings} mappings",
            sources.len()
        )));
    }
    let mut members = PlanLog::new();
    let scratch = sandbox_sync_driver::scratch::fresh();
    let mut script = InboundScript::new(&root, req.limits.timeout_ms, &scratch);
    let mut results = Vec::with_capacity(req.operations.len());
    let mut walks = Vec::new();
    let mut k = 0;
    let mut mapping_op = Vec::with_capacity(sources.len());
    let mut file_modes = BTreeMap::new();
    if incremental {
        script.record();
        // Over a link a listing's bytes cost more than gzip in the sandbox.
        if sandbox_exec::transfer_remote() {
            script.zip_listings();
        }
    }
    for (i, op) in req.operations.iter().enumerate() {
        let (mut files, mut bytes) = (0u64, 0u64);
        for m in &op.files {
            let grant = sources[k];
            let target = confine(&root, &m.target_path, "target")?;
            script.preflight(&target)?;
            let (parent, base) = split_parent(&target);
            mapping_op.push(i);
            match m.kind {
                MappingKind::File => {
                    let (path, meta) = file_source(grant, &m.source_path, &target, &root)?;
                    let name = format!("f{k}");
                    files += 1;
                    bytes += meta.size;
                    // A kept file lands as a sent one does, so another
                    // mapping writing the same path (through any name)
                    // changes nothing.
                    if incremental && meta.size >= KEEP_FILE_MIN {
                        script.reuse_file(k, &target)?;
                        file_modes.insert(k, m.mode.unwrap_or(meta.mode & 0o777));
                    }
                    script.put_file(&name, parent, base, m.mode)?;
                    members.push(&Planned {
                        name: name.into(),
                        mode: meta.mode & 0o777,
                        mtime: mtime(&meta),
                        kind: PlannedKind::HostFile {
                            grant: k,
                            path: path.into(),
                            stamp: Stamp::from(&meta),
                        },
                    });
                }
                MappingKind::Directory => {
                    let name = format!("d{k}");
                    let walk = DirWalk::new(
                        grant,
                        k,
                        &name,
                        &m.source_path,
                        &m.exclude,
                        m.follow_symlinks,
                    )?;
                    if target == root {
                        script.put_root(&name, m.mode)?;
                    } else {
                        script.put_dir(&name, parent, base, m.mode)?;
                    }
                    if incremental {
                        script.reuse_dir(k, &target)?;
                    }
                    walks.push((i, walk));
                }
            }
            k += 1;
        }
        for (j, c) in op.post_upload_commands.iter().enumerate() {
            let cwd = command_cwd(&root, c.cwd.as_deref(), &c.command)?;
            let name = format!("c{i}.{j}");
            script.command(i, j, &name, &cwd, c.timeout_ms)?;
            members.push(&Planned {
                name: name.into(),
                kind: PlannedKind::Inline(c.command.clone().into_bytes()),
                mode: 0o600,
                mtime: 0,
            });
        }
        script.op_done(i);
        results.push(OperationResult {
            operation_id: op.operation_id.clone(),
            files_transferred: files,
            bytes_transferred: bytes,
        });
    }

    let token = io::random_hex(16);
    // Every directory mapping has at least its own member.
    let archive = !members.is_empty() || !walks.is_empty();
    let commit = archive.then(|| Planned {
        name: "commit".into(),
        kind: PlannedKind::Inline(token.clone().into_bytes()),
        mode: 0o600,
        mtime: 0,
    });
    // Offered whenever the policy allows; whether the data is worth it is
    // sampled once the walk is done.
    let offer = codec::preference(codec::policy());
    if archive && !offer.is_empty() {
        script.offer_compression();
    }
    let report_scratch = sandbox_sync_driver::scratch::fresh();
    let report_program = match report_apart {
        true => script.report_program(&report_scratch)?,
        false => None,
    };
    let program = match &report_program {
        Some(_) => script.finish_reported(archive, &token, &report_scratch)?,
        None => script.finish(archive, &token)?,
    };
    Ok(Plan {
        report_program,
        root,
        scratch,
        program,
        members,
        commit,
        sources,
        walks,
        results,
        offer,
        mapping_op,
        file_modes,
        report_scratch,
        walked_at: io::now(),
    })
}

enum Sent {
    /// Stdin failed; the exec status will say why.
    Stream(StreamError),
    /// The walk refused the request before any archive byte was sent.
    Refused(SyncError),
    /// A host source changed while it was being sent.
    SourceChanged(SyncError),
    /// A host-side failure unrelated to the sandbox.
    Fatal(SyncError),
}

/// What [`send`] did.
struct Delivery {
    /// The codec the archive was compressed with.
    codec: Option<Codec>,
    /// Files kept in the sandbox instead of sent: (mapping, bytes).
    kept: Vec<(usize, u64)>,
}

/// Writes the program, then walks the directory sources while it starts.
/// With an archive to send, reads what the program reports (its caps,
/// what its targets hold; any status lines go to `early`), drops the files
/// the targets already hold, answers with the codec and the archive's
/// length, and sends the archive, walking the rest of the tree meanwhile
/// when the program's tar can take an archive of unknown length.
fn send(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &mut Plan<'_>,
    early: &mut Vec<u8>,
) -> Result<Delivery, Sent> {
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    io::flush(stdin).map_err(Sent::Stream)?;
    let mut walker = Walker::new(std::mem::take(&mut plan.walks));
    let delivered = deliver(exec, stdin, stdout, plan, &mut walker, early);
    // Whatever happened: the results count what was walked.
    walker.count_into(&mut plan.results);
    delivered
}

/// [`send`] past the program: walk (all of it, or the lookahead), read the
/// report, answer, send the archive (walking the rest when streaming).
fn deliver(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &mut Plan<'_>,
    walker: &mut Walker<'_>,
    early: &mut Vec<u8>,
) -> Result<Delivery, Sent> {
    let Some(commit) = plan.commit.clone() else {
        return Ok(Delivery {
            codec: None,
            kept: Vec::new(),
        });
    };
    let sources = plan.sources;
    let refuse = |e: SyncError| {
        // Any answer but a codec stops the program, changing nothing.
        let _ = io::write_all(stdin, b"refused 0\n").and_then(|()| io::flush(stdin));
        Sent::Refused(e)
    };
    // While the program starts: the walk's first members.
    let mut done = walker.fill(&mut plan.members, LOOKAHEAD).map_err(refuse)?;
    let (caps, listing) = read_report(stdout, early);
    let policy = codec::policy();
    // Without an end to stdin the sandbox's decompressor would never finish.
    let may_compress = !plan.offer.is_empty() && exec.stdin_ends();
    if may_compress && policy == Compression::Auto {
        // `auto` samples at least this much, where there is that much.
        while !done && plan.members.tally().archive_bytes < AUTO_MIN_BYTES {
            done = walker.fill(&mut plan.members, LOOKAHEAD).map_err(refuse)?;
        }
    }
    let worth_it = may_compress && codec::worth_it(policy, &plan.members, sources);
    let chosen = codec::choose(if worth_it { plan.offer } else { &[] }, &caps.codecs);
    let streaming = !done && (caps.streams || chosen.is_some());
    if !done && !streaming {
        walker.fill(&mut plan.members, usize::MAX).map_err(refuse)?;
    }
    let mut keeper = Keeper::new(&listing, &plan.file_modes, plan.walked_at, caps.records);
    let skip = keeper.skips(&plan.members);
    // Only a whole plan has a length; a streamed one ends at its marker.
    let promised = (!streaming).then(|| keeper.archive_len(plan.members_len()));
    let rest = walker.by_ref().map(|p| {
        // Past the first byte a failed walk is like a changed source: the
        // program never sees its commit token.
        p.map_err(Sent::Fatal)
    });
    let archive = Archive {
        members: &plan.members,
        skip: &skip,
        commit: &commit,
        promised,
    };
    send_archive(exec, stdin, sources, &archive, rest, &mut keeper, chosen)?;
    Ok(Delivery {
        codec: chosen,
        kept: keeper.counted,
    })
}

/// The archive of a plan, as the host answers and sends it.
struct Archive<'a> {
    /// The planned members, the commit token's aside.
    members: &'a PlanLog,
    /// Per planned member: the targets hold it, so it is left out (empty:
    /// nothing is).
    skip: &'a [bool],
    /// The commit token's member, the archive's last.
    commit: &'a Planned,
    /// The members' archive bytes, announced in the answer (none: a
    /// streamed archive, which ends at its marker).
    promised: Option<u64>,
}

/// Answers the program (the codec, and the length where there is one) and
/// sends the archive: the planned members the targets do not hold, then
/// `rest` (the walk's remainder, when streaming; those the targets hold
/// left out too), the keep lists and the commit token, compressed after
/// the answer when `chosen` says so.
fn send_archive(
    exec: &Execution,
    stdin: &OutputStream,
    sources: &[&GrantedDir],
    archive: &Archive<'_>,
    rest: impl Iterator<Item = Result<Planned, Sent>>,
    keeper: &mut Keeper<'_>,
    chosen: Option<Codec>,
) -> Result<(), Sent> {
    let answer = format!(
        "{} {}\n",
        script::choice_name(chosen),
        archive.promised.map_or(0, tar_write::archive_len)
    );
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    if let Some(c) = chosen {
        exec.compress_stdin(codec::to_wit(c)).map_err(fatal)?;
    }
    let mut out = ArchiveWriter::new(exec, stdin, sources);
    for (i, p) in archive.members.iter().enumerate() {
        if !archive.skip.get(i).copied().unwrap_or(false) {
            out.push(&p)?;
        }
    }
    for p in rest {
        let p = p?;
        if !keeper.keeps(&p) {
            out.push(&p)?;
        }
    }
    for p in keeper.lists() {
        out.push(&p)?;
    }
    out.push(archive.commit)?;
    let sent = out.finish()?;
    if let Some(len) = archive.promised.filter(|&len| len != sent) {
        return Err(fatal(format!(
            "the archive came to {sent} bytes, not the {len} announced"
        )));
    }
    if chosen.is_some() {
        exec.finish_compressed_stdin().map_err(fatal)?;
        io::flush(stdin).map_err(Sent::Stream)?;
    }
    Ok(())
}

/// The directory mappings' members, walked one at a time, and what each
/// operation's results count for them.
struct Walker<'a> {
    walks: std::vec::IntoIter<(usize, DirWalk<'a, GrantedDir>)>,
    current: Option<(usize, DirWalk<'a, GrantedDir>)>,
    /// Per operation: (files, archive bytes) walked.
    counted: Vec<(usize, u64, u64)>,
}

impl<'a> Walker<'a> {
    fn new(walks: Vec<(usize, DirWalk<'a, GrantedDir>)>) -> Self {
        Walker {
            walks: walks.into_iter(),
            current: None,
            counted: Vec::new(),
        }
    }

    /// Moves up to `n` members into `log`. Returns true when the walk is
    /// done.
    fn fill(&mut self, log: &mut PlanLog, n: usize) -> Result<bool, SyncError> {
        for _ in 0..n {
            match self.next() {
                Some(p) => log.push(&p?),
                None => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Adds what was walked to the operations' results.
    fn count_into(&self, results: &mut [OperationResult]) {
        for &(op, files, bytes) in &self.counted {
            if let Some(r) = results.get_mut(op) {
                r.files_transferred += files;
                r.bytes_transferred += bytes;
            }
        }
    }
}

impl Iterator for Walker<'_> {
    type Item = Result<Planned, SyncError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (op, walk) = match &mut self.current {
                Some(current) => current,
                None => self.current.insert(self.walks.next()?),
            };
            match walk.next() {
                Some(Ok(p)) => {
                    let file = u64::from(!matches!(p.kind, PlannedKind::Dir));
                    let bytes = p.member().archive_len();
                    match self.counted.last_mut() {
                        Some(c) if c.0 == *op => {
                            c.1 += file;
                            c.2 += bytes;
                        }
                        _ => self.counted.push((*op, file, bytes)),
                    }
                    return Some(Ok(p));
                }
                Some(Err(e)) => {
                    // Nothing is walked after a failure.
                    self.walks = Vec::new().into_iter();
                    self.current = None;
                    return Some(Err(e.into()));
                }
                None => self.current = None,
            }
        }
    }
}
