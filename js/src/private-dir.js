// The directory the package keeps state in between calls (jco
// transpilations of custom components, incremental sync-out records),
// trusted as the Rust host trusts its own (host-shim/src/private_dir.rs):
// only where nobody but this user could have written it, and every file
// in it sealed with HMAC-SHA256 under a key kept there. The cache
// directory can be named by the environment (`SANDBOX_SYNC_CACHE_DIR`,
// `XDG_CACHE_HOME`, often `/tmp/...` in containers), so it may be another
// local user's, who could then forge a record (the host keeps a stale
// file) or plant the JS a worker imports.

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, constants, fstatSync, linkSync, lstatSync, mkdirSync, openSync, readSync, realpathSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { closeFd } from './beneath.js';

const KEY_FILE = 'key';
const KEY_BYTES = 32;
/** Bytes of a seal. */
export const SEAL_BYTES = 32;

const warned = new Set();

/** Why `path` is not used: thrown inside, turned into one warning. */
class NotPrivate extends Error {}

function euid() {
  return process.geteuid?.() ?? process.getuid();
}

/**
 * `dir` (made 0700 where missing) and its key, once it and its ancestors
 * pass: the directory is this user's, each ancestor this user's or root's
 * and writable by nobody else unless sticky (`/tmp`). Otherwise null, with
 * one warning per directory and process.
 */
export function privateDir(dir) {
  try {
    if (!isAbsolute(dir)) throw new NotPrivate('not an absolute path');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const real = realpathSync(dir);
    const me = euid();
    for (let a = dirname(real); ; a = dirname(a)) {
      const st = statSync(a);
      if (st.uid !== me && st.uid !== 0) throw new NotPrivate(`its ancestor ${a} is owned by uid ${st.uid}`);
      if (st.mode & 0o022 && !(st.mode & 0o1000)) {
        throw new NotPrivate(`its ancestor ${a} is writable by others (mode ${(st.mode & 0o7777).toString(8)}, not sticky)`);
      }
      if (a === dirname(a)) break;
    }
    const st = lstatSync(real);
    if (!st.isDirectory()) throw new NotPrivate('not a directory');
    if (st.uid !== me) throw new NotPrivate(`owned by uid ${st.uid}`);
    // Ours: private from now on (what others wrote before fails its seal).
    if (st.mode & 0o077) chmodSync(real, 0o700);
    return { path: real, key: loadOrMakeKey(real, me) };
  } catch (e) {
    if (!warned.has(dir)) {
      warned.add(dir);
      const why = e instanceof NotPrivate ? `not private to this user: ${e.message}` : e.message;
      console.warn(`sandbox-sync: not using the cache directory ${dir}: ${why} (components are transpiled afresh; incremental sync-out keeps no records)`);
    }
    return null;
  }
}

/** The directory's key: read where one is there and private, else made (never replaced). */
function loadOrMakeKey(dir, me) {
  const path = join(dir, KEY_FILE);
  for (let tries = 0; tries < 2; tries++) {
    let fd;
    try {
      fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
      const key = randomBytes(KEY_BYTES);
      const tmp = join(dir, `.key-${process.pid}-${randomBytes(6).toString('hex')}`);
      const w = openSync(tmp, 'wx', 0o600);
      try {
        writeSync(w, key);
      } finally {
        closeFd(w);
      }
      try {
        // A link never replaces: two makers settle on the first.
        linkSync(tmp, path);
        return key;
      } catch (le) {
        if (le.code !== 'EEXIST') throw le;
        continue;
      } finally {
        unlinkSync(tmp);
      }
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.uid !== me || st.mode & 0o077) {
        throw new NotPrivate(`its key is not a private file of this user (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})`);
      }
      const key = Buffer.alloc(KEY_BYTES + 1);
      const n = readSync(fd, key, 0, KEY_BYTES + 1, 0);
      if (n !== KEY_BYTES) throw new NotPrivate('its key has the wrong length');
      return key.subarray(0, KEY_BYTES);
    } finally {
      closeFd(fd);
    }
  }
  throw new NotPrivate('its key keeps changing');
}

/** `data`'s seal as a file of kind `label` (the Rust host's, byte for byte). */
export function seal(key, label, data) {
  return createHmac('sha256', key).update('sandbox-sync\0').update(label).update('\0').update(data).digest();
}

/** `data` then its seal. */
export function sealed(key, label, data) {
  return Buffer.concat([Buffer.from(data.buffer, data.byteOffset, data.byteLength), seal(key, label, data)]);
}

/** What a sealed file of kind `label` holds, if its seal is good; else undefined. */
export function unseal(key, label, file) {
  if (file.length < SEAL_BYTES) return undefined;
  const data = file.subarray(0, file.length - SEAL_BYTES);
  const tag = file.subarray(file.length - SEAL_BYTES);
  return timingSafeEqual(seal(key, label, data), tag) ? data : undefined;
}
