//! `write-file`'s mechanism: a file just created beneath a grant, filled
//! with exactly `len` bytes from a source of chunks and dated on its own
//! descriptor. The source (the sandbox's stream, which lives in the
//! component's resource table) stays the caller's: this module only sees
//! chunks, so `fs/` knows nothing of the table or the bindings.

use std::future::Future;
use std::io::Write as _;

use super::Error;

/// Where [`NewFile::fill`] takes its bytes from.
pub trait Chunks {
    /// Why the source failed, as the caller wants it back.
    type Error;
    /// The next 1 to `want` bytes, once some are ready; `None` once the
    /// source has ended.
    fn next(
        &mut self,
        want: usize,
    ) -> impl Future<Output = Result<Option<bytes::Bytes>, Self::Error>>;
}

/// Why a fill stopped: the file (the grant's [`Error`]) or the source.
#[derive(Debug)]
pub enum FillError<E> {
    /// Writing or dating the file failed.
    Fs(Error),
    /// The source failed.
    Source(E),
}

/// Most bytes asked of the source per chunk.
const CHUNK: usize = 1 << 20;

/// A file [`GrantedDir::create_file`](super::GrantedDir::create_file)
/// made, not yet filled.
pub struct NewFile {
    file: std::fs::File,
    /// The path in the grant, for messages.
    path: String,
}

impl NewFile {
    pub(super) fn new(file: std::fs::File, path: &str) -> Self {
        NewFile {
            file,
            path: path.to_owned(),
        }
    }

    /// Writes up to `len` bytes from `src` and returns how many came. Only
    /// when all `len` came is the mtime set to `mtime_sec` (on the
    /// descriptor just written: no second walk of the path; the atime is
    /// left as it is); a short count is the caller's to judge.
    pub async fn fill<S: Chunks>(
        mut self,
        src: &mut S,
        len: u64,
        mtime_sec: i64,
    ) -> Result<u64, FillError<S::Error>> {
        let io = |e: std::io::Error| {
            FillError::Fs(Error::Io(format!("failed to write {}: {e}", self.path)))
        };
        let mut moved = 0u64;
        while moved < len {
            let want = usize::try_from(len - moved)
                .unwrap_or(usize::MAX)
                .min(CHUNK);
            match src.next(want).await.map_err(FillError::Source)? {
                Some(bytes) => {
                    self.file.write_all(&bytes).map_err(io)?;
                    moved += bytes.len() as u64;
                }
                None => break,
            }
        }
        if moved == len {
            let when = rustix::fs::Timestamps {
                last_access: rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: rustix::fs::UTIME_OMIT,
                },
                last_modification: rustix::fs::Timespec {
                    tv_sec: mtime_sec.max(0),
                    tv_nsec: 0,
                },
            };
            rustix::fs::futimens(&self.file, &when).map_err(|e| io(e.into()))?;
        }
        Ok(moved)
    }
}
