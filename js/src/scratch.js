// The main thread's sweep of what a call left beside its grants, whatever
// ended the call (the worker may be gone).

import { constants, lstatSync, openSync } from 'node:fs';
import { join } from 'node:path';

import { O_PATH, at, closeFd, removeEntry } from './beneath.js';
import { SCRATCH_PREFIX } from './confine.js';

const { O_DIRECTORY } = constants;

/**
 * Removes the scratch entries `[{name, dev, ino}]` a component created at the
 * top of the grant `grantPath`, each only if it is still the very entry
 * created (same device and inode): a whole tree for a directory, never
 * following a symlink. For the host's main thread when a call ends, whatever
 * ended it (the worker may be gone). Returns the failures' messages.
 */
export function removeScratch(grantPath, entries) {
  const failures = [];
  let fd;
  try {
    fd = openSync(grantPath, O_PATH | O_DIRECTORY);
  } catch (e) {
    return e.code === 'ENOENT' ? [] : [`${grantPath}: ${e.message}`];
  }
  try {
    for (const { name, dev, ino } of entries) {
      if (typeof name !== 'string' || name.includes('/') || !name.startsWith(SCRATCH_PREFIX)) continue;
      try {
        const st = lstatSync(at(fd, name), { bigint: true, throwIfNoEntry: false });
        if (st?.dev === BigInt(dev) && st.ino === BigInt(ino)) removeEntry(fd, name, name);
      } catch (e) {
        failures.push(`could not remove scratch ${join(grantPath, name)}: ${e.val ?? e.message}`);
      }
    }
  } finally {
    closeFd(fd);
  }
  return failures;
}
