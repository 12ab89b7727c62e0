// host-fs granted-dir (src/worker/hostfs.js): every method's happy path, and
// an attacker who planted names inside the granted tree: `..`, symlinks out
// as path components or as the final name, FIFOs, non-UTF-8 names.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { decodeComponent, decodePath, encodePath } from '../src/byte-name.js';
import { GrantedDir } from '../src/worker/hostfs.js';
import { SourceDirs } from '../src/worker/source-dirs.js';
import { removeScratch } from '../src/scratch.js';
import { InputStream } from '../src/worker/streams.js';

let root; // temp dir holding `grant` and `outside`
let grantPath;
let outside;
const grants = [];

const inGrant = (...p) => path.join(grantPath, ...p);
const modeOf = (p) => fs.lstatSync(p).mode & 0o7777;
const fdCount = () => fs.readdirSync('/proc/self/fd').length;

function grant(opts = {}) {
  const g = new GrantedDir({ path: grantPath, writable: true, ...opts });
  grants.push(g);
  return g;
}

beforeEach(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'hostfs-test-'));
  grantPath = path.join(root, 'grant');
  outside = path.join(root, 'outside');
  fs.mkdirSync(path.join(outside, 'x'), { recursive: true });
  fs.writeFileSync(path.join(outside, 'secret'), 'secret');
  fs.chmodSync(path.join(outside, 'secret'), 0o600);
  fs.mkdirSync(inGrant('sub'), { recursive: true });
  fs.writeFileSync(inGrant('file'), 'hello');
  fs.writeFileSync(inGrant('sub', 'file'), 'inside');
  // Planted by the attacker:
  fs.symlinkSync(outside, inGrant('link')); // a directory outside
  fs.symlinkSync(path.join(outside, 'secret'), inGrant('flink')); // a file outside
  fs.symlinkSync('../../outside', inGrant('sub', 'deep')); // relative, one level down
  fs.symlinkSync('sub', inGrant('in')); // a directory inside
  fs.symlinkSync('sub/file', inGrant('fin')); // a file inside
});

afterEach(() => {
  for (const g of grants.splice(0)) g.close();
  fs.rmSync(root, { recursive: true, force: true });
});

/** Asserts `fn` throws the fs-error `tag` (a plain object: an Error would trap the component). */
function fails(fn, tag) {
  let thrown;
  try {
    fn();
  } catch (e) {
    thrown = e ?? 'nullish';
  }
  assert.ok(thrown !== undefined, `expected ${tag}, but it succeeded`);
  assert.ok(!(thrown instanceof Error), `an Error escaped: ${thrown?.stack}`);
  assert.equal(thrown.tag, tag, thrown.val);
  assert.equal(typeof thrown.val, 'string');
  return thrown;
}

/** Everything under `dir` (never following links): names, modes, inodes, times, contents. */
function snapshot(dir) {
  const out = [];
  const walk = (d, rel) => {
    for (const name of fs.readdirSync(d).sort()) {
      const p = path.join(d, name);
      const st = fs.lstatSync(p, { bigint: true });
      const body = st.isFile() ? fs.readFileSync(p, 'hex') : st.isSymbolicLink() ? fs.readlinkSync(p) : '';
      out.push(`${rel}${name} ${st.mode.toString(8)} ${st.ino} ${st.mtimeNs} ${body}`);
      if (st.isDirectory()) walk(p, `${rel}${name}/`);
    }
  };
  walk(dir, '');
  return out;
}

/** An InputStream over `text`. */
function memSource(text) {
  const bytes = Buffer.from(text);
  let off = 0;
  return new InputStream({
    read(max) {
      if (off >= bytes.length) return null;
      const chunk = bytes.subarray(off, off + max);
      off += chunk.length;
      return chunk;
    },
  });
}

function readAll(stream) {
  const parts = [];
  for (;;) {
    try {
      parts.push(stream.blockingRead(1n << 20n));
    } catch (e) {
      assert.equal(e.tag, 'closed');
      break;
    }
  }
  stream[Symbol.dispose]();
  return Buffer.concat(parts).toString();
}

function writeAndDrop(out, text) {
  out.write(Buffer.from(text));
  out.blockingFlush();
  out[Symbol.dispose]();
}

/** Every method taking a path, with `p` in the position under test. */
const CALLS = {
  stat: (g, p) => g.stat(p),
  statTimes: (g, p) => g.statTimes(p),
  statFollow: (g, p) => g.statFollow(p),
  readDir: (g, p) => g.readDir(p),
  readDirStat: (g, p) => g.readDirStat(p),
  readDirTimes: (g, p) => g.readDirTimes(p),
  openRead: (g, p) => g.openRead(p),
  openFd: (g, p) => g.openFd(p),
  digest: (g, p) => g.digest(p),
  sync: (g, p) => g.sync(p),
};
const MUTATIONS = {
  createExclusive: (g, p) => g.createExclusive(p, 0o644),
  writeFile: (g, p) => g.writeFile(p, 0o644, 0n, memSource('x'), 1n),
  mkdir: (g, p) => g.mkdir(p, 0o755),
  symlink: (g, p) => g.symlink('file', p),
  'hardLink existing': (g, p) => g.hardLink(p, 'hl'),
  'hardLink path': (g, p) => g.hardLink('file', p),
  'linkFiles src': (g, p) => g.linkFiles(p, 'sub', ['x']),
  'linkFiles dst': (g, p) => g.linkFiles('', p, ['file']),
  'rename src': (g, p) => g.rename(p, 'moved'),
  'rename dst': (g, p) => g.rename('file', p),
  setMode: (g, p) => g.setMode(p, 0o777),
  setMtime: (g, p) => g.setMtime(p, 0n, 0),
  remove: (g, p) => g.remove(p),
};
Object.assign(CALLS, MUTATIONS);

