// The JS host over the orchestrator's own kind of pod exec: @kubernetes/client-node
// against our Kubernetes exec-protocol server (v4 and v5), both components,
// with results and trees identical to the Rust CLI's kube backend.

import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncIn, performSyncOut, SandboxSyncError } from '../src/index.js';
import { rustCli } from './support/rust-cli.js';
import { kubeExec, startK8sServer } from './support/kube-exec.js';
import { build, counted, describeTree, hostDir } from './support/trees.js';

for (const protocol of ['v4', 'v5']) {
  for (const component of ['tar-stream', 'base64-fallback']) {
    describe(`${component} over kube ${protocol}`, () => {
      let server;
      let provider;
      let dir;
      let exec;
      before(async () => {
        server = await startK8sServer({ protocol });
        provider = await loadProvider(component);
      });
      after(async () => {
        provider.close();
        await server.stop();
      });
      test.beforeEach(() => {
        dir = hostDir('kube');
        mkdirSync(join(dir, 'remote'));
        exec = counted(kubeExec({ kubeconfig: server.kubeconfig, namespace: server.namespace, pod: server.pod, container: server.container }));
      });
      test.afterEach(() => rmSync(dir, { recursive: true, force: true }));

      const viaRust = (verb, operations, remoteDir) =>
        rustCli(verb, {
          component,
          operations,
          remoteDir,
          args: ['--backend', 'kube', '--kubeconfig', server.kubeconfig, '-n', server.namespace, '--pod', server.pod, '-c', server.container],
        });

      test('syncs a tree in and out like the Rust CLI, in one exec each', async () => {
        const src = build(join(dir, 'src'), {
          'a.txt': 'alpha',
          'sub/b.bin': Buffer.alloc(1 << 20, 3),
          'x.sh': { data: '#!/bin/sh\n', mode: 0o755 },
          ln: { link: 'a.txt' },
        });
        const remote = join(dir, 'remote');
        const ops = (r) => [{ operationId: 'op', files: [{ sourcePath: src, targetPath: `${r}/tree`, kind: 'directory' }] }];
        const back = (r, host) => [{ operationId: 'op', files: [{ sourcePath: `${r}/tree`, targetPath: host, kind: 'directory' }] }];
        mkdirSync(join(remote, 'js'));
        mkdirSync(join(remote, 'rust'));
        const js = await performSyncIn({ exec, operations: ops(`${remote}/js`), remoteDir: `${remote}/js`, provider });
        if (component === 'tar-stream') assert.equal(exec.calls.length, 1);
        assert.deepEqual(js, viaRust('sync-in', ops(`${remote}/rust`), `${remote}/rust`));
        assert.deepEqual(describeTree(join(remote, 'js/tree')), describeTree(src));
        assert.deepEqual(describeTree(join(remote, 'js')), describeTree(join(remote, 'rust')));
        const out = await performSyncOut({ exec, operations: back(`${remote}/js`, join(dir, 'back-js')), remoteDir: `${remote}/js`, provider });
        assert.deepEqual(out, viaRust('sync-out', back(`${remote}/rust`, join(dir, 'back-rust')), `${remote}/rust`));
        assert.deepEqual(describeTree(join(dir, 'back-js')), describeTree(src));
      });

      test('file mappings with a secret mode, and post-upload commands in order', async () => {
        const src = build(join(dir, 'src'), { 'f.txt': 'hello', key: 'k' });
        const remote = join(dir, 'remote');
        const r = await performSyncIn({
          exec,
          remoteDir: remote,
          provider,
          operations: [
            {
              operationId: 'op',
              files: [
                { sourcePath: join(src, 'f.txt'), targetPath: `${remote}/out.txt`, kind: 'file' },
                { sourcePath: join(src, 'key'), targetPath: `${remote}/key`, kind: 'file', mode: 0o600 },
              ],
              postUploadCommands: [{ command: 'printf DONE >> out.txt' }],
            },
          ],
        });
        assert.equal(r.operations[0].filesTransferred, 2);
        assert.equal(readFileSync(join(remote, 'out.txt'), 'utf8'), 'helloDONE');
        assert.equal(statSync(join(remote, 'key')).mode & 0o777, 0o600);
        await assert.rejects(
          performSyncIn({
            exec,
            remoteDir: remote,
            provider,
            operations: [{ operationId: 'op', files: [], postUploadCommands: [{ command: 'exit 3' }, { command: 'touch never' }] }],
          }),
          (e) => e instanceof SandboxSyncError && e.kind === 'command-failed' && /exit 3/.test(e.message),
        );
        assert.ok(!existsSync(join(remote, 'never')));
      });

      test('a command past its timeout, and a sandbox past the call timeout, end within the deadline', async () => {
        const remote = join(dir, 'remote');
        let t0 = Date.now();
        await assert.rejects(
          performSyncIn({ exec, remoteDir: remote, provider, operations: [{ operationId: 'op', files: [], postUploadCommands: [{ command: 'sleep 30', timeoutMs: 500 }] }] }),
          (e) => e instanceof SandboxSyncError && e.kind === 'command-failed' && e.command.timedOut,
        );
        assert.ok(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms`);
        t0 = Date.now();
        await assert.rejects(
          performSyncIn({ exec, remoteDir: remote, provider, timeoutMs: 1500, operations: [{ operationId: 'op', files: [], postUploadCommands: [{ command: 'sleep 30' }] }] }),
          (e) => e instanceof SandboxSyncError,
        );
        assert.ok(Date.now() - t0 < 1500 + 3000, `took ${Date.now() - t0} ms`);
      });
    });
  }
}
