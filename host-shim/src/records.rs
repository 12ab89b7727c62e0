//! Where the component's records between calls live on the host (WIT
//! `sync-state`): one file per key in a private directory (see
//! [`crate::private_dir`]), written whole and renamed into place, so a
//! record is the last one stored or none. Each is sealed with the
//! directory's key, bound to its key: a record nobody holding the key
//! wrote, or one moved to another key's file, reads as none.
//!
//! The records are an incremental sync-out's account of what it landed in
//! a host target. Losing one only makes the next sync send more, so the
//! store is bounded, never locked: the oldest records go first, a record
//! too big or a write that fails is dropped, and concurrent calls simply
//! keep the last one written.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::private_dir::{PrivateDir, Untrusted, SEAL_BYTES};

/// The largest record kept: about a million files' worth.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Records kept before the oldest are removed.
const MAX_RECORDS: usize = 4096;

/// A directory of records.
#[derive(Debug, Clone)]
pub struct RecordStore {
    dir: PrivateDir,
}

impl RecordStore {
    /// The store in `dir` (see [`PrivateDir::open`]).
    ///
    /// # Errors
    /// When another user could have written the directory, or it cannot
    /// be made.
    pub fn open(dir: &Path) -> Result<Self, Untrusted> {
        Ok(RecordStore {
            dir: PrivateDir::open(dir)?,
        })
    }

    /// The store beside the compile cache (`$SANDBOX_SYNC_CACHE_DIR`,
    /// `$XDG_CACHE_HOME/sandbox-sync` or `~/.cache/sandbox-sync`), in
    /// `records/`; none without any of those, or where it is not private.
    pub fn default_location() -> Option<Self> {
        let base = crate::private_dir::cache_dir()?;
        Self::open(&base.path().join("records")).ok()
    }

    /// The file holding `key`: keys are the component's (host paths among
    /// them), so they are hashed, never used as names.
    fn path(&self, key: &str) -> PathBuf {
        self.dir.path().join(format!("{}.rec", Self::name(key)))
    }

    fn name(key: &str) -> String {
        format!("{:x}", Sha256::digest(key.as_bytes()))
    }

    /// What a record's seal names: its key, so it reads as none under
    /// another's.
    fn label(key: &str) -> String {
        format!("record {}", Self::name(key))
    }

    /// The record under `key`, if any and sealed for it (one larger than
    /// [`MAX_RECORD_BYTES`] counts as none).
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let len = std::fs::metadata(&path).ok()?.len();
        if len > MAX_RECORD_BYTES + SEAL_BYTES as u64 {
            return None;
        }
        let file = std::fs::read(&path).ok()?;
        let value = self.dir.unseal(&Self::label(key), &file);
        if value.is_none() {
            tracing::warn!("the record {} has no valid seal: ignored", path.display());
        }
        value.map(<[u8]>::to_vec)
    }

    /// Replaces the record under `key`.
    ///
    /// # Errors
    /// A record over [`MAX_RECORD_BYTES`], or the write failed (the old
    /// record, if any, is then removed: it no longer describes the target).
    pub fn store(&self, key: &str, value: &[u8]) -> Result<(), String> {
        let path = self.path(key);
        if value.len() as u64 > MAX_RECORD_BYTES {
            let _ = std::fs::remove_file(&path);
            return Err(format!(
                "a record of {} bytes is over the {MAX_RECORD_BYTES}-byte limit",
                value.len()
            ));
        }
        let written = (|| -> io::Result<()> {
            let mut tmp = tempfile::NamedTempFile::new_in(self.dir.path())?;
            tmp.write_all(&self.dir.sealed(&Self::label(key), value))?;
            tmp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&path);
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        self.prune();
        Ok(())
    }

    /// Removes the oldest records beyond [`MAX_RECORDS`].
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else {
            return;
        };
        let mut records: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "rec"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if records.len() <= MAX_RECORDS {
            return;
        }
        records.sort();
        for (_, p) in &records[..records.len() - MAX_RECORDS] {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn records_round_trip_and_stay_private() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(&dir.path().join("r")).unwrap();
        assert_eq!(store.load("out:/a"), None);
        store.store("out:/a", b"one").unwrap();
        store.store("out:/b", b"two").unwrap();
        store.store("out:/a", b"three").unwrap();
        assert_eq!(store.load("out:/a").as_deref(), Some(&b"three"[..]));
        assert_eq!(store.load("out:/b").as_deref(), Some(&b"two"[..]));
        let mode = std::fs::metadata(dir.path().join("r"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // A record moved to another key's file, or written without the
        // key, reads as none.
        let a = dir
            .path()
            .join(format!("r/{}.rec", RecordStore::name("out:/a")));
        let b = dir
            .path()
            .join(format!("r/{}.rec", RecordStore::name("out:/b")));
        std::fs::copy(&a, &b).unwrap();
        assert_eq!(store.load("out:/b"), None);
        std::fs::write(&a, b"forged, no seal at all, more than thirty-two bytes").unwrap();
        assert_eq!(store.load("out:/a"), None);
        // Keys never become names.
        for e in std::fs::read_dir(dir.path().join("r")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(
                name == "key" || name.ends_with(".rec") && !name.contains('/'),
                "{name}"
            );
        }
    }

    #[test]
    fn an_oversized_record_replaces_the_old_one_with_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        store.store("k", b"old").unwrap();
        let big = vec![0u8; MAX_RECORD_BYTES as usize + 1];
        assert!(store.store("k", &big).is_err());
        assert_eq!(store.load("k"), None);
    }
}