test('construction refuses /, relative paths and writable tar -h grants with an Error', () => {
  for (const p of ['/', '//', '/tmp/..', 'relative', '']) {
    assert.throws(() => new GrantedDir({ path: p }), Error, p);
  }
  assert.throws(() => new GrantedDir({ path: grantPath, writable: true, followLinks: true }), Error);
  assert.throws(() => new GrantedDir({ path: path.join(root, 'missing') }), Error);
  const g = grant({ writable: false });
  assert.equal(g.writable(), false);
  assert.equal(grant().writable(), true);
});

test('stat, statTimes and statFollow', () => {
  fs.chmodSync(inGrant('file'), 0o640);
  fs.utimesSync(inGrant('file'), 1, 1_600_000_000.25);
  const g = grant();
  const want = fs.lstatSync(inGrant('file'), { bigint: true });
  assert.deepEqual(g.stat('file'), {
    kind: 'file',
    size: 5n,
    mode: 0o640,
    mtimeSec: 1_600_000_000n,
    mtimeNsec: 250_000_000,
    device: want.dev,
    inode: want.ino,
    linkTarget: undefined,
  });
  assert.equal(g.stat('fin').kind, 'symlink');
  assert.equal(g.stat('fin').linkTarget, 'sub/file');
  assert.equal(g.stat('flink').linkTarget, path.join(outside, 'secret'));
  assert.equal(g.stat('').kind, 'directory');
  assert.equal(g.stat('.').inode, fs.statSync(grantPath, { bigint: true }).ino);

  const t = g.statTimes('sub/file');
  assert.equal(t.name, 'file');
  assert.equal(t.ctimeSec, fs.lstatSync(inGrant('sub/file'), { bigint: true }).ctimeNs / 1_000_000_000n);
  assert.equal(t.metadata.size, 6n);

  assert.equal(g.statFollow('fin').kind, 'file');
  assert.equal(g.statFollow('fin').size, 6n);
  assert.equal(g.statFollow('in').kind, 'directory');
  assert.equal(g.statFollow('').kind, 'directory');
  fails(() => g.stat('missing'), 'not-found');
  fails(() => g.stat('file/x'), 'io'); // ENOTDIR, as in the Rust shim
});

test('readDir, readDirStat and readDirTimes: sorted by name bytes, lstat metadata', () => {
  for (const n of ['b', 'B', '_', 'é']) fs.writeFileSync(inGrant('sub', n), n);
  const g = grant();
  const names = ['B', '_', 'b', 'deep', 'file', 'é'];
  assert.deepEqual(
    g.readDir('sub').map((e) => e.name),
    names,
  );
  assert.deepEqual(
    g.readDir('').map((e) => [e.name, e.kind]),
    [
      ['file', 'file'],
      ['fin', 'symlink'],
      ['flink', 'symlink'],
      ['in', 'symlink'],
      ['link', 'symlink'],
      ['sub', 'directory'],
    ],
  );
  const stats = g.readDirStat('sub');
  assert.deepEqual(
    stats.map((e) => e.name),
    names,
  );
  assert.deepEqual(stats[4].metadata, g.stat('sub/file'));
  assert.equal(stats[3].metadata.linkTarget, '../../outside');
  const times = g.readDirTimes('sub');
  assert.deepEqual(times[4], g.statTimes('sub/file'));
  // A symlink to a directory inside is followed, as by open-read.
  assert.deepEqual(g.readDir('in'), g.readDir('sub'));
  fails(() => g.readDir('file'), 'io');
  fails(() => g.readDir('missing'), 'not-found');
});

test('non-UTF-8 names are invalid-name (and still removable); a leading BOM is kept', () => {
  fs.mkdirSync(inGrant('odd'));
  fs.writeFileSync(Buffer.concat([Buffer.from(inGrant('odd') + '/'), Buffer.from([0x66, 0xff])]), 'x');
  fs.writeFileSync(inGrant('sub', '\uFEFFbom'), '');
  const g = grant();
  fails(() => g.readDir('odd'), 'invalid-name');
  fails(() => g.readDirTimes('odd'), 'invalid-name');
  assert.ok(g.readDir('sub').some((e) => e.name === '\uFEFFbom'));
  g.remove('odd');
  assert.ok(!fs.existsSync(inGrant('odd')));
});

test('byte names are spelled as the component spells them (guest/core/src/byte_name.rs)', () => {
  const path = Buffer.concat([Buffer.from('ok/caf'), Buffer.from([0xe9]), Buffer.from('/x'), Buffer.from([0xff, 0x2f, 0xe9, 0xe9]), Buffer.from('.txt')]);
  const spelled = 'ok/\x00636166e9/\x0078ff/\0e9e92e747874';
  assert.equal(encodePath(path), spelled);
  assert.deepEqual(decodePath(spelled), path);
  assert.equal(encodePath(Buffer.from('a/b')), 'a/b');
  for (const bad of ['\0', '\0f', '\0zz', '\0FF', '\x002e2e', '\x002e', '\x002f', '\x0000', '\x0061', 'a\0ff', '\0ff\0']) {
    assert.equal(decodeComponent(bad), undefined, JSON.stringify(bad));
  }
});

