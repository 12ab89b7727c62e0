// The traps of jco's preview2-shim 0.26.1 and of Node that our host works
// around, one test each: our own wasi:io streams (src/worker/streams.js),
// localExec's stdout, and the event loop and concurrency of the worker
// design. Where it takes a few lines, a test also shows the upstream trap
// still exists in the installed shim.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncIn, performSyncOut, SandboxSyncError } from '../src/index.js';
import { localExec } from '../src/local-exec.js';
import { PACKAGE } from '../scripts/cargo.mjs';
import { InputStream, OutputStream } from '../src/worker/streams.js';
import { sandbox } from './support/sandbox.js';
import { build, hostDir } from './support/trees.js';
import { watchLoop } from './support/loop.js';

const MiB = 1 << 20;

/** An in-memory stream source over `bytes`, handing at most `chunk` bytes a read. */
function memSource(bytes, chunk = Infinity) {
  const s = {
    at: 0,
    closed: 0,
    read(max) {
      if (s.at >= bytes.length) return null;
      const n = Math.min(max, chunk, bytes.length - s.at);
      s.at += n;
      return bytes.subarray(s.at - n, s.at);
    },
    close() {
      s.closed++;
    },
  };
  return s;
}

/** An in-memory sink; `capacity` bytes writable without blocking, if given. */
function memSink(capacity) {
  const chunks = [];
  const s = {
    closed: 0,
    write(bytes) {
      chunks.push(Uint8Array.from(bytes));
    },
    close() {
      s.closed++;
    },
    bytes: () => Buffer.concat(chunks),
  };
  if (capacity !== undefined) s.capacity = () => capacity;
  return s;
}

const iota = (n) => Uint8Array.from({ length: n }, (_, i) => i & 0xff);

function isClosed(e) {
  return e?.tag === 'closed';
}

// The installed shim's own streams over a real file, in a child process
// (the shim starts its I/O worker thread and may exit(1) on a trap).
const SHIM_DEMO = `
import { filesystem } from '@bytecodealliance/preview2-shim';
filesystem._setPreopens({ '/': process.argv[1] });
const [[root]] = filesystem.preopens.getDirectories();
const open = (p, flags) => root.openAt({ symlinkFollow: false }, p, {}, flags);
const kind = (v) => (typeof v === 'bigint' ? 'bigint' : Object.prototype.toString.call(v).slice(8, -1));
const out = {};
const a = open('src.bin', { read: true }).readViaStream(0n);
a.subscribe().block();
const skipped = a.blockingSkip(10n);
out.blockingSkip = { kind: kind(skipped), length: skipped.length };
out.skip = { kind: kind(a.skip(10n)) };
const w = open('dst.bin', { write: true }).writeViaStream(0n);
try {
  w.splice(a, 10n);
  out.splice = 'no error';
} catch (e) {
  out.splice = e.constructor.name + ': ' + e.message;
}
const b = open('src.bin', { read: true }).readViaStream(0n);
b.subscribe().block();
out.blockingSplice = String(w.blockingSplice(b, 10n));
console.log(JSON.stringify(out));
process.exit(0);
`;

