//! Host -> sandbox: plan, one exec, headers from the guest, contents spliced host-side.

use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, InboundScript, Status};
use sandbox_sync_core::tar_write;
use sandbox_sync_driver::plan::{command_cwd, file_source, mtime, plan_dir, Planned, PlannedKind};
use sandbox_sync_driver::scratch::cleanup_if_killed;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    self, ExecOptions, Execution, FileSend, SendError,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    CommandFailure, MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, OutputStream};
use sandbox_sync_driver::errors::{from_core, from_status};
use sandbox_sync_driver::io::{self, StreamFail};

/// Most bytes of status lines accepted from the inbound program.
const MAX_STATUS_BYTES: u64 = 1 << 20;
/// Header bytes buffered before a write.
const HEADER_BATCH: usize = 64 * 1024;
/// Most host files handed to one `send-files` call.
const FILES_PER_CALL: usize = 1024;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir).map_err(from_core)?;
    sandbox_sync_driver::plan::check_modes(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != sources.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} source directories for {mappings} mappings",
            sources.len()
        )));
    }

    // Plan everything (and validate every path) before the exec starts.
    let mut members: Vec<Planned> = Vec::new();
    let scratch = sandbox_sync_driver::scratch::fresh();
    let mut script = InboundScript::new(&root, req.limits.timeout_ms, &scratch);
    let mut results = Vec::with_capacity(req.operations.len());
    let mut k = 0;
    for (i, op) in req.operations.iter().enumerate() {
        let mut files = 0u64;
        let mut bytes = 0u64;
        for m in &op.files {
            let grant = sources[k];
            let target = confine(&root, &m.target_path, "target").map_err(from_core)?;
            script.preflight(&target).map_err(from_core)?;
            let staged = match m.kind {
                MappingKind::File => {
                    let (base, meta) = file_source(grant, &m.source_path, &target, &root)?;
                    let name = format!("f{k}");
                    let p = Planned {
                        name: name.clone(),
                        mode: meta.mode & 0o777,
                        mtime: mtime(&meta),
                        kind: PlannedKind::HostFile {
                            grant: k,
                            path: base.to_owned(),
                            meta,
                        },
                    };
                    files += 1;
                    bytes += match &p.kind {
                        PlannedKind::HostFile { meta, .. } => meta.size,
                        _ => 0,
                    };
                    members.push(p);
                    let (parent, base) = split_parent(&target);
                    script
                        .put_file(&name, parent, base, m.mode)
                        .map_err(from_core)?;
                    name
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
                    for p in &members[before..] {
                        bytes += p.member().archive_len();
                        if !matches!(p.kind, PlannedKind::Dir) {
                            files += 1;
                        }
                    }
                    if target == root {
                        script.put_root(&name, m.mode).map_err(from_core)?;
                    } else {
                        let (parent, base) = split_parent(&target);
                        script
                            .put_dir(&name, parent, base, m.mode)
                            .map_err(from_core)?;
                    }
                    name
                }
            };
            let _ = staged;
            k += 1;
        }
        for (j, c) in op.post_upload_commands.iter().enumerate() {
            let cwd = command_cwd(&root, c.cwd.as_deref(), &c.command)?;
            let name = format!("c{i}.{j}");
            members.push(Planned {
                name: name.clone(),
                kind: PlannedKind::Inline(c.command.clone().into_bytes()),
                mode: 0o600,
                mtime: 0,
            });
            script
                .command(i, j, &name, &cwd, c.timeout_ms)
                .map_err(from_core)?;
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
    let text = script.finish(archive_len, &token).map_err(from_core)?;

    let exec = sandbox_exec::start(
        &script::argv(text.len()),
        ExecOptions {
            timeout_ms: req.limits.timeout_ms,
            max_stderr_bytes: req.limits.max_stderr_bytes,
        },
    )
    .map_err(|e| SyncError::Transport(format!("failed to start the sandbox exec: {e}")))?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let stdout = exec.stdout().map_err(SyncError::Transport)?;

    // A failure to feed stdin usually means the script stopped early; its
    // exit status explains why, so keep it and decide after `finish`.
    let sent = send(
        &exec,
        &stdin,
        text.as_bytes(),
        &members,
        members_len,
        sources,
    );
    match sent {
        Err(Sent::Stream(_)) | Ok(()) => {
            // Stdin stays open until the status: the sandbox never needs EOF.
            let status_lines = read_status(&stdout);
            let status = exec.finish().map_err(SyncError::Transport)?;
            drop(stdin);
            cleanup_if_killed(&status, &root, &scratch, req.limits.max_stderr_bytes);
            conclude(req, results, status_lines, &status, sent.err())
        }
        Err(Sent::SourceChanged(e) | Sent::Fatal(e)) => {
            // The program never sees its commit marker, so it cannot apply
            // anything; stop it now (any transport) and sweep its scratch.
            exec.abort();
            drop(stdin);
            drop(stdout);
            if let Ok(status) = exec.finish() {
                cleanup_if_killed(&status, &root, &scratch, req.limits.max_stderr_bytes);
            }
            Err(e)
        }
    }
}

enum Sent {
    /// Stdin failed; the exec status will say why.
    Stream(StreamFail),
    /// A host source changed while it was being sent.
    SourceChanged(SyncError),
    /// A host-side failure unrelated to the sandbox.
    Fatal(SyncError),
}

fn send(
    exec: &Execution,
    stdin: &OutputStream,
    script: &[u8],
    members: &[Planned],
    members_len: u64,
    sources: &[&GrantedDir],
) -> Result<(), Sent> {
    io::write_all(stdin, script).map_err(Sent::Stream)?;
    // Bytes not yet handed over: they become the prefix of the next host
    // file, or are written after the last one.
    let mut buf: Vec<u8> = Vec::with_capacity(HEADER_BATCH + 1024);
    let mut batch = FileBatch::default();
    for p in members {
        p.member()
            .write_header(&mut buf)
            .map_err(|e| Sent::Fatal(from_core(e)))?;
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
/// (which re-checks each file's size and mtime after sending it).
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
                SendError::StdinFailed(m) => Sent::Stream(StreamFail::Failed(m)),
            })
    }
}