test('with byteNames, names that are not UTF-8 travel encoded, one spelling each, and are taken back', () => {
  const raw = (...parts) => Buffer.concat(parts.map((x) => Buffer.from(x)));
  fs.mkdirSync(raw(inGrant('odd'), '/', [0xff], 'd'), { recursive: true });
  fs.writeFileSync(raw(inGrant('odd'), '/', [0xff], 'd/f', [0xe9]), 'bytes');
  fs.symlinkSync(raw('x', [0xfe], '/y'), raw(inGrant('odd'), '/l'));
  const g = grant();
  assert.equal(g.byteNames(), true);
  const dirName = '\0ff64';
  const fileName = '\0' + Buffer.from(raw('f', [0xe9])).toString('hex');
  // Sorted by name bytes, as ever.
  assert.deepEqual(
    g.readDir('odd').map((e) => e.name),
    ['l', dirName],
  );
  assert.equal(g.stat('odd/l').linkTarget, '\x00' + '78fe/y');
  assert.deepEqual(
    g.readDirChange(`odd/${dirName}`).map((e) => e.name),
    [fileName],
  );
  assert.equal(readAll(g.openRead(`odd/${dirName}/${fileName}`)), 'bytes');
  // Taken back: a new file, a link with an encoded target, hard links, a rename, a removal.
  writeAndDrop(g.createExclusive(`odd/${dirName}/\0e96e6577`, 0o640), 'made');
  assert.equal(fs.readFileSync(raw(inGrant('odd'), '/', [0xff], 'd/', [0xe9], 'new')).toString(), 'made');
  g.symlink(`\0e9/${fileName}`, 'odd/l2');
  assert.deepEqual(fs.readlinkSync(inGrant('odd/l2'), { encoding: 'buffer' }), raw([0xe9], '/f', [0xe9]));
  g.mkdir('copy', 0o755);
  assert.equal(g.linkFiles(`odd/${dirName}`, 'copy', [fileName]), 1);
  assert.equal(fs.readFileSync(raw(inGrant('copy'), '/f', [0xe9])).toString(), 'bytes');
  g.rename(`copy/${fileName}`, 'copy/\0ee');
  assert.ok(fs.existsSync(raw(inGrant('copy'), '/', [0xee])));
  g.remove(`odd/${dirName}`);
  assert.ok(!fs.existsSync(raw(inGrant('odd'), '/', [0xff], 'd')));
  // Malformed or non-canonical spellings name nothing: `..`, UTF-8, odd or upper-case hex, a stray NUL.
  for (const bad of ['\x002e2e', '\x0061', '\0f', '\0FF', 'a\0ff', '\0ff\0']) {
    fails(() => g.stat(bad), 'invalid-name');
    fails(() => g.mkdir(`copy/${bad}`, 0o755), 'invalid-name');
  }
  fails(() => g.symlink('a/\x002e2e', 'copy/bad'), 'invalid-name');
  fails(() => g.linkFiles('odd', 'copy', ['\x002f']), 'invalid-name');
});

test('openRead and openFd read regular files, following symlinks that stay inside', () => {
  const big = Buffer.alloc(2.5 * (1 << 20), 'abc').toString();
  fs.writeFileSync(inGrant('sub', 'big'), big);
  fs.symlinkSync(inGrant('file'), inGrant('abs')); // absolute, into the grant
  fs.symlinkSync('../file', inGrant('sub', 'up')); // `..`, staying inside
  const g = grant();
  assert.equal(readAll(g.openRead('file')), 'hello');
  assert.equal(readAll(g.openRead('sub/big')), big);
  assert.equal(readAll(g.openRead('fin')), 'inside');
  assert.equal(readAll(g.openRead('abs')), 'hello');
  assert.equal(readAll(g.openRead('sub/up')), 'hello');

  const { fd, stat } = g.openFd('sub/file');
  try {
    assert.equal(stat.size, 6n);
    assert.equal(stat.ino, fs.statSync(inGrant('sub/file'), { bigint: true }).ino);
    assert.equal(fs.readFileSync(fd, 'utf8'), 'inside');
  } finally {
    fs.closeSync(fd);
  }
  fails(() => g.openRead('sub'), 'io');
  fails(() => g.openRead('missing'), 'not-found');
  // digest reads what openRead would, whole, and closes it.
  const md5 = (s) => new Uint8Array(createHash('md5').update(s).digest());
  assert.deepEqual(g.digest('sub/big'), md5(big));
  assert.deepEqual(g.digest('abs'), md5('hello'));
  fails(() => g.digest('sub'), 'io');
  fails(() => g.digest('missing'), 'not-found');
});

test('createExclusive: born with exactly its mode whatever the umask, never wider', () => {
  const g = grant();
  const old = process.umask(0o077);
  try {
    for (const [name, mode, want] of [
      ['a', 0o644, 0o644],
      ['b', 0o600, 0o600],
      ['c', 0o4755, 0o755], // no setuid from create-exclusive, as in the Rust shim
      ['d', 0o000, 0o000],
    ]) {
      const out = g.createExclusive(name, mode);
      assert.equal(fs.fstatSync(out.sink.fd).mode & 0o7777, want, name);
      writeAndDrop(out, name);
      assert.equal(fs.statSync(inGrant(name)).size, name.length);
      assert.equal(modeOf(inGrant(name)), want);
    }
  } finally {
    process.umask(old);
  }
  fails(() => g.createExclusive('file', 0o644), 'already-exists');
  fails(() => g.createExclusive('missing/x', 0o644), 'not-found');
  assert.equal(fs.readFileSync(inGrant('file'), 'utf8'), 'hello');
});

