// The seed's file-sync behaviours through the JS API, with real sandboxes
// (GNU sh on this machine; BusyBox in a chroot as uid 65534), for both
// provider components.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncIn, performSyncOut, SandboxSyncError } from '../src/index.js';
import { componentSource } from '../scripts/cargo.mjs';
import { mappedWriter } from './support/mapped.js';
import { sandbox } from './support/sandbox.js';
import { build, counted, describeBytes, describeTree, hostDir } from './support/trees.js';

const COMPONENTS = ['tar-stream', 'base64-fallback'];
const USERLANDS = ['gnu', 'busybox'];

async function rejectsWith(promise, kind, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof SandboxSyncError, `not a SandboxSyncError: ${e?.stack ?? e}`);
    assert.equal(e.kind, kind, e.message);
    if (pattern) assert.match(e.message, pattern);
    return true;
  });
}

function scratchLeft(dir) {
  const found = [];
  // By name bytes: a name that is not UTF-8 is walked too.
  const walk = (d) => {
    for (const n of readdirSync(d, { encoding: 'buffer' })) {
      const p = Buffer.concat([d, Buffer.from('/'), n]);
      if (n.toString('latin1').startsWith('.paperclip-upload')) found.push(p.toString('latin1'));
      if (lstatSync(p).isDirectory()) walk(p);
    }
  };
  walk(Buffer.from(dir));
  return found;
}

