// Regular files a sync-in's walk opened, kept for the send that follows.
//
// Where the walk meets a regular file (readdir's type) in a read-only grant
// it opens it, as send-files would (O_RDONLY|O_NONBLOCK|O_NOFOLLOW|
// O_NOCTTY, through the directory fd the listing holds), and reads its
// metadata off the handle instead of an lstat. send-files then takes the
// handle instead of opening the path again. An open costs Node several us
// (twice that through /proc/self/fd, without the addon), and the worker's
// CPU is what a sync-in of many small files waits for.
//
// Sound for source-dirs.js's reason: send-files sends a file only when the
// handle is the very inode the walk planned (device, inode, size, mtime,
// checked after reading it too), and this handle is the inode the walk
// found beneath the grant. A file renamed or replaced after the walk is
// sent as it was walked, which a walk a moment later would have missed
// just the same. Handles are taken once; what the send never asks for is
// closed with the grant. At most MAX_FDS are held: past that, or once an
// open failed for want of fds, the walk lstats as before.

import { constants, fstatSync, readFileSync } from 'node:fs';

import { closeFd, openAt } from '../beneath.js';

const { O_RDONLY, O_NONBLOCK, O_NOFOLLOW, O_NOCTTY } = constants;
const BIG = { bigint: true };

/**
 * Most handles held at once (a sync-in walks ahead of its send by up to a
 * batch or, until the program reports, the whole tree): an eighth of this
 * process's open-file limit, at most 1024, so the process's other opens
 * never run short on account of these.
 */
const MAX_FDS = Math.min(1024, Math.floor(openFileLimit() / 8));

/** The soft RLIMIT_NOFILE (Node has no getrlimit); 1024 where unreadable or unlimited. */
function openFileLimit() {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m ? Number(m[1]) : 1024;
  } catch {
    return 1024;
  }
}

export class WalkedFiles {
  /** `{fd, stat}` by the path send-files names (`a/b/name`). */
  #files = new Map();
  /** Set once an open failed for want of fds: the walk lstats from then on. */
  #full = false;

  /**
   * Opens entry `name` (raw bytes) of directory fd `dir`, which readdir
   * said is a regular file, to be sent as `path`: its bigint fstat, or null
   * where the caller should lstat it (no room, an open that failed, or not
   * a regular file by now).
   */
  open(dir, name, path) {
    if (this.#full || this.#files.size >= MAX_FDS) return null;
    let fd;
    try {
      fd = openAt(dir, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
    } catch (e) {
      if (e.code === 'EMFILE' || e.code === 'ENFILE') this.#full = true;
      return null;
    }
    let stat = null;
    try {
      stat = fstatSync(fd, BIG);
    } catch {
      // Then lstat says what it is.
    }
    if (!stat?.isFile()) {
      closeFd(fd);
      return null;
    }
    this.#drop(path);
    this.#files.set(path, { fd, stat });
    return stat;
  }

  /** The handle the walk opened as `path`, now the caller's to close; undefined: none. */
  take(path) {
    const file = this.#files.get(path);
    if (file !== undefined) this.#files.delete(path);
    return file;
  }

  /** Closes every handle not taken. */
  close() {
    for (const path of [...this.#files.keys()]) this.#drop(path);
    this.#full = false;
  }

  #drop(path) {
    const file = this.#files.get(path);
    if (file === undefined) return;
    this.#files.delete(path);
    try {
      closeFd(file.fd);
    } catch {
      // Opened only to read: nothing to lose.
    }
  }
}