test('writeFile: exactly len bytes and the mtime; fewer when the stream ends first', () => {
  const g = grant();
  const old = process.umask(0o077);
  try {
    assert.equal(g.writeFile('w', 0o640, 1_234_567_890n, memSource('hello world'), 5n), 5n);
  } finally {
    process.umask(old);
  }
  assert.equal(fs.readFileSync(inGrant('w'), 'utf8'), 'hello');
  assert.equal(modeOf(inGrant('w')), 0o640);
  assert.equal(fs.statSync(inGrant('w'), { bigint: true }).mtimeNs, 1_234_567_890_000_000_000n);

  const big = Buffer.alloc(3 * (1 << 20) + 7, 'xyz').toString();
  assert.equal(g.writeFile('big', 0o644, 0n, memSource(big), BigInt(big.length)), BigInt(big.length));
  assert.equal(fs.readFileSync(inGrant('big'), 'utf8'), big);

  assert.equal(g.writeFile('short', 0o644, 1_234_567_890n, memSource('abcd'), 10n), 4n);
  assert.equal(fs.readFileSync(inGrant('short'), 'utf8'), 'abcd'); // the partial file stays
  assert.notEqual(fs.statSync(inGrant('short')).mtimeMs, 1_234_567_890_000);

  const broken = new InputStream({
    read() {
      throw new Error('pipe broke');
    },
  });
  assert.match(fails(() => g.writeFile('broken', 0o644, 0n, broken, 3n), 'io').val, /pipe broke/);
  fails(() => g.writeFile('file', 0o644, 0n, memSource('x'), 1n), 'already-exists');
  assert.equal(fs.readFileSync(inGrant('file'), 'utf8'), 'hello');
});

test('linkFiles links each name between two directories, a final symlink as itself', () => {
  const g = grant();
  g.mkdir('d', 0o755);
  assert.equal(g.linkFiles('', 'd', ['file', 'flink']), 2);
  assert.equal(fs.statSync(inGrant('d/file')).ino, fs.statSync(inGrant('file')).ino);
  assert.equal(fs.readlinkSync(inGrant('d/flink')), fs.readlinkSync(inGrant('flink')));
  assert.equal(g.linkFiles('sub', 'd', []), 0);
  fails(() => g.linkFiles('', 'd', ['file']), 'already-exists');
  fails(() => g.linkFiles('', 'd', ['missing']), 'not-found');
  for (const n of ['', '.', '..', 'sub/file', 'a\0b']) fails(() => g.linkFiles('', 'd', [n]), 'invalid-name');
  fails(() => g.linkFiles('', 'link', ['file']), 'not-permitted');
});

test('mkdir, symlink, hardLink and rename', () => {
  const g = grant();
  const old = process.umask(0o077);
  try {
    g.mkdir('d', 0o755);
    g.mkdir('d/e', 0o1777);
  } finally {
    process.umask(old);
  }
  assert.equal(modeOf(inGrant('d')), 0o755);
  assert.equal(modeOf(inGrant('d/e')), 0o777); // as the Rust shim: mode & 0o777
  fails(() => g.mkdir('d', 0o755), 'already-exists');
  fails(() => g.mkdir('missing/d', 0o755), 'not-found');

  g.symlink('/anywhere/at/all', 'd/ln');
  assert.equal(fs.readlinkSync(inGrant('d/ln')), '/anywhere/at/all');
  fails(() => g.symlink('x', 'file'), 'already-exists');

  g.hardLink('file', 'd/hl');
  assert.equal(fs.statSync(inGrant('d/hl')).ino, fs.statSync(inGrant('file')).ino);
  fails(() => g.hardLink('missing', 'hl2'), 'not-found');

  g.rename('d/hl', 'sub/moved');
  assert.equal(fs.readFileSync(inGrant('sub/moved'), 'utf8'), 'hello');
  g.rename('sub/moved', 'sub/file'); // replaces a file
  assert.equal(fs.readFileSync(inGrant('sub/file'), 'utf8'), 'hello');
  fails(() => g.rename('missing', 'x'), 'not-found');
});

test('setMode, setMtime, remove and sync', () => {
  const g = grant();
  g.setMode('file', 0o4711);
  assert.equal(modeOf(inGrant('file')), 0o4711);
  g.setMode('sub', 0o700);
  assert.equal(modeOf(inGrant('sub')), 0o700);
  g.setMode('', 0o750);
  assert.equal(modeOf(grantPath), 0o750);

  fs.utimesSync(inGrant('file'), 1_500_000_000, 1);
  g.setMtime('file', 1_600_000_000n, 500_000_000);
  const st = fs.statSync(inGrant('file'), { bigint: true });
  assert.equal(st.mtimeNs, 1_600_000_000_500_000_000n);
  assert.equal(st.atimeNs, 1_500_000_000_000_000_000n); // the atime is kept
  g.setMtime('sub', -5n, 0); // before 1970 clamps to the epoch, as in the Rust shim
  assert.equal(fs.statSync(inGrant('sub'), { bigint: true }).mtimeNs, 0n);
  fails(() => g.setMtime('missing', 0n, 0), 'not-found');

  g.sync('file');
  g.sync('sub');
  g.sync('');

  g.remove('fin');
  assert.ok(!fs.existsSync(inGrant('fin')) && fs.existsSync(inGrant('sub/file')));
  fs.mkdirSync(inGrant('sub/a/b/c'), { recursive: true });
  fs.writeFileSync(inGrant('sub/a/b/c/f'), '');
  g.remove('sub');
  assert.ok(!fs.existsSync(inGrant('sub')));
  g.remove('file');
  assert.ok(!fs.existsSync(inGrant('file')));
  fails(() => g.remove('file'), 'not-found');
  fails(() => g.remove(''), 'not-permitted');
  fails(() => g.remove('.'), 'not-permitted');
});

