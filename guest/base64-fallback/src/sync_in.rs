//! Host -> sandbox the fallback way: base64 chunks, one exec each.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sandbox_sync_core::outcome;
use sandbox_sync_core::plan::{file_source, plan_dir, Planned, PlannedKind, Stamp};
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::FallbackStep;
use sandbox_sync_core::tar_write::{self, END_OF_ARCHIVE};
use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, PostUploadCommand, SyncError, SyncRequest,
};
use sandbox_sync_driver::bindings::wasi::io::streams::{InputStream, StreamError};
use sandbox_sync_driver::errors::{exit, from_status};
use sandbox_sync_driver::plan::command_cwd;
use sandbox_sync_driver::request::{self, Mapping};

use crate::exec::{self, Ran};
use crate::CHUNK;

pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir)?;
    sandbox_sync_driver::plan::check_modes(req)?;
    let mappings: usize = req.operations.iter().map(|o| o.files.len()).sum();
    if mappings != sources.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} sources for {mappings} mappings",
            sources.len()
        )));
    }
    // Validate every path before the first exec, as the native path does.
    for op in &req.operations {
        for m in &op.files {
            confine(&root, &m.target_path, "target")?;
        }
        for c in &op.post_upload_commands {
            command_cwd(&root, c.cwd.as_deref(), &c.command)?;
        }
    }
    let mut ctx = Ctx {
        req,
        root: root.clone(),
    };
    let mut results = Vec::new();
    for (_, op, op_mappings) in request::operations(req) {
        let (mut files, mut bytes) = (0, 0);
        for Mapping {
            grant: k, spec: m, ..
        } in op_mappings
        {
            let target = confine(&root, &m.target_path, "target")?;
            let (f, b) = match m.kind {
                MappingKind::File => ctx.file(sources[k], m, &target)?,
                MappingKind::Directory => ctx.dir(sources[k], k, m, &target)?,
            };
            files += f;
            bytes += b;
        }
        for c in &op.post_upload_commands {
            ctx.command(&op.operation_id, c)?;
        }
        results.push(OperationResult {
            operation_id: op.operation_id.clone(),
            files_transferred: files,
            bytes_transferred: bytes,
        });
    }
    Ok(results)
}

struct Ctx<'a> {
    req: &'a SyncRequest,
    root: String,
}

impl Ctx<'_> {
    fn exec(&mut self, steps: &[FallbackStep<'_>], payload: &[u8]) -> Result<Ran, SyncError> {
        let ran = exec::run(
            self.req,
            &self.root,
            steps,
            payload,
            self.req.limits.timeout_ms,
        )?;
        if !ran.ok() {
            return Err(from_status(
                &ran.status,
                "(fallback)",
                self.req.limits.timeout_ms,
            ));
        }
        Ok(ran)
    }

    /// Creates an empty 0600 temp beside `target`, appends chunks to it, then
    /// chmods and renames it onto `target`. Returns the temp's sandbox name.
    fn stage_and_promote(
        &mut self,
        target: &str,
        confined: &str,
        mode: Option<u32>,
        mut next_chunk: impl FnMut() -> Result<Option<Vec<u8>>, SyncError>,
    ) -> Result<(), SyncError> {
        let (parent, base) = split_parent(target);
        let temp = sandbox_sync_driver::scratch::fresh();
        let temp = temp.as_str();
        self.exec(
            &[FallbackStep::Create {
                target: confined,
                parent,
                temp,
            }],
            b"",
        )?;
        let staged = (|| {
            while let Some(chunk) = next_chunk()? {
                let b64 = STANDARD.encode(&chunk);
                self.exec(
                    &[FallbackStep::Append {
                        parent,
                        temp,
                        len: b64.len(),
                    }],
                    b64.as_bytes(),
                )?;
            }
            self.exec(
                &[FallbackStep::Promote {
                    parent,
                    temp,
                    base,
                    mode,
                }],
                b"",
            )
        })();
        if let Err(e) = staged {
            let _ = self.exec(&[FallbackStep::Remove { parent, temp }], b"");
            return Err(e);
        }
        Ok(())
    }

    fn file(
        &mut self,
        grant: &GrantedDir,
        m: &FileMapping,
        target: &str,
    ) -> Result<(u64, u64), SyncError> {
        let (base, meta) = file_source(grant, &m.source_path, target, &self.root)?;
        let mode = m.mode.or(Some(meta.mode & 0o777));
        let mut reader = FileChunks::open(grant, base, &Stamp::from(&meta))?;
        self.stage_and_promote(target, target, mode, || reader.next())?;
        Ok((1, meta.size))
    }

    fn dir(
        &mut self,
        grant: &GrantedDir,
        k: usize,
        m: &FileMapping,
        target: &str,
    ) -> Result<(u64, u64), SyncError> {
        let mut members = Vec::new();
        plan_dir(
            grant,
            k,
            "d",
            &m.source_path,
            &m.exclude,
            m.follow_symlinks,
            &mut members,
        )?;
        let dir_mode = m
            .mode
            .unwrap_or(members.first().map(|p| p.mode).unwrap_or(0o755));
        // The tar carries the directory's contents (top-level names, no "." member).
        let members: Vec<Planned> = members
            .into_iter()
            .skip(1)
            .map(|mut p| {
                if let Some(rel) = p.name.strip_prefix("d/") {
                    p.name = rel.into();
                }
                p
            })
            .collect();
        let files = members
            .iter()
            .filter(|p| !matches!(p.kind, PlannedKind::Dir))
            .count() as u64;
        let mut tar = TarChunks {
            grant,
            members: &members,
            next: 0,
            buf: Vec::new(),
            open: None,
            done: false,
            total: 0,
        };
        let tar_name = format!("{}.tar", sandbox_sync_driver::scratch::fresh());
        let (parent, base) = split_parent(target);
        // The tar is staged beside the target, or inside the remote dir when
        // the target is the remote dir itself (its parent is outside).
        let stage_dir = if target == self.root {
            self.root.clone()
        } else {
            parent.to_owned()
        };
        let tar_path = format!("{stage_dir}/{tar_name}");
        self.stage_and_promote(&tar_path, target, Some(0o600), || tar.next())?;
        // Extract into this exec's scratch, then replace the target all or
        // nothing with the same functions the tar-stream program uses.
        let replace = if target == self.root {
            FallbackStep::ReplaceRoot { mode: m.mode }
        } else {
            FallbackStep::ReplaceDir {
                parent,
                base,
                mode: Some(dir_mode),
            }
        };
        let unstage = FallbackStep::Remove {
            parent: &stage_dir,
            temp: &tar_name,
        };
        let extracted = self.exec(
            &[
                FallbackStep::Extract {
                    dir: &stage_dir,
                    tar: &tar_name,
                },
                replace,
                unstage.clone(),
            ],
            b"",
        );
        if let Err(e) = extracted {
            let _ = self.exec(&[unstage], b"");
            return Err(e);
        }
        Ok((files, tar.total))
    }

    fn command(&mut self, op: &str, c: &PostUploadCommand) -> Result<(), SyncError> {
        let cwd = c.cwd.clone().unwrap_or_else(|| self.root.clone());
        let step = FallbackStep::Command {
            cwd: &cwd,
            len: c.command.len(),
        };
        let timeout = c.timeout_ms.unwrap_or(self.req.limits.timeout_ms);
        let ran = exec::run(self.req, &self.root, &[step], c.command.as_bytes(), timeout)?;
        outcome::conclude_command(&exit(&ran.status), op, c.timeout_ms, timeout).map_err(Into::into)
    }
}

