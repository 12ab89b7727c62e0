// Path resolution beneath a directory we hold, one component at a time, on
// Linux's /proc/self/fd (see worker/hostfs.js for why): shared by the
// worker's host-fs and the main thread's scratch sweep. As cap-std keeps
// its manual lookup (`fs/manually/`) apart from the operations on the last
// component.

import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, rmdirSync, statSync, unlinkSync } from 'node:fs';

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

/** The components of a clean relative path (`is_clean_relative`); none for the grant itself. */
export function components(path) {
  if (path === '' || path === '.') return [];
  const names = path.split('/');
  if (names.some((c) => c === '' || c === '.' || c === '..' || c.includes('\0'))) {
    throw notPermitted(`${JSON.stringify(path)} is not a clean relative path`);
  }
  return names;
}

/** Opens directory `name` of directory fd `dir`, never through a symlink. */
export function openDir(dir, name, path, how = O_PATH) {
  try {
    return openSync(at(dir, name), how | O_DIRECTORY | O_NOFOLLOW);
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
      if (parent !== root) closeSync(parent);
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
    closeSync(fd);
  }
  rmdirSync(at(dir, name));
}
