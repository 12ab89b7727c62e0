// The main thread's sweep of what a call left beside its grants, whatever
// ended the call (the worker may be gone).

import { constants, lstatSync, openSync, readdirSync, renameSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';

import { O_PATH, at, closeFd, removeEntry } from './beneath.js';
import { SCRATCH_PREFIX } from './confine.js';

const { O_DIRECTORY } = constants;

/**
 * Runs `fn(fd)` on directory `path` opened O_PATH, and returns its failures'
 * messages; a directory that is gone has nothing to sweep.
 */
function inDirectory(path, fn) {
  let fd;
  try {
    fd = openSync(path, O_PATH | O_DIRECTORY);
  } catch (e) {
    return e.code === 'ENOENT' ? [] : [`${path}: ${e.message}`];
  }
  try {
    return fn(fd);
  } finally {
    closeFd(fd);
  }
}

/** Whether `name` in directory `fd` is a scratch name still naming the entry (`dev`, `ino`) noted. */
function stillNoted(fd, { name, dev, ino }) {
  if (typeof name !== 'string' || name.includes('/') || !name.startsWith(SCRATCH_PREFIX)) return false;
  const st = lstatSync(at(fd, name), { bigint: true, throwIfNoEntry: false });
  return st?.dev === BigInt(dev) && st.ino === BigInt(ino);
}

/**
 * Removes the scratch entries `[{name, dev, ino}]` a component created at the
 * top of the grant `grantPath`, each only if it is still the very entry
 * created (same device and inode): a whole tree for a directory, never
 * following a symlink. For the host's main thread when a call ends, whatever
 * ended it (the worker may be gone). Entries noted `beside` the grant are
 * settled (see `settleBeside`). Returns the failures' messages.
 */
export function removeScratch(grantPath, entries) {
  const beside = entries.filter((e) => e.beside);
  const failures = beside.length > 0 ? settleBeside(grantPath, beside) : [];
  return failures.concat(
    inDirectory(grantPath, (fd) =>
      entries
        .filter((e) => !e.beside)
        .flatMap((e) => {
          try {
            if (stillNoted(fd, e)) removeEntry(fd, e.name, e.name);
            return [];
          } catch (err) {
            return [`could not remove scratch ${join(grantPath, e.name)}: ${err.val ?? err.message}`];
          }
        }),
    ),
  );
}

/**
 * What a sync-out's swap (hostfs.js `#swap`) names beside its grant, once
 * the call has ended, whatever ended it: `old` (the grant's old tree) goes
 * back onto the grant's name if the swap stopped with that name naming
 * nothing, else it goes; `staged` (the new tree on its way in) goes. Each
 * only while it is still the very entry named (device and inode).
 */
function settleBeside(grantPath, entries) {
  const parentPath = dirname(resolve(grantPath));
  const grantName = basename(resolve(grantPath));
  return inDirectory(parentPath, (fd) =>
    entries.flatMap((e) => {
      try {
        if (!stillNoted(fd, e)) return [];
        if (e.beside === 'old' && !lstatSync(at(fd, grantName), { throwIfNoEntry: false })) {
          renameSync(at(fd, e.name), at(fd, grantName));
        } else {
          removeEntry(fd, e.name, e.name);
        }
        return [];
      } catch (err) {
        return [`could not settle ${join(parentPath, e.name)}: ${err.val ?? err.message}`];
      }
    }),
  );
}

/** The pid a host scratch name beside a target (`<prefix>-replace-<pid>-<n>`, `<prefix>-old-<pid>-<n>`) names, if that process is gone. */
export function deadHostScratch(name) {
  const m = /^-(?:replace|old)-([0-9]+)-[0-9a-fA-F]+$/.exec(name.startsWith(SCRATCH_PREFIX) ? name.slice(SCRATCH_PREFIX.length) : '');
  if (!m) return null;
  const pid = Number(m[1]);
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return null;
  try {
    process.kill(pid, 0);
    return null;
  } catch (e) {
    return e.code === 'ESRCH' ? pid : null;
  }
}

/**
 * Removes what a killed host process's sync-out left beside `target`
 * (replaced trees named for its pid, gone), as the Rust host does
 * (host-shim/src/target_lock.rs). For a caller that holds the target.
 */
export function sweepBeside(target) {
  const parentPath = dirname(resolve(target));
  let names;
  try {
    names = readdirSync(parentPath);
  } catch {
    return;
  }
  const stale = names.filter((n) => deadHostScratch(n) !== null);
  if (stale.length === 0) return;
  inDirectory(parentPath, (fd) => {
    for (const name of stale) {
      try {
        removeEntry(fd, name, name);
      } catch {
        // Best effort: the next sync-out tries again.
      }
    }
    return [];
  });
}