test('permissions: EACCES is not-permitted; directories on the way need only search permission', {
  skip: process.getuid() === 0 && 'root bypasses permission checks',
}, () => {
  fs.mkdirSync(inGrant('locked'));
  fs.writeFileSync(inGrant('locked', 'f'), 'locked');
  fs.chmodSync(inGrant('locked'), 0o000);
  fs.mkdirSync(inGrant('xonly'));
  fs.writeFileSync(inGrant('xonly', 'f'), 'through');
  fs.chmodSync(inGrant('xonly'), 0o100);
  const g = grant();
  try {
    fails(() => g.stat('locked/f'), 'not-permitted');
    fails(() => g.readDir('locked'), 'not-permitted');
    assert.equal(readAll(g.openRead('xonly/f')), 'through');
    g.setMode('xonly/f', 0o600);
    g.mkdir('noexec', 0o600); // created, then set exactly, with no search permission
    assert.equal(modeOf(inGrant('noexec')), 0o600);
    fs.writeFileSync(inGrant('unreadable'), '');
    fs.chmodSync(inGrant('unreadable'), 0o000);
    g.setMode('unreadable', 0o640); // no open for reading needed
    assert.equal(modeOf(inGrant('unreadable')), 0o640);
  } finally {
    for (const d of ['locked', 'xonly', 'noexec']) if (fs.existsSync(inGrant(d))) fs.chmodSync(inGrant(d), 0o700);
  }
});

test('paths that are not clean relative paths are refused by every method', () => {
  const g = grant();
  const before = snapshot(root);
  const bad = [
    ...['..', '../outside', '../outside/secret', 'sub/..', 'sub/../..'],
    ...['/etc/passwd', '/', '//', 'sub//file', 'sub/./file', './file', 'sub/'],
    ...['fi\0le', 'file\0/../x'],
  ];
  for (const [name, call] of Object.entries(CALLS)) {
    for (const p of bad) {
      const e = fails(() => call(g, p), 'not-permitted');
      assert.match(e.val, /not a clean relative path/, `${name}(${JSON.stringify(p)})`);
    }
  }
  fails(() => g.replaceWith('../x'), 'not-permitted');
  assert.deepEqual(snapshot(root), before);
});

test('a symlink as a path component is never followed out, by any method', () => {
  const g = grant();
  const before = snapshot(outside);
  const entries = fs.readdirSync(root);
  for (const p of ['link/secret', 'link/new', 'link/x', 'link/x/new', 'sub/deep/secret', 'sub/deep/new']) {
    for (const [name, call] of Object.entries(CALLS)) {
      const e = fails(() => call(g, p), 'not-permitted');
      assert.match(e.val, /is a symlink/, `${name}(${p})`);
    }
  }
  assert.deepEqual(snapshot(outside), before);
  assert.deepEqual(fs.readdirSync(root), entries);
});

test('a symlink component inside the grant is not followed either (stricter than the Rust shim)', () => {
  const g = grant();
  fails(() => g.stat('in/file'), 'not-permitted');
  fails(() => g.openRead('in/file'), 'not-permitted');
});

test('a final symlink out of the grant: refused by reads that follow, followed by a tar -h grant', () => {
  fs.mkdirSync(path.join(root, 'grant-evil'));
  fs.writeFileSync(path.join(root, 'grant-evil', 'secret'), 'evil');
  fs.symlinkSync('../grant-evil/secret', inGrant('evil')); // the grant's path is a prefix of it
  fs.symlinkSync('../../grant/../outside/secret', inGrant('sub', 'twisty'));
  const g = grant();
  for (const p of ['flink', 'link', 'evil', 'sub/twisty', 'sub/deep']) {
    for (const name of ['statFollow', 'openRead', 'openFd', 'sync']) {
      assert.match(fails(() => CALLS[name](g, p), 'not-permitted').val, /leads outside/, `${name}(${p})`);
    }
  }
  for (const name of ['readDir', 'readDirStat', 'readDirTimes']) fails(() => CALLS[name](g, 'link'), 'not-permitted');
  assert.equal(g.stat('flink').kind, 'symlink'); // lstat is fine

  const h = grant({ writable: false, followLinks: true });
  assert.equal(readAll(h.openRead('flink')), 'secret');
  assert.equal(readAll(h.openRead('link/secret')), 'secret');
  assert.equal(readAll(h.openRead('sub/deep/secret')), 'secret');
  assert.equal(h.statFollow('link').kind, 'directory');
  assert.deepEqual(
    h.readDirTimes('link').map((e) => e.name),
    ['secret', 'x'],
  );
  assert.equal(h.stat('link/secret').kind, 'file');
  fails(() => h.openRead('../outside/secret'), 'not-permitted'); // paths stay clean
  fails(() => h.remove('flink'), 'not-permitted');
});

// Declared, not t.skip() at run time: Node 20 then skips afterEach.
const canUnshare = process.getuid() === 0 && spawnSync('unshare', ['-m', 'true']).status === 0;

test('a symlink to the same path in another mount namespace is refused', {
  skip: !canUnshare && 'needs root and unshare -m',
}, async () => {
  fs.writeFileSync(inGrant('y'), 'mine');
  const script = `mount -t tmpfs t '${grantPath}' && echo other > '${grantPath}/y' && echo ready && exec sleep 60`;
  const child = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], { stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const ready = await new Promise((res) => {
      child.stdout.once('data', () => res(true));
      child.once('exit', () => res(false));
    });
    assert.ok(ready, 'the other namespace did not start');
    // Its kernel path reads /<grant>/y: only the inode tells it apart.
    fs.symlinkSync(`/proc/${child.pid}/root${grantPath}/y`, inGrant('evil'));
    assert.equal(fs.readFileSync(inGrant('evil'), 'utf8'), 'other\n');
    const g = grant({ writable: false });
    for (const name of ['statFollow', 'openRead', 'openFd', 'sync']) fails(() => CALLS[name](g, 'evil'), 'not-permitted');
    assert.equal(readAll(g.openRead('y')), 'mine');
  } finally {
    child.kill();
  }
});

