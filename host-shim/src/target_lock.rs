//! One sync-out at a time into a directory target.
//!
//! A sync-out builds its tree in scratch inside the target and swaps it in
//! for the whole target. Two at once into one target each staged inside
//! the same old tree; the first swap moved that tree aside with the second
//! one's staging still being written in it, the first then failed to
//! remove it ("Directory not empty") and left it beside the target, and
//! the second failed on a target that was no longer its. So each call
//! holds an exclusive `flock` on every directory target it writes, for
//! the whole call: others wait for it, up to their own deadline.
//!
//! The lock is taken on a descriptor of its own, not the grant's (a swap
//! changes which directory the grant names), and is good only if the path
//! still names the locked directory once it is held: a waiter that wakes
//! after a swap finds the old tree locked and takes the new one.
//! All of a call's targets are taken at once or none (each in (device,
//! inode) order, released on any refusal), so two calls never each hold
//! one the other waits for.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

/// How long a waiting call sleeps between tries.
const RETRY: Duration = Duration::from_millis(20);

/// The locks a call holds; released when dropped.
#[derive(Debug, Default)]
pub struct TargetLocks {
    /// Held open: a lock lasts as long as its descriptor.
    _held: Vec<std::fs::File>,
}

/// What [`try_lock_all`] found.
pub enum Tried {
    /// Every target is this call's until the locks drop; each as
    /// (device, inode).
    Held(TargetLocks, Vec<(u64, u64)>),
    /// Another call holds one, or a target was swapped meanwhile.
    Busy,
}

/// Tries once to lock every directory in `targets`.
///
/// # Errors
/// A target that cannot be opened or locked for another reason.
pub fn try_lock_all(targets: &[PathBuf]) -> std::io::Result<Tried> {
    let mut open: Vec<((u64, u64), &Path, std::fs::File)> = Vec::new();
    for t in targets {
        let f = std::fs::File::open(t)?;
        let m = f.metadata()?;
        let id = (m.dev(), m.ino());
        if !open.iter().any(|(o, _, _)| *o == id) {
            open.push((id, t, f));
        }
    }
    open.sort_by_key(|(id, _, _)| *id);
    for (_, _, f) in &open {
        match rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(Tried::Busy),
            Err(e) => return Err(e.into()),
        }
    }
    // Held: good only while each path still names what was locked.
    for (id, path, _) in &open {
        let now = std::fs::metadata(path)?;
        if (now.dev(), now.ino()) != *id {
            return Ok(Tried::Busy);
        }
    }
    let ids = open.iter().map(|(id, _, _)| *id).collect();
    Ok(Tried::Held(
        TargetLocks {
            _held: open.into_iter().map(|(_, _, f)| f).collect(),
        },
        ids,
    ))
}

/// Removes what a host process that died mid-swap left beside `target`
/// (an old tree moved out by `replace`: `.paperclip-upload-replace-<pid>-<n>`,
/// or `-old-`): only names of a process that is gone, so never another
/// live call's. Called with `target` locked.
pub fn sweep_beside(target: &Path) {
    let Some(parent) = target.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(dead_host_scratch) else {
            continue;
        };
        let p = parent.join(&name);
        tracing::info!(pid, path = %p.display(), "removing what a killed sync left beside its target");
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
}

/// The pid a host scratch name (`<prefix>-replace-<pid>-<n>`,
/// `<prefix>-old-<pid>-<n>`; `<n>` decimal or hex) names, if that process
/// is gone.
fn dead_host_scratch(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(sandbox_sync_core::SCRATCH_PREFIX)?;
    let rest = rest
        .strip_prefix("-replace-")
        .or_else(|| rest.strip_prefix("-old-"))?;
    let (pid, n) = rest.split_once('-')?;
    // A counter (this shim) or random hex (the Node package).
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    if pid == std::process::id() {
        return None;
    }
    let raw = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    match rustix::process::test_kill_process(raw) {
        Err(rustix::io::Errno::SRCH) => Some(pid),
        _ => None,
    }
}

/// A short, varied pause before the next try (two waiters do not wake in
/// step).
pub async fn pause() {
    let jitter = u64::from(std::process::id() % 7) + u64::from(rand_byte() % 13);
    tokio::time::sleep(RETRY + Duration::from_millis(jitter)).await;
}

fn rand_byte() -> u8 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos >> 10) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_gone_process_scratch_is_stale() {
        // No pid can be this high (pid_max is at most 2^22).
        assert_eq!(
            dead_host_scratch(".paperclip-upload-replace-4194305-0"),
            Some(4_194_305)
        );
        assert_eq!(
            dead_host_scratch(".paperclip-upload-old-4194305-3"),
            Some(4_194_305)
        );
        // As the Node package names them.
        assert_eq!(
            dead_host_scratch(".paperclip-upload-old-4194305-0a1b2c3d4e5f"),
            Some(4_194_305)
        );
        let me = std::process::id();
        assert_eq!(
            dead_host_scratch(&format!(".paperclip-upload-replace-{me}-0")),
            None
        );
        // Pid 1 lives.
        assert_eq!(dead_host_scratch(".paperclip-upload-replace-1-0"), None);
        for other in [
            ".paperclip-upload-0123abcd",
            ".paperclip-upload-replace-x-0",
            ".paperclip-upload-replace-4194305-",
            ".paperclip-upload-replace-4194305-0x",
            "replace-4194305-0",
        ] {
            assert_eq!(dead_host_scratch(other), None, "{other}");
        }
    }

    #[test]
    fn a_held_target_is_busy_to_another_until_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        std::fs::create_dir(&a).unwrap();
        let targets = vec![a.clone(), a.clone()];
        let Tried::Held(first, ids) = try_lock_all(&targets).unwrap() else {
            panic!("the first call is refused");
        };
        assert_eq!(ids.len(), 1, "one target named twice is locked once");
        assert!(matches!(try_lock_all(&targets).unwrap(), Tried::Busy));
        drop(first);
        assert!(matches!(try_lock_all(&targets).unwrap(), Tried::Held(..)));
        // Swapped after the lock was taken: the path names another dir.
        let Tried::Held(held, _) = try_lock_all(std::slice::from_ref(&a)).unwrap() else {
            panic!("refused");
        };
        std::fs::rename(&a, tmp.path().join("old")).unwrap();
        std::fs::create_dir(&a).unwrap();
        assert!(matches!(try_lock_all(&[a]).unwrap(), Tried::Held(..)));
        drop(held);
    }
}
