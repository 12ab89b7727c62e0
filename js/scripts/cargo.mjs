// Where cargo's build lives for the package's build script, tests and
// benchmark: `$CARGO_TARGET_DIR` (relative to the repository), else the
// repository's `target/`; and which component file each shipped
// transpilation came from.

import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const TARGET = resolve(PACKAGE, '..', process.env.CARGO_TARGET_DIR ?? 'target');

/** The `.wasm` that `components/<name>/` was transpiled from (build.mjs records it). */
export function componentSource(name) {
  return readFileSync(join(PACKAGE, 'components', name, 'SOURCE'), 'utf8').trim();
}
