//! `sandbox-sync:provider/host-fs` for the component: look up the grant,
//! delegate to [`GrantedDir`], `?`.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, Pollable, StreamError};

use super::FsFailure;
use crate::bindings::host_fs::{
    DirEntry, DirEntryChange, DirEntryStat, DirEntryTimes, EntryKind, FsError, Host,
    HostGrantedDir, Metadata,
};
use crate::fs::{self, GrantedDir};
use crate::state::ShimState;

type FsResult<T> = Result<T, FsFailure>;

/// The sandbox's stream as `write-file`'s source of chunks: it lives in
/// the component's resource table, which `fs/` does not know.
struct TableStream<'a> {
    table: &'a mut wasmtime::component::ResourceTable,
    src: Resource<DynInputStream>,
    path: &'a str,
}

impl fs::Chunks for TableStream<'_> {
    type Error = FsFailure;

    async fn next(&mut self, want: usize) -> Result<Option<bytes::Bytes>, FsFailure> {
        loop {
            let stream = self.table.get_mut(&self.src)?;
            match stream.read(want) {
                Ok(bytes) if bytes.is_empty() => stream.ready().await,
                Ok(bytes) => return Ok(Some(bytes)),
                Err(StreamError::Closed) => return Ok(None),
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(FsError::Io(format!(
                        "reading the sandbox's stream for {}: {e:#}",
                        self.path
                    ))
                    .into())
                }
                Err(StreamError::Trap(e)) => return Err(FsFailure::Trap(e)),
            }
        }
    }
}

impl Host for ShimState {
    fn convert_fs_error(&mut self, err: FsFailure) -> wasmtime::Result<FsError> {
        match err {
            FsFailure::Fs(e) => Ok(e),
            FsFailure::Trap(e) => Err(e),
        }
    }
}