let shimDemo;
/** What the installed preview2-shim's Node streams do (run once). */
function shim() {
  if (!shimDemo) {
    const dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-shim-'));
    try {
      writeFileSync(join(dir, 'src.bin'), randomFillSync(Buffer.alloc(100_000)));
      writeFileSync(join(dir, 'dst.bin'), '');
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', SHIM_DEMO, dir], { cwd: PACKAGE, encoding: 'utf8', timeout: 30_000 });
      shimDemo = JSON.parse(out);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return shimDemo;
}

describe('wasi:io streams', () => {
  test('skip and blockingSkip return a count and consume the bytes (the shim returns the bytes)', () => {
    const src = memSource(iota(100));
    const s = new InputStream(src);
    assert.equal(s.skip(10n), 10n);
    assert.deepEqual([...s.blockingRead(1n)], [10]);
    assert.equal(s.blockingSkip(5n), 5n);
    assert.deepEqual([...s.read(1n)], [16]);
    assert.equal(s.skip(0n), 0n);
    assert.equal(s.blockingSkip(1000n), 83n, 'a skip past the end counts what was left');
    assert.throws(() => s.skip(1n), isClosed);

    const upstream = shim();
    assert.equal(upstream.blockingSkip.kind, 'Uint8Array');
    assert.equal(upstream.skip.kind, 'Uint8Array');
  });

  test('splice and blockingSplice move at most len bytes, return the count, and never throw for a valid source', () => {
    const data = iota(100);
    const src = memSource(data);
    const sink = memSink();
    const out = new OutputStream(sink);
    const input = new InputStream(src);
    assert.equal(out.splice(input, 10n), 10n);
    assert.equal(sink.bytes().length, 10);
    assert.equal(out.blockingSplice(input, 7n), 7n);
    assert.deepEqual(sink.bytes(), Buffer.from(data.subarray(0, 17)));
    assert.equal(src.at, 17, 'the source gave up no more than was spliced');
    assert.deepEqual([...input.read(1n)], [17]);
    assert.equal(out.splice(input, 0n), 0n);

    // The sink's capacity bounds a non-blocking splice; a short read bounds either.
    const narrow = new OutputStream(memSink(4));
    assert.equal(narrow.splice(new InputStream(memSource(data)), 10n), 4n);
    const trickle = new InputStream(memSource(data, 3));
    assert.equal(new OutputStream(memSink()).blockingSplice(trickle, 10n), 3n);

    const upstream = shim();
    assert.match(upstream.splice, /^TypeError: .*private member/);
    assert.ok(BigInt(upstream.blockingSplice) > 10n, `the shim's blockingSplice moved ${upstream.blockingSplice} bytes for 10`);
  });

  // Upstream, dropping a stream ends only the shim's own file and stdio
  // streams; there is no exec pipe in the shim to show the trap on.
  test('dropping an output stream closes its sink, once; dropping an input stream closes its source', () => {
    const sink = memSink();
    const out = new OutputStream(sink);
    out.write(Uint8Array.of(1));
    out[Symbol.dispose]();
    out[Symbol.dispose]();
    assert.equal(sink.closed, 1);
    assert.throws(() => out.write(Uint8Array.of(2)), isClosed);
    assert.throws(() => out.checkWrite(), isClosed);

    const src = memSource(iota(4));
    new InputStream(src)[Symbol.dispose]();
    assert.equal(src.closed, 1);
  });

  test("an exec's stdin ends when the component drops it: a gzip sync-in with stdinEnds lands", async () => {
    const provider = await loadProvider('tar-stream');
    const sb = sandbox('gnu');
    const host = hostDir('stdin-ends');
    try {
      build(host, { 'a.txt': 'alpha', 'big.bin': randomFillSync(Buffer.alloc(2 * MiB)) });
      let execs = 0;
      let ended = 0;
      const exec = (argv, io) => {
        execs++;
        io.stdin?.once('end', () => ended++);
        return sb.exec(argv, io);
      };
      const t0 = Date.now();
      await performSyncIn({
        provider,
        exec,
        stdinEnds: true,
        remoteDir: sb.remoteDir,
        timeoutMs: 20_000,
        operations: [{ operationId: 'o', files: [{ sourcePath: host, targetPath: `${sb.remoteDir}/t`, kind: 'directory' }] }],
      });
      // Without the end, the sandbox's gzip -d would wait for more until the timeout.
      assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
      assert.equal(ended, execs);
      assert.equal(readFileSync(`${sb.remoteDir}/t/a.txt`, 'utf8'), 'alpha');
      assert.ok(readFileSync(`${sb.remoteDir}/t/big.bin`).equals(readFileSync(join(host, 'big.bin'))));
    } finally {
      provider.close();
      sb.cleanup();
      rmSync(host, { recursive: true, force: true });
    }
  });
});

describe("a child's stdout at exit", () => {
  test('Node reports the exit before the bytes: at exit a slow sink still lacks some', async () => {
    let got = 0;
    const held = [];
    let exited = false;
    // Holds every write until the child has exited, so the pipe backs up.
    const sink = new Writable({
      write(chunk, _enc, done) {
        got += chunk.length;
        if (exited) done();
        else held.push(done);
      },
    });
    const child = spawn('sh', ['-c', 'head -c 65536 /dev/zero; sleep 0.2; head -c 65536 /dev/zero']);
    child.stdout.pipe(sink);
    const atExit = await new Promise((ok) =>
      child.once('exit', () => {
        exited = true;
        ok(got);
      }),
    );
    for (const done of held.splice(0)) done();
    await new Promise((ok) => sink.once('finish', ok));
    assert.ok(atExit < 131072, `at exit the sink had ${atExit} bytes`);
    assert.equal(got, 131072);
  });

  test('localExec delivers all 16 MiB a child writes before exiting at once, into a slow sink', async () => {
    let got = 0;
    const slow = new Writable({
      write(chunk, _enc, done) {
        setTimeout(() => {
          got += chunk.length;
          done();
        }, 3);
      },
    });
    const finished = new Promise((ok) => slow.once('finish', ok));
    const r = await localExec()(['head', '-c', String(16 * MiB), '/dev/zero'], { stdout: slow });
    assert.equal(r.exitCode, 0);
    await finished;
    assert.equal(got, 16 * MiB);
  });

  // With a pipe, localExec settles while the sink still holds chunks; the
  // bridge must post the exit only after them (this once cut the archive).
  test('a sync-out of 32 MiB in 2000 files lands whole, every time', async () => {
    const provider = await loadProvider('tar-stream');
    const sb = sandbox('gnu');
    const host = hostDir('many');
    try {
      const files = {};
      for (let i = 0; i < 2000; i++) files[`t/f${i}`] = randomFillSync(Buffer.alloc(16 << 10));
      build(sb.remoteDir, files);
      for (let round = 0; round < 3; round++) {
        const r = await performSyncOut({
          provider,
          exec: sb.exec,
          compression: 'none',
          remoteDir: sb.remoteDir,
          timeoutMs: 60_000,
          operations: [{ operationId: 'o', files: [{ sourcePath: `${sb.remoteDir}/t`, targetPath: join(host, `t${round}`), kind: 'directory' }] }],
        });
        assert.equal(r.operations[0].filesTransferred, 2000);
        assert.ok(readFileSync(join(host, `t${round}`, 'f1999')).equals(files['t/f1999']));
      }
    } finally {
      provider.close();
      sb.cleanup();
      rmSync(host, { recursive: true, force: true });
    }
  });
});

describe('the worker design', () => {
  let provider;
  let sb;
  let host;
  before(async () => {
    provider = await loadProvider('tar-stream');
  });
  test.beforeEach(() => {
    sb = sandbox('gnu');
    host = hostDir('design');
  });
  test.afterEach(() => {
    sb.cleanup();
    rmSync(host, { recursive: true, force: true });
  });
  after(() => provider.close());

  // Plain, and gzip-compressed in the worker (stdinEnds): the latter runs for seconds.
  for (const stdinEnds of [false, true]) {
    test(`a sync does not freeze the event loop${stdinEnds ? ' (gzip)' : ''}`, async () => {
      const files = {};
      for (let i = 0; i < 4; i++) files[`f${i}.bin`] = randomFillSync(Buffer.alloc(16 * MiB));
      build(host, files);
      const stop = watchLoop();
      const t0 = Date.now();
      let gap;
      try {
        await performSyncIn({
          provider,
          exec: sb.exec,
          stdinEnds,
          remoteDir: sb.remoteDir,
          timeoutMs: 120_000,
          operations: [{ operationId: 'o', files: [{ sourcePath: host, targetPath: `${sb.remoteDir}/t`, kind: 'directory' }] }],
        });
      } finally {
        gap = stop();
      }
      const took = Date.now() - t0;
      for (const [name, data] of Object.entries(files)) assert.ok(readFileSync(`${sb.remoteDir}/t/${name}`).equals(data), name);
      assert.ok(gap < 250, `the event loop stalled for ${gap} ms during a ${took} ms sync`);
    });
  }

  test('calls run concurrently', async () => {
    build(host, { 'a.txt': 'alpha', 'b.txt': 'beta' });
    let running = 0;
    let most = 0;
    const exec = async (argv, io) => {
      most = Math.max(most, ++running);
      try {
        return await sb.exec(argv, io);
      } finally {
        running--;
      }
    };
    const call = (name) =>
      performSyncIn({
        provider,
        exec,
        remoteDir: sb.remoteDir,
        timeoutMs: 20_000,
        operations: [
          {
            operationId: name,
            files: [{ sourcePath: join(host, `${name}.txt`), targetPath: `${sb.remoteDir}/${name}/${name}.txt`, kind: 'file' }],
            // Long enough that the two calls' execs must overlap.
            postUploadCommands: [{ command: 'sleep 1' }],
          },
        ],
      });
    const [a, b] = await Promise.all([call('a'), call('b')]);
    assert.deepEqual([a.operations[0].filesTransferred, b.operations[0].filesTransferred], [1, 1]);
    assert.equal(readFileSync(`${sb.remoteDir}/a/a.txt`, 'utf8'), 'alpha');
    assert.equal(readFileSync(`${sb.remoteDir}/b/b.txt`, 'utf8'), 'beta');
    assert.equal(most, 2, 'the two calls never had an exec running at the same time');
  });

  test(
    'an aborted exec reports its exit: a source changed mid-sync fails at once',
    async () => {
      build(host, { 'a.txt': 'alpha' });
      // The plan is made before the exec starts; the file changes under it.
      const exec = (argv, io) => {
        utimesSync(join(host, 'a.txt'), 1_600_000_000, 1_600_000_000);
        return sb.exec(argv, io);
      };
      const t0 = Date.now();
      await assert.rejects(
        performSyncIn({
          provider,
          exec,
          remoteDir: sb.remoteDir,
          timeoutMs: 20_000,
          operations: [{ operationId: 'o', files: [{ sourcePath: join(host, 'a.txt'), targetPath: `${sb.remoteDir}/a.txt`, kind: 'file' }] }],
        }),
        (e) => e instanceof SandboxSyncError && e.kind === 'source-changed',
      );
      assert.ok(Date.now() - t0 < 1000, `took ${Date.now() - t0} ms`);
      assert.ok(!existsSync(`${sb.remoteDir}/a.txt`));
    },
  );
});
