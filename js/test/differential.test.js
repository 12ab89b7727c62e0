// The same component under two hosts: the JS host and the Rust CLI sync the
// same trees into the same kind of sandbox; results and landed trees must
// be identical, both ways.

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncIn, performSyncOut } from '../src/index.js';
import { rustCli } from './support/rust-cli.js';
import { sandbox } from './support/sandbox.js';
import { build, describeTree, hostDir } from './support/trees.js';

/** Operations over `src` (a host tree) and `remote` (a sandbox dir). */
function inbound(src, remote) {
  return [
    {
      operationId: 'tree',
      files: [{ sourcePath: join(src, 'tree'), targetPath: `${remote}/tree`, kind: 'directory', exclude: ['*.log', 'skip/'] }],
    },
    {
      operationId: 'files',
      files: [
        { sourcePath: join(src, 'single.bin'), targetPath: `${remote}/files/single.bin`, kind: 'file' },
        { sourcePath: join(src, 'secret'), targetPath: `${remote}/files/secret`, kind: 'file', mode: 0o600 },
      ],
      postUploadCommands: [{ command: 'ls -la > listing.txt && wc -c < single.bin > size.txt', cwd: `${remote}/files` }],
    },
  ];
}

function outbound(remote, dest) {
  return [
    { operationId: 'tree', files: [{ sourcePath: `${remote}/tree`, targetPath: join(dest, 'tree'), kind: 'directory' }] },
    {
      operationId: 'files',
      files: [
        { sourcePath: `${remote}/files/secret`, targetPath: join(dest, 'secret'), kind: 'file' },
        { sourcePath: `${remote}/files/size.txt`, targetPath: join(dest, 'size.txt'), kind: 'file' },
      ],
    },
  ];
}

/** A tree with the shapes that differ between tar implementations. */
function sourceTree(root) {
  const big = Buffer.alloc(3 << 20);
  for (let i = 0; i < big.length; i += 4096) big[i] = i & 0xff;
  build(root, {
    'tree/a.txt': 'alpha\n',
    'tree/empty/': {},
    'tree/nested/deeper/deepest/x': 'x',
    'tree/exec.sh': { data: '#!/bin/sh\n', mode: 0o755 },
    'tree/private': { data: 'p', mode: 0o600 },
    'tree/unicode-é-文件.txt': 'ü',
    'tree/spaces in name': 's',
    'tree/link': { link: 'a.txt' },
    'tree/dangling': { link: 'nowhere' },
    'tree/drop.log': 'excluded',
    'tree/skip/inside': 'excluded',
    [`tree/${'l'.repeat(120)}/${'m'.repeat(120)}`]: 'long path',
    'tree/big.bin': big,
    'single.bin': Buffer.alloc(100_000, 7),
    'secret': 'token',
  });
}

for (const component of ['tar-stream', 'base64-fallback']) {
  for (const userland of ['gnu', 'busybox']) {
    describe(`${component} on ${userland}: JS host == Rust CLI`, () => {
      let provider;
      let sb;
      let host;
      before(async () => {
        provider = await loadProvider(component);
        sb = sandbox(userland);
        host = hostDir('diff');
        sourceTree(join(host, 'src'));
      });
      after(() => {
        provider.close();
        sb.cleanup();
        rmSync(host, { recursive: true, force: true });
      });

      test('sync-in, then sync-out, land identical trees with identical results', async () => {
        const js = `${sb.remoteDir}/js`;
        const rust = `${sb.remoteDir}/rust`;
        const src = join(host, 'src');
        for (const r of [js, rust]) mkdirSync(sb.host(r));
        sb.adopt(sb.remoteDir);
        const jail = sb.root ? ['--sandbox-root', sb.root, '--sandbox-user', '65534'] : [];
        const jsIn = await performSyncIn({ exec: sb.exec, operations: inbound(src, js), remoteDir: js, provider });
        const rustIn = rustCli('sync-in', { component, operations: inbound(src, rust), remoteDir: rust, args: jail });
        assert.deepEqual(jsIn, rustIn);
        const landed = describeTree(sb.host(js));
        // The post-upload listing names dates and owners; compare its presence only.
        delete landed['files/listing.txt'];
        const expected = describeTree(sb.host(rust));
        delete expected['files/listing.txt'];
        assert.deepEqual(landed, expected);
        assert.ok(landed['tree/big.bin'], 'the tree landed');

        const jsOut = await performSyncOut({ exec: sb.exec, operations: outbound(js, join(host, 'js')), remoteDir: js, provider });
        const rustOut = rustCli('sync-out', { component, operations: outbound(rust, join(host, 'rust')), remoteDir: rust, args: jail });
        assert.deepEqual(jsOut, rustOut);
        assert.deepEqual(describeTree(join(host, 'js')), describeTree(join(host, 'rust')));
        assert.equal(readFileSync(join(host, 'js', 'size.txt'), 'utf8').trim(), '100000');
      });
    });
  }
}
