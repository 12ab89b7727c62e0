// The JS host beside the Rust CLI, same component, same local sandbox, in
// one run (ratios: this machine is shared and noisy):
//   node bench/bench.mjs [--runs 3] [--only W1,W3,W9] [--cli PATH]
// W1: 1 x 1 GiB random, in and out; W3: 10000 x 4 KiB, in and out;
// W9: 100 successive one-file syncs of 4 KiB (the JS provider stays loaded,
// as in a plugin worker; the CLI is a process per sync, as a shell-out is).
// The raw pipe (`tar -c | tar -x`) is the floor.

import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadProvider } from '../src/index.js';
import { TARGET, componentSource } from '../scripts/cargo.mjs';
import { localExec } from '../src/local-exec.js';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    only: { type: 'string', default: 'W1,W3,W9' },
    cli: { type: 'string', default: join(TARGET, 'release', 'sandbox-sync') },
  },
});
const RUNS = Number(args.runs);
const ONLY = new Set(args.only.split(','));
const WASM = componentSource('tar-stream');
const base = join(tmpdir(), `sandbox-sync-js-bench-${process.pid}`);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function fresh(dir) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

function cliSync(verb, operations, remoteDir) {
  const ops = join(base, 'ops.json');
  writeFileSync(ops, JSON.stringify(operations));
  execFileSync(args.cli, [verb, '--remote-dir', remoteDir, '--ops', ops, '--component', WASM], { stdio: ['ignore', 'ignore', 'inherit'] });
}

async function timed(fn) {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e9;
}

const provider = await loadProvider('tar-stream');
const exec = localExec();
const js = (verb, operations, remoteDir) =>
  provider[verb === 'sync-in' ? 'performSyncIn' : 'performSyncOut']({ exec, operations, remoteDir, timeoutMs: 600_000 });

/** Host tree `src` in to a fresh sandbox dir and back out to a fresh host dir. */
function contenders(src, id) {
  const remote = join(base, 'remote');
  const back = join(base, 'back');
  const inOps = [{ operationId: id, files: [{ sourcePath: src, targetPath: `${remote}/t`, kind: 'directory' }] }];
  const outOps = [{ operationId: id, files: [{ sourcePath: `${remote}/t`, targetPath: `${back}/t`, kind: 'directory' }] }];
  return {
    [`${id} in`]: {
      raw: () => execFileSync('sh', ['-c', `mkdir -p "$2" && tar -cf - -C "$1" . | tar -xf - -C "$2"`, 'raw', src, `${fresh(remote)}/t`]),
      cli: () => (fresh(remote), cliSync('sync-in', inOps, remote)),
      js: () => (fresh(remote), js('sync-in', inOps, remote)),
    },
    [`${id} out`]: {
      prepare: () => (fresh(remote), cliSync('sync-in', inOps, remote)),
      raw: () => execFileSync('sh', ['-c', `mkdir -p "$2" && tar -cf - -C "$1" . | tar -xf - -C "$2"`, 'raw', `${remote}/t`, `${fresh(back)}/t`]),
      cli: () => (fresh(back), cliSync('sync-out', outOps, remote)),
      js: () => (fresh(back), js('sync-out', outOps, remote)),
    },
  };
}

const workloads = {};
if (ONLY.has('W1')) {
  const src = fresh(join(base, 'w1'));
  const chunk = Buffer.alloc(64 << 20);
  for (let i = 0; i < 16; i++) writeFileSync(join(src, 'big.bin'), randomFillSync(chunk), { flag: 'a' });
  Object.assign(workloads, contenders(src, 'W1'));
}
if (ONLY.has('W3')) {
  const src = fresh(join(base, 'w3'));
  const data = Buffer.alloc(4096);
  for (let d = 0; d < 100; d++) {
    mkdirSync(join(src, `d${d}`));
    for (let f = 0; f < 100; f++) writeFileSync(join(src, `d${d}`, `f${f}`), randomFillSync(data));
  }
  Object.assign(workloads, contenders(src, 'W3'));
}
if (ONLY.has('W9')) {
  const src = fresh(join(base, 'w9'));
  writeFileSync(join(src, 'one.bin'), randomFillSync(Buffer.alloc(4096)));
  const remote = join(base, 'remote');
  const ops = (i) => [{ operationId: 'w9', files: [{ sourcePath: join(src, 'one.bin'), targetPath: `${remote}/f${i}.bin`, kind: 'file' }] }];
  const hundred = async (one) => {
    fresh(remote);
    for (let i = 0; i < 100; i++) await one(i);
  };
  workloads['W9 in (100 syncs)'] = {
    raw: () => hundred((i) => execFileSync('sh', ['-c', `tar -cf - -C "$1" one.bin | tar -xOf - > "$2"`, 'raw', src, `${remote}/f${i}.bin`])),
    cli: () => hundred((i) => cliSync('sync-in', ops(i), remote)),
    js: () => hundred((i) => js('sync-in', ops(i), remote)),
  };
}

const rows = [];
for (const [name, w] of Object.entries(workloads)) {
  const times = { raw: [], cli: [], js: [] };
  for (let r = 0; r < RUNS; r++) {
    // Interleaved, so drift on the machine hits every contender alike.
    for (const c of ['raw', 'cli', 'js']) {
      await w.prepare?.();
      times[c].push(await timed(w[c]));
    }
  }
  const m = Object.fromEntries(Object.entries(times).map(([c, t]) => [c, median(t)]));
  rows.push(`| ${name} | ${m.raw.toFixed(3)} s | ${m.cli.toFixed(3)} s | ${m.js.toFixed(3)} s | ${(m.js / m.cli).toFixed(2)}x | ${(m.js / m.raw).toFixed(2)}x |`);
  console.error(rows.at(-1));
}
provider.close();
rmSync(base, { recursive: true, force: true });
console.log(`Median of ${RUNS} interleaved runs, local GNU sandbox (a child sh), component ${WASM.split('/').pop()}.\n`);
console.log('| workload | raw pipe | Rust CLI | JS host | JS / CLI | JS / raw |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
