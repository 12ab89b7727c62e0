// src/index.d.ts is written by hand: test/types/index.test-d.ts holds the
// calls a provider makes (they must compile) and misuses marked
// `@ts-expect-error` (they must not), checked with the TypeScript compiler.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// Its `bin`, beside the package.json it exports.
const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
const file = fileURLToPath(new URL('./types/index.test-d.ts', import.meta.url));

test('index.d.ts takes what a provider passes and refuses misuse', () => {
  const r = spawnSync(
    process.execPath,
    [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--types', 'node', '--skipLibCheck', 'false', file],
    { encoding: 'utf8' },
  );
  assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
});
