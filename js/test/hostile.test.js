// A compromised sandbox through the JS host (mirrors tests/conformance/hostile.rs):
// its `tar` passes for GNU tar and writes a crafted archive whatever it is
// asked. Every attack class must be refused with a typed error and land
// nothing: no byte outside the target, no staging, no special file, no
// set-id bit. The GNU sandbox runs as this process's user (root here), so
// this is also the root-sandbox variant.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Writable } from 'node:stream';
import { dirname, isAbsolute, join, resolve as resolvePath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncOut, SandboxSyncError } from '../src/index.js';
import { localExec } from '../src/local-exec.js';
import { TARGET } from '../scripts/cargo.mjs';
import { sandbox } from './support/sandbox.js';
import { hostDir } from './support/trees.js';
import { watchLoop } from './support/loop.js';

const FUZZ_CORPUS = join(TARGET, 'debug', 'examples', 'fuzz-corpus');
// Both read a tar the sandbox's `tar` wrote: streamed, or staged and read back in base64 chunks.
const COMPONENTS = ['tar-stream', 'base64-fallback'];
const REFUSED = ['unsafe-archive', 'limit-exceeded'];
// Not even the target directory the host made for the call.
const NOTHING_LANDED = ['outside', 'outside/victim'];

const HOSTILE_TAR = `#!/bin/sh
case $1 in --version) echo 'tar (GNU tar) 1.35'; exit 0 ;; esac
exec cat ./.evil.tar
`;

/** The fixtures fuzz-corpus writes: `[name, whole archive]`, `benign` included. */
function corpus() {
  if (!existsSync(FUZZ_CORPUS)) {
    throw new Error(`${FUZZ_CORPUS} is not built: cargo build -p sandbox-sync-tests --example fuzz-corpus`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-corpus-'));
  try {
    execFileSync(FUZZ_CORPUS, [dir], { stdio: ['ignore', 'ignore', 'inherit'] });
    const d = join(dir, 'tar_stream');
    return readdirSync(d)
      .sort()
      .map((name) => [name, readFileSync(join(d, name))]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A directory holding the hostile `tar`, first on the sandbox's PATH. */
function fakeBin() {
  const dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-fakebin-'));
  writeFileSync(join(dir, 'tar'), HOSTILE_TAR);
  chmodSync(join(dir, 'tar'), 0o755);
  return dir;
}

/** A GNU sandbox whose `<remoteDir>/src` holds `.evil.tar`, and a host with a victim beside the target. */
function hostileCase(archive) {
  const sb = sandbox('gnu');
  const src = join(sb.remoteDir, 'src');
  mkdirSync(src);
  writeFileSync(join(src, '.evil.tar'), archive);
  const host = hostDir('hostile');
  mkdirSync(join(host, 'outside'));
  writeFileSync(join(host, 'outside/victim'), 'untouched');
  return {
    sb,
    src,
    host,
    target: join(host, 'target'),
    cleanup() {
      sb.cleanup();
      rmSync(host, { recursive: true, force: true });
    },
  };
}

/** Relative paths under `dir`, and what is wrong among them (special files, set-id or sticky bits). */
function audit(dir) {
  const paths = [];
  const bad = [];
  const walk = (rel) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, r));
      paths.push(r);
      if (!st.isDirectory() && !st.isFile() && !st.isSymbolicLink()) bad.push(`special file ${r}`);
      if (st.mode & 0o7000) bad.push(`mode ${(st.mode & 0o7777).toString(8)} on ${r}`);
      if (st.isDirectory()) walk(r);
    }
  };
  walk('');
  return { paths, bad };
}

/** The corpus entries whose only fault is symlinks that leave the target (as in the Rust suite). */
const ONLY_LINKS_THAT_LEAVE = [
  'lone-escaping-symlink',
  'cve-2019-11249-own-dir',
  'absolute-symlink',
  'proc-self-root-symlink',
  'path-max-chain',
  'pax-linkpath-absolute',
  'backslash-dotdot-link',
  'climb-after-a-name',
];

/** Every symlink under `dir`: its path, target, and where it lexically resolves. */
function landedLinks(dir) {
  const found = [];
  const walk = (rel) => {
    for (const name of readdirSync(join(dir, rel))) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, r));
      if (st.isSymbolicLink()) {
        const target = readlinkSync(join(dir, r));
        found.push({ path: r, target, resolved: resolvePath(dirname(join(dir, r)), target) });
      } else if (st.isDirectory()) walk(r);
    }
  };
  walk('');
  return found;
}

function syncOut(provider, c, exec, extra = {}) {
  return performSyncOut({
    provider,
    exec,
    remoteDir: c.sb.remoteDir,
    operations: [{ operationId: 'o', files: [{ sourcePath: c.src, targetPath: c.target, kind: 'directory' }] }],
    timeoutMs: 30_000,
    maxEntries: 1000,
    maxMetadataBytes: 512 << 10,
    ...extra,
  });
}

