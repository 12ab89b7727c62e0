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
//   `callPluginEnvironmentSync` uses (loading them opens no database).

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
