//! Host -> sandbox: plan, one exec, headers from the guest, contents spliced
//! host-side, then conclude from what the program reported. When the data
//! is worth it, the program first says which codecs it has, and the host
//! compresses the archive for the one chosen.

use sandbox_sync_core::outcome::{self, Operation};
use std::borrow::Cow;

use sandbox_sync_core::plan::{file_source, mtime, plan_dir, tally, Planned, PlannedKind};
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{
    self, Codec, InboundScript, Listed, Listing, ListingParser, Status,
};
use sandbox_sync_core::tar_write;
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::plan::{check_modes, command_cwd};
use sandbox_sync_driver::scratch::cleanup_if_killed;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    Execution, FileSend, SendError,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::io::{self, StreamError};

/// Most bytes of status lines accepted from the inbound program.
const MAX_STATUS_BYTES: u64 = 1 << 20;
/// Header bytes buffered before a write.
const HEADER_BATCH: usize = 64 * 1024;
/// Most host files handed to one `send-files` call.
const FILES_PER_CALL: usize = 1024;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let plan = plan(req, sources)?;
    let started = sandbox_sync_driver::exec::start(
        plan.program.len(),
        req.limits.timeout_ms,
        req.limits.max_stderr_bytes,
    )?;
    let (exec, stdin, stdout) = (started.exec, started.stdin, started.stdout);
    let cleanup = |status| {
        cleanup_if_killed(
            status,
            &plan.root,
            &plan.scratch,
            req.limits.max_stderr_bytes,
        );
    };

    // A failure to feed stdin usually means the program stopped early; its
    // exit status explains why, so keep it and decide after `finish`.
    let mut early = Vec::new();
    let mut results = plan.results.clone();
    match send(&exec, &stdin, &stdout, &plan, sources, &mut early) {
        sent @ (Ok(_) | Err(Sent::Stream(_))) => {
            if let Ok(s) = &sent {
                // Kept files were not transferred.
                for &(k, bytes) in &s.kept {
                    if let Some(r) = plan.mapping_op.get(k).and_then(|&i| results.get_mut(i)) {
                        r.files_transferred = r.files_transferred.saturating_sub(1);
                        r.bytes_transferred = r.bytes_transferred.saturating_sub(bytes);
                    }
                }
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
                &statuses,
                &exit(&status),
                stdin_failed.as_deref(),
                req.limits.timeout_ms,
            )?;
            Ok(results)
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

/// Everything decided before the exec starts.
struct Plan {
    root: String,
    scratch: String,
    /// The program's text.
    program: String,
    /// Archive members in order, the commit token last.
    members: Vec<Planned>,
    /// Their bytes in the archive (without the end marker and padding).
    members_len: u64,
    /// What the call reports on success.
    results: Vec<OperationResult>,
    /// Codecs to offer, most wanted first; empty: no compression.
    offer: &'static [Codec],
    /// The program lists its directory targets for files to keep.
    reuse: bool,
    /// The operation of each mapping.
    mapping_op: Vec<usize>,
}

impl Plan {
    /// The program reports (caps, listings) and waits for an answer line.
    fn negotiated(&self) -> bool {
        !self.offer.is_empty() || self.reuse
    }
}

/// Plans the whole call, and validates every path, before the exec starts.
fn plan(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Plan, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    check_modes(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != sources.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} source directories for {mappings} mappings",
            sources.len()
        )));
    }
    let mut members: Vec<Planned> = Vec::new();
    let scratch = sandbox_sync_driver::scratch::fresh();
    let mut script = InboundScript::new(&root, req.limits.timeout_ms, &scratch);
    let mut results = Vec::with_capacity(req.operations.len());
    let mut k = 0;
    let incremental = codec::incremental();
    let mut reuse = false;
    let mut mapping_op = Vec::with_capacity(sources.len());
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
                    script.put_file(&name, parent, base, m.mode)?;
                    members.push(Planned {
                        name,
                        mode: meta.mode & 0o777,
                        mtime: mtime(&meta),
                        kind: PlannedKind::HostFile {
                            grant: k,
                            path: path.to_owned(),
                            meta,
                        },
                    });
                }
                MappingKind::Directory => {
                    let name = format!("d{k}");
                    let before = members.len();
                    plan_dir(
                        grant,
                        k,
                        &name,
                        &m.source_path,
                        &m.exclude,
                        m.follow_symlinks,
                        &mut members,
                    )?;
                    let (f, b) = tally(&members[before..]);
                    files += f;
                    bytes += b;
                    if target == root {
                        script.put_root(&name, m.mode)?;
                    } else {
                        script.put_dir(&name, parent, base, m.mode)?;
                    }
                    if incremental {
                        script.reuse_dir(k, &target)?;
                        reuse = true;
                    }
                }
            }
            k += 1;
        }
        for (j, c) in op.post_upload_commands.iter().enumerate() {
            let cwd = command_cwd(&root, c.cwd.as_deref(), &c.command)?;
            let name = format!("c{i}.{j}");
            script.command(i, j, &name, &cwd, c.timeout_ms)?;
            members.push(Planned {
                name,
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
    let mut archive_len = 0;
    let mut members_len = 0;
    if !members.is_empty() {
        members.push(Planned {
            name: "commit".into(),
            kind: PlannedKind::Inline(token.clone().into_bytes()),
            mode: 0o600,
            mtime: 0,
        });
        members_len = members.iter().map(|p| p.member().archive_len()).sum();
        archive_len = tar_write::archive_len(members_len);
    }
    let policy = codec::policy();
    let offer = if archive_len > 0 && codec::worth_it(policy, &members, sources) {
        script.offer_compression();
        codec::preference(policy)
    } else {
        &[]
    };
    let program = script.finish(archive_len, &token)?;
    Ok(Plan {
        root,
        scratch,
        program,
        members,
        members_len,
        results,
        offer,
        reuse,
        mapping_op,
    })
}

enum Sent {
    /// Stdin failed; the exec status will say why.
    Stream(StreamError),
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

/// Writes the program; when the plan negotiates, reads what the program
/// reports (its codecs, what its targets hold; any status lines go to
/// `early`), drops the files the targets already hold, and answers with
/// the codec and the archive's length. Then writes the archive.
fn send(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &Plan,
    sources: &[&GrantedDir],
    early: &mut Vec<u8>,
) -> Result<Delivery, Sent> {
    // No earlier than the sandbox ran anything: bounds its clock's skew.
    let sent_at = io::unix_now();
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    if !plan.negotiated() {
        send_archive(exec, stdin, &plan.members, plan.members_len, sources)?;
        return Ok(Delivery {
            codec: None,
            kept: Vec::new(),
        });
    }
    io::flush(stdin).map_err(Sent::Stream)?;
    let (caps, listing) = read_report(stdout, early);
    let (members, kept) = keep_unchanged(&plan.members, &listing, sent_at);
    let members_len: u64 = members.iter().map(|p| p.member().archive_len()).sum();
    // Without an end to stdin the sandbox's decompressor would never finish.
    let chosen = codec::choose(plan.offer, &caps).filter(|_| exec.stdin_ends());
    let answer = format!(
        "{} {}\n",
        script::choice_name(chosen),
        tar_write::archive_len(members_len)
    );
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let Some(chosen) = chosen else {
        send_archive(exec, stdin, &members, members_len, sources)?;
        return Ok(Delivery { codec: None, kept });
    };
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    exec.compress_stdin(codec::to_wit(chosen)).map_err(fatal)?;
    send_archive(exec, stdin, &members, members_len, sources)?;
    exec.finish_compressed_stdin().map_err(fatal)?;
    io::flush(stdin).map_err(Sent::Stream)?;
    Ok(Delivery {
        codec: Some(chosen),
        kept,
    })
}

/// Most bytes of listings kept (about 100 bytes a file); past it the
/// listing is dropped and every file is sent.
const MAX_LISTING_BYTES: usize = 64 << 20;

/// Reads what the program reports before it waits for the answer: its
/// listings, then its codec line. It prints nothing else meanwhile (status
/// lines, should any come, go to `early`). A program that ended first (a
/// failed preflight) reports no codecs and no listings.
fn read_report(stdout: &InputStream, early: &mut Vec<u8>) -> (Vec<Codec>, Listing) {
    let mut parser = ListingParser::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut listed = 0usize;
    let mut dropped = false;
    loop {
        let Ok(chunk) = stdout.blocking_read(64 << 10) else {
            return (Vec::new(), Listing::default());
        };
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(n) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + n + 1];
            start += n + 1;
            let text = std::str::from_utf8(&line[..n]).unwrap_or("");
            if let Some(caps) = script::parse_caps(text) {
                let listing = if dropped {
                    Listing::default()
                } else {
                    parser.finish()
                };
                return (caps, listing);
            }
            listed += line.len();
            dropped |= listed > MAX_LISTING_BYTES;
            if dropped {
                parser = ListingParser::default();
            } else if !parser.line(text) && script::parse_status(text).is_some() {
                early.extend_from_slice(line);
            }
        }
        pending.drain(..start);
        if pending.len() > MAX_LISTING_BYTES {
            // One endless line: not a listing.
            pending.clear();
            dropped = true;
        }
    }
}

/// Drops from the archive the host files of directory mappings whose
/// targets already hold them and names them in a `k<k>` member instead,
/// which the program copies from the old target into the staged tree.
///
/// A target file is the source's when size, mode and mtime (seconds) match
/// and it is not "racy" (as git calls it): it landed at least a whole
/// second after its mtime, so a later write to the source, however soon,
/// changed the mtime. When it landed is bounded by its ctime, in the
/// sandbox's clock, less the most the sandbox's clock can be ahead of ours
/// (its `now` against `sent_at`, our clock before it ran anything).
///
/// Names with a newline or backslash are always sent (the program's file
/// list is one name a line, and GNU tar unquotes backslashes). A sandbox
/// that lies here can only make us skip a file whose bytes it already
/// controls: the copy comes from its own target, and every name and the
/// tree's shape still come from the plan.
fn keep_unchanged<'a>(
    members: &'a [Planned],
    listing: &Listing,
    sent_at: i64,
) -> (Cow<'a, [Planned]>, Vec<(usize, u64)>) {
    let Some(now) = listing.now.filter(|_| !listing.dirs.is_empty()) else {
        return (Cow::Borrowed(members), Vec::new());
    };
    // The most the sandbox's clock can be ahead of ours (a second for each
    // clock's rounding).
    let ahead = now.saturating_sub(sent_at).saturating_add(2);
    let mut out = Vec::with_capacity(members.len());
    let mut kept = Vec::new();
    let mut lists: std::collections::BTreeMap<usize, Vec<u8>> = Default::default();
    for p in members {
        if let PlannedKind::HostFile { grant, meta, .. } = &p.kind {
            let same = |files: &std::collections::HashMap<String, Listed>, rel: &str| {
                files.get(rel).is_some_and(|l| {
                    l.size == meta.size
                        && l.mode == p.mode
                        && l.mtime == meta.mtime_sec
                        && l.ctime.saturating_sub(ahead) > meta.mtime_sec.saturating_add(1)
                })
            };
            let rel = p.name.strip_prefix(&format!("d{grant}/"));
            if let (Some(rel), Some(files)) = (rel, listing.dirs.get(grant)) {
                if !rel.contains(['\n', '\\']) && same(files, rel) {
                    let list = lists.entry(*grant).or_default();
                    list.extend_from_slice(b"./");
                    list.extend_from_slice(rel.as_bytes());
                    list.push(b'\n');
                    // What `tally` counted for it.
                    kept.push((*grant, p.member().archive_len()));
                    continue;
                }
            }
        }
        out.push(p.clone());
    }
    // The keep lists go before the commit token, which stays last.
    let commit = out.pop();
    for (k, list) in lists {
        out.push(Planned {
            name: format!("k{k}"),
            kind: PlannedKind::Inline(list),
            mode: 0o600,
            mtime: 0,
        });
    }
    out.extend(commit);
    (Cow::Owned(out), kept)
}

