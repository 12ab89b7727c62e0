// The host-fs's openat addon (native/at.c, src/native.js, beneath.js's
// openAt/closeFd): built and loaded where the package is tested, opening
// what /proc/self/fd opens, with node:fs's errors and O_CLOEXEC, and never
// leaking an fd, even from a worker terminated mid-sync. The rest of
// host-fs's behaviour is hostfs.test.js's, run both with and without it.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Worker } from 'node:worker_threads';

import { closeFd, createAt, openAt, O_PATH, sealFd } from '../src/beneath.js';
import { native } from '../src/native.js';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY } = fs.constants;
const OFF = process.env.SANDBOX_SYNC_NATIVE === '0';
const SRC = path.join(import.meta.dirname, '..', 'src');

let root;
let dir;
before(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'native-test-'));
  fs.mkdirSync(path.join(root, 'sub'));
  fs.writeFileSync(path.join(root, 'file'), 'hello');
  fs.symlinkSync('/etc/hostname', path.join(root, 'link'));
  dir = fs.openSync(root, O_PATH | O_DIRECTORY);
});
after(() => {
  fs.closeSync(dir);
  fs.rmSync(root, { recursive: true, force: true });
});

/** The fds of this process that name `where` or a file beneath it. */
const fdsUnder = (where) =>
  fs.readdirSync('/proc/self/fd').filter((fd) => {
    try {
      const to = fs.readlinkSync(`/proc/self/fd/${fd}`);
      return to === where || to.startsWith(where + '/');
    } catch {
      return false; // closed meanwhile (readdir's own fd)
    }
  });

test('the addon is built for this machine and in use', { skip: OFF && 'SANDBOX_SYNC_NATIVE=0' }, () => {
  // npm test builds it first (scripts/native.mjs); a package that fell back
  // silently would still pass every other test, at twice the cost.
  assert.notEqual(native, null, `native/${process.platform}-${process.arch}/at.node did not load`);
  assert.equal(native.held(), 0);
});

test('opens what /proc/self/fd opens, close-on-exec, and closes it', () => {
  const fd = openAt(dir, 'file', O_RDONLY | O_NOFOLLOW);
  try {
    assert.equal(fs.readFileSync(fd, 'utf8'), 'hello');
    const flags = parseInt(/^flags:\s+([0-7]+)$/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))[1], 8);
    assert.ok(flags & 0o2000000, 'no O_CLOEXEC: a sandbox process would inherit the host file');
    if (native) assert.equal(native.held(), 1);
  } finally {
    closeFd(fd);
  }
  if (native) assert.equal(native.held(), 0);
  assert.deepEqual(fdsUnder(root), [String(dir)]);
  // Raw bytes, and a directory for the walk.
  const sub = openAt(dir, Buffer.from('sub'), O_PATH | O_DIRECTORY | O_NOFOLLOW);
  assert.ok(fs.fstatSync(sub).isDirectory());
  closeFd(sub);
  // node:fs's own fds close through closeFd too.
  closeFd(fs.openSync(path.join(root, 'file'), 'r'));
  assert.deepEqual(fdsUnder(root), [String(dir)]);
});

