// Transpiles the provider components cargo built into components/<name>/
// with jco (instantiation mode: the package passes every import itself).
// Run after `cargo test` or `just components`; CARGO_TARGET_DIR is honoured.
// Then builds the host-fs's openat module (scripts/native.mjs).
//
// The transpiler is jco-transpile 0.1.1 (jco 1.15's), not jco 1.35's: the
// latter's glue takes every import call through the component-model async
// machinery (a task, a subtask and their promises per call), which cost
// 40% of the worker's time on a sync-out of small files and tripled the
// glue to 640 KB; the older glue calls a synchronous import directly.

import { mkdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { transpileBytes } from '@bytecodealliance/jco-transpile';
import { COMPONENTS, PACKAGE as pkg, newestBuild, sha256 } from './cargo.mjs';
import { buildNative } from './native.mjs';

// The glue asks `process.env` for JCO_DEBUG on every import call (four
// times a call, each a trip into C++: ~9 ms of a 10,000-file sync-out's
// ~300 in the worker); it is read once, at load, instead. A glue without
// that exact check fails the build, so a transpiler update is looked at.
const DEBUG_CHECK = 'if (!globalThis?.process?.env?.JCO_DEBUG) { return; }';
const DEBUG_DEF = 'const _debugLog = (...args) => {';
function readDebugOnce(glue) {
  if (glue.split(DEBUG_CHECK).length !== 2 || glue.split(DEBUG_DEF).length !== 2) {
    throw new Error('the transpiled glue no longer has the JCO_DEBUG check build.mjs rewrites: review it');
  }
  return glue
    .replace(DEBUG_DEF, `const _jcoDebug = Boolean(globalThis?.process?.env?.JCO_DEBUG);\n${DEBUG_DEF}`)
    .replace(DEBUG_CHECK, 'if (!_jcoDebug) { return; }');
}

for (const [name, file] of Object.entries(COMPONENTS)) {
  const wasm = newestBuild(file);
  const out = join(pkg, 'components', name);
  const { files } = await transpileBytes(readFileSync(wasm), { name: 'provider', instantiation: 'sync', emitTypescriptDeclarations: false });
  rmSync(out, { recursive: true, force: true });
  for (const [f, data] of Object.entries(files)) {
    mkdirSync(dirname(join(out, f)), { recursive: true });
    writeFileSync(join(out, f), f.endsWith('.js') ? readDebugOnce(Buffer.from(data).toString('utf8')) : data);
  }
  // What it was built from, without the build machine's paths.
  writeFileSync(join(out, 'SOURCE'), `${basename(wasm)} sha256:${sha256(readFileSync(wasm))}\n`);
  console.log(`${name}: ${wasm} -> ${out}`);
}

const native = buildNative();
if (native) console.log(`openat: native/at.c -> ${native}`);
