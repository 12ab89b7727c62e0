// `auto` over a remote exec where the sandbox has gzip and no zstd (BusyBox
// images): the sandbox times its gzip on the first 512 KiB of an archive
// past 4 MiB and sends them as a probe, which the component times as this
// host delivers it and answers with the link's rate; gzip stays only where
// it beats the link.

import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { loadProvider, localExec } from '../src/index.js';
import { build, hostDir } from './support/trees.js';

/** A remote exec over `exec`: its stdout paced to `rate` bytes a second (none: not paced), its bytes counted. */
function link(exec, rate) {
  const wire = { bytes: 0 };
  const wrapped = (argv, io) => {
    if (!io.stdout) return exec(argv, io);
    const paced = new Transform({
      transform(chunk, _enc, done) {
        wire.bytes += chunk.length;
        if (!rate) return done(null, chunk);
        setTimeout(() => done(null, chunk), (chunk.length / rate) * 1000);
      },
    });
    paced.pipe(io.stdout);
    return exec(argv, { ...io, stdout: paced });
  };
  return { exec: wrapped, wire };
}

describe('auto chooses gzip by the link', () => {
  let provider;
  let dir;
  let remote;
  const text = 'agent step=42 status=ok 2026-12-04T05:00:00Z\n'.repeat(140_000); // ~6.4 MB: probed past 4 MiB
  /** A local sandbox with every tool of /usr/bin but zstd, and gzip as `gzip` (a script). */
  const sandbox = (gzip) => {
    const bin = join(dir, `bin-${Math.random().toString(16).slice(2)}`);
    mkdirSync(bin);
    for (const t of readdirSync('/usr/bin')) {
      if (!t.startsWith('zstd') && t !== 'gzip') symlinkSync(join('/usr/bin', t), join(bin, t));
    }
    writeFileSync(join(bin, 'gzip'), `#!/bin/sh\n${gzip}\nexec /usr/bin/gzip "$@"\n`);
    chmodSync(join(bin, 'gzip'), 0o755);
    return localExec(['env', `PATH=${bin}`]);
  };

  before(async () => {
    provider = await loadProvider('tar-stream');
    dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-adapt-'));
    remote = build(join(dir, 'remote'), { 'log.txt': text });
  });
  after(() => {
    provider.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [name, gzip, rate, gzipped] of [
    ['a slow link gets gzip after the probe', ':', 2_000_000, true],
    ['a gzip slower than the link is not used', 'sleep 0.4', 0, false],
  ]) {
    test(name, async () => {
      const { exec, wire } = link(sandbox(gzip), rate);
      const back = hostDir();
      try {
        await provider.performSyncOut({
          exec,
          remoteDir: remote,
          timeoutMs: 60_000,
          operations: [{ operationId: 'op', files: [{ sourcePath: `${remote}/log.txt`, targetPath: join(back, 'log.txt'), kind: 'file' }] }],
        });
        assert.equal(readFileSync(join(back, 'log.txt'), 'utf8'), text);
        // The probe goes plain either way; gzip makes the stream tiny.
        if (gzipped) assert.ok(wire.bytes < 1 << 20, `${wire.bytes} bytes on the wire`);
        else assert.ok(wire.bytes > text.length, `${wire.bytes} bytes on the wire`);
      } finally {
        rmSync(back, { recursive: true, force: true });
      }
    });
  }
});
