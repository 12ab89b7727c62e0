// The orchestrator's own host code, from the npm registry
// (@paperclipai/server, pinned in test/host/package.json: its own project,
// so the package's dev install stays small), for the Paperclip plugin tests. The package exports only its entry, whose import boots the whole
// server (database, HTTP); so this resolves that entry without loading it and
// imports the few dist modules the tests need by file URL, each of which
// loads on its own with no side effects beyond a logger:
// - services/plugin-worker-manager.js: forks the plugin worker and speaks
//   JSON-RPC to it over stdio (initialize, then each call);
// - services/plugin-manifest-validator.js: what the plugin loader runs on a
//   manifest;
// - services/environment-runtime.js, environment-config.js,
//   environment-driver-traits.js and plugin-environment-driver.js: the
//   sandbox driver's capability classifier and the helpers its
//   `callPluginEnvironmentSync` uses (loading them opens no database);
// - services/plugin-loader.js: what `POST /api/plugins/install` and the
//   server's start run to install a plugin package and activate it, over
//   the stand-ins below for its database and runtime services.

import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

// The server's logger pretty-prints to stdout at debug level; it reads its
// level once, at import.
process.env.PAPERCLIP_LOG_LEVEL ??= 'error';

const SERVER_PACKAGE = new URL('../host/node_modules/@paperclipai/server/', import.meta.url);
let serverExports;
try {
  serverExports = JSON.parse(readFileSync(new URL('package.json', SERVER_PACKAGE), 'utf8')).exports['.'];
} catch (e) {
  throw new Error(`the orchestrator's server is not installed: run \`npm install\` in js/test/host (${e.message})`);
}
const SERVER_ENTRY = new URL(serverExports.import, SERVER_PACKAGE);
const server = (path) => import(new URL(path, SERVER_ENTRY));

export const { createPluginWorkerManager } = await server('./services/plugin-worker-manager.js');
export const { pluginManifestValidator } = await server('./services/plugin-manifest-validator.js');
export const { classifyEnvironmentCapabilities, buildSandboxCapabilityNarrowing } = await server('./services/environment-runtime.js');
const { stripSandboxProviderEnvelope } = await server('./services/environment-config.js');
const { ENVIRONMENT_DRIVER_CAPABILITY_SUPPORT } = await server('./services/environment-driver-traits.js');
const { resolvePluginExecuteRpcTimeoutMs } = await server('./services/plugin-environment-driver.js');
export const SANDBOX_SUPPORTED_CAPABILITIES = ENVIRONMENT_DRIVER_CAPABILITY_SUPPORT.sandbox.supportedCapabilities;
export const { pluginLoader } = await server('./services/plugin-loader.js');
const version = (url) => JSON.parse(readFileSync(url, 'utf8')).version;
export const HOST_VERSION = version(new URL('package.json', SERVER_PACKAGE));
/** The plugin SDK release the server runs with. */
export const HOST_SDK_VERSION = version(new URL('../plugin-sdk/package.json', SERVER_PACKAGE));

/**
 * The plugin loader's database, in memory: the `plugins` table's rows, for
 * the drizzle query chains `installPlugin` and `loadSingle` run on it (a
 * select by id or key, the install order, an insert, an update). Filters
 * are not read, so it holds one plugin; every other table is empty.
 */
export function pluginRegistryStandIn() {
  const rows = [];
  const isPlugins = (table) => table?.[Symbol.for('drizzle:Name')] === 'plugins';
  const query = (result) => {
    const q = {
      from: (table) => Object.assign(q, { table }),
      where: () => q,
      orderBy: () => q,
      returning: () => q,
      values: (row) => Object.assign(q, { row }),
      set: (patch) => Object.assign(q, { patch }),
      then: (resolve, reject) => Promise.resolve().then(() => result(q)).then(resolve, reject),
    };
    return q;
  };
  const db = {
    select: (columns) => query((q) => (!isPlugins(q.table) ? [] : columns ? [{ maxOrder: rows.length }] : rows)),
    insert: (table) =>
      query((q) => {
        if (!isPlugins(table)) throw new Error('the stand-in holds only the plugins table');
        rows.push({ id: randomUUID(), ...q.row });
        return rows.slice(-1);
      }),
    update: () => query((q) => rows.map((row) => Object.assign(row, q.patch))),
    transaction: (fn) => fn(db),
  };
  return { db, rows };
}

/**
 * The runtime services `loadSingle` activates a plugin with: the real
 * worker manager, and no-ops for the rest (a plugin declaring no jobs or
 * tools registers nothing with them).
 */
export function pluginRuntimeStandIn(workerManager) {
  return {
    workerManager,
    eventBus: { forPlugin: () => ({}), subscriptionCount: () => 0, clearPlugin: () => {} },
    jobScheduler: { registerPlugin: async () => {}, unregisterPlugin: async () => {}, stop: () => {} },
    jobStore: { syncJobDeclarations: async () => {} },
    toolDispatcher: { registerPluginTools: () => {}, unregisterPluginTools: () => {} },
    lifecycleManager: { load: async () => {}, markError: async () => {} },
    buildHostHandlers: () => ({}),
    instanceInfo: { instanceId: 'test-instance', hostVersion: HOST_VERSION },
  };
}

/**
 * The sandbox driver's `callPluginEnvironmentSync` (services/environment-runtime.js),
 * minus its database read of the environment config, which `config` stands
 * for here: `lease` is a lease row (`expiresAt` a Date or null). Returns the
 * `pluginWorkerManager.call` arguments.
 */
export function environmentSyncCall(method, { environment, lease, config, operations }) {
  const sanitizedConfig = stripSandboxProviderEnvelope(config);
  return [
    lease.metadata.pluginId,
    method,
    {
      driverKey: lease.metadata.provider,
      companyId: lease.companyId,
      environmentId: environment.id,
      issueId: lease.issueId,
      config: sanitizedConfig,
      lease: {
        providerLeaseId: lease.providerLeaseId,
        metadata: lease.metadata ?? undefined,
        expiresAt: lease.expiresAt?.toISOString() ?? null,
      },
      operations,
    },
    resolvePluginSandboxRpcTimeoutMs(sanitizedConfig),
  ];
}

/** environment-runtime.js's (unexported) resolvePluginSandboxRpcTimeoutMs. */
function resolvePluginSandboxRpcTimeoutMs(config) {
  const candidates = [config.timeoutMs, config.bridgeRequestTimeoutMs]
    .filter((v) => typeof v === 'number' && Number.isFinite(v) && v > 0)
    .map((v) => Math.trunc(v));
  if (candidates.length === 0) return undefined;
  return resolvePluginExecuteRpcTimeoutMs({ requestedTimeoutMs: Math.max(...candidates), config });
}
