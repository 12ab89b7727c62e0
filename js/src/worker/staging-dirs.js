// Directory fds kept for the tree a sync-out stages beneath a writable
// grant, so that writing each of its files walks no path again (the walk
// was 4 of a written file's 10 syscalls).
//
// Anywhere else in a grant a path must be walked afresh on every call:
// another host process may move a directory away, or swap it for a
// symlink, at any moment, and a kept fd would go on naming the directory
// wherever it went. The staging tree is the exception, while its top is a
// directory this grant created itself (mkdir fails on an existing name)
// that is ours and mode 0700: no other user can then look anything up
// beneath it, create, rename or remove an entry there, nor reach it
// through /proc/<pid>/fd (which takes ptrace rights over us). Only root
// and our own uid could, and both can already write anywhere we write. So
// a kept fd names exactly what a fresh walk would. The fds are dropped,
// and walks done afresh for the rest of the call, as soon as the
// component renames, removes or chmods anything in the tree, or swaps the
// tree in (replace-with), and when the grant closes.

import { fstatSync } from 'node:fs';

import { closeFd } from '../beneath.js';

/** Most directory fds kept. */
const MAX_FDS = 64;

export class StagingDirs {
  /** The tree's top directory (its name at the grant's top); null: nothing is kept. */
  #top = null;
  /** O_PATH fds by directory path (`top/a/b`), oldest first. */
  #fds = new Map();

  /** Keeps fds beneath `name`, a directory the grant just created as `fd`, if it shuts out everyone else. */
  adopt(name, fd) {
    const st = fstatSync(fd);
    if ((st.mode & 0o077) !== 0 || st.uid !== process.geteuid()) return;
    this.drop();
    this.#top = name;
  }

  /** Whether `path` (a clean relative path) lies in the tree. */
  holds(path) {
    return this.#top !== null && (path === this.#top || path.startsWith(`${this.#top}/`));
  }

  /** The fd kept for directory `key` (`top/a/b`, as `dir` joins it); undefined: none. */
  held(key) {
    return this.#fds.get(key);
  }

  /**
   * The fd of the directory `names` lead to, where it lies in the tree:
   * the one kept, else `walk()`'s, then kept. Undefined elsewhere.
   */
  dir(names, walk) {
    if (this.#top === null || names[0] !== this.#top) return undefined;
    const key = names.join('/');
    let fd = this.#fds.get(key);
    if (fd === undefined) {
      fd = walk();
      if (this.#fds.size >= MAX_FDS) {
        const [oldest, oldestFd] = this.#fds.entries().next().value;
        this.#fds.delete(oldest);
        closeFd(oldestFd);
      }
      this.#fds.set(key, fd);
    }
    return fd;
  }

  /** Closes every kept fd and keeps none from now on. */
  drop() {
    for (const fd of this.#fds.values()) {
      try {
        closeFd(fd);
      } catch {
        // A directory fd: nothing to lose.
      }
    }
    this.#fds.clear();
    this.#top = null;
  }
}