for (const component of COMPONENTS) {
  for (const userland of USERLANDS) {
    describe(`${component} on ${userland}`, () => {
      let provider;
      let sb;
      let host;
      let exec;
      const R = (p = '') => (p ? `${sb.remoteDir}/${p}` : sb.remoteDir);
      const H = (p = '') => sb.host(R(p));
      const run = (dir, operations, extra = {}) =>
        (dir === 'in' ? performSyncIn : performSyncOut)({ exec, operations, remoteDir: sb.remoteDir, timeoutMs: 30_000, provider, ...extra });

      before(async () => {
        provider = await loadProvider(component);
      });
      test.beforeEach(() => {
        sb = sandbox(userland);
        host = hostDir();
        exec = counted(sb.exec);
      });
      test.afterEach(() => {
        sb.cleanup();
        rmSync(host, { recursive: true, force: true });
      });
      after(() => provider.close());

      test('rejects targets that escape the remote dir, before any exec', async () => {
        build(host, { 'a.txt': 'a' });
        for (const target of [`${R()}/../etc/passwd`, '/etc/passwd', 'relative/path']) {
          await assert.rejects(
            run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'a.txt'), targetPath: target, kind: 'file' }] }]),
            (e) => e instanceof SandboxSyncError && ['confinement', 'invalid-request'].includes(e.kind),
          );
        }
        assert.equal(exec.calls.length, 0);
      });

      test('moves file mappings in one exec, a secret born 0600, no scratch left', async () => {
        build(host, { 'a.txt': 'alpha', 'secret': 'token' });
        const r = await run('in', [
          {
            operationId: 'op',
            files: [
              { sourcePath: join(host, 'a.txt'), targetPath: R('x/a.txt'), kind: 'file' },
              { sourcePath: join(host, 'secret'), targetPath: R('x/secret'), kind: 'file', mode: 0o600 },
            ],
          },
        ]);
        assert.deepEqual(r.operations.map((o) => [o.operationId, o.filesTransferred]), [['op', 2]]);
        assert.ok(r.operations[0].bytesTransferred > 0);
        assert.equal(readFileSync(H('x/a.txt'), 'utf8'), 'alpha');
        assert.equal(readFileSync(H('x/secret'), 'utf8'), 'token');
        assert.equal(statSync(H('x/secret')).mode & 0o777, 0o600);
        if (component === 'tar-stream') assert.equal(exec.calls.length, 1);
        assert.deepEqual(scratchLeft(H()), []);
      });

      test('a directory mapping honours excludes; tar -h only with followSymlinks', async () => {
        build(host, { 'src/keep.txt': 'k', 'src/drop.log': 'd', 'src/sub/deep.txt': 'deep', 'real.txt': 'real', 'src/link': { link: '../real.txt' } });
        await run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'src'), targetPath: R('plain'), kind: 'directory', exclude: ['*.log'] }] }]);
        assert.ok(existsSync(H('plain/keep.txt')));
        assert.ok(!existsSync(H('plain/drop.log')));
        assert.equal(readFileSync(H('plain/sub/deep.txt'), 'utf8'), 'deep');
        assert.ok(lstatSync(H('plain/link')).isSymbolicLink());
        await run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'src'), targetPath: R('followed'), kind: 'directory', followSymlinks: true }] }]);
        assert.ok(lstatSync(H('followed/link')).isFile());
        assert.equal(readFileSync(H('followed/link'), 'utf8'), 'real');
      });

      test('confineFollowedSymlinks refuses a followed link out of its source, landing nothing', async () => {
        build(host, { 'secret.txt': 'outside the source', 'src/a.txt': 'a', 'src/out': { link: '../secret.txt' } });
        const ops = (t) => [{ operationId: 'op', files: [{ sourcePath: join(host, 'src'), targetPath: R(t), kind: 'directory', followSymlinks: true }] }];
        await run('in', ops('followed'));
        assert.equal(readFileSync(H('followed/out'), 'utf8'), 'outside the source');
        await rejectsWith(run('in', ops('confined'), { confineFollowedSymlinks: true }), 'confinement');
        assert.ok(!existsSync(H('confined')));
        assert.deepEqual(scratchLeft(H()), []);
      });

      test('refuses a sandbox-planted symlink ancestor, changing nothing outside', async () => {
        build(host, { 'a.txt': 'a', 'dir/f': 'f' });
        const outside = sb.host(userland === 'gnu' ? join(sb.remoteDir, '..', 'outside') : '/outside');
        mkdirSync(outside, { recursive: true });
        symlinkSync(userland === 'gnu' ? outside : '/outside', H('planted'));
        await assert.rejects(run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'a.txt'), targetPath: R('planted/sub/a.txt'), kind: 'file' }] }]));
        await assert.rejects(run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'dir'), targetPath: R('planted/d'), kind: 'directory' }] }]));
        assert.deepEqual(readdirSync(outside), []);
      });

      test('streams a 2 MiB payload byte-exact', async () => {
        const data = Buffer.alloc(2 << 20);
        for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 12)) & 0xff;
        build(host, { 'big.bin': data });
        const r = await run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'big.bin'), targetPath: R('big.bin'), kind: 'file' }] }]);
        assert.ok(readFileSync(H('big.bin')).equals(data));
        assert.equal(r.operations[0].bytesTransferred, data.length);
      });

      test('brings file mappings back, modes and counts kept, no scratch left', async () => {
        build(H(), { 'out/a.txt': 'alpha', 'out/key': { data: 'k', mode: 0o600 } });
        sb.adopt(R());
        const r = await run('out', [
          {
            operationId: 'back',
            files: [
              { sourcePath: R('out/a.txt'), targetPath: join(host, 'got/a.txt'), kind: 'file' },
              { sourcePath: R('out/key'), targetPath: join(host, 'got/key'), kind: 'file' },
            ],
          },
        ]);
        assert.deepEqual(r.operations.map((o) => [o.operationId, o.filesTransferred]), [['back', 2]]);
        assert.equal(readFileSync(join(host, 'got/a.txt'), 'utf8'), 'alpha');
        assert.equal(statSync(join(host, 'got/key')).mode & 0o777, 0o600);
        assert.deepEqual(scratchLeft(host), []);
        assert.deepEqual(scratchLeft(H()), []);
      });

      test('round-trips a directory, a symlink kept as a link', async () => {
        build(H(), { 'tree/a.txt': 'a', 'tree/sub/b.txt': 'b', 'tree/ln': { link: 'a.txt' } });
        sb.adopt(R());
        const r = await run('out', [{ operationId: 'op', files: [{ sourcePath: R('tree'), targetPath: join(host, 'tree'), kind: 'directory' }] }]);
        assert.ok(r.operations[0].filesTransferred >= 2);
        assert.equal(readFileSync(join(host, 'tree/sub/b.txt'), 'utf8'), 'b');
        assert.equal(lstatSync(join(host, 'tree/ln')).isSymbolicLink(), true);
      });

      test('refuses an outbound source that escapes, or a symlink leading out', async () => {
        await assert.rejects(run('out', [{ operationId: 'op', files: [{ sourcePath: '/etc/passwd', targetPath: join(host, 'p'), kind: 'file' }] }]));
        assert.equal(exec.calls.length, 0);
        symlinkSync('/etc/passwd', H('leak'));
        await assert.rejects(run('out', [{ operationId: 'op', files: [{ sourcePath: R('leak'), targetPath: join(host, 'leak'), kind: 'file' }] }]));
        assert.ok(!existsSync(join(host, 'leak')));
      });

      test('fails closed past maxOutputBytes, writing no target', async () => {
        build(H(), { 'big.txt': 'x'.repeat(4096) });
        sb.adopt(R());
        await rejectsWith(
          run('out', [{ operationId: 'op', files: [{ sourcePath: R('big.txt'), targetPath: join(host, 'big.txt'), kind: 'file' }] }], { maxOutputBytes: 1024 }),
          'limit-exceeded',
        );
        assert.ok(!existsSync(join(host, 'big.txt')));
        assert.deepEqual(scratchLeft(host), []);
      });

      test('a failed sync-out leaves no host directory it created', async () => {
        build(H(), { 'big.txt': 'x'.repeat(4096) });
        sb.adopt(R());
        await assert.rejects(run('out', [{ operationId: 'op', files: [{ sourcePath: R('nope'), targetPath: join(host, 'a/b/out'), kind: 'directory' }] }]));
        await rejectsWith(
          run('out', [{ operationId: 'op', files: [{ sourcePath: R('big.txt'), targetPath: join(host, 'c/d/big.txt'), kind: 'file' }] }], { maxOutputBytes: 1024 }),
          'limit-exceeded',
        );
        assert.ok(!existsSync(join(host, 'a')) && !existsSync(join(host, 'c')), 'a target directory was left');
        assert.ok(existsSync(host), 'the directory that was there stays');
      });

      test('runs post-upload commands in order, verbatim, stopping at the first failure', async () => {
        build(host, { 'f.txt': 'hello' });
        const file = { sourcePath: join(host, 'f.txt'), targetPath: R('out.txt'), kind: 'file' };
        await run('in', [{ operationId: 'op', files: [file], postUploadCommands: [{ command: 'printf DONE >> out.txt' }] }]);
        assert.equal(readFileSync(H('out.txt'), 'utf8'), 'helloDONE');
        await rejectsWith(
          run('in', [
            {
              operationId: 'op',
              files: [file],
              postUploadCommands: [{ command: 'echo nope >&2; exit 3' }, { command: 'touch never' }],
            },
          ]),
          'command-failed',
          /nope/,
        );
        assert.ok(!existsSync(H('never')));
        mkdirSync(H('sub'));
        sb.adopt(R('sub'));
        await run('in', [{ operationId: 'op', files: [file], postUploadCommands: [{ command: 'pwd -P > where', cwd: R('sub') }] }]);
        assert.match(readFileSync(H('sub/where'), 'utf8'), /sub\n$/);
        await assert.rejects(run('in', [{ operationId: 'op', files: [file], postUploadCommands: [{ command: 'touch esc', cwd: '/etc' }] }]));
        await assert.rejects(run('in', [{ operationId: 'op', files: [file], postUploadCommands: [{ command: 'touch esc', cwd: `${R()}/../escape` }] }]));
      });

      test('refuses a post-upload cwd that leads out through a planted symlink', async () => {
        build(host, { 'f.txt': 'x' });
        const outside = sb.host(userland === 'gnu' ? join(sb.remoteDir, '..', 'outside') : '/outside');
        mkdirSync(outside, { recursive: true });
        symlinkSync(userland === 'gnu' ? outside : '/outside', H('out-link'));
        await assert.rejects(
          run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'f.txt'), targetPath: R('f.txt'), kind: 'file' }], postUploadCommands: [{ command: 'touch pwned', cwd: R('out-link') }] }]),
          (e) => e instanceof SandboxSyncError && ['confinement', 'command-failed'].includes(e.kind),
        );
        assert.deepEqual(readdirSync(outside), []);
      });

      test('a post-upload command past its timeout fails as timed out, within the deadline', async () => {
        build(host, { 'f.txt': 'x' });
        const t0 = Date.now();
        await assert.rejects(
          run('in', [{ operationId: 'op', files: [{ sourcePath: join(host, 'f.txt'), targetPath: R('f.txt'), kind: 'file' }], postUploadCommands: [{ command: 'sleep 30', timeoutMs: 500 }] }]),
          (e) => e instanceof SandboxSyncError && ['command-failed', 'limit-exceeded', 'transport'].includes(e.kind),
        );
        assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
      });

      test('a sync-out past the backpressure window lands whole, compressed or not', async () => {
        const spec = {};
        for (let i = 0; i < 3000; i++) spec[`t/d${i % 30}/f${i}`] = randomBytes(4096 + (i % 7) * 1000);
        build(H(), spec);
        sb.adopt(R());
        for (const compression of ['none', 'gzip', 'zstd']) {
          const dest = join(host, compression);
          await run('out', [{ operationId: 'op', files: [{ sourcePath: R('t'), targetPath: dest, kind: 'directory' }] }], { compression });
          assert.deepEqual(describeTree(dest), describeTree(H('t')), compression);
        }
      });

      test('names with any character but NUL and / travel both ways', async () => {
        const names = ['Icon\r', 'tab\there', 'new\nline', 'esc\u001b[2Jx', 'nel\u0085x', 'bell\u0007', ' spaced ', "quote'\"$(x)`y`", 'back\\slash', '*?[glob]'];
        const spec = {};
        names.forEach((n, i) => {
          spec[`src/${n}`] = `${i} ${n}`;
          spec[`src/dir ${n}/in ${n}`] = 'inner';
        });
        spec['src/link\tto'] = { link: 'tab\there' };
        build(host, spec);
        const into = [{ operationId: 'op', files: [{ sourcePath: join(host, 'src'), targetPath: R('t'), kind: 'directory' }] }];
        const back = [{ operationId: 'op', files: [{ sourcePath: R('t'), targetPath: join(host, 'back'), kind: 'directory' }] }];
        await run('in', into);
        assert.deepEqual(describeTree(H('t')), describeTree(join(host, 'src')));
        await run('out', back);
        assert.deepEqual(describeTree(join(host, 'back')), describeTree(join(host, 'src')));
        // Same-size rewrites on either side, then re-syncs: each lands.
        writeFileSync(join(host, 'src/new\nline'), '2 NEW\nLINE');
        await run('in', into);
        assert.deepEqual(describeTree(H('t')), describeTree(join(host, 'src')));
        writeFileSync(H('t/tab\there'), '1 TAB\tHERE');
        await run('out', back);
        assert.equal(readFileSync(join(host, 'back/tab\there'), 'utf8'), '1 TAB\tHERE');
        assert.deepEqual(describeTree(join(host, 'back')), describeTree(H('t')));
      });

      test('names that are not UTF-8 travel both ways, incremental on', async () => {
        const raw = (...parts) => Buffer.concat(parts.map((x) => (typeof x === 'string' ? Buffer.from(x) : Buffer.from(x))));
        const at = (root, ...parts) => raw(root, '/', ...parts);
        const src = join(host, 'src');
        mkdirSync(at(src, [0xff, 0xfe], ' dir'), { recursive: true });
        writeFileSync(at(src, 'caf', [0xe9], '.txt'), 'latin-1');
        writeFileSync(at(src, [0xff, 0xfe], ' dir/in', [0xe9]), 'inner');
        writeFileSync(at(src, 'caf', [0xe9], '.log'), 'excluded');
        writeFileSync(join(src, 'plain.txt'), 'plain');
        symlinkSync(raw('caf', [0xe9], '.txt'), at(src, 'l', [0xe9]));
        const expected = () => {
          const t = describeBytes(src);
          delete t['caf\u00e9.log'];
          return t;
        };
        const into = [{ operationId: 'op', files: [{ sourcePath: src, targetPath: R('ws'), kind: 'directory', exclude: ['*.log'] }] }];
        const first = await run('in', into, { incremental: true });
        assert.equal(first.operations[0].filesTransferred, 4);
        assert.deepEqual(describeBytes(H('ws')), expected());
        await new Promise((r) => setTimeout(r, 1100));
        writeFileSync(at(src, 'caf', [0xe9], '.txt'), 'LATIN-1');
        await run('in', into, { incremental: true });
        assert.deepEqual(describeBytes(H('ws')), expected());

        // Back out, with one more such name made in the sandbox, twice (the second incremental).
        writeFileSync(H('ws/plain.txt'), 'PLAIN');
        writeFileSync(at(H('ws'), 'made ', [0xe8]), 'by the agent');
        sb.adopt(R('ws'));
        const back = join(host, 'back');
        const out = [{ operationId: 'op', files: [{ sourcePath: R('ws'), targetPath: back, kind: 'directory', exclude: ['*.log'] }] }];
        await run('out', out, { incremental: true });
        assert.deepEqual(describeBytes(back), describeBytes(H('ws')));
        assert.equal(readFileSync(at(back, 'made ', [0xe8]), 'utf8'), 'by the agent');
        await new Promise((r) => setTimeout(r, 1100));
        writeFileSync(at(H('ws'), 'made ', [0xe8]), 'BY THE AGENT');
        await run('out', out, { incremental: true });
        await run('out', out, { incremental: true });
        assert.deepEqual(describeBytes(back), describeBytes(H('ws')));
        assert.deepEqual(scratchLeft(H()), []);
        assert.deepEqual(scratchLeft(host), []);
      });

      test('an incremental re-sync lands the same tree', async () => {
        build(host, { 'src/a.txt': 'a', 'src/b/c.txt': 'c', 'src/big': Buffer.alloc(300_000, 1) });
        const ops = [{ operationId: 'op', files: [{ sourcePath: join(host, 'src'), targetPath: R('t'), kind: 'directory' }] }];
        await run('in', ops);
        writeFileSync(join(host, 'src/a.txt'), 'changed');
        await run('in', ops);
        assert.deepEqual(describeTree(H('t')), describeTree(join(host, 'src')));
      });

      test('checksum re-syncs land writes through a mapping, both ways', async () => {
        build(host, { 'src/a.txt': 'a', 'src/db.bin': Buffer.alloc(8192, 97) });
        mkdirSync(H('proj'), { recursive: true });
        writeFileSync(H('proj/db.bin'), Buffer.alloc(8192, 97));
        sb.adopt(R('proj'));
        const into = [{ operationId: 'in', files: [{ sourcePath: join(host, 'src'), targetPath: R('t'), kind: 'directory' }] }];
        const out = [{ operationId: 'out', files: [{ sourcePath: R('proj'), targetPath: join(host, 'back'), kind: 'directory' }] }];
        const opts = { incremental: true, checksum: true };
        const writers = [await mappedWriter(join(host, 'src/db.bin')), await mappedWriter(H('proj/db.bin'))];
        try {
          await run('in', into, opts);
          await run('out', out, opts);
          await run('out', out, opts);
          for (const [i, word] of ['ONE!', 'TWO!'].entries()) {
            for (const w of writers) await w.write(4 * i, Buffer.from(word));
            await run('in', into, opts);
            await run('out', out, opts);
            assert.deepEqual(describeTree(H('t')), describeTree(join(host, 'src')));
            assert.deepEqual(describeTree(join(host, 'back')), describeTree(H('proj')));
          }
          assert.equal(readFileSync(join(host, 'back/db.bin')).subarray(0, 8).toString(), 'ONE!TWO!');
        } finally {
          for (const w of writers) await w.close();
        }
      });
    });
  }
}

