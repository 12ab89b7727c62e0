// localExec is a sandbox on this machine, as the Rust host's local backend:
// `auto` compresses nothing there. Any other exec, a wrapper around a
// localExec included, is remote: a pod's exec keeps `auto`.

import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, localExec } from '../src/index.js';
import { isLocalExec } from '../src/local-exec.js';
import { build, describeTree, hostDir } from './support/trees.js';

describe('a localExec is local', () => {
  let provider;
  let dir;
  let log;
  let exec;
  before(async () => {
    provider = await loadProvider('tar-stream');
    dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-local-'));
    // Codecs that log each run, ahead of the real ones on the sandbox's PATH.
    log = join(dir, 'codecs.log');
    for (const codec of ['zstd', 'gzip']) {
      writeFileSync(join(dir, codec), `#!/bin/sh\necho ${codec} >> '${log}'\nexec /usr/bin/${codec} "$@"\n`);
      chmodSync(join(dir, codec), 0o755);
    }
    exec = localExec(['env', `PATH=${dir}:/usr/local/bin:/usr/bin:/bin`]);
  });
  after(() => {
    provider.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('only the exec localExec made', () => {
    assert.equal(isLocalExec(exec), true);
    assert.equal(isLocalExec((argv, io) => exec(argv, io)), false);
  });

  for (const [name, wrap, compressed] of [
    ['auto compresses nothing through a localExec', (e) => e, false],
    ['auto still compresses through any other exec', (e) => (argv, io) => e(argv, io), true],
  ]) {
    test(name, async () => {
      const remote = build(join(dir, 'remote'), { 't/a.txt': 'compressible '.repeat(50_000) });
      const back = hostDir();
      rmSync(log, { force: true });
      try {
        await provider.performSyncOut({
          exec: wrap(exec),
          remoteDir: remote,
          timeoutMs: 30_000,
          operations: [{ operationId: 'op', files: [{ sourcePath: `${remote}/t`, targetPath: join(back, 't'), kind: 'directory' }] }],
        });
        assert.deepEqual(describeTree(join(back, 't')), describeTree(join(remote, 't')));
        assert.equal(existsSync(log) && readFileSync(log, 'utf8').trim() !== '', compressed);
      } finally {
        rmSync(back, { recursive: true, force: true });
        rmSync(remote, { recursive: true, force: true });
      }
    });
  }
});
