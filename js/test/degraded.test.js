// A feature the sandbox turns off for want of a tool is in the result
// (`degraded`), as in the Rust host; with every tool the result keeps the
// seed's shape.

import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { performSyncIn } from '../src/index.js';
import { localExec } from '../src/local-exec.js';
import { build, hostDir } from './support/trees.js';

/** A PATH directory with this machine's tools but `missing`. */
function toolsWithout(dir, missing) {
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  for (const d of ['/usr/local/bin', '/usr/bin', '/bin']) {
    for (const name of existsSync(d) ? readdirSync(d) : []) {
      if (!missing.includes(name) && !existsSync(join(bin, name))) symlinkSync(join(d, name), join(bin, name));
    }
  }
  return bin;
}

test('a sandbox without awk reports incremental sync-in off, naming awk', async () => {
  const dir = hostDir('degraded');
  try {
    build(dir, { 'src/a.txt': 'a', 'src/b/c.txt': 'c', 'workspace/': {} });
    const remoteDir = join(dir, 'workspace');
    const operations = [
      { operationId: 'op', files: [{ sourcePath: join(dir, 'src'), targetPath: `${remoteDir}/t`, kind: 'directory' }] },
    ];
    const full = await performSyncIn({ exec: localExec(), operations, remoteDir, timeoutMs: 30_000 });
    assert.equal(full.degraded, undefined, JSON.stringify(full));
    const bin = toolsWithout(dir, ['awk', 'gawk', 'mawk', 'nawk']);
    const noAwk = await performSyncIn({ exec: localExec(['env', `PATH=${bin}`]), operations, remoteDir, timeoutMs: 30_000 });
    assert.deepEqual(noAwk.degraded, [{ feature: 'incremental-in-record', missing: ['awk'] }]);
    assert.equal(noAwk.operations[0].filesTransferred, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