test('final symlinks are never followed by mutations: the outside stays untouched', () => {
  const g = grant();
  const before = snapshot(outside);
  fails(() => g.setMode('flink', 0o777), 'not-permitted');
  fails(() => g.setMode('link', 0o777), 'not-permitted');
  // As in the Rust shim, setMtime sets a symlink's own time, never its target's.
  g.setMtime('flink', 1_000_000_000n, 0);
  assert.equal(fs.lstatSync(inGrant('flink'), { bigint: true }).mtimeNs, 1_000_000_000_000_000_000n);
  fails(() => g.createExclusive('flink', 0o644), 'already-exists');
  fails(() => g.writeFile('flink', 0o644, 0n, memSource('pwned'), 5n), 'already-exists');
  fails(() => g.mkdir('link', 0o755), 'already-exists');
  fails(() => g.symlink('x', 'link'), 'already-exists');
  g.hardLink('flink', 'hl'); // links the symlink itself
  assert.ok(fs.lstatSync(inGrant('hl')).isSymbolicLink());
  g.rename('link', 'moved'); // moves the symlink itself
  g.remove('moved');
  g.remove('flink');
  fs.mkdirSync(inGrant('sub/trap'));
  fs.symlinkSync(outside, inGrant('sub/trap/out'));
  g.remove('sub'); // a tree holding symlinks out: the links go, not their targets
  assert.deepEqual(snapshot(outside), before);
});

test('a read-only grant refuses every mutation', () => {
  const g = grant({ writable: false });
  const before = snapshot(root);
  for (const [name, call] of Object.entries(MUTATIONS)) {
    for (const p of ['new', 'file', 'sub', '']) {
      assert.match(fails(() => call(g, p), 'not-permitted').val, /read-only/, `${name}(${p})`);
    }
  }
  fails(() => g.replaceWith('.paperclip-upload-x'), 'not-permitted');
  assert.deepEqual(snapshot(root), before);
  assert.equal(readAll(g.openRead('file')), 'hello');
  g.sync('file');
});

test('a FIFO is refused by openRead and openFd without blocking', () => {
  execFileSync('mkfifo', [inGrant('sub', 'fifo')]);
  fs.symlinkSync('sub/fifo', inGrant('tofifo'));
  const g = grant();
  for (const p of ['sub/fifo', 'tofifo']) {
    assert.match(fails(() => g.openRead(p), 'io').val, /not a regular file/);
    fails(() => g.openFd(p), 'io');
  }
  assert.equal(g.stat('sub/fifo').kind, 'other');
});

test("a send-files batch's kept directory only ever yields what it held, never a symlink swapped in", () => {
  fs.writeFileSync(inGrant('sub', 'b'), 'b inside');
  fs.writeFileSync(path.join(outside, 'b'), 'b outside');
  const g = grant({ writable: false });
  const dirs = new SourceDirs();
  const before = fdCount();
  try {
    const first = g.openFd('sub/file', dirs);
    fs.closeSync(first.fd);
    // The directory goes away and a symlink out takes its name.
    fs.renameSync(inGrant('sub'), path.join(root, 'moved'));
    fs.symlinkSync(outside, inGrant('sub'));
    // A fresh walk refuses the symlink; the batch's kept fd still names the
    // directory the walk found (its own file, which send-files then checks
    // against the plan), never the link's target.
    fails(() => g.openFd('sub/b'), 'not-permitted');
    const kept = g.openFd('sub/b', dirs);
    try {
      assert.equal(fs.readFileSync(kept.fd, 'utf8'), 'b inside');
    } finally {
      fs.closeSync(kept.fd);
    }
  } finally {
    dirs.close();
  }
  assert.equal(fdCount(), before, 'the kept fd is closed with the batch');
});

test("a read-only grant's walk opens its regular files for send-files: each taken once, the walked inode, the rest closed with the grant", () => {
  execFileSync('mkfifo', [inGrant('sub', 'fifo')]);
  fs.symlinkSync('file', inGrant('sub', 'alias'));
  fs.writeFileSync(inGrant('sub', 'other'), 'other');
  const before = fdCount();
  const g = new GrantedDir({ path: grantPath, writable: false });
  const held = fdCount();
  const listed = Object.fromEntries(g.readDirChange('sub').map((e) => [e.name, e]));
  // Every other kind is lstat'ed as before (a FIFO's walk never blocks).
  assert.equal(listed.fifo.metadata.kind, 'other');
  assert.equal(listed.alias.metadata.kind, 'symlink');
  assert.equal(listed.alias.metadata.linkTarget, 'file');
  assert.equal(listed.deep.metadata.kind, 'symlink');
  assert.equal(listed.file.metadata.kind, 'file');
  assert.equal(listed.file.metadata.size, 6n);
  assert.equal(listed.file.metadata.inode, fs.lstatSync(inGrant('sub', 'file'), { bigint: true }).ino);
  assert.equal(fdCount(), held + 2, 'the two regular files are held');
  // Replaced after the walk: send-files gets the walked inode (which it
  // then checks against the plan), a fresh open the new file.
  fs.renameSync(inGrant('sub', 'file'), path.join(root, 'was'));
  fs.writeFileSync(inGrant('sub', 'file'), 'replaced');
  const dirs = new SourceDirs();
  try {
    const walked = g.openFd('sub/file', dirs);
    assert.equal(walked.stat.ino, listed.file.metadata.inode);
    assert.equal(fs.readFileSync(walked.fd, 'utf8'), 'inside');
    fs.closeSync(walked.fd);
    const again = g.openFd('sub/file', dirs);
    assert.equal(fs.readFileSync(again.fd, 'utf8'), 'replaced', 'taken once');
    fs.closeSync(again.fd);
  } finally {
    dirs.close();
  }
  // Only send-files takes them: openRead opens the path afresh.
  assert.equal(readAll(g.openRead('sub/other')), 'other');
  g.close();
  assert.equal(fdCount(), before, 'what send-files never took is closed with the grant');
  // A writable grant's walk (a sync-out target) opens nothing.
  const w = grant();
  const open = fdCount();
  w.readDirChange('sub');
  assert.equal(fdCount(), open);
});

