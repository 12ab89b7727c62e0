//! Writing the inbound archive: headers from guest memory, file contents
//! handed to the host in batches, which it splices from the host files.

use sandbox_sync_core::plan::{Planned, PlannedKind};
use sandbox_sync_core::tar_write;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    Execution, FileSend, SendError,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::SyncError;
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::io::{self, StreamError};

use super::Sent;

/// Header bytes buffered before a write.
const HEADER_BATCH: usize = 64 * 1024;
/// Most host files handed to one `send-files` call.
const FILES_PER_CALL: usize = 1024;

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
    pub fn push(&mut self, p: &Planned) -> Result<(), Sent> {
        let buf = &mut self.buf;
        let member = p.member();
        member
            .write_header(buf)
            .map_err(|e| Sent::Fatal(e.into()))?;
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
            io::write_all(self.stdin, &self.buf).map_err(Sent::Stream)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Sends what is pending and the end of the archive (padded to whole
    /// records). Returns the members' archive bytes.
    pub fn finish(mut self) -> Result<u64, Sent> {
        self.batch.send(self.exec, self.sources)?;
        if self.len > 0 {
            tar_write::write_end(&mut self.buf, self.len);
        }
        io::write_all(self.stdin, &self.buf).map_err(Sent::Stream)?;
        io::flush(self.stdin).map_err(Sent::Stream)?;
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
