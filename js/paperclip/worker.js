// The runnable Paperclip plugin worker (the entry the host forks): sandbox-sync
// for a *local* sandbox, a directory on this machine, with environment config
// `{backend: "local", sandboxRoot?: string}`. With `sandboxRoot`, every
// sandbox command runs under `chroot <sandboxRoot>`: that needs root, and the
// root needs what the sync scripts use in any sandbox (/bin/sh, /proc
// mounted, /dev/null).

import { isAbsolute } from 'node:path';
import { runWorker } from '@paperclipai/plugin-sdk';
import { SandboxSyncError } from '../src/index.js';
import { localExec } from '../src/local-exec.js';
import { createSandboxSyncPlugin } from './plugin.js';

function resolveExec({ config = {} }) {
  if (config.backend !== 'local') {
    throw new SandboxSyncError('invalid-request', `backend ${JSON.stringify(config.backend)} is not supported by this worker (only "local")`);
  }
  if (config.sandboxRoot !== undefined && !(typeof config.sandboxRoot === 'string' && isAbsolute(config.sandboxRoot))) {
    throw new SandboxSyncError('invalid-request', 'sandboxRoot must be an absolute path');
  }
  return localExec(config.sandboxRoot ? ['chroot', config.sandboxRoot] : []);
}

const plugin = createSandboxSyncPlugin({ resolveExec });
export default plugin;

// Starts the JSON-RPC host on stdio only when this file is the process entry.
runWorker(plugin, import.meta.url);