test('creates exclusively, with the mode asked, under the umask', () => {
  const fd = openAt(dir, 'made', O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  closeFd(fd);
  assert.equal(fs.statSync(path.join(root, 'made')).mode & 0o777, 0o600);
  assert.throws(() => openAt(dir, 'made', O_WRONLY | O_CREAT | O_EXCL, 0o600), { code: 'EEXIST', errno: -17 });
});

test("fails as node:fs fails: code, negative errno, the name", () => {
  assert.throws(() => openAt(dir, 'missing', O_RDONLY), { code: 'ENOENT', errno: -2, message: /missing/ });
  assert.throws(() => openAt(dir, 'link', O_RDONLY | O_NOFOLLOW), { code: 'ELOOP' });
  assert.throws(() => openAt(dir, 'link', O_PATH | O_DIRECTORY | O_NOFOLLOW), { code: 'ENOTDIR' });
  assert.throws(() => openAt(dir, 'file/x', O_RDONLY), { code: 'ENOTDIR' });
  assert.throws(() => openAt(-1, 'file', O_RDONLY), native ? { code: 'EBADF' } : { code: 'ENOENT' });
  if (!native) return;
  // Where /proc would have its own say, the addon refuses.
  assert.throws(() => openAt(dir, Buffer.from('fi\0le'), O_RDONLY), { code: 'EINVAL' });
  assert.throws(() => openAt(dir, 'x'.repeat(5000), O_RDONLY), { code: 'ENAMETOOLONG' });
  assert.throws(() => openAt(dir, Buffer.alloc(5000, 0x78), O_RDONLY), { code: 'ENAMETOOLONG' });
  assert.throws(() => native.openat(dir, 7, O_RDONLY, 0), TypeError);
  assert.throws(() => closeFd(1 << 30), { code: 'EBADF' });
  assert.equal(native.held(), 0);
});

test('create: exclusive, never through a symlink, exactly the mode asked whatever the umask', { skip: !native && 'no addon' }, () => {
  const made = path.join(root, 'created');
  const old = process.umask(0o077);
  let fd;
  try {
    fd = createAt(dir, 'created', 0o4755);
  } finally {
    process.umask(old);
  }
  assert.equal(native.held(), 1);
  // Exactly mode & 0o777: the umask narrowed the open, the chmod set it; no setuid.
  assert.equal(fs.fstatSync(fd).mode & 0o7777, 0o755);
  const flags = parseInt(/^flags:\s+([0-7]+)$/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))[1], 8);
  assert.ok(flags & 0o2000000, 'no O_CLOEXEC');
  assert.equal(flags & 0o3, O_WRONLY);
  fs.writeSync(fd, 'bytes');
  const atime = fs.fstatSync(fd, { bigint: true }).atimeNs;
  sealFd(fd, 1_500_000_000n);
  assert.equal(native.held(), 0);
  assert.throws(() => fs.fstatSync(fd), { code: 'EBADF' }, 'seal closes');
  const st = fs.statSync(made, { bigint: true });
  assert.equal(st.mtimeNs, 1_500_000_000_000_000_000n);
  assert.equal(st.atimeNs, atime, 'the access time is left alone');
  assert.equal(fs.readFileSync(made, 'utf8'), 'bytes');
  // O_EXCL; a symlink is not followed, whether dangling or not.
  assert.throws(() => createAt(dir, 'created', 0o644), { code: 'EEXIST', message: /created/ });
  fs.symlinkSync(path.join(root, 'nowhere'), path.join(root, 'dangling'));
  assert.throws(() => createAt(dir, 'dangling', 0o644), { code: 'EEXIST' });
  assert.throws(() => createAt(dir, 'link', 0o644), { code: 'EEXIST' });
  assert.ok(!fs.existsSync(path.join(root, 'nowhere')));
  assert.throws(() => createAt(dir, Buffer.from('a\0b'), 0o644), { code: 'EINVAL' });
  assert.throws(() => createAt(-1, 'x', 0o644), { code: 'EBADF' });
  assert.throws(() => native.create(dir, 'x'), TypeError);
  // Before the epoch: clamped to it, as the Rust shim does.
  const early = createAt(dir, 'early', 0o600);
  sealFd(early, -5n);
  assert.equal(fs.statSync(path.join(root, 'early'), { bigint: true }).mtimeNs, 0n);
  // Only what create or openat opened, and only a BigInt time.
  const theirs = fs.openSync(made, 'r');
  try {
    assert.throws(() => sealFd(theirs, 1n), { code: 'EBADF' });
    assert.ok(fs.fstatSync(theirs).isFile(), 'an fd not opened by the addon stays open');
    assert.throws(() => native.seal(theirs, 1), TypeError);
  } finally {
    fs.closeSync(theirs);
  }
  assert.equal(native.held(), 0);
  for (const f of ['created', 'dangling', 'early']) fs.rmSync(path.join(root, f));
});

