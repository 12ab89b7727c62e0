// The provider worker starts with the worker flags it needs, not the host's:
// a host run as `node --input-type=module -e '...'` syncs (a worker that
// inherited `--input-type` failed to start, ERR_INPUT_TYPE_NOT_ALLOWED), and
// the host's own preloads stay out of the worker.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { PACKAGE } from '../scripts/cargo.mjs';

let dir;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-execargv-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

test('a host started as `node --input-type=module -e` syncs both ways', () => {
  const src = join(dir, 'src');
  const sandbox = join(dir, 'sandbox');
  const back = join(dir, 'back');
  mkdirSync(join(src, 'd'), { recursive: true });
  mkdirSync(sandbox);
  writeFileSync(join(src, 'a.txt'), 'alpha\n');
  writeFileSync(join(src, 'd', 'b.bin'), Buffer.alloc(70_000, 7));
  // Records each thread it runs in: the host's, never the worker's.
  const preload = join(dir, 'preload.cjs');
  const seen = join(dir, 'preload.log');
  writeFileSync(preload, `require('node:fs').appendFileSync(${JSON.stringify(seen)}, require('node:worker_threads').isMainThread ? 'main\\n' : 'worker\\n');\n`);

  const script = `
    import { localExec, performSyncIn, performSyncOut } from '@sandbox-sync/node';
    const [sandbox, src, back] = process.argv.slice(1);
    const exec = localExec();
    const files = (from, to) => [{ operationId: 'op', files: [{ sourcePath: from, targetPath: to, kind: 'directory' }] }];
    const into = await performSyncIn({ exec, remoteDir: sandbox, timeoutMs: 30_000, operations: files(src, sandbox + '/ws') });
    const out = await performSyncOut({ exec, remoteDir: sandbox, timeoutMs: 30_000, operations: files(sandbox + '/ws', back) });
    console.log(JSON.stringify({ into, out, gc: typeof gc }));
  `;
  // Flags a host may well run with: V8's are process-wide (the worker has
  // them anyway, and a Worker's execArgv refuses them), --preserve-symlinks
  // is one the worker keeps.
  const flags = ['--input-type=module', '--expose-gc', '--max-old-space-size=512', '--preserve-symlinks', '--require', preload];
  // cwd: the package resolves itself by name from there.
  const report = JSON.parse(
    execFileSync(process.execPath, [...flags, '-e', script, sandbox, src, back], { cwd: PACKAGE, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }),
  );

  assert.equal(report.gc, 'function');
  assert.equal(report.into.operations[0].filesTransferred, 2);
  assert.equal(report.out.operations[0].filesTransferred, 2);
  assert.equal(readFileSync(join(sandbox, 'ws', 'a.txt'), 'utf8'), 'alpha\n');
  assert.equal(readFileSync(join(back, 'a.txt'), 'utf8'), 'alpha\n');
  assert.deepEqual(readFileSync(join(back, 'd', 'b.bin')), Buffer.alloc(70_000, 7));
  assert.equal(readFileSync(seen, 'utf8'), 'main\n');
});
