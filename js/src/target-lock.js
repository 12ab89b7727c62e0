// One sync-out at a time into a directory target, as the Rust host does it
// (host-shim/src/target_lock.rs): a sync-out stages inside its target and
// swaps the staged tree in for it, so two at once each staged in the same
// old tree, and the first swap moved it aside under the second's writes.
// Each call holds an exclusive flock (the addon's; Node has none) on every
// directory target for the whole call, on a descriptor of its own, good
// only while the path still names the locked directory; all of a call's
// targets at once, in (device, inode) order, or none. Calls of one process
// also take turns by the targets they hold (the only turns there are
// where the addon does not load: then other processes are not held off).

import { constants, fstatSync, openSync, statSync } from 'node:fs';
import { constants as os } from 'node:os';
import { closeFd } from './beneath.js';
import { native } from './native.js';
import { SandboxSyncError } from './request.js';

const RETRY_MS = 20;
/** dev:ino of the targets this process's calls hold. */
const held = new Set();

const EWOULDBLOCK = -os.errno.EWOULDBLOCK;

/** Tries once to hold every directory in `targets`: the release function, or null (busy). */
function tryLockAll(targets) {
  const open = [];
  const release = () => {
    for (const o of open) {
      if (o.mine) held.delete(o.key);
      closeFd(o.fd);
    }
  };
  try {
    for (const t of targets) {
      const fd = openSync(t, constants.O_RDONLY | constants.O_DIRECTORY);
      const st = fstatSync(fd, { bigint: true });
      const key = `${st.dev}:${st.ino}`;
      if (open.some((o) => o.key === key)) {
        closeFd(fd);
        continue;
      }
      open.push({ fd, key, path: t, dev: st.dev, ino: st.ino, mine: false });
    }
    open.sort((a, b) => (a.dev === b.dev ? (a.ino < b.ino ? -1 : 1) : a.dev < b.dev ? -1 : 1));
    for (const o of open) {
      if (held.has(o.key)) return release(), null;
      if (native?.trylock) {
        const r = native.trylock(o.fd);
        if (r === EWOULDBLOCK) return release(), null;
        if (r < 0) throw new SandboxSyncError('io', `failed to lock the sync-out target ${o.path} (errno ${-r})`);
      }
      held.add(o.key);
      o.mine = true;
    }
    for (const o of open) {
      const now = statSync(o.path, { bigint: true });
      if (now.dev !== o.dev || now.ino !== o.ino) return release(), null;
    }
    return release;
  } catch (e) {
    release();
    if (e instanceof SandboxSyncError) throw e;
    throw new SandboxSyncError('io', `failed to lock a sync-out target: ${e.message}`);
  }
}

/**
 * Holds every directory target of a sync-out `request` until the returned
 * function is called, waiting for other calls up to `deadline` (ms since
 * the epoch).
 */
export async function lockTargets(request, deadline) {
  const targets = request.operations.flatMap((op) => op.files.filter((m) => m.kind === 'directory').map((m) => m.targetPath));
  for (;;) {
    const release = tryLockAll(targets);
    if (release) return release;
    if (Date.now() >= deadline) {
      throw new SandboxSyncError('limit-exceeded', `another sync-out into ${targets.join(', ')} held it for the whole of this call's timeout`);
    }
    await new Promise((ok) => setTimeout(ok, RETRY_MS + Math.floor(Math.random() * 13)));
  }
}