/// Writes the archive: headers from guest memory, file contents handed to
/// the host in batches.
fn send_archive(
    exec: &Execution,
    stdin: &OutputStream,
    members: &[Planned],
    members_len: u64,
    sources: &[&GrantedDir],
) -> Result<(), Sent> {
    // Bytes not yet handed over: they become the prefix of the next host
    // file, or are written after the last one.
    let mut buf: Vec<u8> = Vec::with_capacity(HEADER_BATCH + 1024);
    let mut batch = FileBatch::default();
    for p in members {
        p.member()
            .write_header(&mut buf)
            .map_err(|e| Sent::Fatal(e.into()))?;
        match &p.kind {
            PlannedKind::HostFile { grant, path, meta } => {
                if batch.grant != Some(*grant) || batch.files.len() >= FILES_PER_CALL {
                    batch.send(exec, sources)?;
                    batch.grant = Some(*grant);
                }
                batch.files.push(FileSend {
                    prefix: std::mem::take(&mut buf),
                    path: path.clone(),
                    size: meta.size,
                    mtime_sec: meta.mtime_sec,
                    mtime_nsec: meta.mtime_nsec,
                    device: meta.device,
                    inode: meta.inode,
                });
                tar_write::write_padding(&mut buf, meta.size);
            }
            PlannedKind::Inline(bytes) => {
                buf.extend_from_slice(bytes);
                tar_write::write_padding(&mut buf, bytes.len() as u64);
            }
            PlannedKind::Dir | PlannedKind::Symlink(_) => {}
        }
        if batch.files.is_empty() && buf.len() >= HEADER_BATCH {
            io::write_all(stdin, &buf).map_err(Sent::Stream)?;
            buf.clear();
        }
    }
    batch.send(exec, sources)?;
    if !members.is_empty() {
        tar_write::write_end(&mut buf, members_len);
    }
    io::write_all(stdin, &buf).map_err(Sent::Stream)?;
    io::flush(stdin).map_err(Sent::Stream)
}

