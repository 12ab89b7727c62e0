// Transpiles the provider components cargo built into components/<name>/
// with jco (instantiation mode: the package passes every import itself).
// Run after `cargo test` or `just components`; CARGO_TARGET_DIR is honoured.

import { existsSync, mkdirSync, rmSync, statSync, writeFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { transpile } from '@bytecodealliance/jco';
import { PACKAGE as pkg, TARGET as target } from './cargo.mjs';
const COMPONENTS = {
  'tar-stream': 'sandbox_sync_component.wasm',
  'base64-fallback': 'sandbox_sync_base64_fallback.wasm',
};

/** The newest build of `file`: the host's build script's, or `just components`'. */
function newest(file) {
  const found = [join(target, 'guest', 'wasm32-wasip2', 'guest', file), join(target, 'wasm32-wasip2', 'guest', file)]
    .filter(existsSync)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (found.length === 0) throw new Error(`${file} is not built under ${target}: run \`cargo build -p sandbox-sync-host\` or \`just components\``);
  return found[0];
}

for (const [name, file] of Object.entries(COMPONENTS)) {
  const wasm = newest(file);
  const out = join(pkg, 'components', name);
  const { files } = await transpile(readFileSync(wasm), { name: 'provider', instantiation: { tag: 'sync' }, noTypescript: true });
  rmSync(out, { recursive: true, force: true });
  for (const [f, data] of Object.entries(files)) {
    mkdirSync(dirname(join(out, f)), { recursive: true });
    writeFileSync(join(out, f), data);
  }
  writeFileSync(join(out, 'SOURCE'), `${wasm}\n`);
  console.log(`${name}: ${wasm} -> ${out}`);
}
