// Run as a child process: one sync-out, measuring this process's memory
// from /proc/self/status. argv[2] is JSON: {codec, bomb, pad, maxOutputBytes}
// (the sandbox answers with a codec frame, the file `bomb`, then `pad`
// bytes of 'a'), or {component, growMiB} (a provider directory,
// growing-component.js's).
// Prints JSON: the error's kind and message, `grewMiB` (peak RSS during the
// sync over RSS before it) and `heldMiB` (RSS once the call's workers have
// let go, over RSS before).

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, pipeline } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadProvider } from '../../src/index.js';

const { codec = 'none', bomb, pad = 0, maxOutputBytes, component = 'tar-stream', growMiB = 0 } = JSON.parse(process.argv[2]);
const MiB = 1 << 20;

function status(field) {
  return Number(readFileSync('/proc/self/status', 'utf8').match(new RegExp(`${field}:\\s+(\\d+) kB`))[1]) * 1024;
}

function marker(words) {
  const m = Buffer.alloc(512, ' ');
  m.write(`SANDBOX-SYNC ${words}`);
  m[511] = 10;
  return m;
}

function* stdout() {
  yield marker(`codec ${codec}`);
  yield readFileSync(bomb);
  // Reused: the sandbox's own garbage is no part of the host's RSS.
  const a = Buffer.alloc(MiB, 'a');
  for (let n = 0; n < pad; n += MiB) yield a.subarray(0, Math.min(MiB, pad - n));
}

// Like the real bootstrap, it reads the whole program (its length is the
// last argument), then answers and exits.
const exec = (argv, io) =>
  new Promise((resolve) => {
    let program = Number(argv.at(-1));
    const answer = () => pipeline(Readable.from(stdout()), io.stdout, () => resolve({ exitCode: 0, stderr: '' }));
    io.stdin.on('data', (chunk) => {
      if (program > 0 && (program -= chunk.length) <= 0) answer();
    });
  });

const root = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-rss-'));
mkdirSync(join(root, 'src'));
const files = [{ sourcePath: join(root, 'src'), targetPath: join(root, 'target'), kind: 'directory' }];
const provider = await loadProvider(component);
try {
  // Resets VmHWM to the current RSS (Linux 4.0+).
  writeFileSync('/proc/self/clear_refs', '5');
} catch {
  // Then VmHWM counts from the start, an overestimate.
}
const before = status('VmRSS');
let outcome;
try {
  const operations = [{ operationId: `grow ${growMiB}`, files }];
  await provider.performSyncOut({ exec, compression: codec, incremental: false, remoteDir: root, timeoutMs: 60_000, maxOutputBytes, operations });
  outcome = { kind: 'ok' };
} catch (e) {
  outcome = { kind: e.kind, message: e.message };
}
const grew = status('VmHWM') - before;
// A worker the call retired exits soon after: give it time.
for (let i = 0; i < 50 && status('VmRSS') - before > 64 * MiB; i++) await sleep(100);
const held = status('VmRSS') - before;
provider.close();
rmSync(root, { recursive: true, force: true });
console.log(JSON.stringify({ ...outcome, grewMiB: Math.round(grew / MiB), heldMiB: Math.round(held / MiB) }));
