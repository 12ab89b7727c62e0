// Transpiles the provider components cargo built into components/<name>/
// with jco (instantiation mode: the package passes every import itself).
// Run after `cargo test` or `just components`; CARGO_TARGET_DIR is honoured.

import { mkdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { transpile } from '@bytecodealliance/jco';
import { COMPONENTS, PACKAGE as pkg, newestBuild, sha256 } from './cargo.mjs';

for (const [name, file] of Object.entries(COMPONENTS)) {
  const wasm = newestBuild(file);
  const out = join(pkg, 'components', name);
  const { files } = await transpile(readFileSync(wasm), { name: 'provider', instantiation: { tag: 'sync' }, noTypescript: true });
  rmSync(out, { recursive: true, force: true });
  for (const [f, data] of Object.entries(files)) {
    mkdirSync(dirname(join(out, f)), { recursive: true });
    writeFileSync(join(out, f), data);
  }
  // What it was built from, without the build machine's paths.
  writeFileSync(join(out, 'SOURCE'), `${basename(wasm)} sha256:${sha256(readFileSync(wasm))}\n`);
  console.log(`${name}: ${wasm} -> ${out}`);
}
