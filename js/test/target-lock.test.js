// Issue 48: sync-outs into one target take turns (src/target-lock.js), in
// one process and across processes: every call succeeds, the target ends
// as exactly one sandbox tree, and nothing is left beside it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { localExec, performSyncOut } from '../src/index.js';
import { native } from '../src/native.js';

const INDEX = fileURLToPath(new URL('../src/index.js', import.meta.url));
const FILES = 40;

let tmp;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-lock-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Sandbox tree `i` (its own remote dir), as sync-out operations into `target`. */
function tree(i, target) {
  const remote = join(tmp, `remote-${i}-${Math.random().toString(36).slice(2)}`);
  for (let f = 0; f < FILES; f++) {
    mkdirSync(join(remote, 'out', `d${f % 4}`), { recursive: true });
    writeFileSync(join(remote, 'out', `d${f % 4}`, `f${f}.txt`), `tree ${i} file ${f}\n`.repeat(200));
  }
  writeFileSync(join(remote, 'out', `only-${i}`), '');
  return { remoteDir: remote, operations: [{ operationId: 'o', files: [{ sourcePath: join(remote, 'out'), targetPath: target, kind: 'directory' }] }] };
}

/** The target holds exactly one tree, and its parent nothing else. */
function exactlyOneTree(parent, target) {
  const names = readdirSync(target);
  const only = names.filter((n) => n.startsWith('only-'));
  assert.equal(only.length, 1, `not one tree: ${names.join(', ')}`);
  const i = only[0].slice('only-'.length);
  for (let f = 0; f < FILES; f++) {
    assert.equal(readFileSync(join(target, `d${f % 4}`, `f${f}.txt`), 'utf8'), `tree ${i} file ${f}\n`.repeat(200));
  }
  assert.equal(names.length, 5, names.join(', '));
  assert.deepEqual(readdirSync(parent), ['target']);
}

test('eight sync-outs of one process into one target take turns', async () => {
  const parent = join(tmp, 'one-process');
  const target = join(parent, 'target');
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, (_, i) => performSyncOut({ exec: localExec(), timeoutMs: 60_000, incremental: false, ...tree(i, target) })),
  );
  assert.deepEqual(
    results.filter((r) => r.status === 'rejected').map((r) => r.reason?.message),
    [],
  );
  exactlyOneTree(parent, target);
});

test('sync-outs of two processes into one target take turns', { skip: !native?.trylock && 'the addon does not load here' }, async () => {
  const parent = join(tmp, 'two-processes');
  const target = join(parent, 'target');
  const run = (i) =>
    new Promise((resolve) => {
      const spec = tree(i, target);
      const child = spawn(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const { performSyncOut, localExec } = await import(${JSON.stringify(INDEX)}); const spec = JSON.parse(process.argv[1]);
           await Promise.all([0, 1, 2].map(() => performSyncOut({ exec: localExec(), timeoutMs: 60_000, incremental: false, ...spec })));`,
          JSON.stringify(spec),
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.on('exit', (code) => resolve({ code, err }));
    });
  const done = await Promise.all([run(0), run(1)]);
  assert.deepEqual(
    done.map((d) => d.code),
    [0, 0],
    done.map((d) => d.err).join('\n'),
  );
  exactlyOneTree(parent, target);
});
