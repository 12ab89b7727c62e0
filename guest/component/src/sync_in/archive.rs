//! Writing the inbound archive: headers from guest memory, file contents
//! handed to the host in batches, which it splices from the host files.

use sandbox_sync_core::plan::{Planned, PlannedKind};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::script::{self, Codec};
use sandbox_sync_core::tar_write;
use sandbox_sync_driver::codec;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    Execution, FileSend, SendError,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::SyncError;
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::io::{self, StreamError};

use super::keep::Keeper;
use super::SendStopped;

/// Header bytes buffered before a write.
const HEADER_BATCH: usize = 64 * 1024;
/// Most host files handed to one `send-files` call.
const FILES_PER_CALL: usize = 128;

/// The archive of a plan, as the host answers and sends it.
pub struct Archive<'a> {
    /// The planned members, the commit token's aside.
    pub members: &'a PlanLog,
    /// Per planned member: the targets hold it, so it is left out (empty:
    /// nothing is).
    pub skip: &'a [bool],
    /// The commit token's member, the archive's last.
    pub commit: &'a Planned,
    /// The members' archive bytes, announced in the answer (none: a
    /// streamed archive, which ends at its marker).
    pub promised: Option<u64>,
}

/// Answers the program (the codec, and the length where there is one) and
/// sends the archive: the planned members the targets do not hold, then
/// `rest` (the walk's remainder, when streaming; those the targets hold
/// left out too), the keep lists and the commit token, compressed after
/// the answer when `chosen` says so.
pub fn send_archive(
    exec: &Execution,
    stdin: &OutputStream,
    sources: &[&GrantedDir],
    archive: &Archive<'_>,
    rest: impl Iterator<Item = Result<Planned, SendStopped>>,
    keeper: &mut Keeper<'_>,
    chosen: Option<Codec>,
) -> Result<(), SendStopped> {
    let answer = format!(
        "{} {}\n",
        script::choice_name(chosen),
        archive.promised.map_or(0, tar_write::archive_len)
    );
    io::write_all(stdin, answer.as_bytes()).map_err(SendStopped::Stream)?;
    let fatal = |e: String| SendStopped::Fatal(SyncError::Transport(e));
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
        io::flush(stdin).map_err(SendStopped::Stream)?;
    }
    Ok(())
}

/// Writes members as they come; [`ArchiveWriter::finish`] ends the archive.
pub struct ArchiveWriter<'a> {
    exec: &'a Execution,
    stdin: &'a OutputStream,
    sources: &'a [&'a GrantedDir],
    /// Bytes not yet handed over: they become the prefix of the next host
    /// file, or are written after the last one.
    buf: Vec<u8>,
    batch: FileBatch,
    /// Archive bytes of the members so far (headers, contents, padding).
    len: u64,
}

impl<'a> ArchiveWriter<'a> {
    pub fn new(
        exec: &'a Execution,
        stdin: &'a OutputStream,
        sources: &'a [&'a GrantedDir],
    ) -> Self {
        ArchiveWriter {
            exec,
            stdin,
            sources,
            buf: Vec::with_capacity(HEADER_BATCH + 1024),
            batch: FileBatch::default(),
            len: 0,
        }
    }

    /// Appends `p`.
    pub fn push(&mut self, p: &Planned) -> Result<(), SendStopped> {
        let buf = &mut self.buf;
        let member = p.member();
        member
            .write_header(buf)
            .map_err(|e| SendStopped::Fatal(e.into()))?;
        self.len += member.archive_len();
        match &p.kind {
            PlannedKind::HostFile { grant, path, stamp } => {
                let batch = &mut self.batch;
                if batch.grant != Some(*grant) || batch.files.len() >= FILES_PER_CALL {
                    batch.send(self.exec, self.sources)?;
                    batch.grant = Some(*grant);
                }
                batch.files.push(FileSend {
                    prefix: std::mem::take(buf),
                    path: path.to_string(),
                    size: stamp.size,
                    mtime_sec: stamp.mtime_sec,
                    mtime_nsec: stamp.mtime_nsec,
                    device: stamp.device,
                    inode: stamp.inode,
                });
                tar_write::write_padding(buf, stamp.size);
            }
            PlannedKind::Inline(bytes) => {
                buf.extend_from_slice(bytes);
                tar_write::write_padding(buf, bytes.len() as u64);
            }
            PlannedKind::Dir | PlannedKind::Symlink(_) => {}
        }
        if self.batch.files.is_empty() && self.buf.len() >= HEADER_BATCH {
            io::write_all(self.stdin, &self.buf).map_err(SendStopped::Stream)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Sends what is pending and the end of the archive (padded to whole
    /// records). Returns the members' archive bytes.
    pub fn finish(mut self) -> Result<u64, SendStopped> {
        self.batch.send(self.exec, self.sources)?;
        if self.len > 0 {
            tar_write::write_end(&mut self.buf, self.len);
        }
        io::write_all(self.stdin, &self.buf).map_err(SendStopped::Stream)?;
        io::flush(self.stdin).map_err(SendStopped::Stream)?;
        Ok(self.len)
    }
}

/// Consecutive host files from one grant, sent by the host in one call
/// (which re-checks each file's identity, size and mtime after sending it).
#[derive(Default)]
struct FileBatch {
    grant: Option<usize>,
    files: Vec<FileSend>,
}

impl FileBatch {
    fn send(&mut self, exec: &Execution, sources: &[&GrantedDir]) -> Result<(), SendStopped> {
        let files = std::mem::take(&mut self.files);
        let Some(grant) = self.grant else {
            return Ok(());
        };
        if files.is_empty() {
            return Ok(());
        }
        exec.send_files(sources[grant], &files)
            .map_err(|e| match e {
                SendError::SourceChanged(m) => {
                    SendStopped::SourceChanged(SyncError::SourceChanged(m))
                }
                SendError::ReadFailed(m) => SendStopped::Fatal(SyncError::Io(m)),
                SendError::StdinFailed(m) => SendStopped::Stream(StreamError::Failed(m)),
            })
    }
}