/** What is wrong after a refused sync: anything landed, the victim touched. */
function leftovers(c) {
  const wrong = [];
  const { paths, bad } = audit(c.host);
  wrong.push(...bad);
  if (paths.join('\n') !== NOTHING_LANDED.join('\n')) wrong.push(`landed: ${paths.join(', ')}`);
  if (readFileSync(join(c.host, 'outside/victim'), 'utf8') !== 'untouched') wrong.push('outside/victim was changed');
  return wrong;
}

/**
 * Wraps `exec` to keep each execution's stdout (in order); it settles only
 * once the bytes are through `io.stdout`.
 */
function recording(exec) {
  const outputs = [];
  const wrapped = async (argv, io) => {
    const chunks = [];
    outputs.push(chunks);
    const tee = new Writable({
      write(chunk, _enc, done) {
        chunks.push(Buffer.from(chunk));
        io.stdout.write(chunk, done);
      },
      final(done) {
        io.stdout.end(done);
      },
    });
    const r = await exec(argv, { ...io, stdout: tee });
    if (!tee.writableFinished) await new Promise((ok) => tee.once('finish', ok));
    return r;
  };
  wrapped.outputs = () => outputs.map((c) => Buffer.concat(c));
  return wrapped;
}

/**
 * An exec replaying `outputs` (one per execution, each exiting 0) until
 * `limit` bytes in all; the execution that crosses it writes up to the
 * limit and then neither ends, exits nor reads its stdin.
 */
function hangingAfter(outputs, limit) {
  let next = 0;
  let sent = 0;
  return (_argv, io) => {
    const out = outputs[next++] ?? Buffer.alloc(0);
    if (sent + out.length <= limit) {
      sent += out.length;
      io.stdout.end(out);
      return Promise.resolve({ exitCode: 0, stderr: '' });
    }
    io.stdout.write(out.subarray(0, limit - sent));
    sent = limit;
    return new Promise(() => {});
  };
}

