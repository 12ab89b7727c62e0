// host-fs `granted-dir` (wit/provider.wit) for the worker, on node:fs
// synchronous calls, confined beneath the directory the host granted.
//
// The Rust shim resolves paths with openat2(RESOLVE_BENEATH) through cap-std.
// Node has neither openat nor openat2, so this walks one component at a time
// from an fd of the grant: `a/b/c` is reached by opening each directory
// relative to its parent's fd with O_DIRECTORY|O_NOFOLLOW, through openat
// where the package's addon loads (beneath.js `openAt`), and otherwise, and
// for every other call, as `/proc/self/fd/<parent fd>/<name>` (Linux only),
// whose magic link the kernel resolves to exactly the directory we hold.
// O_NOFOLLOW refuses a symlink, so the walk never leaves the grant and no
// rename meanwhile can redirect it. The last component is then acted on with
// calls that do not follow a final symlink. Directories on the way are held
// as O_PATH fds: like openat's own resolution they need no read permission,
// and opening one has no side effect.
//
// Where a final symlink may be followed (open-read, stat-follow, read-dir,
// sync), it is opened O_PATH, and used only once proven inside the grant:
// nothing outside is ever opened for real.
//
// Methods throw only `{tag, val}` fs-errors (jco's lowering of `fs-error`): an
// Error escaping to the component would trap it.

import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  constants,
  fchmodSync,
  fchownSync,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  readSync,
  renameSync,
  symlinkSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';

import { O_PATH, at, checkProcFd, closeFd, components, createAt, fsError, notPermitted, openAt, openDir, rawComponent, removeEntry, sealFd, walk } from '../beneath.js';
import { decodePath, encodeComponent } from '../byte-name.js';
import { native } from '../native.js';
import { SCRATCH_PREFIX } from '../confine.js';
import { guarded } from './hostfs-errors.js';
import { change, decode, entryChange, entryTimes, kindOf, metadata, split, toTime } from './hostfs-metadata.js';
import { StagingDirs } from './staging-dirs.js';
import { InputStream, OutputStream } from './streams.js';
import { WalkedFiles } from './walked-files.js';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;

/** Most bytes `write-file` takes from the sandbox's stream per read. */
const WRITE_CHUNK = 1n << 20n;
const BIG = { bigint: true };

// ---- paths -----------------------------------------------------------------

/** A name of ours beside a grant, unique across processes and worker threads. */
const hostScratchName = (what) => `${SCRATCH_PREFIX}-${what}-${process.pid}-${randomBytes(6).toString('hex')}`;

/** Whether `path` names scratch at the grant's top level. */
const isTopScratch = (path) => !path.includes('/') && path.startsWith(SCRATCH_PREFIX);

// ---- streams ---------------------------------------------------------------

/** An InputStream source reading a host file; the fd closes at EOF or when the stream is dropped. */
class FileSource {
  constructor(fd) {
    this.fd = fd;
  }
  read(max) {
    const buf = new Uint8Array(max);
    const n = readSync(this.fd, buf, 0, max, null);
    if (n > 0) return buf.subarray(0, n);
    this.close();
    return null;
  }
  close() {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    try {
      closeFd(fd);
    } catch {
      // Nothing was written through it: a failed close loses nothing.
    }
  }
}

function writeAll(fd, bytes) {
  for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
}

/** An OutputStream sink writing a file created by create-exclusive. */
class FileSink {
  constructor(fd) {
    this.fd = fd;
  }
  write(bytes) {
    writeAll(this.fd, bytes);
  }
  close() {
    closeFd(this.fd);
  }
}

/** Moves up to `len` bytes from the component's stream `src` to `fd`: fewer when it ends first. */
function copy(src, fd, len, path) {
  let moved = 0n;
  while (moved < len) {
    let chunk;
    try {
      chunk = src.blockingRead(len - moved < WRITE_CHUNK ? len - moved : WRITE_CHUNK);
    } catch (e) {
      if (e?.tag === 'closed') break;
      throw fsError('io', `reading the sandbox's stream for ${path}: ${e?.val?.toDebugString?.() ?? e}`);
    }
    writeAll(fd, chunk);
    moved += BigInt(chunk.length);
  }
  return moved;
}