test('replaceWith swaps the staged tree in, with its mode; the old contents go', () => {
  const scratch = [];
  const g = grant({ onScratch: (...a) => scratch.push(a) });
  fs.symlinkSync(outside, inGrant('sub', 'trap'));
  const before = snapshot(outside);
  g.mkdir('.paperclip-upload-stage', 0o750);
  writeAndDrop(g.createExclusive('.paperclip-upload-stage/new', 0o644), 'new');
  const staged = fs.statSync(inGrant('.paperclip-upload-stage')).ino;
  g.replaceWith('.paperclip-upload-stage');

  assert.deepEqual(fs.readdirSync(grantPath), ['new']);
  assert.equal(modeOf(grantPath), 0o750);
  assert.equal(fs.statSync(grantPath).ino, staged);
  assert.deepEqual(fs.readdirSync(root).sort(), ['grant', 'outside']); // nothing left beside it
  assert.deepEqual(snapshot(outside), before);
  // The grant now names the new tree.
  assert.equal(g.stat('').inode, BigInt(staged));
  writeAndDrop(g.createExclusive('after', 0o600), 'x');
  assert.ok(fs.existsSync(inGrant('after')));
  // The staging dir, then what the swap names beside the grant (for the
  // main thread, should this thread end mid-swap).
  assert.deepEqual(
    scratch.map(([name, , , beside]) => [name.replace(/-[0-9]+-[0-9a-f]+$/, ''), beside ?? null]),
    [
      ['.paperclip-upload-stage', null],
      ['.paperclip-upload-replace', 'staged'],
      ['.paperclip-upload-old', 'old'],
    ],
  );
});

test('replaceWith refusals and failures leave the directory as it was', () => {
  const g = grant();
  g.mkdir('sub/.paperclip-upload-x', 0o755);
  fs.writeFileSync(inGrant('.paperclip-upload-file'), '');
  const before = snapshot(root);
  fails(() => g.replaceWith('sub'), 'not-permitted');
  fails(() => g.replaceWith('sub/.paperclip-upload-x'), 'not-permitted');
  fails(() => g.replaceWith(''), 'not-permitted');
  fails(() => g.replaceWith('.paperclip-upload-missing'), 'not-found');
  fails(() => g.replaceWith('.paperclip-upload-file'), 'io');
  assert.deepEqual(snapshot(root), before);

  // The grant's path now names another directory: refuse, touch nothing.
  fs.renameSync(grantPath, path.join(root, 'elsewhere'));
  fs.mkdirSync(grantPath);
  g.mkdir('.paperclip-upload-y', 0o755);
  assert.match(fails(() => g.replaceWith('.paperclip-upload-y'), 'io').val, /moved or replaced/);
  assert.deepEqual(fs.readdirSync(grantPath), []);
});

test('onScratch fires for top-level .paperclip-upload creations only', () => {
  const calls = [];
  const g = grant({ onScratch: (name, dev, ino) => calls.push({ name, dev, ino }) });
  g.mkdir('.paperclip-upload-a', 0o700);
  writeAndDrop(g.createExclusive('.paperclip-upload-b', 0o600), '');
  g.writeFile('.paperclip-upload-c', 0o600, 0n, memSource(''), 0n);
  g.mkdir('sub/.paperclip-upload-d', 0o700);
  writeAndDrop(g.createExclusive('plain', 0o600), '');
  g.symlink('x', '.paperclip-upload-e');
  g.rename('file', '.paperclip-upload-f');
  assert.deepEqual(
    calls.map((c) => c.name),
    ['.paperclip-upload-a', '.paperclip-upload-b', '.paperclip-upload-c'],
  );
  for (const { name, dev, ino } of calls) {
    const st = fs.lstatSync(inGrant(name), { bigint: true });
    assert.deepEqual([dev, ino], [st.dev, st.ino]);
  }
});

// Directory fds kept for a private (0700) staged tree (staging-dirs.js).
test('a staged tree walks afresh once anything in it moves, and a tree others may enter is never kept', () => {
  const before = fdCount();
  const g = grant();
  // A private tree: fds kept while writing, then the component renames d.
  g.mkdir('.paperclip-upload-t', 0o700);
  g.mkdir('.paperclip-upload-t/d', 0o700);
  g.writeFile('.paperclip-upload-t/d/f', 0o644, 0n, memSource('f'), 1n);
  g.rename('.paperclip-upload-t/d', '.paperclip-upload-t/e');
  fails(() => g.writeFile('.paperclip-upload-t/d/g', 0o644, 0n, memSource('g'), 1n), 'not-found');
  g.writeFile('.paperclip-upload-t/e/g', 0o644, 0n, memSource('g'), 1n);
  assert.deepEqual(fs.readdirSync(inGrant('.paperclip-upload-t', 'e')).sort(), ['f', 'g']);
  // A tree other users may enter: another host process swaps a directory for a symlink out.
  g.mkdir('.paperclip-upload-open', 0o755);
  g.mkdir('.paperclip-upload-open/d', 0o755);
  g.writeFile('.paperclip-upload-open/d/f', 0o644, 0n, memSource('f'), 1n);
  fs.renameSync(inGrant('.paperclip-upload-open', 'd'), inGrant('.paperclip-upload-open', 'aside'));
  fs.symlinkSync(outside, inGrant('.paperclip-upload-open', 'd'));
  fails(() => g.writeFile('.paperclip-upload-open/d/g', 0o644, 0n, memSource('g'), 1n), 'not-permitted');
  assert.deepEqual(fs.readdirSync(outside).sort(), ['secret', 'x']);
  // Widening the private tree stops keeping its fds, as swapping it in does.
  g.setMode('.paperclip-upload-t', 0o755);
  fs.renameSync(inGrant('.paperclip-upload-t', 'e'), inGrant('.paperclip-upload-t', 'aside'));
  fs.symlinkSync(outside, inGrant('.paperclip-upload-t', 'e'));
  fails(() => g.writeFile('.paperclip-upload-t/e/h', 0o644, 0n, memSource('h'), 1n), 'not-permitted');
  assert.deepEqual(fs.readdirSync(outside).sort(), ['secret', 'x']);
  g.close();
  assert.equal(fdCount(), before);
});

