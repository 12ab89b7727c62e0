//! Host -> sandbox: plan, one exec, headers from the guest, contents spliced
//! host-side, then conclude from what the program reported. When the data
//! is worth it, the program first says which codecs it has, and the host
//! compresses the archive for the one chosen.

use sandbox_sync_core::outcome::{self, Operation};
use sandbox_sync_core::plan::{file_source, mtime, plan_dir, tally, Planned, PlannedKind};
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Codec, InboundScript, Status};
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
    match send(&exec, &stdin, &stdout, &plan, sources, &mut early) {
        sent @ (Ok(_) | Err(Sent::Stream(_))) => {
            // Plain, stdin stays open until the status (the sandbox never
            // needs EOF); a compressed archive ends with stdin.
            let stdin = match sent {
                Ok(Some(_)) => {
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
            Ok(plan.results)
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
    /// Codecs to offer, most wanted first; empty: the program expects a
    /// plain archive and asks nothing.
    offer: &'static [Codec],
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
    for (i, op) in req.operations.iter().enumerate() {
        let (mut files, mut bytes) = (0u64, 0u64);
        for m in &op.files {
            let grant = sources[k];
            let target = confine(&root, &m.target_path, "target")?;
            script.preflight(&target)?;
            let (parent, base) = split_parent(&target);
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

/// Writes the program, agrees on a codec when the plan offers one (any
/// stdout bytes read meanwhile that are not the codec line go to `early`),
/// then writes the archive. Returns the codec it was compressed with.
fn send(
    exec: &Execution,
    stdin: &OutputStream,
    stdout: &InputStream,
    plan: &Plan,
    sources: &[&GrantedDir],
    early: &mut Vec<u8>,
) -> Result<Option<Codec>, Sent> {
    io::write_all(stdin, plan.program.as_bytes()).map_err(Sent::Stream)?;
    if plan.offer.is_empty() {
        send_archive(exec, stdin, plan, sources)?;
        return Ok(None);
    }
    io::flush(stdin).map_err(Sent::Stream)?;
    let caps = read_caps(stdout, early);
    // Without an end to stdin the sandbox's decompressor would never finish.
    let chosen = codec::choose(plan.offer, &caps).filter(|_| exec.stdin_ends());
    let answer = format!("{}\n", script::choice_name(chosen));
    io::write_all(stdin, answer.as_bytes()).map_err(Sent::Stream)?;
    let Some(chosen) = chosen else {
        send_archive(exec, stdin, plan, sources)?;
        return Ok(None);
    };
    let fatal = |e: String| Sent::Fatal(SyncError::Transport(e));
    exec.compress_stdin(codec::to_wit(chosen)).map_err(fatal)?;
    send_archive(exec, stdin, plan, sources)?;
    exec.finish_compressed_stdin().map_err(fatal)?;
    io::flush(stdin).map_err(Sent::Stream)?;
    Ok(Some(chosen))
}

/// Most bytes read while waiting for the codec line.
const MAX_CAPS_BYTES: usize = 4096;

/// Reads the program's codec line: the codecs it can run. Nothing else is
/// printed before it, and the program then waits for the answer, so
/// nothing follows it yet; anything else read goes to `early`. A program
/// that ended first (a failed preflight) has no codecs.
fn read_caps(stdout: &InputStream, early: &mut Vec<u8>) -> Vec<Codec> {
    let mut bytes = Vec::new();
    while !bytes.contains(&b'\n') && bytes.len() < MAX_CAPS_BYTES {
        match stdout.blocking_read((MAX_CAPS_BYTES - bytes.len()) as u64) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(_) => break,
        }
    }
    let mut caps = None;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        let parsed = std::str::from_utf8(line)
            .ok()
            .and_then(|l| script::parse_caps(l.strip_suffix('\n')?));
        match parsed {
            Some(c) if caps.is_none() => caps = Some(c),
            _ => early.extend_from_slice(line),
        }
    }
    caps.unwrap_or_default()
}

/// Writes the archive: headers from guest memory, file contents handed to
/// the host in batches.
fn send_archive(
    exec: &Execution,
    stdin: &OutputStream,
    plan: &Plan,
    sources: &[&GrantedDir],
) -> Result<(), Sent> {
    // Bytes not yet handed over: they become the prefix of the next host
    // file, or are written after the last one.
    let mut buf: Vec<u8> = Vec::with_capacity(HEADER_BATCH + 1024);
    let mut batch = FileBatch::default();
    for p in &plan.members {
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
    if !plan.members.is_empty() {
        tar_write::write_end(&mut buf, plan.members_len);
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
