//! The directory the host keeps state in between calls (compiled
//! components, incremental sync-out records), trusted only where nobody
//! but the effective user could have written it, and every file in it
//! authenticated.
//!
//! A cache directory can be named by the environment
//! (`SANDBOX_SYNC_CACHE_DIR`, `XDG_CACHE_HOME`, often `/tmp/...` in
//! containers whose `HOME` is read-only), so it may be another local
//! user's. That user could forge a record (the host would keep a stale
//! file) or plant a compiled artifact (native code the host runs). As
//! ssh's `StrictModes` and git's `safe.directory` decide, the directory
//! must be the user's own and each of its ancestors the user's or root's
//! and writable by nobody else, unless sticky (`/tmp`: others may add
//! names there but not replace ours). A directory that fails is not used
//! at all (one warning; the call compiles afresh and keeps no records).
//!
//! Files are also sealed with HMAC-SHA256 under a key kept in the
//! directory (`key`, 32 random bytes, `0600`): whoever cannot read the key
//! cannot make a file the host accepts, whatever else goes wrong (a
//! directory made private only after another user wrote into it, a file
//! copied in from elsewhere). Each kind of file has its own label, so one
//! cannot pass for another.

use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a seal (an HMAC-SHA256 tag).
pub const SEAL_BYTES: usize = 32;

/// The key file's name.
const KEY_FILE: &str = "key";
const KEY_BYTES: usize = 32;

/// Why a directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// Someone else could have written it.
    #[error("{path} is not private to this user: {why}")]
    NotPrivate {
        /// The directory (or its ancestor, or its key) at fault.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// It could not be made or read.
    #[error("{path}: {source}")]
    Io {
        /// The path at fault.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
}

/// A directory only this user could have written, and its key.
#[derive(Clone)]
pub struct PrivateDir {
    path: PathBuf,
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for PrivateDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("PrivateDir")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> Untrusted + '_ {
    move |source| Untrusted::Io {
        path: path.to_owned(),
        source,
    }
}

fn not_private(path: &Path, why: impl Into<String>) -> Untrusted {
    Untrusted::NotPrivate {
        path: path.to_owned(),
        why: why.into(),
    }
}

impl PrivateDir {
    /// `dir` (created `0700` where missing), once it and its ancestors
    /// pass (see the module docs); its key, made where there is none.
    ///
    /// # Errors
    /// [`Untrusted::NotPrivate`] where another user could have written it,
    /// [`Untrusted::Io`] where it cannot be made or read.
    pub fn open(dir: &Path) -> Result<Self, Untrusted> {
        if !dir.is_absolute() {
            return Err(not_private(dir, "not an absolute path"));
        }
        let me = rustix::process::geteuid().as_raw();
        // Nothing is made where the ancestors already fail.
        if let Some(first) = dir.ancestors().skip(1).find(|a| a.exists()) {
            let first = std::fs::canonicalize(first).map_err(io_at(first))?;
            check_ancestors(&first, me)?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_at(dir))?;
        let real = std::fs::canonicalize(dir).map_err(io_at(dir))?;
        if let Some(parent) = real.parent() {
            check_ancestors(parent, me)?;
        }
        let meta = std::fs::symlink_metadata(&real).map_err(io_at(&real))?;
        if !meta.is_dir() {
            return Err(not_private(&real, "not a directory"));
        }
        if meta.uid() != me {
            return Err(not_private(&real, format!("owned by uid {}", meta.uid())));
        }
        if meta.mode() & 0o077 != 0 {
            // Ours: private from now on (what others wrote before is
            // caught by the seals).
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700))
                .map_err(io_at(&real))?;
        }
        let key = load_or_make_key(&real, me)?;
        Ok(PrivateDir { path: real, key })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `data`'s seal as a file of kind `label`.
    pub fn seal(&self, label: &str, data: &[u8]) -> [u8; SEAL_BYTES] {
        self.mac(label, data).finalize().into_bytes().into()
    }

    /// `data` as sealed (`data` then its seal), for a file of kind `label`.
    pub fn sealed(&self, label: &str, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() + SEAL_BYTES);
        out.extend_from_slice(data);
        out.extend_from_slice(&self.seal(label, data));
        out
    }

    /// What a sealed file of kind `label` holds, if its seal is good.
    pub fn unseal<'a>(&self, label: &str, file: &'a [u8]) -> Option<&'a [u8]> {
        let split = file.len().checked_sub(SEAL_BYTES)?;
        let (data, tag) = file.split_at(split);
        // Constant time.
        self.mac(label, data).verify_slice(tag).ok()?;
        Some(data)
    }

    fn mac(&self, label: &str, data: &[u8]) -> Hmac<Sha256> {
        // A key of any length is accepted.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(b"sandbox-sync\0");
        m.update(label.as_bytes());
        m.update(b"\0");
        m.update(data);
        m
    }
}

