// The host's memory against a hostile sandbox (decompression bombs, a zstd
// window the size of the machine) and a component that grows. Each runs a
// sync-out in a child process (test/support/peak-rss.js) and asserts that
// process's peak RSS over its RSS before the sync, and the error. Before
// the decoders were bounded these peaks were 1.6 GB (zstd RLE), 1.9 GB (a
// 1.875 GiB window) and 3 GB (gzip); the component's memory had no cap,
// and a call's heap stayed with the idle worker after it.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { Decoder, GZIP_SLICE, ZSTD_BLOCKS } from '../src/worker/decode.js';
import { GUEST_MEMORY_BYTES, capMemory } from '../src/worker/memory-cap.js';
import { gzipBomb, zstdCli, zstdRle, zstdSingleSegment, zstdSkippable } from './support/bombs.js';
import { growingComponent } from './support/growing-component.js';

const MiB = 1 << 20;
const PEAK_RSS = fileURLToPath(new URL('./support/peak-rss.js', import.meta.url));
const GUARD = 64 * MiB;
const GUARD_MESSAGE = /more than the 67108864-byte output guard allows/;
const WINDOW_MESSAGE = /^the sandbox's zstd stream asks for a 1\.9 GiB window \(at most 8 MiB\)$/;
/** What a bomb may add to the host's RSS: decoded bytes held stay within a few MiB. */
const BOMB_PEAK_MIB = 128;
const hasZstd = (() => {
  try {
    execFileSync('zstd', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

let dir;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-bombs-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** A sync-out in a child process whose sandbox answers per `scenario`: its outcome and RSS figures. */
function measured(scenario) {
  const out = execFileSync(process.execPath, [PEAK_RSS, JSON.stringify(scenario)], { encoding: 'utf8', timeout: 120_000 });
  return JSON.parse(out.trim().split('\n').pop());
}

/** `codec` stdout of `bytes` (written to a file for the child), then `pad` bytes of 'a'. */
function bomb(name, codec, bytes, pad = 0) {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return measured({ codec, bomb: path, pad, maxOutputBytes: GUARD });
}

function refusedWithin(r, kind, message, peakMiB) {
  assert.equal(r.kind, kind, r.message);
  assert.match(r.message, message);
  assert.ok(r.grewMiB < peakMiB, `peak RSS grew by ${r.grewMiB} MiB`);
}

describe('a decompression bomb from the sandbox', () => {
  test('a zstd stream of RLE blocks (50 KB for 1.6 GB) is read to the guard within bounded memory', () => {
    refusedWithin(bomb('rle.zst', 'zstd', zstdRle(12_800)), 'limit-exceeded', GUARD_MESSAGE, BOMB_PEAK_MIB);
  });

  test("the zstd CLI's own bomb (512 MiB of zeros at level 19, an 8 MiB window) is read within bounded memory", { skip: !hasZstd && 'no zstd CLI' }, () => {
    refusedWithin(bomb('cli.zst', 'zstd', zstdCli(512 * MiB, ['-19'])), 'limit-exceeded', GUARD_MESSAGE, BOMB_PEAK_MIB);
  });

  test('a zstd frame asking for a 1.875 GiB window is refused before it is allocated', () => {
    const r = bomb('window.zst', 'zstd', zstdRle(100, (20 << 3) | 7));
    refusedWithin(r, 'transport', WINDOW_MESSAGE, 32);
  });

  test('a single-segment zstd frame whose content size (its window) is 1.875 GiB is refused', () => {
    refusedWithin(bomb('segment.zst', 'zstd', zstdSingleSegment(1.875 * 2 ** 30, 100)), 'transport', WINDOW_MESSAGE, 32);
  });

  test('a zstd frame from `zstd --long=31` (a 2 GiB window) is refused', { skip: !hasZstd && 'no zstd CLI' }, () => {
    const r = bomb('long.zst', 'zstd', zstdCli(64 * MiB, ['-19', '--long=31']));
    refusedWithin(r, 'transport', /^the sandbox's zstd stream asks for a 2 GiB window \(at most 8 MiB\)$/, 32);
  });

  test('a gzip member of 3 GiB of zeros (3 MB) is read to the guard within bounded memory', () => {
    refusedWithin(bomb('bomb.gz', 'gzip', gzipBomb(3 * 2 ** 30)), 'limit-exceeded', GUARD_MESSAGE, BOMB_PEAK_MIB);
  });

  test('a gzip header whose name never ends is refused once 256 KiB of it is held', () => {
    // FNAME set: the name runs on through 48 MiB of 'a'.
    const r = bomb('name.gz', 'gzip', Buffer.from([0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 0xff]), 48 * MiB);
    refusedWithin(r, 'transport', /^corrupt gzip stream from the sandbox: more than 256 KiB it cannot decode yet$/, 32);
  });
});

describe("the component's memory", () => {
  const grown = (growMiB) => measured({ component: growingComponent(join(dir, 'growing')), growMiB });

  test('a component that grows past 512 MiB fails inside, as limit-exceeded, and nothing is held after', () => {
    const r = grown(1024);
    assert.equal(r.kind, 'limit-exceeded', r.message);
    assert.equal(r.message, 'the provider component needed more than its 512 MiB of memory (lower maxEntries or maxMetadataBytes to fail sooner)');
    assert.ok(r.grewMiB < 512 + 64, `peak RSS grew by ${r.grewMiB} MiB`);
    assert.ok(r.heldMiB < 64, `${r.heldMiB} MiB still held after the call`);
  });

  test('a call that grew the component to 256 MiB leaves no heap held once it is over', () => {
    const r = grown(256);
    assert.equal(r.kind, 'ok', r.message);
    assert.ok(r.grewMiB > 200, `the component grew RSS by only ${r.grewMiB} MiB`);
    assert.ok(r.heldMiB < 64, `${r.heldMiB} MiB still held after the call`);
  });

  test("the shipped components' memories stop at 512 MiB", () => {
    for (const c of ['tar-stream', 'base64-fallback']) {
      const module = new WebAssembly.Module(capMemory(readFileSync(new URL(`../components/${c}/provider.core.wasm`, import.meta.url))));
      const imports = {};
      for (const i of WebAssembly.Module.imports(module)) (imports[i.module] ??= {})[i.name] = () => assert.fail('not called');
      const { memory } = new WebAssembly.Instance(module, imports).exports;
      memory.grow(GUEST_MEMORY_BYTES / (64 << 10) - memory.buffer.byteLength / (64 << 10));
      assert.equal(memory.buffer.byteLength, GUEST_MEMORY_BYTES);
      assert.throws(() => memory.grow(1), RangeError, c);
    }
  });

  test('capMemory adds the maximum, lowers a larger one, keeps a smaller one', () => {
    // (module (memory (export "m") <limits>))
    const module = (limits) => Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 5, limits.length + 1, 1, ...limits, 7, 5, 1, 1, 0x6d, 2, 0]);
    const memory = (limits) => new WebAssembly.Instance(new WebAssembly.Module(capMemory(module(limits)))).exports.m;
    const pages = GUEST_MEMORY_BYTES / (64 << 10);
    for (const limits of [[0x00, 1], [0x01, 1, 0x80, 0x80, 0x04]]) {
      const m = memory(limits);
      assert.throws(() => m.grow(pages), RangeError);
      assert.equal(m.grow(pages - 1), 1);
    }
    assert.throws(() => memory([0x01, 1, 2]).grow(2), RangeError);
  });
});

describe('the bounded decoders', () => {
  /**
   * Decodes `wire` fed in `chunk`-byte writes: the decoded length, the
   * bytes (if `keep`), and the most decoded bytes held unread at once.
   */
  function decode(codec, wire, { chunk = 1 << 20, keep = true } = {}) {
    const d = new Decoder(codec, Infinity);
    const parts = [];
    let length = 0;
    let held = 0;
    let at = 0;
    for (;;) {
      const out = d.read(64 << 10);
      if (out === null) return { length, held, bytes: Buffer.concat(parts) };
      held = Math.max(held, out.length + d.out.reduce((n, c) => n + c.length, 0));
      if (out.length > 0) {
        length += out.length;
        if (keep) parts.push(out);
      } else if (at < wire.length) d.write(wire.subarray(at, (at += chunk)));
      else d.end();
    }
  }
  const text = readFileSync(new URL('../src/worker/hostfs.js', import.meta.url));

  test('zstd: skippable, concatenated, single-segment and checksummed frames decode as one stream, in any chunking', { skip: !hasZstd && 'no zstd CLI' }, () => {
    const file = join(dir, 'text');
    writeFileSync(file, text);
    // From a file: single-segment with its content size; from a pipe: a window, no size.
    const known = execFileSync('zstd', ['-q', '-c', '--check', file]);
    const piped = execFileSync('sh', ['-c', `zstd -q -c --no-check -3 < "${file}" | cat`]);
    const empty = execFileSync('zstd', ['-q', '-c'], { input: '' });
    const wire = Buffer.concat([zstdSkippable(10), known, zstdSkippable(0), piped, empty, known, zstdSkippable(100_000)]);
    for (const chunk of [1, 7, 4096, 1 << 20]) {
      assert.ok(decode('zstd', wire, { chunk }).bytes.equals(Buffer.concat([text, text, text])), `in ${chunk}-byte writes`);
    }
  });

  test('zstd: an RLE bomb is held at most ~1.5 MiB at a time, and a cut stream fails', () => {
    const { length, held } = decode('zstd', zstdRle(2048), { keep: false });
    assert.equal(length, 2048 * (128 << 10));
    assert.ok(held <= (ZSTD_BLOCKS + 4) * (128 << 10), `held ${held} decoded bytes`);
    assert.throws(() => decode('zstd', zstdRle(10).subarray(0, -1)), /zstd stream from the sandbox/);
  });

  test('zstd: a block larger than its frame allows is refused', () => {
    // A 1 KiB window (exponent 0) with a 128 KiB RLE block.
    assert.throws(() => decode('zstd', zstdRle(1, 0)), /^Error: corrupt zstd stream from the sandbox: a block of 131072 bytes \(at most 1024\)$/);
  });

  test('gzip: a bomb is held at most ~4 MiB at a time; concatenated members decode as one stream', () => {
    const { length, held } = decode('gzip', gzipBomb(256 * MiB), { keep: false });
    assert.equal(length, 256 * MiB);
    assert.ok(held <= 1032 * GZIP_SLICE + (64 << 10), `held ${held} decoded bytes`);
    const member = gzipSync(text);
    const wire = Buffer.concat([member, gzipSync(Buffer.alloc(0)), member]);
    for (const chunk of [3, 4096, 1 << 20]) {
      assert.ok(decode('gzip', wire, { chunk }).bytes.equals(Buffer.concat([text, text])), `in ${chunk}-byte writes`);
    }
  });
});