/** Entry `name` of directory fd `dir` opened for reading without following a final symlink; undefined where that fails. */
function openPlain(dir, name) {
  try {
    return openAt(dir, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  } catch {
    return undefined;
  }
}

/** `{fd, stat}`: `fd` and its bigint fstat; `fd` is closed if the fstat fails. */
function withStat(fd) {
  try {
    return { fd, stat: fstatSync(fd, BIG) };
  } catch (e) {
    closeFd(fd);
    throw e;
  }
}

// ---- the grant -------------------------------------------------------------

export class GrantedDir {
  /** O_RDONLY fd of the granted directory; -1 once closed. */
  #fd;
  /** Writable grants: O_PATH fd of the directory holding the grant (null: no replace-with). */
  #parent = null;
  /** The grant's name in #parent. */
  #name;
  #writable;
  /** Dereference symlinks wherever they lead (`tar -h`; read-only grants only). */
  #follow;
  /** Names that are not UTF-8 travel encoded (byte-name.js), once the component asks. */
  #bytes = false;
  #onScratch;
  /** Directory fds kept for the tree a sync-out stages (see staging-dirs.js). */
  #staging = new StagingDirs();
  /** Files the walk of a read-only grant opened for send-files (see walked-files.js). */
  #walked = new WalkedFiles();

  /**
   * Opens the grant. Throws an Error (a host bug, not a component error) for
   * `/`, a relative path, or a directory that cannot be opened; and off Linux,
   * where /proc/self/fd, which the confinement rests on, does not exist.
   */
  constructor({ path, writable = false, followLinks = false, onScratch = () => {} }) {
    if (process.platform !== 'linux') throw new Error('host-fs needs Linux (/proc/self/fd) to confine paths');
    if (typeof path !== 'string' || !isAbsolute(path) || resolve(path) === '/') {
      throw new Error(`refusing to grant ${path}`);
    }
    if (writable && followLinks) throw new Error(`${path}: only a read-only grant may follow symlinks`);
    this.path = path;
    this.#writable = Boolean(writable);
    this.#follow = Boolean(followLinks);
    this.#onScratch = onScratch;
    this.#fd = openSync(path, O_RDONLY | O_DIRECTORY);
    try {
      checkProcFd(this.#fd);
    } catch (e) {
      closeFd(this.#fd);
      throw e;
    }
    if (this.#writable) {
      this.#name = basename(resolve(path));
      try {
        this.#parent = openSync(dirname(resolve(path)), O_PATH | O_DIRECTORY);
      } catch {
        // As in the Rust shim: the grant works, only replace-with is refused.
      }
    }
  }

  /** Closes the grant's fds; idempotent (jco's drop, then the worker's cleanup). */
  close() {
    this.#staging.drop();
    this.#walked.close();
    for (const fd of [this.#fd, this.#parent]) {
      if (fd === null || fd < 0) continue;
      try {
        closeFd(fd);
      } catch {
        // A directory fd: nothing to lose.
      }
    }
    this.#fd = -1;
    this.#parent = null;
  }

  [Symbol.dispose]() {
    this.close();
  }

  writable() {
    return this.#writable;
  }

  /**
   * From now on names that are not UTF-8 (entries and link targets) are
   * handed over encoded as byte-name.js spells them, and taken back in
   * paths (WIT 0.2.9); before, they are `invalid-name`.
   */
  byteNames() {
    this.#bytes = true;
    return true;
  }

  stat(path) {
    return this.statTimes(path).metadata;
  }

  statTimes(path) {
    return this.#in(path, (dir, leaf) => entryTimes(dir, leaf, path.slice(path.lastIndexOf('/') + 1), this.#bytes));
  }

  statFollow(path) {
    return this.#in(path, (dir, leaf) => this.#resolved(dir, leaf, path, 0, (fd, st) => metadata(st)));
  }

  statChange(path, follow) {
    const name = path.slice(path.lastIndexOf('/') + 1);
    if (!follow) return this.#in(path, (dir, leaf) => entryChange(dir, leaf, name, this.#bytes));
    return this.#in(path, (dir, leaf) =>
      this.#resolved(dir, leaf, path, 0, (fd, st) => {
        const [ctimeSec, ctimeNsec] = split(st.ctimeNs);
        return { name, metadata: metadata(st), ctimeSec, ctimeNsec };
      }),
    );
  }

  readDir(path) {
    return this.#list(path, (entry, name) => ({ name, kind: kindOf(entry) }));
  }

  readDirStat(path) {
    return this.readDirTimes(path).map(({ name, metadata }) => ({ name, metadata }));
  }

  readDirTimes(path) {
    return this.#list(path, (entry, name, dir) => entryTimes(dir, entry.name, name, this.#bytes));
  }

  readDirChange(path) {
    const bytes = this.#bytes;
    if (this.#writable || this.#follow) return this.#list(path, (entry, name, dir) => entryChange(dir, entry.name, name, bytes));
    const prefix = components(path, bytes)
      .map((c) => `${c}/`)
      .join('');
    return this.#list(path, (entry, name, dir) => {
      const stat = entry.isFile() ? this.#walked.open(dir, entry.name, prefix + name) : null;
      return stat ? change(stat, name) : entryChange(dir, entry.name, name, bytes);
    });
  }

  openRead(path) {
    return new InputStream(new FileSource(this.openFd(path).fd));
  }

  /** MD5 of the file openRead would open, read whole (granted-dir.digest). */
  digest(path) {
    const { fd } = this.openFd(path);
    try {
      const hash = createHash('md5');
      const buf = Buffer.allocUnsafe(1 << 20);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) return new Uint8Array(hash.digest());
        hash.update(buf.subarray(0, n));
      }
    } finally {
      closeFd(fd);
    }
  }

  /**
   * A regular file opened for reading under open-read's rules, with its
   * bigint fstat: `{fd, stat}`. `dirs` (a send-files batch's SourceDirs)
   * keeps the directories walked to for the batch's next files.
   */
  openFd(path, dirs) {
    // send-files (a batch's dirs) takes what the walk opened.
    const walked = dirs && this.#walked.take(path);
    if (walked) return walked;
    return this.#in(
      path,
      (dir, leaf) => {
        // Straight to the file, as the Rust shim opens it (O_NONBLOCK: a
        // FIFO swapped in does not block the open, and is refused below).
        // O_NOFOLLOW fails on a final symlink, which the path below
        // follows only to inside the grant; any failure takes that path,
        // for its error.
        const direct = this.#follow ? undefined : openPlain(dir, leaf);
        if (direct !== undefined) {
          const opened = withStat(direct);
          if (opened.stat.isFile()) return opened;
          closeFd(direct);
          throw fsError('io', `${path} is not a regular file`);
        }
        return this.#resolved(dir, leaf, path, 0, (fd, stat) => {
          if (!stat.isFile()) throw fsError('io', `${path} is not a regular file`);
          return { fd: openSync(at(fd), O_RDONLY | O_NONBLOCK | O_NOCTTY), stat };
        });
      },
      dirs,
    );
  }

  createExclusive(path, mode) {
    return new OutputStream(new FileSink(this.#create(path, mode)));
  }

  writeFile(path, mode, mtimeSec, src, len) {
    const fd = this.#create(path, mode);
    return guarded(path, () => {
      let open = true;
      try {
        const moved = copy(src, fd, len, path);
        if (moved === len) {
          open = false;
          sealFd(fd, mtimeSec);
        }
        return moved;
      } finally {
        if (open) closeFd(fd);
      }
    });
  }

  mkdir(path, mode) {
    this.#mut(path, (dir, leaf) => {
      mkdirSync(at(dir, leaf), { mode: mode & 0o700 });
      const fd = openDir(dir, leaf, path);
      try {
        this.#noteScratch(path, fd);
        // Through the fd: exactly the directory just made, even one with no search permission.
        chmodSync(at(fd), mode & 0o777);
        if (isTopScratch(path)) this.#staging.adopt(path, fd);
      } finally {
        closeFd(fd);
      }
    });
  }

  symlink(target, path) {
    const raw = this.#bytes ? decodePath(target) : target;
    if (raw === undefined) throw fsError('invalid-name', `link target ${JSON.stringify(target)} is not well formed`);
    this.#mut(path, (dir, leaf) => symlinkSync(raw, at(dir, leaf)));
  }

  hardLink(existing, path) {
    this.#between(existing, path, linkSync);
  }

  /** `link-files`: each `srcDir/<name>` hard-linked as `dstDir/<name>`, the two directories opened once. */
  linkFiles(srcDir, dstDir, names) {
    const open = (path) => this.#mut(path, (dir, leaf) => openDir(dir, leaf, path));
    const from = open(srcDir);
    try {
      const to = open(dstDir);
      try {
        let made = 0;
        for (const name of names) {
          const shown = `${dstDir}/${name}`;
          const raw = name.includes('/') ? undefined : rawComponent(name, this.#bytes);
          if (raw === undefined) throw fsError('invalid-name', `${JSON.stringify(name)} is not one path component`);
          guarded(shown, () => linkSync(at(from, raw), at(to, raw)));
          made += 1;
        }
        return made;
      } finally {
        closeFd(to);
      }
    } finally {
      closeFd(from);
    }
  }

  rename(src, dst) {
    this.#changing([src, dst], () => this.#between(src, dst, renameSync));
  }

  setMode(path, mode) {
    this.#changing([path], () => this.#setMode(path, mode));
  }

  #setMode(path, mode) {
    this.#mut(path, (dir, leaf) => {
      const fd = openAt(dir, leaf, O_PATH | O_NOFOLLOW);
      try {
        if (fstatSync(fd).isSymbolicLink()) throw notPermitted(`${path} is a symlink`);
        // chmod through an O_PATH fd's /proc link changes exactly the inode it holds.
        chmodSync(at(fd), mode & 0o7777);
      } finally {
        closeFd(fd);
      }
    });
  }

  /** Sets the mtime without following a final symlink: a symlink gets its own (as in the Rust shim). */
  setMtime(path, sec, nsec) {
    this.#mut(path, (dir, leaf) => {
      const entry = at(dir, leaf);
      lutimesSync(entry, toTime(...split(lstatSync(entry, BIG).atimeNs)), toTime(sec, nsec));
    });
  }

  remove(path) {
    this.#changing([path], () =>
      this.#mut(path, (dir, leaf) => {
        if (leaf === '.') throw notPermitted('refusing to remove the granted directory itself');
        removeEntry(dir, leaf, path);
      }),
    );
  }

  sync(path) {
    this.#in(path, (dir, leaf) =>
      this.#resolved(dir, leaf, path, 0, (p) => {
        const fd = openSync(at(p), O_RDONLY | O_NONBLOCK);
        try {
          fsyncSync(fd);
        } finally {
          closeFd(fd);
        }
      }),
    );
  }

  replaceWith(staged) {
    // The staged tree becomes the grant: walk it afresh.
    this.#staging.drop();
    this.#mut(staged, () => {
      if (!isTopScratch(staged)) {
        throw notPermitted(`${JSON.stringify(staged)} is not a scratch directory at the top of the grant`);
      }
      if (this.#parent === null) throw notPermitted(`the directory holding ${this.path} cannot be opened`);
      guarded(`replace ${this.path}`, () => this.#swap(staged));
    });
  }

  // Node has no renameat2(RENAME_EXCHANGE), so the swap takes three renames:
  // the staged tree out beside the grant, the grant aside, the staged tree
  // onto the grant's name. Between the last two, for microseconds, the grant
  // path names nothing, where the Rust shim's exchange always names the whole
  // old or the whole new tree. A failure renames everything back. A grant that
  // is a mount point cannot be swapped (EXDEV; the Rust shim swaps its
  // contents instead).
  #swap(staged) {
    const parent = this.#parent;
    const grant = at(parent, this.#name);
    const here = fstatSync(this.#fd, BIG);
    const there = lstatSync(grant, BIG);
    if (there.dev !== here.dev || there.ino !== here.ino) {
      throw fsError('io', `${this.path} was moved or replaced during the sync`);
    }
    const fresh = openDir(this.#fd, staged, staged, O_RDONLY);
    const beside = hostScratchName('replace');
    const old = hostScratchName('old');
    try {
      const st = fstatSync(fresh, BIG);
      // The new directory keeps the old one's owner where the host may set it.
      if (st.uid !== here.uid || st.gid !== here.gid) {
        try {
          fchownSync(fresh, Number(here.uid), Number(here.gid));
        } catch {
          // Best effort, as in the Rust shim.
        }
      }
      // Named to the host before they exist: if this thread is terminated
      // between the renames, the main thread puts the old tree back or
      // removes what is left beside the grant (scratch.js).
      this.#onScratch(beside, st.dev, st.ino, 'staged');
      this.#onScratch(old, here.dev, here.ino, 'old');
      renameSync(at(this.#fd, staged), at(parent, beside));
      try {
        renameSync(grant, at(parent, old));
        try {
          renameSync(at(parent, beside), grant);
        } catch (e) {
          renameSync(at(parent, old), grant);
          throw e;
        }
      } catch (e) {
        this.#unstage(beside, staged);
        throw e;
      }
    } catch (e) {
      closeFd(fresh);
      throw e;
    }
    closeFd(this.#fd);
    this.#fd = fresh;
    try {
      removeEntry(parent, old, old);
    } catch (e) {
      const where = join(dirname(resolve(this.path)), old);
      throw fsError('io', `${this.path} was replaced, but its old contents could not be removed from ${where}: ${e.val ?? e.message}`);
    }
  }

  /** Puts a staged tree back where the host's scratch sweep finds it, else removes it. */
  #unstage(beside, staged) {
    try {
      renameSync(at(this.#parent, beside), at(this.#fd, staged));
    } catch {
      removeEntry(this.#parent, beside, staged);
    }
  }

  // ---- internals ----

  /**
   * Runs `fn(dirFd, leaf)` on the directory holding `path`'s last component,
   * walked from the grant without following a symlink (a `tar -h` grant lets
   * the kernel follow them all), or the fd `kept` holds for it (the staged
   * tree's, or a send-files batch's: see staging-dirs.js, source-dirs.js);
   * fs failures become fs-errors about `path`.
   */
  #in(path, fn, kept = this.#staging) {
    return guarded(path, () => {
      // Most calls name an entry of a directory `kept` holds: its key was
      // walked (so is clean), only the last component is left to check.
      const bytes = this.#bytes;
      const slash = path.lastIndexOf('/');
      if (slash > 0 && !this.#follow) {
        const fd = kept.held(path.slice(0, slash));
        const leaf = rawComponent(path.slice(slash + 1), bytes);
        if (fd !== undefined && leaf !== undefined) return fn(fd, leaf);
      }
      // Keys as the path spells them; names to the kernel as raw bytes.
      const names = components(path, bytes);
      const raw = (c) => rawComponent(c, bytes);
      // Not this.#fd afterwards: replace-with changes it.
      const root = this.#fd;
      if (names.length === 0) return fn(root, '.');
      if (this.#follow) return fn(root, bytes ? decodePath(path) : path);
      const dirs = names.slice(0, -1);
      const leaf = raw(names.at(-1));
      const walkDirs = () => walk(root, dirs.map(raw), path);
      const keptFd = kept.dir(dirs, walkDirs);
      if (keptFd !== undefined) return fn(keptFd, leaf);
      const dir = walkDirs();
      try {
        return fn(dir, leaf);
      } finally {
        if (dir !== root) closeFd(dir);
      }
    });
  }

  /** Runs `fn`, which moves, removes or chmods `paths`: fds kept for the staged tree they lie in go. */
  #changing(paths, fn) {
    try {
      return fn();
    } finally {
      if (paths.some((p) => this.#staging.holds(p))) this.#staging.drop();
    }
  }

  /** `#in` for a mutation: the grant must be writable. */
  #mut(path, fn) {
    if (!this.#writable) throw notPermitted(`${this.path} is granted read-only`);
    return this.#in(path, fn);
  }

  /** `op(from, to)` on two paths of a writable grant; the operation's failure is about `to` (as in the Rust shim). */
  #between(from, to, op) {
    this.#mut(from, (fromDir, fromLeaf) => this.#in(to, (toDir, toLeaf) => op(at(fromDir, fromLeaf), at(toDir, toLeaf))));
  }

  /**
   * Runs `fn(fd, stat)` on an O_PATH fd (opened with `flags`) of what
   * `leaf` in `dir` names, and its bigint fstat: see #openResolved.
   */
  #resolved(dir, leaf, path, flags, fn) {
    const { fd, stat } = this.#openResolved(at(dir, leaf), path, flags);
    try {
      return fn(fd, stat);
    } finally {
      closeFd(fd);
    }
  }

  /**
   * An O_PATH fd of `entry`, a final symlink followed: only to inside the
   * grant, unless the grant follows links anywhere. With its bigint fstat:
   * `{fd, stat}`.
   */
  #openResolved(entry, path, flags) {
    if (this.#follow) return withStat(openSync(entry, O_PATH | flags));
    // The entry itself first: not a symlink, the confined walk reached it.
    // (No lstat before: whatever it is by then, O_NOFOLLOW holds it, never
    // a symlink's target.)
    let own = null;
    try {
      own = withStat(openSync(entry, O_PATH | O_NOFOLLOW | flags));
    } catch (e) {
      // With O_DIRECTORY, O_NOFOLLOW reports a symlink as ENOTDIR: followed below.
      if (e.code !== 'ENOTDIR' || !lstatSync(entry).isSymbolicLink()) throw e;
    }
    if (own !== null) {
      if (!own.stat.isSymbolicLink()) return own;
      closeFd(own.fd);
    }
    const fd = openSync(entry, O_PATH | flags);
    try {
      if (!this.#inside(fd, path)) throw notPermitted(`${path}: a symlink leads outside ${this.path}`);
      return withStat(fd);
    } catch (e) {
      closeFd(fd);
      throw e;
    }
  }

  /**
   * True when fd `fd` is the grant or beneath it: its kernel path lies beneath
   * the grant's, and walking that path again from the grant, without
   * following a symlink, reaches the very same inode (a path alone could name
   * a file of another mount namespace, reached through /proc/<pid>/root).
   */
  #inside(fd, path) {
    const [p, r] = [fd, this.#fd].map((f) => readlinkSync(at(f), { encoding: 'buffer' }));
    const prefix = r.at(-1) === 0x2f ? r : Buffer.concat([r, Buffer.from('/')]);
    if (!p.equals(r) && !p.subarray(0, prefix.length).equals(prefix)) return false;
    // Split as latin1: byte for byte, whatever the encoding of the names.
    const rest = p.equals(r) ? [] : p.subarray(prefix.length).toString('latin1').split('/');
    const names = rest.map((n) => Buffer.from(n, 'latin1'));
    let dir = this.#fd;
    try {
      dir = walk(this.#fd, names.slice(0, -1), path);
      const there = names.length === 0 ? fstatSync(dir) : lstatSync(at(dir, names.at(-1)));
      const here = fstatSync(fd);
      return there.dev === here.dev && there.ino === here.ino;
    } catch {
      return false; // not reachable without a symlink
    } finally {
      if (dir !== this.#fd) closeFd(dir);
    }
  }

  /** `make(dirent, name, dirFd)` for each entry of directory `path`, sorted by name bytes. */
  #list(path, make) {
    const where = join(this.path, path);
    return this.#in(path, (dir, leaf) =>
      this.#resolved(dir, leaf, path, O_DIRECTORY, (fd) =>
        readdirSync(at(fd), { encoding: 'buffer', withFileTypes: true })
          .sort((a, b) => Buffer.compare(a.name, b.name))
          .map((e) => make(e, this.#entryName(e.name, where), fd)),
      ),
    );
  }

  /** Entry name `raw` (bytes) of directory `where` as a string: encoded where it is not UTF-8 and the component asked, else refused. */
  #entryName(raw, where) {
    return this.#bytes ? encodeComponent(raw) : decode(raw, (n) => `${n} in ${where} is not UTF-8`);
  }

  /** Creates a new file born with exactly `mode & 0o777`; returns its fd, open for writing. */
  #create(path, mode) {
    return this.#mut(path, (dir, leaf) => {
      // The open and the chmod in one call, where nothing is noted between them.
      if (native && !isTopScratch(path)) return createAt(dir, leaf, mode);
      const fd = openAt(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode & 0o600);
      try {
        this.#noteScratch(path, fd);
        // Born at most 0600 (less under a umask), set exactly before any byte is written: never a wider window.
        fchmodSync(fd, mode & 0o777);
        return fd;
      } catch (e) {
        closeFd(fd);
        throw e;
      }
    });
  }

  /** Reports `path`, just created as `fd`, to the host when it is scratch at the grant's top level. */
  #noteScratch(path, fd) {
    if (!isTopScratch(path)) return;
    const { dev, ino } = fstatSync(fd, BIG);
    this.#onScratch(path, dev, ino);
  }
}

