// src/index.d.ts and paperclip/plugin.d.ts are written by hand:
// test/types/*.test-d.ts hold the calls a provider makes (they must compile)
// and misuses marked `@ts-expect-error` (they must not), checked with the
// TypeScript compiler.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// Its `bin`, beside the package.json it exports.
const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
const PACKAGE = fileURLToPath(new URL('..', import.meta.url));

function check(name) {
  const file = fileURLToPath(new URL(`./types/${name}`, import.meta.url));
  const r = spawnSync(
    process.execPath,
    [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--types', 'node', '--skipLibCheck', 'false', file],
    { encoding: 'utf8' },
  );
  assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
}

test('index.d.ts takes what a provider passes and refuses misuse', () => check('index.test-d.ts'));

test('paperclip/plugin.d.ts takes what a provider passes and refuses misuse', () => check('paperclip.test-d.ts'));

test('every entry point exports its types first, from a file that ships', () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE, 'package.json'), 'utf8'));
  for (const entry of ['.', './paperclip']) {
    const target = pkg.exports[entry];
    // Conditions match in order: `types` after `default` would never be read.
    assert.deepEqual(Object.keys(target), ['types', 'default'], `exports["${entry}"]`);
    assert.ok(existsSync(join(PACKAGE, target.types)), `${target.types} is missing`);
    assert.ok(pkg.files.includes(target.types.split('/')[1]), `${target.types} is not in files`);
  }
});
