// The directory fd one send-files batch walked to last, kept for the
// batch's next files: the walk plans a directory's files together, so
// each file then costs no path walk (two of its nine syscalls).
//
// staging-dirs.js's argument does not hold here (a source is anyone's
// tree: a directory may be moved out of the grant at any moment). This
// is sound for another reason: send-files sends a file only when the
// handle it opened is the very file the walk planned (device, inode,
// size, mtime; checked before and after reading it), and the walk found
// that file beneath the grant. A directory moved away meanwhile can
// only yield a file the walk saw inside it, which a fresh walk could as
// well have opened a moment before the move. Nothing is kept past the
// batch, and only for open-read's file opens.

import { closeFd } from '../beneath.js';

export class SourceDirs {
  /** The kept directory's path (`a/b`) and O_PATH fd; null: none. */
  #key = null;
  #fd = undefined;

  /** The kept fd if it is directory `key`'s (`a/b`, as `dir` joins it); undefined: none. */
  held(key) {
    return key === this.#key ? this.#fd : undefined;
  }

  /** The fd of the directory `names` lead to: the kept one, else `walk()`'s, then kept. */
  dir(names, walk) {
    // The grant itself needs no walk.
    if (names.length === 0) return undefined;
    const key = names.join('/');
    if (key !== this.#key) {
      this.close();
      this.#fd = walk();
      this.#key = key;
    }
    return this.#fd;
  }

  /** Closes the kept fd. */
  close() {
    if (this.#key === null) return;
    const fd = this.#fd;
    this.#key = null;
    this.#fd = undefined;
    try {
      closeFd(fd);
    } catch {
      // A directory fd: nothing to lose.
    }
  }
}
