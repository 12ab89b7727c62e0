// The package's addon (native/at.c: openat) where it loads, else null: not
// built for this platform, not Linux, another libc, or turned off with
// SANDBOX_SYNC_NATIVE=0 (the tests run host-fs both ways). Without it,
// host-fs opens through /proc/self/fd: the same files, at twice the cost.

import { createRequire } from 'node:module';

function load() {
  if (process.platform !== 'linux' || process.env.SANDBOX_SYNC_NATIVE === '0') return null;
  try {
    return createRequire(import.meta.url)(`../native/${process.platform}-${process.arch}/at.node`);
  } catch {
    return null;
  }
}

export const native = load();