fn changed(path: &str) -> SyncError {
    SyncError::SourceChanged(format!(
        "source file {path} changed while it was being sent"
    ))
}

/// A host file read in [`CHUNK`]s; at its end it must still be exactly
/// what was planned (size and mtime), else `source-changed`.
struct FileChunks<'a> {
    grant: &'a GrantedDir,
    stream: Option<InputStream>,
    path: String,
    planned: Stamp,
    read: u64,
}

impl<'a> FileChunks<'a> {
    fn open(grant: &'a GrantedDir, path: &str, planned: &Stamp) -> Result<Self, SyncError> {
        let stream = grant.open_read(path).map_err(|_| changed(path))?;
        Ok(FileChunks {
            grant,
            stream: Some(stream),
            path: path.to_owned(),
            planned: *planned,
            read: 0,
        })
    }

    fn next(&mut self) -> Result<Option<Vec<u8>>, SyncError> {
        let Some(stream) = &self.stream else {
            return Ok(None);
        };
        let want = (self.planned.size - self.read).min(CHUNK as u64);
        let mut chunk = Vec::with_capacity(want as usize);
        while (chunk.len() as u64) < want {
            match stream.blocking_read(want - chunk.len() as u64) {
                Ok(b) => chunk.extend_from_slice(&b),
                Err(StreamError::Closed) => return Err(changed(&self.path)),
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(SyncError::Io(sandbox_sync_driver::io::one_line(&e)))
                }
            }
        }
        self.read += chunk.len() as u64;
        if self.read == self.planned.size {
            self.stream = None;
            let now = self
                .grant
                .stat_follow(&self.path)
                .map_err(|_| changed(&self.path))?;
            let p = &self.planned;
            if (now.device, now.inode) != (p.device, p.inode)
                || now.size != p.size
                || now.mtime_sec != p.mtime_sec
                || now.mtime_nsec != p.mtime_nsec
            {
                return Err(changed(&self.path));
            }
            if chunk.is_empty() {
                return Ok(None);
            }
        }
        Ok(Some(chunk))
    }
}

/// A tar of planned members produced in [`CHUNK`]s (contents pass through
/// guest memory: this is the fallback, not the fast path).
struct TarChunks<'a> {
    grant: &'a GrantedDir,
    members: &'a [Planned],
    next: usize,
    buf: Vec<u8>,
    open: Option<(FileChunks<'a>, u64)>,
    done: bool,
    total: u64,
}

impl<'a> TarChunks<'a> {
    fn next(&mut self) -> Result<Option<Vec<u8>>, SyncError> {
        while self.buf.len() < CHUNK && !self.done {
            if let Some((reader, size)) = &mut self.open {
                match reader.next()? {
                    Some(bytes) => self.buf.extend_from_slice(&bytes),
                    None => {
                        tar_write::write_padding(&mut self.buf, *size);
                        self.open = None;
                    }
                }
                continue;
            }
            let Some(p) = self.members.get(self.next) else {
                self.buf.extend_from_slice(&END_OF_ARCHIVE);
                self.done = true;
                break;
            };
            self.next += 1;
            p.member().write_header(&mut self.buf)?;
            if let PlannedKind::HostFile { path, stamp, .. } = &p.kind {
                self.open = Some((FileChunks::open(self.grant, path, stamp)?, stamp.size));
            }
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        let take = self.buf.len().min(CHUNK);
        let rest = self.buf.split_off(take);
        let chunk = std::mem::replace(&mut self.buf, rest);
        self.total += chunk.len() as u64;
        Ok(Some(chunk))
    }
}
