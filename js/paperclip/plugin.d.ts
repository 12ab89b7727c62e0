// Types of `@sandbox-sync/node/paperclip` (plugin.js). The plugin types are
// the SDK's own: this entry imports the SDK, so whoever uses it has it.

import type {
  PaperclipPlugin,
  PluginDefinition,
  PluginEnvironmentSyncInParams,
  PluginEnvironmentSyncOutParams,
} from '@paperclipai/plugin-sdk';
import type { PodStreamExec } from '../src/index.js';

/** What the host passes a sync hook: `resolveExec` and `resolveRemoteDir` get it as is. */
export type SandboxSyncHookParams = PluginEnvironmentSyncInParams | PluginEnvironmentSyncOutParams;

/**
 * The environment driver's sandbox capabilities sandbox-sync gives (the
 * manifest's `sandboxCapabilities`).
 */
export const SANDBOX_SYNC_CAPABILITIES: Readonly<{
  nativeSyncIn: true;
  nativeSyncOut: true;
  concurrentSyncOperations: true;
}>;

/**
 * The lease's workspace remote dir: `metadata.remoteCwd`, else
 * `metadata.workspaceRealization.remote.path`; a `SandboxSyncError`
 * (`invalid-request`) when it has neither.
 */
export function leaseRemoteDir(params: Pick<SandboxSyncHookParams, 'lease'>): string;

/**
 * `createSandboxSyncPlugin`'s options: the two resolvers, and any other
 * plugin hook (`setup` included, run after sandbox-sync's own). The sync
 * hooks are sandbox-sync's.
 */
export interface SandboxSyncPluginOptions extends Partial<Omit<PluginDefinition, 'onEnvironmentSyncIn' | 'onEnvironmentSyncOut'>> {
  /** The sandbox's exec for one sync call (one exec serves the whole call). */
  resolveExec(params: SandboxSyncHookParams): PodStreamExec | Promise<PodStreamExec>;
  /** The sandbox directory the call is confined to (default {@link leaseRemoteDir}). */
  resolveRemoteDir?(params: SandboxSyncHookParams): string | Promise<string>;
}

/**
 * A plugin whose environment driver syncs natively with sandbox-sync. A
 * failure reaches the host as an error whose message starts with
 * `error[<kind>]: ` (its RPC forwards only the message).
 */
export function createSandboxSyncPlugin(options: SandboxSyncPluginOptions): PaperclipPlugin;
