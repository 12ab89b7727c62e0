// Two copies of the package against each other (a change's effect alone,
// apart from the machine's drift): each copy syncs in its own process,
// the two alternating, and each process reports the median wall and CPU
// time (main thread and worker, `process.cpuUsage()`) of its syncs.
//   node bench/ab.mjs --a <js dir> --b <js dir> [--files 10000] [--way in|out]
//                     [--syncs 9] [--rounds 3] [--dir DIR]
// A copy is a `js/` directory with its components built, e.g. a
// `git worktree` of another commit with this one's `components/` and
// `node_modules/` (the components must be the same for the comparison to
// be about the host). The tree: --files x 4 KiB random, 100 per directory,
// made once in --dir (the temp dir by default; a tmpfs shows the hosts' own
// costs), synced into a wiped target each time after one untimed sync.

import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    a: { type: 'string' },
    b: { type: 'string' },
    files: { type: 'string', default: '10000' },
    way: { type: 'string', default: 'in' },
    syncs: { type: 'string', default: '9' },
    rounds: { type: 'string', default: '3' },
    dir: { type: 'string', default: tmpdir() },
    // Set in the child processes: the copy to run and the tree.
    run: { type: 'string' },
    tree: { type: 'string' },
  },
});

const median = (xs) => xs.sort((x, y) => x - y)[xs.length >> 1];

if (args.run) {
  const { loadProvider, localExec } = await import(pathToFileURL(join(args.run, 'src', 'index.js')).href);
  const provider = await loadProvider('tar-stream');
  const exec = localExec();
  const out = args.way === 'out';
  // Sync-in writes beneath `remote-in`; sync-out reads `remote/t` into `back`.
  const remote = join(args.tree, out ? 'remote' : 'remote-in');
  const target = out ? join(args.tree, 'back') : remote;
  const files = out ? [{ sourcePath: join(remote, 't'), targetPath: target, kind: 'directory' }] : [{ sourcePath: join(args.tree, 'src'), targetPath: join(remote, 't'), kind: 'directory' }];
  const request = { exec, remoteDir: remote, operations: [{ operationId: 'ab', files }], timeoutMs: 600_000 };
  const wall = [];
  const cpu = [];
  for (let i = 0; i <= Number(args.syncs); i++) {
    rmSync(target, { recursive: true, force: true });
    if (!out) mkdirSync(remote);
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await (out ? provider.performSyncOut(request) : provider.performSyncIn(request));
    const c = process.cpuUsage(c0);
    if (i === 0) continue;
    wall.push(performance.now() - t0);
    cpu.push((c.user + c.system) / 1000);
  }
  console.log(JSON.stringify({ wall: median(wall), cpu: median(cpu) }));
  process.exit(0);
}

if (!args.a || !args.b || !['in', 'out'].includes(args.way)) throw new Error('usage: --a <js dir> --b <js dir> [--way in|out]');
const tree = mkdtempSync(join(args.dir, 'sandbox-sync-ab-'));
try {
  const data = Buffer.alloc(4096);
  for (const top of [join(tree, 'src'), join(tree, 'remote', 't')]) {
    for (let n = 0; n < Number(args.files); n++) {
      const dir = join(top, `d${Math.floor(n / 100)}`);
      if (n % 100 === 0) mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `f${n % 100}`), randomFillSync(data));
    }
  }
  const self = fileURLToPath(import.meta.url);
  const run = (copy) => JSON.parse(execFileSync(process.execPath, [self, '--run', resolve(copy), '--tree', tree, '--way', args.way, '--syncs', args.syncs], { encoding: 'utf8' }));
  console.log(`${args.files} x 4 KiB, sync-${args.way}, median of ${args.syncs} syncs per process\n`);
  console.log('| round | A wall | B wall | B / A | A CPU | B CPU | B / A |\n|---|---|---|---|---|---|---|');
  for (let r = 1; r <= Number(args.rounds); r++) {
    // Alternate which goes first.
    const [a, b] = r % 2 ? [run(args.a), run(args.b)] : [run(args.b), run(args.a)].reverse();
    const ms = (x) => `${x.toFixed(1)} ms`;
    console.log(`| ${r} | ${ms(a.wall)} | ${ms(b.wall)} | ${(b.wall / a.wall).toFixed(2)}x | ${ms(a.cpu)} | ${ms(b.cpu)} | ${(b.cpu / a.cpu).toFixed(2)}x |`);
  }
} finally {
  rmSync(tree, { recursive: true, force: true });
}
