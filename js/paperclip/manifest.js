// The Paperclip plugin manifest for ./worker.js (package.json's
// `paperclipPlugin.manifest`). A module, not JSON: the host loads a manifest
// with a bare dynamic import(), which refuses .json without an import
// attribute. Paths in `entrypoints` are relative to the package root.

/**
 * What sandbox-sync gives a sandbox provider's environment driver: both
 * native sync verbs, and calls that may run at the same time (each call gets
 * its own provider worker). The host's schema for this object is strict: an
 * unknown key fails the whole manifest.
 */
export const SANDBOX_SYNC_CAPABILITIES = Object.freeze({
  nativeSyncIn: true,
  nativeSyncOut: true,
  concurrentSyncOperations: true,
});

export default {
  id: 'sandbox-sync',
  apiVersion: 1,
  version: '0.1.0',
  displayName: 'sandbox-sync',
  description:
    'Native file sync (environmentSyncIn/environmentSyncOut) through the sandbox-sync WebAssembly providers, for a local sandbox directory.',
  author: 'sandbox-sync',
  categories: ['workspace'],
  capabilities: ['environment.drivers.register'],
  entrypoints: { worker: './paperclip/worker.js' },
  environmentDrivers: [
    {
      driverKey: 'sandbox-sync-local',
      kind: 'sandbox_provider',
      displayName: 'Local sandbox (sandbox-sync)',
      description: 'A directory on this machine as the sandbox, optionally entered through chroot.',
      sandboxCapabilities: { ...SANDBOX_SYNC_CAPABILITIES },
      configSchema: {
        type: 'object',
        properties: {
          backend: { type: 'string', enum: ['local'] },
          sandboxRoot: { type: 'string', description: 'Run every sandbox command under `chroot <sandboxRoot>`.' },
          timeoutMs: { type: 'integer', minimum: 1, description: 'Bound on one sync call.' },
        },
        required: ['backend'],
      },
    },
  ],
};
