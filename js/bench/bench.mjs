// The JS host beside the module it replaces (the seed's file-sync.js), the
// Rust CLI (same component) and the raw pipe, on the same local sandbox,
// interleaved in one run (ratios: this machine is shared and noisy):
//   node bench/bench.mjs [--runs 5] [--only S,B,ONE,W3,FIRST] [--cli PATH] [--seed FILE] [--dir DIR]
// S: 2000 x 4 KiB; B: 1 x 128 MiB random; W3: 10000 x 4 KiB (each in and
// out); ONE: successive one-file syncs (the JS provider stays loaded, as in
// a plugin worker; the CLI is a process per sync, as a shell-out is);
// FIRST: the first call in a fresh process, its import included.
//
// The seed's module is read at run time from the seed document `--seed`
// names (it is not part of this repository); without it that column is
// left out. Every contender but the CLI gets the very same `exec`
// (localExec) and the seed's input shape, nothing else.
//
// Trees live in `--dir` (the temp dir by default; TMPDIR is pointed there,
// for the seed's host tarballs too). On ext4 each run's deletes slow the
// next run's creates for every contender alike (inode allocation skips
// recently deleted inodes): a tmpfs shows the hosts' own costs.

import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { TARGET, componentSource } from '../scripts/cargo.mjs';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    only: { type: 'string', default: 'S,B,ONE,W3,FIRST' },
    cli: { type: 'string', default: join(TARGET, 'release', 'sandbox-sync') },
    seed: { type: 'string' },
    dir: { type: 'string', default: tmpdir() },
    // Successive syncs per ONE run.
    syncs: { type: 'string', default: '50' },
  },
});
const RUNS = Number(args.runs);
const SYNCS = Number(args.syncs);
const ONLY = new Set(args.only.split(','));
const PACKAGE = fileURLToPath(new URL('../src/index.js', import.meta.url));
const LOCAL_EXEC = fileURLToPath(new URL('../src/local-exec.js', import.meta.url));
const base = mkdtempSync(join(args.dir, 'sandbox-sync-js-bench-'));
process.env.TMPDIR = base;
// The CLI loads a copy of the very component the package's transpilation
// was made from: a rebuild during the run must not change one side only.
const SOURCE = componentSource('tar-stream');
const WASM = join(base, 'component.wasm');
copyFileSync(SOURCE, WASM);
const TIMEOUT_MS = 600_000;

/**
 * The module text of the seed document `file`: a unified diff adding
 * `dist/file-sync.js`, written out as an ES module beneath `base`.
 */
function extractSeed(file) {
  const lines = readFileSync(file, 'utf8').split('\n');
  const start = lines.findIndex((l) => l.startsWith('@@ '));
  if (start < 0) throw new Error(`${file}: no diff hunk`);
  const body = [];
  for (const l of lines.slice(start + 1)) {
    if (l.startsWith('+')) body.push(l.slice(1));
    else if (l.trim() !== '') break;
  }
  const dir = join(base, 'seed');
  mkdirSync(dir);
  writeFileSync(join(dir, 'file-sync.mjs'), body.join('\n'));
  return join(dir, 'file-sync.mjs');
}

const SEED = args.seed ? extractSeed(args.seed) : null;
const seed = SEED ? await import(pathToFileURL(SEED).href) : null;
const { loadProvider, localExec } = await import(pathToFileURL(PACKAGE).href);
const provider = await loadProvider('tar-stream');
const exec = localExec();
const CONTENDERS = ['raw', 'cli', ...(seed ? ['seed'] : []), 'js'];

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

/** The seed's input shape, for either module. */
const call = (module, verb, operations, remoteDir) =>
  module[verb === 'sync-in' ? 'performSyncIn' : 'performSyncOut']({ exec, operations, remoteDir, timeoutMs: TIMEOUT_MS });

const pipe = (from, to) => execFileSync('sh', ['-c', `mkdir -p "$2" && tar -cf - -C "$1" . | tar -xf - -C "$2"`, 'raw', from, to]);