/// Consecutive host files from one grant, sent by the host in one call
/// (which re-checks each file's identity, size and mtime after sending it).
#[derive(Default)]
struct FileBatch {
    grant: Option<usize>,
    files: Vec<FileSend>,
}

impl FileBatch {
    fn send(&mut self, exec: &Execution, sources: &[&GrantedDir]) -> Result<(), Sent> {
        let files = std::mem::take(&mut self.files);
        let Some(grant) = self.grant else {
            return Ok(());
        };
        if files.is_empty() {
            return Ok(());
        }
        exec.send_files(sources[grant], &files)
            .map_err(|e| match e {
                SendError::SourceChanged(m) => Sent::SourceChanged(SyncError::SourceChanged(m)),
                SendError::ReadFailed(m) => Sent::Fatal(SyncError::Io(m)),
                SendError::StdinFailed(m) => Sent::Stream(StreamError::Failed(m)),
            })
    }
}

/// Reads the inbound program's status lines until stdout ends (after
/// `early`, what was read before).
fn read_status(stdout: &InputStream, early: Vec<u8>) -> Vec<Status> {
    let mut bytes = early;
    while let Ok(chunk) = stdout.blocking_read(64 * 1024) {
        if bytes.len() as u64 + chunk.len() as u64 > MAX_STATUS_BYTES {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(script::parse_status)
        .collect()
}
