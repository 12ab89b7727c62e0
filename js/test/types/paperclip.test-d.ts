// Type tests for paperclip/plugin.d.ts, checked by test/types.test.js as
// index.test-d.ts is. Imported by the package's name, as a provider does:
// the `./paperclip` export must lead the compiler to these types.

import type { PaperclipPlugin, PluginContext } from '@paperclipai/plugin-sdk';
import {
  createSandboxSyncPlugin,
  leaseRemoteDir,
  SANDBOX_SYNC_CAPABILITIES,
  type SandboxSyncHookParams,
  type SandboxSyncPluginOptions,
} from '@sandbox-sync/node/paperclip';
import { localExec, type PodStreamExec } from '@sandbox-sync/node';

// A provider's plugin, as its worker writes it: its own exec, and its other hooks.
const plugin: PaperclipPlugin = createSandboxSyncPlugin({
  resolveExec: async (params) => {
    const pod: string | null = params.lease.providerLeaseId;
    const exec: PodStreamExec = localExec(['kubectl', 'exec', '-i', String(pod), '--']);
    return exec;
  },
  resolveRemoteDir: (params) => (params.config.root as string | undefined) ?? leaseRemoteDir(params),
  async setup(ctx: PluginContext) {
    void ctx;
  },
  async onHealth() {
    return { status: 'ok' };
  },
});

const local = createSandboxSyncPlugin({ resolveExec: () => localExec() });
const dir: string = leaseRemoteDir({ lease: { providerLeaseId: null, metadata: { remoteCwd: '/workspace' } } });
const flags: { nativeSyncIn: true; nativeSyncOut: true; concurrentSyncOperations: true } = SANDBOX_SYNC_CAPABILITIES;
const resolver: SandboxSyncPluginOptions['resolveExec'] = (params: SandboxSyncHookParams) => localExec([params.driverKey]);

// -- misuse ------------------------------------------------------------------

// @ts-expect-error resolveExec is required
const noExec = createSandboxSyncPlugin({});
// @ts-expect-error resolveExec returns an exec, not a command
const badExec = createSandboxSyncPlugin({ resolveExec: () => 'kubectl exec' });
// @ts-expect-error the sync hooks are sandbox-sync's own
const ownHook = createSandboxSyncPlugin({ resolveExec: () => localExec(), onEnvironmentSyncIn: async () => ({ operations: [] }) });
// @ts-expect-error a remote dir is a string
const badDir = createSandboxSyncPlugin({ resolveExec: () => localExec(), resolveRemoteDir: () => 7 });
// @ts-expect-error the capabilities are read-only
SANDBOX_SYNC_CAPABILITIES.nativeSyncIn = true;
// @ts-expect-error leaseRemoteDir reads a lease
void leaseRemoteDir({ metadata: { remoteCwd: '/w' } });

void [plugin, local, dir, flags, resolver, noExec, badExec, ownHook, badDir];