describe('loadProvider', () => {
  test('loads any component file at run time (transpiled once, by content) and syncs with it', async () => {
    const wasm = componentSource('base64-fallback');
    const provider = await loadProvider(wasm);
    assert.equal(provider.info.name, 'sandbox-sync-base64-fallback');
    assert.ok(provider.info.capabilities.includes('sync-in'));
    assert.equal(await loadProvider(wasm), provider);
    const sb = sandbox('gnu');
    const host = build(hostDir(), { 'f.txt': 'swapped in' });
    try {
      await provider.performSyncIn({ exec: sb.exec, remoteDir: sb.remoteDir, operations: [{ operationId: 'op', files: [{ sourcePath: join(host, 'f.txt'), targetPath: `${sb.remoteDir}/f.txt`, kind: 'file' }] }] });
      assert.equal(readFileSync(join(sb.remoteDir, 'f.txt'), 'utf8'), 'swapped in');
    } finally {
      provider.close();
      sb.cleanup();
      rmSync(host, { recursive: true, force: true });
    }
  });

  test('refuses what is not a provider component', async () => {
    await rejectsWith(loadProvider('/nonexistent/provider.wasm'), 'invalid-request');
    const empty = hostDir('empty');
    try {
      await rejectsWith(loadProvider(empty), 'invalid-request');
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