async function timed(fn) {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** Host tree `src` in to a fresh sandbox dir, and back out to a fresh host dir. */
function both(src, id) {
  const remote = join(base, 'remote');
  const back = join(base, 'back');
  const inOps = [{ operationId: id, files: [{ sourcePath: src, targetPath: `${remote}/t`, kind: 'directory' }] }];
  const outOps = [{ operationId: id, files: [{ sourcePath: `${remote}/t`, targetPath: `${back}/t`, kind: 'directory' }] }];
  return {
    [`${id} in`]: {
      prepare: () => fresh(remote),
      raw: () => pipe(src, `${remote}/t`),
      cli: () => cliSync('sync-in', inOps, remote),
      seed: () => call(seed, 'sync-in', inOps, remote),
      js: () => call(provider, 'sync-in', inOps, remote),
    },
    [`${id} out`]: {
      setup: () => (fresh(remote), pipe(src, `${remote}/t`)),
      prepare: () => fresh(back),
      raw: () => pipe(`${remote}/t`, `${back}/t`),
      cli: () => cliSync('sync-out', outOps, remote),
      seed: () => call(seed, 'sync-out', outOps, remote),
      js: () => call(provider, 'sync-out', outOps, remote),
    },
  };
}

function tree(id, files, size) {
  const src = fresh(join(base, id));
  const data = Buffer.alloc(size);
  for (let d = 0; d < files / 100; d++) {
    mkdirSync(join(src, `d${d}`));
    for (let f = 0; f < 100; f++) writeFileSync(join(src, `d${d}`, `f${f}`), randomFillSync(data));
  }
  return src;
}

const workloads = {};
const perSync = new Set();
if (ONLY.has('S')) Object.assign(workloads, both(tree('s', 2000, 4096), 'S: 2000 x 4 KiB'));
if (ONLY.has('B')) {
  const src = fresh(join(base, 'b'));
  writeFileSync(join(src, 'big.bin'), randomFillSync(Buffer.alloc(128 << 20)));
  Object.assign(workloads, both(src, 'B: 128 MiB'));
}
if (ONLY.has('ONE')) {
  const src = fresh(join(base, 'one'));
  writeFileSync(join(src, 'one.bin'), randomFillSync(Buffer.alloc(4096)));
  const remote = join(base, 'remote');
  const back = join(base, 'back');
  const inOps = (i) => [{ operationId: 'one', files: [{ sourcePath: join(src, 'one.bin'), targetPath: `${remote}/f${i}.bin`, kind: 'file' }] }];
  const outOps = (i) => [{ operationId: 'one', files: [{ sourcePath: `${remote}/one.bin`, targetPath: `${back}/f${i}.bin`, kind: 'file' }] }];
  /** SYNCS successive syncs. */
  const each = (one) => async () => {
    for (let i = 0; i < SYNCS; i++) await one(i);
  };
  const name = `ONE: 4 KiB file, per sync (${SYNCS} in a row)`;
  workloads[`${name} in`] = {
    prepare: () => fresh(remote),
    raw: each((i) => execFileSync('sh', ['-c', `tar -cf - -C "$1" one.bin | tar -xOf - > "$2"`, 'raw', src, `${remote}/f${i}.bin`])),
    cli: each((i) => cliSync('sync-in', inOps(i), remote)),
    seed: each((i) => call(seed, 'sync-in', inOps(i), remote)),
    js: each((i) => call(provider, 'sync-in', inOps(i), remote)),
  };
  workloads[`${name} out`] = {
    setup: () => (fresh(remote), pipe(src, remote)),
    prepare: () => fresh(back),
    raw: each((i) => execFileSync('sh', ['-c', `tar -cf - -C "$1" one.bin | tar -xOf - > "$2"`, 'raw', remote, `${back}/f${i}.bin`])),
    cli: each((i) => cliSync('sync-out', outOps(i), remote)),
    seed: each((i) => call(seed, 'sync-out', outOps(i), remote)),
    js: each((i) => call(provider, 'sync-out', outOps(i), remote)),
  };
  perSync.add(`${name} in`).add(`${name} out`);
}
if (ONLY.has('W3')) Object.assign(workloads, both(tree('w3', 10000, 4096), 'W3: 10000 x 4 KiB'));

/**
 * The first call in a fresh Node process: importing the module, then one
 * 4 KiB file in, timed inside the process (its own startup excluded).
 * With `warm`, the provider is loaded first (`await loadProvider()`, as
 * the Paperclip plugin does at its setup) and the call alone is timed.
 */
function firstCall(modulePath, name, warm = false) {
  const src = fresh(join(base, 'first-src'));
  writeFileSync(join(src, 'one.bin'), randomFillSync(Buffer.alloc(4096)));
  const remote = join(base, 'remote');
  const program = join(base, `first-${name}.mjs`);
  writeFileSync(
    program,
    `const t0 = performance.now();
    const m = await import(${JSON.stringify(pathToFileURL(modulePath).href)});
    const { localExec } = await import(${JSON.stringify(pathToFileURL(LOCAL_EXEC).href)});
    ${warm ? 'await m.loadProvider();' : ''}
    const t1 = performance.now();
    await m.performSyncIn({ exec: localExec(), remoteDir: ${JSON.stringify(remote)}, timeoutMs: ${TIMEOUT_MS},
      operations: [{ operationId: 'first', files: [{ sourcePath: ${JSON.stringify(join(src, 'one.bin'))}, targetPath: ${JSON.stringify(`${remote}/one.bin`)}, kind: 'file' }] }] });
    console.log(JSON.stringify({ load: t1 - t0, call: performance.now() - t1 }));`,
  );
  return () => {
    fresh(remote);
    return JSON.parse(execFileSync(process.execPath, [program]).toString());
  };
}

const rows = [];
const ratio = (a, b) => (a === undefined || b === undefined ? '-' : `${(a / b).toFixed(2)}x`);
const show = (ms) => (ms === undefined ? '-' : ms >= 1000 ? `${(ms / 1000).toFixed(3)} s` : `${ms.toFixed(1)} ms`);
/**
 * The runs' ratios `js[r] / other[r]` (each run's contenders back to back)
 * as `(min-max)`: how far one run's ratio strays on a machine that drifts.
 */
function spread(times, other) {
  if (!times?.js || !times[other]) return '';
  const rs = times.js.map((t, r) => t / times[other][r]).sort((x, y) => x - y);
  return ` (${rs[0].toFixed(2)}-${rs.at(-1).toFixed(2)})`;
}
function row(name, m, times) {
  rows.push(
    `| ${name} | ${show(m.raw)} | ${show(m.cli)} | ${show(m.seed)} | ${show(m.js)} | ${ratio(m.js, m.seed)}${spread(times, 'seed')} | ${ratio(m.js, m.cli)}${spread(times, 'cli')} |`,
  );
  console.error(rows.at(-1));
}

for (const [name, w] of Object.entries(workloads)) {
  w.setup?.();
  // Warm: the first sync of a workload (page cache, the provider's instance) is not timed.
  for (const c of CONTENDERS) {
    await w.prepare?.();
    await w[c]();
  }
  const times = Object.fromEntries(CONTENDERS.map((c) => [c, []]));
  for (let r = 0; r < RUNS; r++) {
    // Interleaved, so drift on the machine hits every contender alike.
    for (const c of CONTENDERS) {
      await w.prepare?.();
      times[c].push(await timed(w[c]));
    }
  }
  const per = perSync.has(name) ? SYNCS : 1;
  row(name, Object.fromEntries(CONTENDERS.map((c) => [c, median(times[c]) / per])), times);
}

if (ONLY.has('FIRST')) {
  const programs = {
    js: firstCall(PACKAGE, 'js'),
    jsWarm: firstCall(PACKAGE, 'js-warm', true),
    ...(seed ? { seed: firstCall(SEED, 'seed') } : {}),
  };
  const times = { cli: [], seed: [], js: [], jsWarm: [], seedImport: [], jsImport: [], seedCall: [] };
  const remote = join(base, 'remote');
  const ops = [{ operationId: 'first', files: [{ sourcePath: join(base, 'first-src', 'one.bin'), targetPath: `${remote}/one.bin`, kind: 'file' }] }];
  for (let r = 0; r < RUNS; r++) {
    for (const [c, run] of Object.entries(programs)) {
      const { load, call: ms } = run();
      if (c === 'jsWarm') {
        times.jsWarm.push(ms);
        continue;
      }
      times[c].push(load + ms);
      times[`${c}Import`].push(load);
      if (c === 'seed') times.seedCall.push(ms);
    }
    fresh(remote);
    times.cli.push(await timed(() => cliSync('sync-in', ops, remote)));
  }
  const m = Object.fromEntries(Object.entries(times).map(([c, t]) => [c, t.length ? median(t) : undefined]));
  row(`FIRST: import + first one-file sync in a fresh process (import alone: seed ${show(m.seedImport)}, JS ${show(m.jsImport)}; CLI: the whole process)`, m);
  row('FIRST, module and provider loaded at start (`await loadProvider()`, as the Paperclip plugin does): the first call alone', {
    seed: m.seedCall,
    js: m.jsWarm,
  });
}

provider.close();
rmSync(base, { recursive: true, force: true });
console.log(
  `Median of ${RUNS} interleaved runs (in brackets: the lowest and highest of the runs' own ratios) after one untimed, local GNU sandbox (a child sh through localExec), component ${basename(SOURCE)}, trees in ${args.dir}; ` +
    `the seed's module ${SEED ? `from ${basename(args.seed)}` : 'not given (--seed FILE)'}.\n`,
);
console.log('| workload | raw pipe | Rust CLI | seed module | JS package | JS / seed | JS / CLI |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
