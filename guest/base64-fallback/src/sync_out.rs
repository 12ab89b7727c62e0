//! Sandbox -> host the fallback way: a tar staged in the sandbox, read back
//! in `dd | base64` chunks (one exec each), then validated and extracted by
//! the same driver code the native path uses.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir};
use sandbox_sync_core::script::FallbackStep;
use sandbox_sync_core::tar_read::{Limits, Source};
use sandbox_sync_core::Error as CoreError;
use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    MappingKind, OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::errors::from_status;
use sandbox_sync_driver::extract::{receive_dir, receive_file, ArchiveInput};
use sandbox_sync_driver::io;
use sandbox_sync_driver::request::{self, Mapping};

use crate::exec;
use crate::CHUNK;

pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    sandbox_sync_driver::plan::check_modes(req)?;
    sandbox_sync_driver::plan::check_out_targets(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != targets.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} targets for {mappings} mappings",
            targets.len()
        )));
    }
    for op in &req.operations {
        if !op.post_upload_commands.is_empty() {
            return Err(SyncError::InvalidRequest(format!(
                "operation {}: post-upload commands apply to sync-in only",
                op.operation_id
            )));
        }
        for m in &op.files {
            confine(&root, &m.source_path, "source")?;
            Excluder::new(&m.exclude)?;
        }
    }
    let limits = Limits {
        max_entries: req.limits.max_entries,
        max_metadata_bytes: req.limits.max_metadata_bytes,
        max_payload_bytes: req.limits.max_output_bytes,
    };
    let mut results = Vec::new();
    for (_, op, op_mappings) in request::operations(req) {
        let (mut files, mut bytes) = (0, 0);
        for Mapping {
            grant: k, spec: m, ..
        } in op_mappings
        {
            let source = confine(&root, &m.source_path, "source")?;
            let name = format!("{}.tar", sandbox_sync_driver::scratch::fresh());
            let pack = match m.kind {
                MappingKind::File => FallbackStep::PackFile {
                    name: &name,
                    source: &source,
                },
                MappingKind::Directory => FallbackStep::PackDir {
                    name: &name,
                    source: &source,
                    follow: m.follow_symlinks,
                    exclude: &m.exclude,
                },
            };
            let unstage = FallbackStep::Unstage { name: &name };
            let result = (|| {
                let ran = exec::run(req, &root, &[pack], b"", req.limits.timeout_ms)?;
                if !ran.ok() {
                    return Err(from_status(
                        &ran.status,
                        &op.operation_id,
                        req.limits.timeout_ms,
                    ));
                }
                let size: u64 = std::str::from_utf8(&ran.stdout)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        SyncError::Transport("the sandbox did not report the archive size".into())
                    })?;
                if size > req.limits.max_output_bytes {
                    return Err(SyncError::LimitExceeded(format!(
                        "the sandbox's archive of {size} bytes exceeds the {}-byte output guard",
                        req.limits.max_output_bytes
                    )));
                }
                let mut input = Chunked {
                    req,
                    root: &root,
                    name: &name,
                    size,
                    next_chunk: 0,
                    buf: Vec::new(),
                    pos: 0,
                };
                match m.kind {
                    MappingKind::File => receive_file(&mut input, targets[k], m, limits)
                        .map(|(f, b)| (f, b.unwrap_or(size))),
                    MappingKind::Directory => {
                        receive_dir(&mut input, targets[k], &op.operation_id, m, limits)
                            .map(|(f, _)| (f, size))
                    }
                }
            })();
            let _ = exec::run(req, &root, &[unstage], b"", req.limits.timeout_ms);
            let (f, b) = result?;
            files += f;
            bytes += b;
        }
        results.push(OperationResult {
            operation_id: op.operation_id.clone(),
            files_transferred: files,
            bytes_transferred: bytes,
        });
    }
    Ok(results)
}

/// The staged remote tar, fetched one [`CHUNK`] per exec.
struct Chunked<'a> {
    req: &'a SyncRequest,
    root: &'a str,
    name: &'a str,
    size: u64,
    next_chunk: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl Chunked<'_> {
    fn fill(&mut self) -> Result<(), CoreError> {
        if self.next_chunk * CHUNK as u64 >= self.size {
            return Err(CoreError::unsafe_archive("archive is truncated"));
        }
        let step = FallbackStep::Chunk {
            name: self.name,
            size: CHUNK,
            index: self.next_chunk,
        };
        let ran = exec::run(
            self.req,
            self.root,
            &[step],
            b"",
            self.req.limits.timeout_ms,
        )
        .map_err(|e| CoreError::new(sandbox_sync_core::ErrorKind::Transport, format!("{e:?}")))?;
        if !ran.ok() {
            return Err(CoreError::new(
                sandbox_sync_core::ErrorKind::Transport,
                "reading a chunk of the remote tar failed",
            ));
        }
        let text: Vec<u8> = ran
            .stdout
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        let bytes = STANDARD
            .decode(&text)
            .map_err(|e| CoreError::unsafe_archive(format!("the sandbox sent bad base64: {e}")))?;
        if bytes.is_empty() || bytes.len() > CHUNK {
            return Err(CoreError::unsafe_archive(
                "the sandbox sent a chunk of the wrong size",
            ));
        }
        self.next_chunk += 1;
        self.buf = bytes;
        self.pos = 0;
        Ok(())
    }

    fn take(&mut self, max: usize) -> Result<&[u8], CoreError> {
        if self.pos == self.buf.len() {
            self.fill()?;
        }
        let n = max.min(self.buf.len() - self.pos);
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

impl Source for Chunked<'_> {
    fn read_exact(&mut self, mut out: &mut [u8]) -> Result<(), CoreError> {
        while !out.is_empty() {
            let chunk = self.take(out.len())?;
            let n = chunk.len();
            out[..n].copy_from_slice(chunk);
            out = &mut out[n..];
        }
        Ok(())
    }
}

impl ArchiveInput for Chunked<'_> {
    fn copy_to(&mut self, out: &OutputStream, mut len: u64) -> Result<(), SyncError> {
        while len > 0 {
            let chunk = self.take(usize::try_from(len).unwrap_or(usize::MAX))?;
            let n = chunk.len() as u64;
            io::write_all(out, chunk)
                .map_err(|e| SyncError::Io(format!("failed to write a host file: {e}")))?;
            len -= n;
        }
        Ok(())
    }

    fn skip(&mut self, mut len: u64) -> Result<(), CoreError> {
        while len > 0 {
            len -= self.take(usize::try_from(len).unwrap_or(usize::MAX))?.len() as u64;
        }
        Ok(())
    }
}
