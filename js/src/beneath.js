// Path resolution beneath a directory we hold, one component at a time, with
// openat or Linux's /proc/self/fd (see worker/hostfs.js for why): shared by the
// worker's host-fs and the main thread's scratch sweep. As cap-std keeps
// its manual lookup (`fs/manually/`) apart from the operations on the last
// component.

import { closeSync, constants, fstatSync, futimesSync, lstatSync, openSync, readdirSync, rmdirSync, statSync, unlinkSync } from 'node:fs';
import { getSystemErrorMap } from 'node:util';

import { decodeComponent, hasEncoded } from './byte-name.js';
import { native } from './native.js';

const { O_DIRECTORY, O_NOFOLLOW } = constants;
/** Linux's O_PATH, missing from fs.constants (this value on x86, arm, riscv, ppc, s390). */
export const O_PATH = 0o10000000;

/** An fs-error as jco lowers WIT's `fs-error`: `{tag, val}`. */
export const fsError = (tag, val) => ({ tag, val });
export const notPermitted = (val) => fsError('not-permitted', val);

/** `/proc/self/fd/<fd>`, or its entry `name` (a string, or raw bytes from a listing). */
export function at(fd, name) {
  const dir = `/proc/self/fd/${fd}`;
  if (name === undefined) return dir;
  return typeof name === 'string' ? `${dir}/${name}` : Buffer.concat([Buffer.from(`${dir}/`), name]);
}

const ERRNO = getSystemErrorMap();

/** An Error as node:fs throws it: `code`, negative `errno`, `syscall`. */
function errnoError(errno, syscall, what) {
  const [code, description] = ERRNO.get(errno) ?? [`E${-errno}`, 'unknown error'];
  return Object.assign(new Error(`${code}: ${description}, ${syscall} '${what}'`), { errno, code, syscall });
}

/**
 * Opens `name` (a string or raw bytes; more than one component only in a
 * grant that follows symlinks) relative to directory fd `dir`: openat
 * through the addon, else its /proc/self/fd path, which the kernel resolves
 * the same way. Returns the fd, to be closed with `closeFd`; throws as
 * openSync does.
 */
export const openAt = native
  ? (dir, name, flags, mode = 0) => {
      const fd = native.openat(dir, name, flags, mode);
      if (fd < 0) throw errnoError(fd, 'openat', typeof name === 'string' ? name : name.toString('latin1'));
      return fd;
    }
  : (dir, name, flags, mode = 0) => openSync(at(dir, name), flags, mode);

/**
 * Closes any fd host-fs opened, by `openAt` or node:fs: the addon's own it
 * closes itself (it closes what a terminated worker left open, so it must
 * know), the rest node:fs does. Host-fs never calls closeSync.
 */
export const closeFd = native
  ? (fd) => {
      const r = native.close(fd);
      if (r > 0) closeSync(fd);
      else if (r < 0) throw errnoError(r, 'close', fd);
    }
  : closeSync;

/** Whether `name` (with no `/`) may be one component of a clean relative path. */
export const isComponent = (name) => name !== '' && name !== '.' && name !== '..' && !name.includes('\0');

/**
 * A new file `name` of directory fd `dir` (O_EXCL, not through a symlink),
 * born at most 0600 and given exactly `mode & 0o777` before any byte is
 * written; its fd, for `sealFd` or `closeFd`. Through the addon only (see
 * at.c's `create`): a failed chmod closes the fd and leaves the empty file.
 */
export function createAt(dir, name, mode) {
  const fd = native.create(dir, name, mode);
  if (fd < 0) throw errnoError(fd, 'create', typeof name === 'string' ? name : name.toString('latin1'));
  return fd;
}

/**
 * Gives a file host-fs created modification time `sec` (a BigInt, clamped
 * at the epoch) and closes it, even when that fails. The addon leaves the
 * access time alone; node:fs cannot, so it gets now (the file was created a
 * moment ago).
 */
export const sealFd = native
  ? (fd, sec) => {
      const r = native.seal(fd, sec);
      if (r < 0) throw errnoError(r, 'futimens', fd);
    }
  : (fd, sec) => {
      try {
        futimesSync(fd, Date.now() / 1000, Number(sec < 0n ? 0n : sec));
      } finally {
        closeFd(fd);
      }
    };

/**
 * The name one component `c` of a clean path spells: `c` itself, or where
 * `bytes` (the grant hands over names that are not UTF-8: byte-name.js) and
 * `c` is encoded, its raw bytes; undefined where `c` may not be one.
 */
export function rawComponent(c, bytes) {
  if (!bytes || !hasEncoded(c)) return isComponent(c) ? c : undefined;
  return decodeComponent(c);
}

/**
 * The components of a clean relative path (`is_clean_relative`), as the
 * path spells them (encoded ones too, where `bytes`); none for the grant
 * itself.
 */
export function components(path, bytes = false) {
  if (path === '' || path === '.') return [];
  const names = path.split('/');
  if (bytes && hasEncoded(path)) {
    if (!names.every((c) => rawComponent(c, true) !== undefined)) {
      throw fsError('invalid-name', `${JSON.stringify(path)} is not a clean relative path`);
    }
  } else if (!names.every(isComponent)) {
    throw notPermitted(`${JSON.stringify(path)} is not a clean relative path`);
  }
  return names;
}

/** Opens directory `name` of directory fd `dir`, never through a symlink. */
export function openDir(dir, name, path, how = O_PATH) {
  try {
    return openAt(dir, name, how | O_DIRECTORY | O_NOFOLLOW);
  } catch (e) {
    // With O_DIRECTORY, O_NOFOLLOW reports a symlink as ENOTDIR.
    if (e.code === 'ENOTDIR' && lstatSync(at(dir, name), { throwIfNoEntry: false })?.isSymbolicLink()) {
      throw notPermitted(`${path}: ${name} is a symlink, not followed beneath the grant`);
    }
    throw e;
  }
}

/** Throws unless /proc/self/fd resolves `fd` to its own file: the confinement rests on it. */
export function checkProcFd(fd) {
  const st = fstatSync(fd);
  const via = statSync(at(fd), { throwIfNoEntry: false });
  if (via?.dev !== st.dev || via.ino !== st.ino) {
    throw new Error('host-fs needs /proc/self/fd (Linux, /proc mounted) to confine paths');
  }
}

/**
 * The directory `names` lead to from directory fd `root`, each opened without
 * following a symlink: `root` itself for none, else an fd the caller closes.
 */
export function walk(root, names, path) {
  let dir = root;
  for (const name of names) {
    const parent = dir;
    try {
      dir = openDir(parent, name, path);
    } finally {
      if (parent !== root) closeFd(parent);
    }
  }
  return dir;
}

/** Removes entry `name` of directory fd `dir`: a file, a symlink or a whole tree, never following a symlink. */
export function removeEntry(dir, name, path) {
  if (!lstatSync(at(dir, name)).isDirectory()) {
    unlinkSync(at(dir, name));
    return;
  }
  const fd = openDir(dir, name, path);
  try {
    for (const child of readdirSync(at(fd), { encoding: 'buffer' })) removeEntry(fd, child, path);
  } finally {
    closeFd(fd);
  }
  rmdirSync(at(dir, name));
}