test("same: the planned file's device, inode, size and mtime, exactly, and nothing else", { skip: !native && 'no addon' }, () => {
  const file = path.join(root, 'planned');
  // Written now: an mtime with nanoseconds, which a double could not carry next to today's seconds.
  fs.writeFileSync(file, 'x'.repeat(100));
  const fd = fs.openSync(file, 'r');
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    const f = { device: st.dev, inode: st.ino, size: st.size, mtimeSec: st.mtimeNs / 1_000_000_000n, mtimeNsec: Number(st.mtimeNs % 1_000_000_000n) };
    const same = (g) => native.same(fd, g.device, g.inode, g.size, g.mtimeSec, g.mtimeNsec);
    assert.equal(same(f), 1);
    for (const [field, other] of [
      ['device', f.device + 1n],
      ['inode', f.inode + 1n],
      ['inode', f.inode + (1n << 63n)], // beyond 2^53: compared as the 64 bits they are
      ['size', f.size - 1n],
      ['mtimeSec', f.mtimeSec + 1n],
      ['mtimeSec', -f.mtimeSec],
      ['mtimeNsec', f.mtimeNsec + 1],
    ]) {
      assert.equal(same({ ...f, [field]: other }), 0, `${field} ${other}`);
    }
    // Changed under the open handle: no longer the planned file.
    fs.appendFileSync(file, 'y');
    assert.equal(same(f), 0);
    assert.equal(same({ ...f, size: 101n, mtimeSec: 0n }), 0, 'the size alone is not enough');
    // Not a regular file, or no file at all.
    const d = fs.openSync(root, 'r');
    const dst = fs.fstatSync(d, { bigint: true });
    assert.equal(native.same(d, dst.dev, dst.ino, dst.size, dst.mtimeNs / 1_000_000_000n, Number(dst.mtimeNs % 1_000_000_000n)), 0);
    fs.closeSync(d);
    assert.equal(native.same(1 << 30, f.device, f.inode, f.size, f.mtimeSec, f.mtimeNsec), -9);
    // BigInts in range, or a TypeError: never a silently truncated comparison.
    assert.throws(() => native.same(fd, Number(f.device), f.inode, f.size, f.mtimeSec, f.mtimeNsec), TypeError);
    assert.throws(() => native.same(fd, -1n, f.inode, f.size, f.mtimeSec, f.mtimeNsec), TypeError);
    assert.throws(() => native.same(fd, f.device, 1n << 64n, f.size, f.mtimeSec, f.mtimeNsec), TypeError);
    assert.throws(() => native.same(fd, f.device, f.inode, f.size, 1n << 63n, f.mtimeNsec), TypeError);
    assert.throws(() => native.same(fd, f.device, f.inode, f.size, f.mtimeSec), TypeError);
  } finally {
    fs.closeSync(fd);
    fs.rmSync(file);
  }
});

test("a worker's fds close when it is terminated mid-call", async () => {
  // As a sync past its deadline: the worker holds host files (the walk's,
  // the staged tree's) and is blocked in the component when terminated.
  const files = Array.from({ length: 50 }, (_, i) => `f${i}`);
  for (const f of files) fs.writeFileSync(path.join(root, f), f);
  const worker = new Worker(
    `
    const { workerData, parentPort } = require('node:worker_threads');
    const fs = require('node:fs');
    import(workerData.beneath).then(({ openAt }) => {
      const dir = openAt(fs.openSync(workerData.root, 'r'), '.', fs.constants.O_RDONLY);
      for (const f of workerData.files) openAt(dir, f, fs.constants.O_RDONLY);
      parentPort.postMessage('holding');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
    });
    `,
    { eval: true, workerData: { root, files, beneath: path.join(SRC, 'beneath.js') } },
  );
  try {
    const message = await new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    assert.equal(message, 'holding');
    // The grant (node:fs's), its '.' and the files (the addon's), and ours.
    assert.equal(fdsUnder(root).length, 1 + 1 + files.length + 1);
  } finally {
    await worker.terminate();
  }
  assert.deepEqual(fdsUnder(root), [String(dir)]);
});

test('host-fs closes with closeFd only', () => {
  // closeSync on an addon fd would leave it in the addon's bitmap, to be
  // closed again, by then maybe another file, when the thread exits.
  const offenders = [];
  for (const dirName of ['.', 'worker']) {
    for (const f of fs.readdirSync(path.join(SRC, dirName)).filter((n) => n.endsWith('.js'))) {
      const text = fs.readFileSync(path.join(SRC, dirName, f), 'utf8');
      const uses = text.split('\n').filter((l) => /\bcloseSync\b/.test(l) && !l.trim().startsWith('*') && !l.trim().startsWith('//'));
      if (f === 'beneath.js' && dirName === '.') continue;
      if (uses.length) offenders.push(`${dirName}/${f}: ${uses.join(' | ')}`);
    }
  }
  assert.deepEqual(offenders, []);
});
