// The values the Node host copies from the Rust sources, checked against
// them: a drift here is a host that speaks a different protocol than the
// component it loads, or reports errors the orchestrator cannot type.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { DEFAULTS, WIT_VERSION } from '../src/index.js';
import { SCRATCH_PREFIX } from '../src/confine.js';
import { KINDS } from '../src/request.js';

const repo = new URL('../../', import.meta.url);
const read = (path) => readFileSync(new URL(path, repo), 'utf8');
const core = read('guest/core/src/lib.rs');

/** The string value of Rust's `pub const NAME: &str = "...";` in `text`. */
function rustStr(text, name) {
  const m = text.match(new RegExp(`pub const ${name}: &str = "([^"]*)";`));
  assert.ok(m, `no ${name} in the Rust source`);
  return m[1];
}

/** A Rust integer expression as the sources write them: `1_000_000`, `8 << 30`. */
function rustInt(expr) {
  const n = (s) => {
    assert.match(s.trim(), /^[0-9_]+$/, `not a plain literal: ${s}`);
    return BigInt(s.trim().replaceAll('_', ''));
  };
  const [a, b] = expr.split('<<');
  return Number(b === undefined ? n(a) : n(a) << n(b));
}

test('the WIT version is the WIT file\'s and the core\'s', () => {
  const wit = read('wit/provider.wit').match(/^package sandbox-sync:provider@([0-9.]+);$/m)?.[1];
  assert.equal(WIT_VERSION, wit);
  assert.equal(WIT_VERSION, rustStr(core, 'WIT_VERSION'));
});

test('the scratch prefix is the core\'s', () => {
  assert.equal(SCRATCH_PREFIX, rustStr(core, 'SCRATCH_PREFIX'));
});

test('the error kinds are the core\'s, every one', () => {
  const body = read('guest/core/src/error.rs').split('pub fn as_str(self)')[1]?.split('\n    }\n')[0] ?? '';
  const rust = [...body.matchAll(/ErrorKind::\w+ => "([a-z-]+)"/g)].map((m) => m[1]);
  assert.ok(rust.length >= 8, `found ${rust.length} kinds in error.rs`);
  assert.deepEqual([...KINDS].sort(), rust.sort());
});

test('the default limits are the Rust host\'s', () => {
  const ctor = read('host-shim/src/provider.rs').split('pub fn new(remote_dir: impl Into<String>) -> Self {')[1]?.split('\n    }\n')[0] ?? '';
  const field = (name) => {
    const m = ctor.match(new RegExp(`\\b${name}: ([^,]+),`));
    assert.ok(m, `no ${name} in SyncOptions::new`);
    return m[1];
  };
  const secs = field('timeout').match(/^Duration::from_secs\(([0-9_]+)\)$/)?.[1];
  assert.ok(secs, `timeout is ${field('timeout')}`);
  assert.deepEqual(DEFAULTS, {
    timeoutMs: rustInt(secs) * 1000,
    maxOutputBytes: rustInt(field('max_output_bytes')),
    maxStderrBytes: rustInt(field('max_stderr_bytes')),
    maxEntries: rustInt(field('max_entries')),
    maxMetadataBytes: rustInt(field('max_metadata_bytes')),
  });
  assert.equal(field('compress'), 'Compress::Auto');
  assert.equal(field('incremental'), 'true');
});
