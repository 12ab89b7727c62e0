// Where cargo's build lives for the package's build script, tests and
// benchmark: `$CARGO_TARGET_DIR` (relative to the repository), else the
// repository's `target/`; and which component file each shipped
// transpilation came from.

import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const TARGET = resolve(PACKAGE, '..', process.env.CARGO_TARGET_DIR ?? 'target');

/** The shipped transpilations, and the component file each is made from. */
export const COMPONENTS = {
  'tar-stream': 'sandbox_sync_component.wasm',
  'base64-fallback': 'sandbox_sync_base64_fallback.wasm',
};

/** The newest build of `file`: the host's build script's, or `just components`'. */
export function newestBuild(file) {
  const found = [join(TARGET, 'guest', 'wasm32-wasip2', 'guest', file), join(TARGET, 'wasm32-wasip2', 'guest', file)]
    .filter(existsSync)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (found.length === 0) throw new Error(`${file} is not built under ${TARGET}: run \`cargo build -p sandbox-sync-host\` or \`just components\``);
  return found[0];
}

export const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/**
 * The `.wasm` that `components/<name>/` was transpiled from: the build
 * whose hash its SOURCE records (build.mjs writes it).
 */
export function componentSource(name) {
  const [, recorded] = readFileSync(join(PACKAGE, 'components', name, 'SOURCE'), 'utf8').trim().split(' sha256:');
  const wasm = newestBuild(COMPONENTS[name]);
  if (sha256(readFileSync(wasm)) !== recorded) {
    throw new Error(`components/${name} is not a transpilation of ${wasm}: run \`npm run build\``);
  }
  return wasm;
}
