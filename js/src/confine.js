// The lexical check every sandbox path in a request passes before any exec
// (layer one of three; the sandbox program re-checks with `realpath`, and the
// host writes only through its grants). The same rule as the component's
// `sandbox_path::confine`, offered because the module this package replaces
// exports it (`assertConfinedSandboxPath`) and its callers use it;
// test/confine.test.js holds the two to each other.

import { CONTROL, SandboxSyncError } from './request.js';

/** Names starting with this are the providers' scratch, never a target. */
export const SCRATCH_PREFIX = '.paperclip-upload';


/** `path` with `//` and `.` collapsed and no trailing `/`; null if relative or holding `..`. */
function normalizeAbsolute(path) {
  if (!path.startsWith('/')) return null;
  const parts = [];
  for (const c of path.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') return null;
    parts.push(c);
  }
  return `/${parts.join('/')}`;
}

/**
 * Throws unless `candidate` is an absolute sandbox path equal to or beneath
 * `remoteDir`, with no `..`, no control character and no component using the
 * reserved scratch name; returns it normalized. `label` names the path in
 * the error ("target", "source", "post-upload command cwd").
 *
 * Throws a `SandboxSyncError` (an `Error`): `invalid-request` for a bad
 * remote dir or a control character, `confinement` otherwise, with the
 * replaced module's texts for the two refusals it shares with this one.
 */
export function assertConfinedSandboxPath(remoteDir, candidate, label) {
  if (typeof remoteDir !== 'string' || typeof candidate !== 'string') {
    throw new SandboxSyncError('invalid-request', `Kubernetes sync ${label} path and remote dir must be strings`);
  }
  const root = normalizeAbsolute(remoteDir);
  if (CONTROL.test(remoteDir) || root === null || root === '/') {
    throw new SandboxSyncError('invalid-request', `remote dir ${JSON.stringify(remoteDir)} is not a clean absolute path other than /`);
  }
  if (CONTROL.test(candidate)) {
    throw new SandboxSyncError('invalid-request', `Kubernetes sync ${label} path contains a control character: ${JSON.stringify(candidate)}`);
  }
  const norm = normalizeAbsolute(candidate);
  if (norm === null) {
    throw new SandboxSyncError('confinement', `Kubernetes sync ${label} path is not a confined absolute path: ${candidate}`);
  }
  if (norm !== root && !norm.startsWith(`${root}/`)) {
    throw new SandboxSyncError('confinement', `Kubernetes sync ${label} path escapes the workspace remote dir: ${candidate}`);
  }
  if (norm.slice(root.length).split('/').some((c) => c.startsWith(SCRATCH_PREFIX))) {
    throw new SandboxSyncError('confinement', `Kubernetes sync ${label} path uses the reserved scratch name ${SCRATCH_PREFIX}*: ${candidate}`);
  }
  return norm;
}
