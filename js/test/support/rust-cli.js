// The Rust CLI (the debug build `cargo test` made) on the very component a
// shipped transpilation came from: the other side of the differential tests.

import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TARGET, componentSource } from '../../scripts/cargo.mjs';
import { hostDir } from './trees.js';

const CLI = join(TARGET, 'debug', 'sandbox-sync');

/** `sandbox-sync VERB --remote-dir R --ops … --component … ...args`; its result in the seed's shape. */
export function rustCli(verb, { component, operations, remoteDir, args = [] }) {
  const dir = hostDir('ops');
  const ops = join(dir, 'ops.json');
  writeFileSync(ops, JSON.stringify(operations));
  try {
    const out = execFileSync(CLI, [verb, '--remote-dir', remoteDir, '--ops', ops, '--component', componentSource(component), ...args], {
      encoding: 'utf8',
    });
    return { operations: JSON.parse(out).operations };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
