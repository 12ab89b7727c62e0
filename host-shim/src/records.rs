//! Where the component's records between calls live on the host (WIT
//! `sync-state`): one file per key in a private directory, written whole
//! and renamed into place, so a record is the last one stored or none.
//!
//! The records are an incremental sync-out's account of what it landed in
//! a host target. Losing one only makes the next sync send more, so the
//! store is bounded, never locked: the oldest records go first, a record
//! too big or a write that fails is dropped, and concurrent calls simply
//! keep the last one written.

use std::io::{self, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The largest record kept: about a million files' worth.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Records kept before the oldest are removed.
const MAX_RECORDS: usize = 4096;

/// A directory of records.
#[derive(Debug, Clone)]
pub struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    /// The store in `dir`, created `0700` if needed.
    ///
    /// # Errors
    /// When the directory cannot be created or made private.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(RecordStore {
            dir: dir.to_owned(),
        })
    }

    /// The store beside the compile cache (`$SANDBOX_SYNC_CACHE_DIR`,
    /// `$XDG_CACHE_HOME/sandbox-sync` or `~/.cache/sandbox-sync`), in
    /// `records/`; none without any of those.
    pub fn default_location() -> Option<Self> {
        let base = crate::runtime::cache_dir()?;
        Self::open(&base.join("records")).ok()
    }

    /// The file holding `key`: keys are the component's (host paths among
    /// them), so they are hashed, never used as names.
    fn path(&self, key: &str) -> PathBuf {
        self.dir
            .join(format!("{:x}.rec", Sha256::digest(key.as_bytes())))
    }

    /// The record under `key`, if any (one larger than
    /// [`MAX_RECORD_BYTES`] counts as none).
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let len = std::fs::metadata(&path).ok()?.len();
        if len > MAX_RECORD_BYTES {
            return None;
        }
        std::fs::read(path).ok()
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
            let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
            tmp.write_all(value)?;
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
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
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
        // Keys never become names.
        for e in std::fs::read_dir(dir.path().join("r")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(name.ends_with(".rec") && !name.contains('/'), "{name}");
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
