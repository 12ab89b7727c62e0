// Issue 48: the package trusts only state this user alone could have
// written (src/private-dir.js): a cache directory another user owns or
// could write is not used, and a record without this user's seal reads as
// none. Run as root (as CI does), uid 65534 standing in for the other user.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { privateDir, seal, sealed, unseal } from '../src/private-dir.js';
import { recordStore } from '../src/worker/records.js';
import { componentSource } from '../scripts/cargo.mjs';

const INDEX = fileURLToPath(new URL('../src/index.js', import.meta.url));

let tmp;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-private-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Runs `f` with console.warn captured; returns what it warned. */
function warnings(f) {
  const seen = [];
  const warn = console.warn;
  console.warn = (line) => seen.push(String(line));
  try {
    f();
  } finally {
    console.warn = warn;
  }
  return seen;
}

test('a private directory gets a private key, the same each time', () => {
  const d = privateDir(join(tmp, 'mine'));
  assert.ok(d);
  assert.equal(statSync(join(tmp, 'mine')).mode & 0o777, 0o700);
  assert.equal(statSync(join(tmp, 'mine', 'key')).mode & 0o777, 0o600);
  assert.deepEqual(privateDir(join(tmp, 'mine')).key, d.key);
});

test('seals bind the key, the label and the bytes, as the Rust host makes them', () => {
  const key = Buffer.alloc(32, 7);
  const file = sealed(key, 'record x', Buffer.from('facts'));
  assert.deepEqual(unseal(key, 'record x', file), Buffer.from('facts'));
  assert.equal(unseal(key, 'record y', file), undefined);
  assert.equal(unseal(Buffer.alloc(32, 8), 'record x', file), undefined);
  assert.equal(unseal(key, 'record x', file.subarray(0, 10)), undefined);
  // HMAC-SHA256(key, "sandbox-sync\0" + label + "\0" + data): the format
  // host-shim/src/private_dir.rs writes (its tests check the same bytes).
  assert.equal(seal(key, 'cwasm', Buffer.from('x')).toString('hex'), '24fec63364561dae384e58aaec2f16a54f440af18e31757a3aa8647328c0efda');
});

test('a directory another user owns, or under one others may write, is not used', { skip: process.getuid() !== 0 && 'needs root' }, () => {
  const theirs = join(tmp, 'theirs');
  mkdirSync(theirs);
  chownSync(theirs, 65534, 65534);
  const open = join(tmp, 'open');
  mkdirSync(open);
  chmodSync(open, 0o777);
  for (const [dir, why] of [
    [theirs, 'owned by uid 65534'],
    [join(open, 'cache'), 'writable by others'],
  ]) {
    let got;
    const said = warnings(() => {
      got = privateDir(dir);
    });
    assert.equal(got, null);
    assert.equal(said.length, 1, said.join('\n'));
    assert.match(said[0], new RegExp(`not using the cache directory .*${why}`));
  }
  assert.deepEqual(readdirSync(theirs), []);
  // Sticky, as /tmp: fine.
  chmodSync(open, 0o1777);
  assert.ok(privateDir(join(open, 'cache2')));
});

test('a record without this directory seal reads as none; a moved one too', () => {
  const d = privateDir(join(tmp, 'records'));
  const store = recordStore({ dir: d.path, key: d.key });
  store.store('out:/a', new Uint8Array([1, 2, 3]));
  store.store('out:/b', new Uint8Array([4]));
  assert.deepEqual([...store.load('out:/a')], [1, 2, 3]);
  const files = readdirSync(d.path).filter((n) => n.endsWith('.rec'));
  assert.equal(files.length, 2);
  const [a, b] = files.map((n) => join(d.path, n));
  // Swap the two files: each is now under the other's key.
  const bytesA = readFileSync(a);
  writeFileSync(a, readFileSync(b));
  writeFileSync(b, bytesA);
  assert.equal(store.load('out:/a'), undefined);
  assert.equal(store.load('out:/b'), undefined);
  writeFileSync(a, 'forged, with no seal, longer than thirty-two bytes');
  assert.equal(store.load('out:/a'), undefined);
});

test('a jco transpilation altered in the cache is not imported: it is made anew', () => {
  const cache = join(tmp, 'jco-cache');
  const wasm = componentSource('base64-fallback');
  const load = () =>
    spawnSync(
      process.execPath,
      ['--input-type=module', '-e', `const { loadProvider } = await import(${JSON.stringify(INDEX)}); const p = await loadProvider(process.argv[1]); console.log(p.info.name); p.close();`, wasm],
      { env: { ...process.env, SANDBOX_SYNC_CACHE_DIR: cache }, encoding: 'utf8' },
    );
  const first = load();
  assert.equal(first.status, 0, first.stderr);
  assert.equal(first.stdout.trim(), 'sandbox-sync-base64-fallback');
  const [dir] = readdirSync(join(cache, 'jco')).filter((n) => n !== 'key');
  const glue = join(cache, 'jco', dir, 'provider.js');
  writeFileSync(glue, `${readFileSync(glue, 'utf8')}\nglobalThis.planted = true;\n`);
  const second = load();
  assert.equal(second.status, 0, second.stderr);
  assert.match(second.stderr, /has no valid seal: transpiling anew/);
  assert.ok(!readFileSync(glue, 'utf8').includes('planted'), 'the planted glue is still there');
  const third = load();
  assert.equal(third.status, 0, third.stderr);
  assert.doesNotMatch(third.stderr, /no valid seal/);
});
