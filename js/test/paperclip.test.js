// The Paperclip plugin (paperclip/) under the orchestrator's real host code
// from the npm registry: @paperclipai/server's plugin worker manager forks
// paperclip/worker.js as the plugin loader would and calls the sync verbs
// with the parameters its sandbox driver builds; the sandbox is a local temp
// directory (no chroot). Then the hooks in-process, after setup() under the
// SDK's test harness. Last, the server's plugin loader installing the packed
// package by name and activating it.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createTestHarness } from '@paperclipai/plugin-sdk/testing';
import { resolveDeclaredSandboxCapabilities } from '@paperclipai/shared';
import {
  HOST_SDK_VERSION,
  SANDBOX_SUPPORTED_CAPABILITIES,
  buildSandboxCapabilityNarrowing,
  classifyEnvironmentCapabilities,
  createPluginWorkerManager,
  environmentSyncCall,
  pluginLoader,
  pluginManifestValidator,
  pluginRegistryStandIn,
  pluginRuntimeStandIn,
} from './support/paperclip-host.js';
import { createSandboxSyncPlugin } from '../paperclip/plugin.js';
import { localExec } from '../src/local-exec.js';

const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(await readFile(join(PACKAGE_ROOT, 'package.json'), 'utf8'));

/** The manifest as the plugin loader reads it: package.json -> module -> validator. */
async function loadManifest() {
  const mod = await import(pathToFileURL(resolve(PACKAGE_ROOT, pkg.paperclipPlugin.manifest)));
  return pluginManifestValidator().parseOrThrow(mod.default);
}

