//! Swapping a fully built tree in for a granted directory.
//!
//! A sync-out directory mapping is destroy-then-replace, and it must be all
//! or nothing: the component builds the new tree in a scratch directory at
//! the grant's top level, applies its mode, and then asks for the swap. The
//! host moves the staged directory out beside the grant and exchanges the
//! two names with one `renameat2(RENAME_EXCHANGE)`: at every instant the
//! target path names either the whole old tree or the whole new one, with
//! its final mode. Only then is the old tree removed.
//!
//! A grant that is a mount point cannot be renamed. There the swap happens
//! inside it: every old entry moves into a scratch directory, every new one
//! moves in, and any failure moves everything back, so a failure still
//! leaves the old contents exactly as they were (observers may see the
//! intermediate state; a mount point allows nothing better).

use cap_std::fs::MetadataExt as _;
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, Permissions, PermissionsExt};
use rustix::fs::{AtFlags, RenameFlags};

use super::Error;
use super::{fs_error, host_scratch_name};

/// Replaces the directory `dir` (named `parent.1` in `parent.0`) with its
/// child `staged`. Returns the handle that now names the target.
pub(super) fn replace(
    dir: &Dir,
    staged: &Path,
    parent: &(Dir, OsString),
    shown: &Path,
) -> Result<Dir, Error> {
    let (pdir, name) = parent;
    let err = |what: &str, e: io::Error| fs_error(&format!("{what} {}", shown.display()), &e);
    let here = dir.dir_metadata().map_err(|e| err("stat", e))?;
    let there = rustix::fs::statat(pdir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| err("stat", e.into()))?;
    if (there.st_dev, there.st_ino) != (here.dev(), here.ino()) {
        return Err(Error::Io(format!(
            "{} was moved or replaced during the sync",
            shown.display()
        )));
    }
    let new = dir
        .open_dir_nofollow(staged)
        .map_err(|e| err("open the staged tree of", e))?;
    let staged_meta = new.dir_metadata().map_err(|e| err("stat", e))?;
    // The new directory keeps the old one's owner where the host may set it.
    if (staged_meta.uid(), staged_meta.gid()) != (here.uid(), here.gid()) {
        let _ = rustix::fs::fchown(
            &new,
            Some(rustix::fs::Uid::from_raw(here.uid())),
            Some(rustix::fs::Gid::from_raw(here.gid())),
        );
    }

    // Out beside the target: same parent, so the exchange is one rename.
    let beside = host_scratch_name("replace");
    match rustix::fs::renameat_with(dir, staged, pdir, beside.as_str(), RenameFlags::NOREPLACE) {
        Ok(()) => {}
        Err(rustix::io::Errno::XDEV) => {
            // The grant is a mount point: swap its contents instead.
            drop(new);
            in_place(dir, staged, shown)?;
            return dir.try_clone().map_err(|e| err("reopen", e));
        }
        Err(e) => return Err(err("move the staged tree of", e.into())),
    }
    if let Err(e) = rustix::fs::renameat_with(
        pdir,
        beside.as_str(),
        pdir,
        name.as_os_str(),
        RenameFlags::EXCHANGE,
    ) {
        // Put the staged tree back where the grant's sweep finds it.
        if rustix::fs::renameat(pdir, beside.as_str(), dir, staged).is_err() {
            let _ = pdir.remove_dir_all(&beside);
        }
        return Err(err("replace", e.into()));
    }
    // `beside` now holds the old tree; the target is the new one.
    if let Err(e) = remove_tree(pdir, &beside) {
        return Err(Error::Io(format!(
            "{} was replaced, but its old contents could not be removed from {}: {e}",
            shown.display(),
            shown.with_file_name(&beside).display()
        )));
    }
    Ok(new)
}