impl HostGrantedDir for ShimState {
    async fn writable(&mut self, this: Resource<GrantedDir>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.writable())
    }

    async fn byte_names(&mut self, this: Resource<GrantedDir>) -> wasmtime::Result<bool> {
        self.table.get(&this)?.allow_byte_names();
        Ok(true)
    }

    async fn stat(&mut self, this: Resource<GrantedDir>, path: String) -> FsResult<Metadata> {
        Ok(self.table.get(&this)?.stat(&path)?.into())
    }

    async fn stat_follow(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Metadata> {
        Ok(self.table.get(&this)?.stat_follow(&path)?.into())
    }

    async fn read_dir(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntry>> {
        Ok(all(self.table.get(&this)?.read_dir(&path)?))
    }

    async fn read_dir_stat(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntryStat>> {
        Ok(all(self.table.get(&this)?.read_dir_stat(&path)?))
    }

    async fn stat_times(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<DirEntryTimes> {
        Ok(self.table.get(&this)?.stat_times(&path)?.into())
    }

    async fn read_dir_times(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntryTimes>> {
        Ok(all(self.table.get(&this)?.read_dir_times(&path)?))
    }

    async fn read_dir_change(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntryChange>> {
        Ok(all(self.table.get(&this)?.read_dir_change(&path)?))
    }

    async fn stat_change(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
        follow: bool,
    ) -> FsResult<DirEntryChange> {
        Ok(self.table.get(&this)?.stat_change(&path, follow)?.into())
    }

    async fn open_read(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Resource<DynInputStream>> {
        let s: DynInputStream = Box::new(self.table.get(&this)?.open_read(&path)?);
        Ok(self.table.push(s)?)
    }

    async fn digest(&mut self, this: Resource<GrantedDir>, path: String) -> FsResult<Vec<u8>> {
        Ok(self.table.get(&this)?.digest(&path)?.to_vec())
    }

    async fn create_exclusive(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
        mode: u32,
    ) -> FsResult<Resource<DynOutputStream>> {
        let s: DynOutputStream = Box::new(self.table.get(&this)?.create_exclusive(&path, mode)?);
        Ok(self.table.push(s)?)
    }

    async fn write_file(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
        mode: u32,
        mtime_sec: i64,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> FsResult<u64> {
        let file = self.table.get(&this)?.new_file(&path, mode)?;
        let mut src = TableStream {
            table: &mut self.table,
            src,
            path: &path,
        };
        file.fill(&mut src, len, mtime_sec)
            .await
            .map_err(|e| match e {
                fs::FillError::Fs(e) => e.into(),
                fs::FillError::Source(f) => f,
            })
    }

    async fn mkdir(&mut self, this: Resource<GrantedDir>, path: String, mode: u32) -> FsResult<()> {
        Ok(self.table.get(&this)?.mkdir(&path, mode)?)
    }

    async fn symlink(
        &mut self,
        this: Resource<GrantedDir>,
        target: String,
        path: String,
    ) -> FsResult<()> {
        Ok(self.table.get(&this)?.symlink(&target, &path)?)
    }

    async fn hard_link(
        &mut self,
        this: Resource<GrantedDir>,
        existing: String,
        path: String,
    ) -> FsResult<()> {
        Ok(self.table.get(&this)?.hard_link(&existing, &path)?)
    }

    async fn link_files(
        &mut self,
        this: Resource<GrantedDir>,
        src_dir: String,
        dst_dir: String,
        names: Vec<String>,
    ) -> FsResult<u32> {
        Ok(self
            .table
            .get(&this)?
            .link_files(&src_dir, &dst_dir, &names)?)
    }

    async fn rename(
        &mut self,
        this: Resource<GrantedDir>,
        src: String,
        dst: String,
    ) -> FsResult<()> {
        Ok(self.table.get(&this)?.rename(&src, &dst)?)
    }

    async fn set_mode(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
        mode: u32,
    ) -> FsResult<()> {
        Ok(self.table.get(&this)?.set_mode(&path, mode)?)
    }

    async fn set_mtime(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
        sec: i64,
        nsec: u32,
    ) -> FsResult<()> {
        Ok(self.table.get(&this)?.set_mtime(&path, sec, nsec)?)
    }

    async fn remove(&mut self, this: Resource<GrantedDir>, path: String) -> FsResult<()> {
        Ok(self.table.get(&this)?.remove(&path)?)
    }

    async fn sync(&mut self, this: Resource<GrantedDir>, path: String) -> FsResult<()> {
        Ok(self.table.get(&this)?.sync(&path)?)
    }

    async fn replace_with(&mut self, this: Resource<GrantedDir>, staged: String) -> FsResult<()> {
        Ok(self.table.get_mut(&this)?.replace_with(&staged)?)
    }

    async fn drop(&mut self, this: Resource<GrantedDir>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

/// Every entry of a listing, converted.
fn all<T, U: From<T>>(entries: Vec<T>) -> Vec<U> {
    entries.into_iter().map(U::from).collect()
}

impl From<fs::EntryKind> for EntryKind {
    fn from(k: fs::EntryKind) -> Self {
        match k {
            fs::EntryKind::File => EntryKind::File,
            fs::EntryKind::Directory => EntryKind::Directory,
            fs::EntryKind::Symlink => EntryKind::Symlink,
            fs::EntryKind::Other => EntryKind::Other,
        }
    }
}

impl From<fs::Metadata> for Metadata {
    fn from(m: fs::Metadata) -> Self {
        let fs::Metadata {
            kind,
            size,
            mode,
            mtime_sec,
            mtime_nsec,
            device,
            inode,
            link_target,
        } = m;
        Metadata {
            kind: kind.into(),
            size,
            mode,
            mtime_sec,
            mtime_nsec,
            device,
            inode,
            link_target,
        }
    }
}

impl From<fs::DirEntry> for DirEntry {
    fn from(e: fs::DirEntry) -> Self {
        let fs::DirEntry { name, kind } = e;
        DirEntry {
            name,
            kind: kind.into(),
        }
    }
}

impl From<fs::DirEntryStat> for DirEntryStat {
    fn from(e: fs::DirEntryStat) -> Self {
        let fs::DirEntryStat { name, metadata } = e;
        DirEntryStat {
            name,
            metadata: metadata.into(),
        }
    }
}

impl From<fs::DirEntryTimes> for DirEntryTimes {
    fn from(e: fs::DirEntryTimes) -> Self {
        let fs::DirEntryTimes {
            name,
            metadata,
            ctime_sec,
        } = e;
        DirEntryTimes {
            name,
            metadata: metadata.into(),
            ctime_sec,
        }
    }
}

impl From<fs::DirEntryChange> for DirEntryChange {
    fn from(e: fs::DirEntryChange) -> Self {
        let fs::DirEntryChange {
            name,
            metadata,
            ctime_sec,
            ctime_nsec,
        } = e;
        DirEntryChange {
            name,
            metadata: metadata.into(),
            ctime_sec,
            ctime_nsec,
        }
    }
}
