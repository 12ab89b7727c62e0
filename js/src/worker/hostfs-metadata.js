// host-fs metadata as WIT's `metadata`, `dir-entry-times` and
// `dir-entry-change` records, from bigint lstat.

import { lstatSync, readlinkSync } from 'node:fs';

import { at, fsError } from '../beneath.js';
import { encodePath, utf8 } from '../byte-name.js';

const NS = 1_000_000_000n;
const BIG = { bigint: true };
/** `bytes` as a string (WIT names are UTF-8), else invalid-name with `message(shown)`. */
export function decode(bytes, message) {
  const s = utf8(bytes);
  if (s === undefined) throw fsError('invalid-name', message(JSON.stringify(bytes.toString())));
  return s;
}

/** Whole seconds (floored, for times before 1970) and nanoseconds of a time in ns. */
export function split(ns) {
  const nsec = ((ns % NS) + NS) % NS;
  return [(ns - nsec) / NS, Number(nsec)];
}

/**
 * A time for Node's utimes: seconds as a double, so about 0.25 µs precision
 * for today's dates (Node takes a negative one as "now": clamped to 0, as in
 * the Rust shim).
 */
export const toTime = (sec, nsec) => Number(sec < 0n ? 0n : sec) + Math.min(nsec, 999_999_999) / 1e9;

export function kindOf(st) {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'directory';
  return st.isFile() ? 'file' : 'other';
}

export function metadata(st, linkTarget) {
  const [mtimeSec, mtimeNsec] = split(st.mtimeNs);
  return {
    kind: kindOf(st),
    size: st.size,
    mode: Number(st.mode & 0o7777n),
    mtimeSec,
    mtimeNsec,
    device: st.dev,
    inode: st.ino,
    linkTarget,
  };
}

/**
 * The dir-entry-change of entry `name` of directory fd `dir`, named
 * `shown`; a link target that is not UTF-8 is encoded where `bytes`
 * (byte-name.js), else refused.
 */
export function entryChange(dir, name, shown, bytes = false) {
  const st = lstatSync(at(dir, name), BIG);
  let target;
  if (st.isSymbolicLink()) {
    const raw = readlinkSync(at(dir, name), { encoding: 'buffer' });
    target = bytes ? encodePath(raw) : decode(raw, (t) => `link target ${t} is not UTF-8`);
  }
  return change(st, shown, target);
}

/** The dir-entry-change of bigint stat `st`, named `shown`. */
export function change(st, shown, target) {
  const [ctimeSec, ctimeNsec] = split(st.ctimeNs);
  return { name: shown, metadata: metadata(st, target), ctimeSec, ctimeNsec };
}

/** The dir-entry-times of entry `name` of directory fd `dir`, named `shown`. */
export function entryTimes(dir, name, shown, bytes = false) {
  const { ctimeNsec, ...times } = entryChange(dir, name, shown, bytes);
  return times;
}
