// The caller's exec is the plugin's code: whatever it does (throws, settles
// with nonsense, writes after settling, never settles) a sync ends typed,
// within its deadline, and the next sync works.

import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, SandboxSyncError } from '../src/index.js';
import { sandbox } from './support/sandbox.js';
import { build, hostDir } from './support/trees.js';

describe("a misbehaving caller's exec", () => {
  let provider;
  let sb;
  let host;
  before(async () => {
    provider = await loadProvider('tar-stream');
    sb = sandbox('gnu');
    host = build(hostDir(), { 'f.txt': 'payload' });
  });
  after(() => {
    provider.close();
    sb.cleanup();
    rmSync(host, { recursive: true, force: true });
  });

  const syncIn = (exec, extra = {}) =>
    provider.performSyncIn({
      exec,
      remoteDir: sb.remoteDir,
      operations: [{ operationId: 'op', files: [{ sourcePath: join(host, 'f.txt'), targetPath: `${sb.remoteDir}/f.txt`, kind: 'file' }] }],
      ...extra,
    });

  async function failsTyped(exec, kinds, extra) {
    const t0 = Date.now();
    await assert.rejects(syncIn(exec, extra), (e) => {
      assert.ok(e instanceof SandboxSyncError, String(e?.stack ?? e));
      assert.ok(kinds.includes(e.kind), `${e.kind}: ${e.message}`);
      return true;
    });
    return Date.now() - t0;
  }

  test('one that throws, or rejects, fails the sync as a transport error', async () => {
    await failsTyped(() => {
      throw new Error('no pod');
    }, ['transport']);
    await failsTyped(() => Promise.reject(new Error('websocket closed before status frame')), ['transport']);
    await failsTyped(() => Promise.reject('not even an Error'), ['transport']);
  });

  test('one that settles with nonsense (no exit code) fails the sync', async () => {
    await failsTyped(async () => undefined, ['transport', 'command-failed', 'io']);
  });

  test('one that never settles and never reads ends within the deadline', async () => {
    const took = await failsTyped(() => new Promise(() => {}), ['transport', 'limit-exceeded', 'command-failed'], { timeoutMs: 1000 });
    assert.ok(took < 1000 + 3000, `took ${took} ms`);
  });

  test('one that keeps writing stdout after it settled changes nothing, and the next sync works', async () => {
    const exec = async (argv, io) => {
      const r = await sb.exec(argv, io);
      setTimeout(() => io.stdout.write?.(Buffer.from('late garbage')), 5);
      return r;
    };
    await syncIn(exec);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(readFileSync(`${sb.remoteDir}/f.txt`, 'utf8'), 'payload');
    await syncIn(sb.exec);
  });

  test('after all of these, a sync with a sound exec lands', async () => {
    rmSync(`${sb.remoteDir}/f.txt`, { force: true });
    const r = await syncIn(sb.exec);
    assert.equal(r.operations[0].filesTransferred, 1);
    assert.equal(readFileSync(`${sb.remoteDir}/f.txt`, 'utf8'), 'payload');
  });
});