describe('paperclip worker under @paperclipai/server 2026.916.1', () => {
  const pluginId = randomUUID();
  const environment = { id: randomUUID(), driver: 'sandbox' };
  let manifest;
  let manager;
  let worker;
  let host;
  let remote;

  /** A lease row as the sandbox driver stores it after environmentAcquireLease. */
  function lease(extra = { remoteCwd: remote }) {
    return {
      companyId: 'company-1',
      issueId: 'issue-1',
      providerLeaseId: `local-${pluginId}`,
      expiresAt: null,
      metadata: {
        driver: 'sandbox',
        executionWorkspaceMode: 'isolated',
        pluginId,
        pluginKey: manifest.id,
        provider: manifest.environmentDrivers[0].driverKey,
        sandboxProviderPlugin: true,
        backend: 'local',
        sandboxLeaseAcquisition: { outcome: 'created' },
        ...extra,
      },
    };
  }

  /** One sync verb, through the server's worker manager. */
  function sync(method, operations, { config = {}, leaseRow = lease() } = {}) {
    const input = { environment, lease: leaseRow, operations, config: { provider: leaseRow.metadata.provider, backend: 'local', ...config } };
    return manager.call(...environmentSyncCall(method, input));
  }

  before(async () => {
    manifest = await loadManifest();
    host = await mkdtemp(join(tmpdir(), 'pc-host-'));
    remote = await mkdtemp(join(tmpdir(), 'pc-sandbox-'));
    manager = createPluginWorkerManager();
    worker = await manager.startWorker(pluginId, {
      // As the loader's resolveWorkerEntrypoint: relative to the package root.
      entrypointPath: resolve(PACKAGE_ROOT, manifest.entrypoints.worker),
      manifest,
      config: {},
      instanceInfo: { instanceId: 'test-instance', hostVersion: '2026.916.1' },
      apiVersion: manifest.apiVersion,
      hostHandlers: {},
      autoRestart: false,
    });
  });

  after(async () => {
    await manager?.stopAll();
    await rm(host, { recursive: true, force: true });
    await rm(remote, { recursive: true, force: true });
  });

  test('initialize reports both sync verbs; the host grants native and concurrent sync', () => {
    assert.ok(worker.supportedMethods.includes('environmentSyncIn'));
    assert.ok(worker.supportedMethods.includes('environmentSyncOut'));
    const effective = classifyEnvironmentCapabilities({
      verifiedMethods: worker.supportedMethods,
      declared: resolveDeclaredSandboxCapabilities(manifest.environmentDrivers[0]),
      narrowing: buildSandboxCapabilityNarrowing({ leasePolicy: 'ephemeral', leaseMetadata: lease().metadata }),
      supportedCapabilities: SANDBOX_SUPPORTED_CAPABILITIES,
    });
    assert.equal(effective.nativeSyncIn, true);
    assert.equal(effective.nativeSyncOut, true);
    assert.equal(effective.concurrentSyncOperations, true);
  });

  test('environmentSyncIn lands files and directories, with per-operation counts', async () => {
    const token = 'secret-token\n';
    await writeFile(join(host, 'token'), token);
    await mkdir(join(host, 'ws', 'src'), { recursive: true });
    await writeFile(join(host, 'ws', 'README.md'), '# ws\n');
    await writeFile(join(host, 'ws', 'src', 'main.rs'), 'fn main() {}\n');

    const result = await sync('environmentSyncIn', [
      { operationId: 'sync-op-1', files: [{ sourcePath: join(host, 'token'), targetPath: join(remote, '.config', 'token'), kind: 'file', mode: 0o600 }] },
      { operationId: 'sync-op-2', files: [{ sourcePath: join(host, 'ws'), targetPath: join(remote, 'ws'), kind: 'directory' }] },
    ]);

    assert.deepEqual(result.operations[0], { operationId: 'sync-op-1', filesTransferred: 1, bytesTransferred: token.length });
    assert.equal(result.operations[1].operationId, 'sync-op-2');
    assert.equal(result.operations[1].filesTransferred, 2);
    assert.ok(result.operations[1].bytesTransferred > 0);
    assert.equal(await readFile(join(remote, '.config', 'token'), 'utf8'), token);
    assert.equal((await stat(join(remote, '.config', 'token'))).mode & 0o777, 0o600);
    assert.equal(await readFile(join(remote, 'ws', 'src', 'main.rs'), 'utf8'), 'fn main() {}\n');
  });

  test('environmentSyncOut brings files back, the remote dir read from workspaceRealization (#13864)', async () => {
    await mkdir(join(remote, 'out'), { recursive: true });
    await writeFile(join(remote, 'out', 'result.json'), '{"ok":true}');
    const realized = lease({ workspaceRealization: { remote: { path: remote } } });

    const result = await sync('environmentSyncOut', [
      { operationId: 'restore', files: [{ sourcePath: join(remote, 'out'), targetPath: join(host, 'restored'), kind: 'directory' }] },
    ], { leaseRow: realized });

    assert.equal(result.operations[0].filesTransferred, 1);
    assert.equal(await readFile(join(host, 'restored', 'result.json'), 'utf8'), '{"ok":true}');
  });

  test('serves concurrent calls on one worker', async () => {
    const results = await Promise.all(
      ['a', 'b', 'c'].map(async (name) => {
        await writeFile(join(host, name), name);
        return sync('environmentSyncIn', [{ operationId: name, files: [{ sourcePath: join(host, name), targetPath: join(remote, 'many', name), kind: 'file' }] }]);
      }),
    );
    assert.deepEqual(results.map((r) => r.operations[0].operationId), ['a', 'b', 'c']);
    assert.equal(await readFile(join(remote, 'many', 'c'), 'utf8'), 'c');
  });

  test('an escaping path fails as a JSON-RPC error carrying the typed kind, touching nothing', async () => {
    const passwd = await readFile('/etc/passwd');
    await writeFile(join(host, 'evil'), 'root::0:0::/:/bin/sh\n');
    await assert.rejects(
      sync('environmentSyncIn', [{ operationId: 'x', files: [{ sourcePath: join(host, 'evil'), targetPath: '/etc/passwd', kind: 'file' }] }]),
      (err) => err.name === 'JsonRpcCallError' && err.code === -32002 && /^error\[confinement\]: /.test(err.message),
    );
    await assert.rejects(
      sync('environmentSyncOut', [{ operationId: 'y', files: [{ sourcePath: '/etc/passwd', targetPath: join(host, 'stolen'), kind: 'file' }] }]),
      (err) => err.code === -32002 && /^error\[confinement\]: /.test(err.message),
    );
    assert.deepEqual(await readFile('/etc/passwd'), passwd);
    await assert.rejects(stat(join(host, 'stolen')), { code: 'ENOENT' });
  });

  test('a lease with no remote dir fails typed, before any sandbox command', async () => {
    await assert.rejects(
      sync('environmentSyncIn', [], { leaseRow: lease({}) }),
      (err) => err.code === -32002 && /^error\[invalid-request\]: .*remoteCwd/.test(err.message),
    );
  });

  test('config.timeoutMs bounds the call, the local exec killing the whole sandbox command', async () => {
    const pidFile = join(remote, 'sleep.pid');
    const started = Date.now();
    await assert.rejects(
      sync(
        'environmentSyncIn',
        [{ operationId: 'slow', files: [], postUploadCommands: [{ command: `sleep 60 & echo $! > ${pidFile}; wait` }] }],
        { config: { timeoutMs: 1000 } },
      ),
      (err) => /^error\[(command-failed|limit-exceeded)\]: /.test(err.message),
    );
    assert.ok(Date.now() - started < 10_000, 'the call returned long before sleep 60 would end');
    // The shell's background child, not just the shell, is gone (or a zombie
    // waiting for init to reap it).
    const pid = Number(await readFile(pidFile, 'utf8'));
    const alive = () => {
      try {
        return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 50 && alive(); i++) await setTimeout(100);
    assert.equal(alive(), false, `sleep (pid ${pid}) outlived the call`);
  });
});

describe('paperclip plugin in-process, after setup() under the SDK test harness', () => {
  // The SDK's createEnvironmentTestHarness (2026.916.1) drives validateConfig
  // through deleteTemplate but has no sync verbs, so the hooks are called
  // directly once setup() has run against the harness's context.
  test('a provider plugs its own exec in: one exec per call, its params passed through', async () => {
    const manifest = await loadManifest();
    const harness = createTestHarness({ manifest });
    const remote = await mkdtemp(join(tmpdir(), 'pc-inproc-'));
    const seen = [];
    const plugin = createSandboxSyncPlugin({
      resolveExec: (params) => {
        const exec = localExec();
        return (argv, io) => {
          seen.push(params.lease.providerLeaseId);
          return exec(argv, io);
        };
      },
      resolveRemoteDir: (params) => params.lease.metadata.root,
    });
    try {
      await plugin.definition.setup(harness.ctx);
      const source = join(remote, 'in.txt');
      await writeFile(source, 'hello');
      const params = {
        driverKey: 'custom',
        companyId: 'company-1',
        environmentId: 'env-1',
        config: {},
        lease: { providerLeaseId: 'pod-7', metadata: { root: join(remote, 'root') } },
        operations: [{ operationId: 'op', files: [{ sourcePath: source, targetPath: join(remote, 'root', 'in.txt'), kind: 'file' }] }],
      };
      await mkdir(join(remote, 'root'));
      const result = await plugin.definition.onEnvironmentSyncIn(params);
      assert.deepEqual(result.operations, [{ operationId: 'op', filesTransferred: 1, bytesTransferred: 5 }]);
      assert.deepEqual(seen, ['pod-7']);

      params.operations[0].files[0].targetPath = '/etc/passwd';
      await assert.rejects(plugin.definition.onEnvironmentSyncIn(params), { kind: 'confinement' });
    } finally {
      await rm(remote, { recursive: true, force: true });
    }
  });
});

describe('the server\'s plugin loader installs the package by name and activates it', () => {
  // As `POST /api/plugins/install` and the server's start drive it:
  // installPlugin({packageName, version}) runs `npm install <name>@<version>
  // --prefix <plugin dir> --save --ignore-scripts` (the version here is the
  // packed tarball: the package is not on the registry) and validates the
  // manifest that package.json's `paperclipPlugin.manifest` names; loadSingle()
  // resolves the worker entrypoint from the plugin dir and forks it with the
  // loader's environment. Its database is an in-memory stand-in.
  let root;
  let tarball;
  let pluginDir;
  let registry;
  let manager;
  let loader;
  const npm = (cwd, args) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'pc-loader-'));
    pluginDir = join(root, 'plugins');
    // The test script built components/ already; packing runs no script.
    tarball = join(root, npm(PACKAGE_ROOT, ['pack', '--ignore-scripts', '--pack-destination', root]).trim().split('\n').pop());
    registry = pluginRegistryStandIn();
    manager = createPluginWorkerManager();
    loader = pluginLoader(registry.db, { localPluginDir: pluginDir }, pluginRuntimeStandIn(manager));
  });

  after(async () => {
    await manager?.stopAll();
    await rm(root, { recursive: true, force: true });
  });

  test('installPlugin installs it by package name and registers its manifest', async () => {
    const discovered = await loader.installPlugin({ packageName: pkg.name, version: `file:${tarball}` });
    assert.equal(discovered.source, 'npm');
    assert.equal(discovered.packagePath, join(pluginDir, 'node_modules', '@sandbox-sync', 'node'));
    assert.equal(discovered.manifest.id, 'sandbox-sync');
    // The loader records the manifest's version, not package.json's.
    assert.equal(discovered.version, pkg.version);
    // A registry install: activation finds it by name in the plugin dir.
    assert.deepEqual(
      registry.rows.map((r) => [r.pluginKey, r.packageName, r.packagePath, r.status]),
      [['sandbox-sync', pkg.name, null, 'installed']],
    );
  });

  test('its node_modules scan lists only plugin-named packages; it is found by name and by path', async () => {
    // discoverFromNpm takes `paperclip-plugin-*` and `@scope/plugin-*` only
    // (isPluginPackageName); nothing in the server calls it.
    const scan = await loader.discoverFromNpm([join(pluginDir, 'node_modules')]);
    assert.deepEqual(scan.discovered.map((d) => d.packageName), []);
    assert.equal((await loader.loadManifest(join(pluginDir, 'node_modules', '@sandbox-sync', 'node'))).id, 'sandbox-sync');
  });

  test('activation needs @paperclipai/plugin-sdk in the plugin dir (npm installs no optional peer)', async () => {
    registry.rows[0].status = 'ready'; // what lifecycle.load() does before activating
    const result = await loader.loadSingle(registry.rows[0].id, { markErrorOnFailure: false });
    assert.equal(result.success, false);
    assert.match(result.error, /Cannot find package '@paperclipai\/plugin-sdk' imported from .*paperclip\/worker\.js/);
    // The crashed worker stays registered; the server's markError would stop it.
    await manager.stopAll();
  });

  test('with the server\'s SDK in the plugin dir, activation starts the worker and it syncs', async () => {
    npm(root, ['install', '--prefix', pluginDir, '--prefer-offline', `@paperclipai/plugin-sdk@${HOST_SDK_VERSION}`]);
    const { id } = registry.rows[0];
    const result = await loader.loadSingle(id, { markErrorOnFailure: false });
    assert.equal(result.success, true, result.error);
    assert.ok(manager.getWorker(id).supportedMethods.includes('environmentSyncIn'));

    const remote = join(root, 'sandbox');
    await mkdir(remote);
    await writeFile(join(root, 'in.txt'), 'installed\n');
    const manifest = registry.rows[0].manifestJson;
    const leaseRow = {
      companyId: 'company-1',
      issueId: 'issue-1',
      providerLeaseId: 'local-1',
      expiresAt: null,
      metadata: { driver: 'sandbox', pluginId: id, pluginKey: manifest.id, provider: manifest.environmentDrivers[0].driverKey, remoteCwd: remote },
    };
    const synced = await manager.call(
      ...environmentSyncCall('environmentSyncIn', {
        environment: { id: randomUUID(), driver: 'sandbox' },
        lease: leaseRow,
        config: { provider: leaseRow.metadata.provider, backend: 'local' },
        operations: [{ operationId: 'op', files: [{ sourcePath: join(root, 'in.txt'), targetPath: join(remote, 'in.txt'), kind: 'file' }] }],
      }),
    );
    assert.deepEqual(synced.operations, [{ operationId: 'op', filesTransferred: 1, bytesTransferred: 10 }]);
    assert.equal(await readFile(join(remote, 'in.txt'), 'utf8'), 'installed\n');
  });
});