/// Reads the inbound program's status lines until stdout ends.
fn read_status(stdout: &InputStream) -> Vec<Status> {
    let mut bytes = Vec::new();
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

fn conclude(
    req: &SyncRequest,
    results: Vec<OperationResult>,
    statuses: Vec<Status>,
    status: &sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus,
    stream: Option<Sent>,
) -> Result<Vec<OperationResult>, SyncError> {
    // Operations complete strictly in order, so the count names the failing one.
    let done = statuses
        .iter()
        .filter(|s| matches!(s, Status::OpDone(_)))
        .count();
    let failing = req
        .operations
        .get(done)
        .map(|o| o.operation_id.as_str())
        .unwrap_or("(none)");
    if status.exit_code == Some(0) && !status.timed_out && !status.stderr_truncated {
        if done != req.operations.len() {
            return Err(SyncError::Transport(format!(
                "the sandbox exited 0 but reported {done} of {} operations complete",
                req.operations.len()
            )));
        }
        if let Some(Sent::Stream(e)) = stream {
            return Err(SyncError::Transport(format!(
                "the sandbox stopped reading its input: {e}"
            )));
        }
        return Ok(results);
    }
    let code = status.exit_code;
    if code == Some(script::exit::COMMAND) || code == Some(script::exit::COMMAND_TIMEOUT) {
        if let Some(Status::CommandFailed {
            op,
            cmd,
            code,
            timed_out,
        }) = statuses
            .iter()
            .find(|s| matches!(s, Status::CommandFailed { .. }))
            .cloned()
        {
            let op_id = req
                .operations
                .get(op)
                .map(|o| o.operation_id.clone())
                .unwrap_or_default();
            let what = if timed_out {
                let ms = req
                    .operations
                    .get(op)
                    .and_then(|o| o.post_upload_commands.get(cmd))
                    .and_then(|c| c.timeout_ms);
                format!("post-upload command timed out after {} ms", ms.unwrap_or(0))
            } else {
                format!("post-upload command failed (exit {code})")
            };
            return Err(SyncError::CommandFailed(CommandFailure {
                operation_id: op_id.clone(),
                exit_code: if timed_out { None } else { Some(code) },
                timed_out,
                message: format!("operation {op_id}: {what} (command {cmd})"),
                stderr: sandbox_sync_driver::errors::stderr_tail(status),
            }));
        }
    }
    Err(from_status(status, failing, req.limits.timeout_ms))
}
