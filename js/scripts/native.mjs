// Builds native/at.c (the host-fs's openat, see there) into
// native/<platform>-<arch>/at.node with the system C compiler ($CC, else cc:
// the one cargo links with) against the Node-API headers of the
// node-api-headers package. Linux only: elsewhere host-fs refuses to run.
// Rebuilt when the source is newer than the module.

import { execFileSync } from 'node:child_process';
import { mkdirSync, renameSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { PACKAGE as pkg } from './cargo.mjs';

const SOURCE = join(pkg, 'native', 'at.c');

/** Where the package loads the module from on this platform (src/native.js). */
const MODULE = join(pkg, 'native', `${process.platform}-${process.arch}`, 'at.node');

export function buildNative() {
  if (process.platform !== 'linux') return null;
  const out = MODULE;
  const built = statSync(out, { throwIfNoEntry: false });
  if (built && built.mtimeMs >= statSync(SOURCE).mtimeMs) return out;
  const { include_dir } = createRequire(import.meta.url)('node-api-headers');
  mkdirSync(join(out, '..'), { recursive: true });
  // Built beside and renamed: a worker loading the module never sees half of it.
  const tmp = `${out}.${process.pid}.tmp`;
  const cc = process.env.CC || 'cc';
  execFileSync(cc, ['-std=c11', '-O2', '-fPIC', '-shared', '-s', '-Wall', '-Wextra', '-Werror', '-I', include_dir, '-o', tmp, SOURCE], {
    stdio: 'inherit',
  });
  renameSync(tmp, out);
  return out;
}