/// Removes the tree `name` in `parent`, never following a symlink, its
/// top-level entries shared out between two threads: the old tree of a
/// replaced target is as big as the new one, its removal is the last thing
/// between a sync and its record, and the sandbox side is idle by then.
fn remove_tree(parent: &Dir, name: &str) -> io::Result<()> {
    let dir = parent.open_dir_nofollow(name)?;
    let mut entries = Vec::new();
    for e in dir.entries()? {
        let e = e?;
        entries.push((e.file_name(), e.file_type()?.is_dir()));
    }
    let next = AtomicUsize::new(0);
    let work = || -> io::Result<()> {
        while let Some((n, is_dir)) = entries.get(next.fetch_add(1, Ordering::Relaxed)) {
            if *is_dir {
                dir.remove_dir_all(n)?;
            } else {
                dir.remove_file(n)?;
            }
        }
        Ok(())
    };
    std::thread::scope(|s| {
        // Without a second thread, this one does it all.
        let other = std::thread::Builder::new().spawn_scoped(s, work).ok();
        let mine = work();
        let theirs = other.map_or(Ok(()), |t| {
            t.join()
                .unwrap_or_else(|_| Err(io::Error::other("a removal thread panicked")))
        });
        mine.and(theirs)
    })?;
    drop(dir);
    parent.remove_dir(name)
}

/// Replaces the contents of `dir` with those of its child `staged`, moving
/// everything back on any failure.
fn in_place(dir: &Dir, staged: &Path, shown: &Path) -> Result<(), Error> {
    let err = |what: &str, e: io::Error| fs_error(&format!("{what} {}", shown.display()), &e);
    let old = host_scratch_name("old");
    dir.create_dir(&old)
        .map_err(|e| err("create scratch in", e))?;
    let names = |d: &Path| -> io::Result<Vec<OsString>> {
        let mut v = Vec::new();
        for e in dir.read_dir(d)? {
            v.push(e?.file_name());
        }
        Ok(v)
    };
    let undo = |moved: &[OsString], from: &Path, to: &Path| {
        for n in moved.iter().rev() {
            let _ = dir.rename(from.join(n), dir, to.join(n));
        }
    };
    let here = Path::new(".");
    let old_p = Path::new(&old);
    let old_mode = dir.dir_metadata().map_err(|e| err("stat", e))?.mode();
    let new_mode = dir
        .symlink_metadata(staged)
        .map_err(|e| err("stat the staged tree of", e))?
        .mode();

    let result = (|| {
        let mut out = Vec::new();
        let listed = names(here).map_err(|e| err("list", e))?;
        for n in listed {
            if n == staged.as_os_str() || n == old_p.as_os_str() {
                continue;
            }
            if let Err(e) = dir.rename(&n, dir, old_p.join(&n)) {
                undo(&out, old_p, here);
                return Err(err("move aside the old contents of", e));
            }
            out.push(n);
        }
        // The mode is in place before any new entry is visible.
        if let Err(e) = dir.set_permissions(here, Permissions::from_mode(new_mode & 0o7777)) {
            undo(&out, old_p, here);
            return Err(err("chmod", e));
        }
        let mut moved_in = Vec::new();
        let staged_names = names(staged).map_err(|e| err("list the staged tree of", e));
        let staged_names = match staged_names {
            Ok(v) => v,
            Err(e) => {
                let _ = dir.set_permissions(here, Permissions::from_mode(old_mode & 0o7777));
                undo(&out, old_p, here);
                return Err(e);
            }
        };
        for n in staged_names {
            if let Err(e) = dir.rename(staged.join(&n), dir, &n) {
                undo(&moved_in, here, staged);
                let _ = dir.set_permissions(here, Permissions::from_mode(old_mode & 0o7777));
                undo(&out, old_p, here);
                return Err(err("move the new contents into", e));
            }
            moved_in.push(n);
        }
        Ok(())
    })();
    match &result {
        Ok(()) => {
            let _ = dir.remove_dir(staged);
            if let Err(e) = remove_tree(dir, &old) {
                return Err(err("remove the old contents of", e));
            }
        }
        Err(_) => {
            let _ = remove_tree(dir, &old);
        }
    }
    result
}
