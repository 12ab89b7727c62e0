//! `sandbox-sync:provider/host-fs` for the component: look up the grant,
//! delegate to [`GrantedDir`], `?`.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use super::FsFailure;
use crate::bindings::host_fs::{DirEntry, DirEntryStat, FsError, Host, HostGrantedDir, Metadata};
use crate::fs::GrantedDir;
use crate::state::ShimState;

type FsResult<T> = Result<T, FsFailure>;

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

    async fn stat(&mut self, this: Resource<GrantedDir>, path: String) -> FsResult<Metadata> {
        Ok(self.table.get(&this)?.stat(&path)?)
    }

    async fn stat_follow(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Metadata> {
        Ok(self.table.get(&this)?.stat_follow(&path)?)
    }

    async fn read_dir(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntry>> {
        Ok(self.table.get(&this)?.read_dir(&path)?)
    }

    async fn read_dir_stat(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Vec<DirEntryStat>> {
        Ok(self.table.get(&this)?.read_dir_stat(&path)?)
    }

    async fn open_read(
        &mut self,
        this: Resource<GrantedDir>,
        path: String,
    ) -> FsResult<Resource<DynInputStream>> {
        let s: DynInputStream = Box::new(self.table.get(&this)?.open_read(&path)?);
        Ok(self.table.push(s)?)
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
