// sandbox-sync as a Paperclip plugin (`@sandbox-sync/node/paperclip`): the
// environment driver's native sync hooks, for any sandbox a provider can
// exec into. The provider supplies the exec, as the Kubernetes plugin's
// `resolveSyncPodExec` does for a pod.

import { definePlugin } from '@paperclipai/plugin-sdk';
import { SandboxSyncError, loadProvider, performSyncIn, performSyncOut } from '../src/index.js';

export { SANDBOX_SYNC_CAPABILITIES } from './manifest.js';

/**
 * The sandbox directory a sync is confined to. The host sends no remoteDir:
 * providers put it on the lease as `remoteCwd`, but the host files the
 * realized workspace under `workspaceRealization` without flattening it, so
 * `remoteCwd` can be missing on a realized lease (paperclip #13864).
 */
export function leaseRemoteDir(params) {
  const metadata = params.lease?.metadata ?? {};
  const dir = metadata.remoteCwd ?? metadata.workspaceRealization?.remote?.path;
  if (typeof dir !== 'string' || dir === '') {
    throw new SandboxSyncError(
      'invalid-request',
      'the lease metadata has no workspace remote dir (remoteCwd or workspaceRealization.remote.path)',
    );
  }
  return dir;
}

/**
 * The host's RPC layer forwards only an error's message (and a numeric
 * `code`), so the typed kind goes into the message, as the CLI prints it.
 */
function withKindInMessage(err) {
  if (!(err instanceof SandboxSyncError)) return err;
  return Object.assign(new Error(`error[${err.kind}]: ${err.message}`, { cause: err }), { kind: err.kind });
}

/**
 * A plugin whose environment driver syncs natively with sandbox-sync.
 *
 * - `resolveExec(params)` returns (or resolves to) the sandbox's exec:
 *   `(argv, {stdin, stdout, timeoutMs, maxStderrBytes}) => Promise<{exitCode, stderr}>`.
 * - `resolveRemoteDir(params)` defaults to {@link leaseRemoteDir}.
 * - Any other option is part of the plugin definition (`setup`, the
 *   provider's lease and execute hooks, ...).
 *
 * A sync is bounded by `params.config.timeoutMs` when set (the host's own RPC
 * deadline is that plus 30 s), else by sandbox-sync's default;
 * `params.config.strictLinks: true` refuses, instead of leaving out, a
 * symlink that leads outside its mapping; `params.config.checksum: true`
 * judges every file a re-sync may keep by its content (rsync's `-c`).
 */
export function createSandboxSyncPlugin({ resolveExec, resolveRemoteDir = leaseRemoteDir, ...definition }) {
  if (typeof resolveExec !== 'function') throw new TypeError('createSandboxSyncPlugin needs resolveExec(params)');
  const sync = (perform) => async (params) => {
    try {
      const remoteDir = await resolveRemoteDir(params);
      const exec = await resolveExec(params);
      return await perform({
        exec,
        operations: params.operations,
        remoteDir,
        timeoutMs: params.config?.timeoutMs,
        strictLinks: params.config?.strictLinks === true,
        checksum: params.config?.checksum === true,
      });
    } catch (err) {
      throw withKindInMessage(err);
    }
  };
  return definePlugin({
    ...definition,
    async setup(...args) {
      // The provider's worker starts with the plugin (~100 ms), not with its
      // first sync; a failure to start is the first sync's to report.
      loadProvider().catch(() => {});
      return definition.setup?.(...args);
    },
    onEnvironmentSyncIn: sync(performSyncIn),
    onEnvironmentSyncOut: sync(performSyncOut),
  });
}