describe('a hostile sandbox on sync-out', () => {
  let fixtures;
  let bin;
  let exec;

  before(() => {
    fixtures = corpus();
    bin = fakeBin();
    exec = localExec(['env', `PATH=${bin}:/usr/local/bin:/usr/bin:/bin`]);
  });
  after(() => rmSync(bin, { recursive: true, force: true }));

  test('the corpus holds the attack classes and a benign archive', () => {
    const names = fixtures.map(([n]) => n);
    assert.ok(names.includes('benign'));
    for (const n of ['dotdot', 'absolute-name', 'hardlink-dotdot', 'char-device', 'setuid-file', 'symlink-then-write-absolute', 'entry-count-flood']) {
      assert.ok(names.includes(n), `fuzz-corpus wrote no ${n}`);
    }
  });

  for (const component of COMPONENTS) {
    describe(component, () => {
      let provider;
      before(async () => {
        provider = await loadProvider(component);
      });
      after(() => provider.close());

      test('refuses every attack class as unsafe-archive or limit-exceeded, landing nothing', async () => {
        const wrong = [];
        for (const [name, archive] of fixtures) {
          if (name === 'benign') continue;
          const c = hostileCase(archive);
          try {
            await syncOut(provider, c, exec, { strictLinks: true });
            wrong.push(`${name}: accepted`);
          } catch (e) {
            if (!(e instanceof SandboxSyncError) || !REFUSED.includes(e.kind)) {
              wrong.push(`${name}: ${e?.kind ?? 'not a SandboxSyncError'}: ${String(e?.message ?? e).slice(0, 300)}`);
            }
          }
          try {
            for (const w of leftovers(c)) wrong.push(`${name}: ${w}`);
          } finally {
            c.cleanup();
          }
        }
        assert.deepEqual(wrong, [], `not refused cleanly:\n${wrong.join('\n')}`);
      });

      test('by default, lands an archive whose only fault is links that leave, without them, and names them', async () => {
        const wrong = [];
        const warnings = [];
        for (const [name, archive] of fixtures) {
          if (name === 'benign') continue;
          const c = hostileCase(archive);
          try {
            const r = await syncOut(provider, c, exec, { onWarning: (w) => warnings.push(w) });
            if (!ONLY_LINKS_THAT_LEAVE.includes(name)) wrong.push(`${name}: accepted skipping links`);
            else if (!(r.operations[0].skippedLinkCount > 0)) wrong.push(`${name}: nothing skipped`);
            const { bad } = audit(c.host);
            wrong.push(...bad.map((b) => `${name}: ${b}`));
            for (const l of landedLinks(c.target)) {
              if (isAbsolute(l.target) || !l.resolved.startsWith(`${c.target}/`)) wrong.push(`${name}: ${l.path} -> ${l.target} landed`);
            }
            if (readFileSync(join(c.host, 'outside/victim'), 'utf8') !== 'untouched') wrong.push(`${name}: outside/victim was changed`);
          } catch (e) {
            if (ONLY_LINKS_THAT_LEAVE.includes(name)) wrong.push(`${name}: refused: ${e?.message}`);
            else if (!(e instanceof SandboxSyncError) || !REFUSED.includes(e.kind)) wrong.push(`${name}: ${e?.kind}: ${e?.message}`);
            else for (const w of leftovers(c)) wrong.push(`${name}: ${w}`);
          } finally {
            c.cleanup();
          }
        }
        assert.deepEqual(wrong, [], `wrong:\n${wrong.join('\n')}`);
        assert.ok(warnings.some((w) => w.includes('syncOut: skipped symlink whose target leaves the synced directory: l -> /etc/passwd')), warnings.join('\n'));
      });

      test('a benign archive through the same harness lands', async () => {
        const c = hostileCase(new Map(fixtures).get('benign'));
        try {
          await syncOut(provider, c, exec);
          assert.equal(readFileSync(join(c.target, 'd/ok'), 'utf8'), 'fine');
          assert.equal(lstatSync(join(c.target, 'l')).isSymbolicLink(), true);
          assert.deepEqual(audit(c.host).bad, []);
        } finally {
          c.cleanup();
        }
      });

      test('a hostile stream far larger than the pipes is refused at once, not at the timeout', async () => {
        // The refusal comes at the first header, while the sandbox still has
        // 32 MiB to write (random: no codec shrinks it into the pipes); the
        // host must let it finish rather than wait it out.
        const evil = Buffer.concat([new Map(fixtures).get('dotdot'), randomFillSync(Buffer.alloc(32 << 20))]);
        const c = hostileCase(evil);
        const t0 = Date.now();
        try {
          await assert.rejects(syncOut(provider, c, exec, { timeoutMs: 20_000 }), (e) => e instanceof SandboxSyncError && e.kind === 'unsafe-archive');
          assert.ok(Date.now() - t0 < 5000, `refused after ${Date.now() - t0} ms`);
          assert.deepEqual(leftovers(c), []);
        } finally {
          c.cleanup();
        }
      });

      test('an exec that hangs mid-stream holds the deadline, lands nothing, and leaves the event loop free', async () => {
        const settings = { compression: 'none', incremental: false };
        const benign = new Map(fixtures).get('benign');
        // The real stream for the benign archive, then the same bytes cut at half.
        const rec = recording(exec);
        const first = hostileCase(benign);
        try {
          await syncOut(provider, first, rec, settings);
        } finally {
          first.cleanup();
        }
        const outputs = rec.outputs();
        const total = outputs.reduce((n, o) => n + o.length, 0);
        assert.ok(total > 1024, `recorded only ${total} bytes`);

        const c = hostileCase(benign);
        const stop = watchLoop();
        const t0 = Date.now();
        try {
          await assert.rejects(
            syncOut(provider, c, hangingAfter(outputs, total >> 1), { ...settings, timeoutMs: 1500 }),
            (e) => {
              assert.ok(e instanceof SandboxSyncError, `not a SandboxSyncError: ${e?.stack ?? e}`);
              assert.ok(['limit-exceeded', 'transport'].includes(e.kind), `${e.kind}: ${e.message}`);
              return true;
            },
          );
          const took = Date.now() - t0;
          const gap = stop();
          assert.ok(took < 1500 + 2500, `rejected after ${took} ms`);
          assert.ok(gap < 250, `the event loop stalled for ${gap} ms`);
          assert.deepEqual(leftovers(c), []);
        } finally {
          stop();
          c.cleanup();
        }
      });
    });
  }
});

// The orchestrator's own test of the output guard: an exec that writes past
// the guard and settles without ever reading its stdin. However the exit
// and the script's send race, the guard is what the caller hears.
describe('an exec that floods stdout and exits without reading stdin', () => {
  test('trips the output guard, every time', async () => {
    const target = hostDir();
    try {
      for (let i = 0; i < 12; i++) {
        const exec = async (_argv, io) => {
          io.stdout.write(Buffer.alloc(4096));
          return { exitCode: 0, stderr: '' };
        };
        await assert.rejects(
          performSyncOut({
            exec,
            remoteDir: '/workspace',
            maxOutputBytes: 1024,
            timeoutMs: 10_000,
            operations: [{ operationId: 'op', files: [{ sourcePath: '/workspace/big.bin', targetPath: join(target, 'big.bin'), kind: 'file' }] }],
          }),
          (e) => {
            assert.ok(e instanceof SandboxSyncError, `not a SandboxSyncError: ${e?.stack ?? e}`);
            assert.equal(e.kind, 'limit-exceeded', `run ${i}: ${e.message}`);
            return true;
          },
        );
      }
      assert.deepEqual(readdirSync(target), []);
    } finally {
      rmSync(target, { recursive: true, force: true });
    }
  });
});