test("a kept directory's entries are still checked name by name: no `..`, `.`, empty or NUL leaf", () => {
  const g = grant();
  g.mkdir('.paperclip-upload-k', 0o700);
  g.mkdir('.paperclip-upload-k/d', 0o700);
  g.writeFile('.paperclip-upload-k/d/f', 0o644, 0n, memSource('f'), 1n); // the fd of `d` is kept from here
  for (const leaf of ['..', '.', '', 'a\0b']) {
    fails(() => g.writeFile(`.paperclip-upload-k/d/${leaf}`, 0o644, 0n, memSource('x'), 1n), 'not-permitted');
    fails(() => g.stat(`.paperclip-upload-k/d/${leaf}`), 'not-permitted');
  }
  // `d/../../x` has a kept-looking prefix only after a `..`: walked, and refused.
  fails(() => g.writeFile('.paperclip-upload-k/d/../../x', 0o644, 0n, memSource('x'), 1n), 'not-permitted');
  assert.deepEqual(fs.readdirSync(inGrant('.paperclip-upload-k', 'd')), ['f']);
  assert.ok(!fs.existsSync(inGrant('x')));
  g.close();
});

test('removeScratch removes only the very entries created, without a grant', () => {
  const calls = [];
  const g = grant({ onScratch: (name, dev, ino) => calls.push({ name, dev, ino }) });
  g.mkdir('.paperclip-upload-tree', 0o755);
  g.mkdir('.paperclip-upload-tree/d', 0o755);
  writeAndDrop(g.createExclusive('.paperclip-upload-tree/d/f', 0o644), 'f');
  g.symlink(outside, '.paperclip-upload-tree/out');
  writeAndDrop(g.createExclusive('.paperclip-upload-swapped', 0o644), 'mine');
  writeAndDrop(g.createExclusive('.paperclip-upload-gone', 0o644), '');
  g.close();
  // Same name, another inode (written aside first: a freed inode number is soon reused).
  fs.writeFileSync(inGrant('other'), 'someone else');
  fs.renameSync(inGrant('other'), inGrant('.paperclip-upload-swapped'));
  fs.rmSync(inGrant('.paperclip-upload-gone'));
  const file = fs.lstatSync(inGrant('file'), { bigint: true });
  const before = snapshot(outside);

  const failures = removeScratch(grantPath, [
    ...calls,
    { name: 'file', dev: file.dev, ino: file.ino }, // not a scratch name
    { name: 'sub/../file', dev: file.dev, ino: file.ino },
  ]);
  assert.deepEqual(failures, []);
  assert.deepEqual(fs.readdirSync(grantPath).sort(), ['.paperclip-upload-swapped', 'file', 'fin', 'flink', 'in', 'link', 'sub']);
  assert.equal(fs.readFileSync(inGrant('.paperclip-upload-swapped'), 'utf8'), 'someone else');
  assert.deepEqual(snapshot(outside), before);
  assert.deepEqual(removeScratch(path.join(root, 'missing'), calls), []);
});

test('no fd leaks, whether calls succeed or fail', () => {
  const before = fdCount();
  const g = new GrantedDir({ path: grantPath, writable: true });
  const attempt = (fn) => {
    try {
      fn();
    } catch (e) {
      assert.ok(!(e instanceof Error), e?.stack);
    }
  };
  assert.equal(readAll(g.openRead('sub/file')), 'inside');
  const s = g.openRead('sub/file');
  s.blockingRead(1n);
  s[Symbol.dispose](); // dropped before EOF
  const eof = g.openRead('sub/file');
  eof.blockingRead(100n);
  attempt(() => eof.blockingRead(100n)); // EOF closes the file: no drop needed
  for (const call of Object.values(CALLS)) {
    for (const p of ['file', 'sub/file', 'sub', 'missing/x', 'link/secret', 'sub/deep/x', 'flink', 'fin', '../x']) {
      attempt(() => {
        const r = call(g, p);
        if (r?.[Symbol.dispose]) r[Symbol.dispose]();
        if (typeof r?.fd === 'number') fs.closeSync(r.fd);
      });
    }
  }
  g.writeFile('w', 0o644, 0n, memSource('abc'), 9n);
  g.mkdir('.paperclip-upload-s', 0o755);
  g.replaceWith('.paperclip-upload-s');
  g.close();
  g.close();
  assert.equal(fdCount(), before);
});

test('a closed grant fails with an fs-error, never through a reused fd number', () => {
  const g = grant();
  g.close();
  const reused = fs.openSync(outside, 'r'); // the lowest free number: the grant's
  try {
    fails(() => g.stat(''), 'not-found');
    fails(() => g.readDir(''), 'not-found');
  } finally {
    fs.closeSync(reused);
  }
});
