// host-fs errors as jco lowers WIT's `fs-error` (`{tag, val}`), mapped from
// errno as the Rust shim's `fs_error` maps them. Methods throw only these:
// an Error escaping to the component would trap it.

import { getSystemErrorMap } from 'node:util';

import { fsError } from '../beneath.js';

const ERRNO = getSystemErrorMap();

/** fs-error tags by errno code, as the Rust shim's `fs_error` maps them; others are `io`. */
const TAGS = {
  ENOENT: 'not-found',
  EEXIST: 'already-exists',
  EACCES: 'not-permitted',
  EPERM: 'not-permitted',
  EXDEV: 'not-permitted',
  ENOSPC: 'no-space',
};

export const isFsError = (e) => typeof e === 'object' && e !== null && !(e instanceof Error) && typeof e.tag === 'string';

/** Runs `fn`, turning anything it throws into an fs-error about `path`. */
export function guarded(path, fn) {
  try {
    return fn();
  } catch (e) {
    if (isFsError(e)) throw e;
    const what = ERRNO.get(e?.errno)?.[1] ?? e?.message ?? String(e);
    throw fsError(TAGS[e?.code] ?? 'io', `${path}: ${what}`);
  }
}