/// `dir` and each of its ancestors: the user's or root's, and writable by
/// nobody else unless sticky.
fn check_ancestors(dir: &Path, me: u32) -> Result<(), Untrusted> {
    for ancestor in dir.ancestors() {
        let meta = std::fs::metadata(ancestor).map_err(io_at(ancestor))?;
        if meta.uid() != me && meta.uid() != 0 {
            return Err(not_private(
                ancestor,
                format!("an ancestor owned by uid {}", meta.uid()),
            ));
        }
        if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            return Err(not_private(
                ancestor,
                format!(
                    "an ancestor others may write (mode {:o}, not sticky)",
                    meta.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// The directory's key: read where one is there (a regular file of ours,
/// `0600` or tighter, of the right length), else made, never replaced
/// (two processes that make one at once settle on the first).
fn load_or_make_key(dir: &Path, me: u32) -> Result<[u8; KEY_BYTES], Untrusted> {
    let path = dir.join(KEY_FILE);
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(mut f) => {
                let meta = f.metadata().map_err(io_at(&path))?;
                if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
                    return Err(not_private(
                        &path,
                        format!(
                            "the key is not a private file of this user (uid {}, mode {:o})",
                            meta.uid(),
                            meta.mode() & 0o7777
                        ),
                    ));
                }
                let mut key = [0u8; KEY_BYTES];
                f.read_exact(&mut key).map_err(io_at(&path))?;
                if f.read(&mut [0u8; 1]).map_err(io_at(&path))? != 0 {
                    return Err(not_private(&path, "the key has the wrong length"));
                }
                return Ok(key);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut key = [0u8; KEY_BYTES];
                std::fs::File::open("/dev/urandom")
                    .and_then(|mut r| r.read_exact(&mut key))
                    .map_err(io_at(Path::new("/dev/urandom")))?;
                let mut tmp = tempfile::Builder::new()
                    .permissions(std::fs::Permissions::from_mode(0o600))
                    .tempfile_in(dir)
                    .map_err(io_at(dir))?;
                tmp.write_all(&key).map_err(io_at(dir))?;
                tmp.as_file().sync_all().map_err(io_at(dir))?;
                match tmp.persist_noclobber(&path) {
                    Ok(_) => return Ok(key),
                    // Another process made one first: read that.
                    Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_at(&path)(e.error)),
                }
            }
            Err(e) => return Err(io_at(&path)(e)),
        }
    }
    Err(not_private(&path, "the key keeps changing"))
}

/// The state directory the environment names (`$SANDBOX_SYNC_CACHE_DIR`,
/// `$XDG_CACHE_HOME/sandbox-sync` or `~/.cache/sandbox-sync`), where it
/// passes; none otherwise, with one warning a process.
pub fn cache_dir() -> Option<PrivateDir> {
    let base = std::env::var_os("SANDBOX_SYNC_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("sandbox-sync"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/sandbox-sync"))
        })?;
    match PrivateDir::open(&base) {
        Ok(dir) => Some(dir),
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "not using the cache directory {}: {e} (components are compiled afresh; \
                     incremental sync-out keeps no records)",
                    base.display()
                )
            });
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_bind_the_key_the_label_and_the_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = PrivateDir::open(&tmp.path().join("c")).unwrap();
        let sealed = dir.sealed("record", b"facts");
        assert_eq!(dir.unseal("record", &sealed), Some(&b"facts"[..]));
        assert_eq!(dir.unseal("cwasm", &sealed), None, "another kind");
        let mut flipped = sealed.clone();
        flipped[0] ^= 1;
        assert_eq!(dir.unseal("record", &flipped), None);
        assert_eq!(dir.unseal("record", &sealed[..10]), None, "too short");
        // Another directory's key: nothing of this one's passes.
        let other = PrivateDir::open(&tmp.path().join("d")).unwrap();
        assert_eq!(other.unseal("record", &sealed), None);
        // The same directory opened again: the same key.
        let again = PrivateDir::open(&tmp.path().join("c")).unwrap();
        assert_eq!(again.unseal("record", &sealed), Some(&b"facts"[..]));
        let key = std::fs::metadata(tmp.path().join("c/key")).unwrap();
        assert_eq!(key.mode() & 0o777, 0o600);
        assert!(
            !format!("{dir:?}").contains("key:"),
            "the key is never shown"
        );
    }

    /// The bytes the Node package's seals have too (js/test/private-dir.test.js):
    /// either host reads the other's records.
    #[test]
    fn seals_are_hmac_sha256_of_label_and_bytes() {
        let dir = PrivateDir {
            path: PathBuf::from("/nowhere"),
            key: [7; KEY_BYTES],
        };
        let hex: String = dir
            .seal("cwasm", b"x")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "24fec63364561dae384e58aaec2f16a54f440af18e31757a3aa8647328c0efda"
        );
    }

    #[test]
    fn refuses_what_others_could_write() {
        let tmp = tempfile::tempdir().unwrap();
        // An ancestor others may write (not sticky).
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = PrivateDir::open(&open.join("cache")).unwrap_err();
        assert!(err.to_string().contains("others may write"), "{err}");
        // Sticky, as /tmp: fine.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        PrivateDir::open(&open.join("cache")).unwrap();
        // A key that is not private.
        let loose = tmp.path().join("loose");
        PrivateDir::open(&loose).unwrap();
        std::fs::set_permissions(loose.join("key"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let err = PrivateDir::open(&loose).unwrap_err();
        assert!(err.to_string().contains("the key"), "{err}");
        // Not absolute.
        assert!(PrivateDir::open(Path::new("rel/cache")).is_err());
    }
}
