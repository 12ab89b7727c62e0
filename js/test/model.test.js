// Incremental sync is never wrong, under the Node host too: the Rust
// suite's model test (tests/conformance/model.rs) in small. A seeded
// random sequence of host edits real tools make (same-size rewrites with
// the mtime put back, npm's 1985 mtime, touch, chmod, renames, deletes,
// a file replaced by a directory or a link, writes through a shared
// mapping that a writer keeps), sandbox actions (a chmod to
// the same mode, a link, a touch, a hidden edit) and syncs both ways;
// after every sync the incremental target must equal what a full sync
// lands in entries, types, contents, modes, mtimes and link targets.
// MODEL_STEPS (default 16) and MODEL_SEED vary it.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadProvider, performSyncIn, performSyncOut } from '../src/index.js';
import { mappedWriter } from './support/mapped.js';
import { sandbox } from './support/sandbox.js';
import { hostDir } from './support/trees.js';

const STEPS = Number(process.env.MODEL_STEPS ?? 16);
// Paths here are latin1 strings, one char per byte, so that one name can
// be `caf\xe9.txt`, a name that is not UTF-8 (and a link's target too):
// every fs call below takes their bytes.
const NAMES = ['a.txt', 'b.txt', 'd/c.txt', 'd/e/f.bin', 'g.txt', 'd/caf\xe9.txt'];
const B = (p) => Buffer.from(p, 'latin1');
const chmodSync = (p, mode) => fs.chmodSync(B(p), mode);
const linkSync = (a, b) => fs.linkSync(B(a), B(b));
const lstatSync = (p) => fs.lstatSync(B(p));
const mkdirSync = (p, o) => fs.mkdirSync(B(p), o);
const readdirSync = (p) => fs.readdirSync(B(p), { encoding: 'buffer' }).map((n) => n.toString('latin1'));
const readFileSync = (p) => fs.readFileSync(B(p));
const readlinkSync = (p) => fs.readlinkSync(B(p), { encoding: 'buffer' }).toString('latin1');
const renameSync = (a, b) => fs.renameSync(B(a), B(b));
const rmSync = (p, o) => fs.rmSync(B(p), o);
const statSync = (p) => fs.statSync(B(p));
const symlinkSync = (t, p) => fs.symlinkSync(B(t), B(p));
const unlinkSync = (p) => fs.unlinkSync(B(p));
const utimesSync = (p, a, m) => fs.utimesSync(B(p), a, m);
const writeFileSync = (p, d) => fs.writeFileSync(B(p), d);
/** npm's mtime for every file it unpacks (seconds). */
const NPM = 499_162_500;
const settle = () => new Promise((r) => setTimeout(r, 150));

/** xorshift32, seeded. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
  return { below: (n) => Math.floor(next() * n), bytes: (n) => Buffer.from(Array.from({ length: n }, () => Math.floor(next() * 256))) };
}

/** Every entry under `root`: type, mode, contents' hash, mtime (seconds), link target. */
function describeTree(root) {
  const out = {};
  const walk = (rel) => {
    let names;
    try {
      names = readdirSync(join(root, rel)).sort();
    } catch {
      return;
    }
    for (const n of names) {
      const r = rel ? `${rel}/${n}` : n;
      const p = join(root, r);
      const st = lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out[r] = `l ${readlinkSync(p)}`;
      else if (st.isDirectory()) {
        out[r] = `d${mode}`;
        walk(r);
      } else out[r] = `f${mode} ${createHash('sha256').update(readFileSync(p)).digest('hex').slice(0, 16)} ${Math.floor(st.mtimeMs / 1000)}`;
    }
  };
  walk('');
  return out;
}

const isFile = (p) => {
  try {
    return lstatSync(p).isFile();
  } catch {
    return false;
  }
};

for (const userland of ['gnu', 'busybox']) {
  describe(`incremental model under the Node host on ${userland}`, () => {
    let provider;
    before(async () => {
      provider = await loadProvider('tar-stream');
    });
    after(() => provider.close());

    test(`${STEPS} random steps land what full syncs land, both ways`, async () => {
      const seed = Number(process.env.MODEL_SEED ?? (userland === 'gnu' ? 7 : 11));
      const r = rng(seed);
      const sb = sandbox(userland);
      const host = hostDir();
      const log = [];
      /** Mapped writers by path, kept open across steps. */
      const writers = new Map();
      const fail = (what) => assert.fail(`${what}\nMODEL_SEED=${seed} on ${userland}, steps:\n  ${log.join('\n  ')}`);
      const R = (p) => `${sb.remoteDir}/${p}`;
      const src = join(host, 'src');
      const outSrc = sb.host(R('out'));
      try {
        const old = Date.now() / 1000 - 3600;
        for (const root of [src, outSrc]) {
          for (const n of NAMES) {
            mkdirSync(dirname(join(root, n)), { recursive: true });
            writeFileSync(join(root, n), r.bytes(1 + r.below(3000)));
            utimesSync(join(root, n), old, old);
          }
        }
        sb.adopt(R('out'));
        const run = async (dir, operations, incremental) => {
          const f = dir === 'in' ? performSyncIn : performSyncOut;
          return f({ exec: sb.exec, operations, remoteDir: sb.remoteDir, timeoutMs: 30_000, provider, incremental });
        };
        const syncIn = async () => {
          const ops = (t) => [{ operationId: 'in', files: [{ sourcePath: src, targetPath: R(t), kind: 'directory' }] }];
          const inc = await run('in', ops('in'), true);
          await run('in', ops('in-full'), false);
          log.push(`sync-in: sent ${inc.operations[0].filesTransferred}`);
          const [a, b] = [describeTree(sb.host(R('in'))), describeTree(sb.host(R('in-full')))];
          if (JSON.stringify(a) !== JSON.stringify(b)) fail(`sync-in differs: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
        };
        const syncOut = async () => {
          const ops = (t) => [{ operationId: 'out', files: [{ sourcePath: R('out'), targetPath: join(host, t), kind: 'directory' }] }];
          const inc = await run('out', ops('back'), true);
          await run('out', ops('back-full'), false);
          log.push(`sync-out: sent ${inc.operations[0].filesTransferred}`);
          const [a, b] = [describeTree(join(host, 'back')), describeTree(join(host, 'back-full'))];
          if (JSON.stringify(a) !== JSON.stringify(b)) fail(`sync-out differs: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
        };
        const edit = async (root, side) => {
          const n = NAMES[r.below(NAMES.length)];
          const p = join(root, n);
          const kind = r.below(10);
          let what = 'nothing';
          if (isFile(p) && kind === 9 && statSync(p).size > 0) {
            // A writer that keeps its mapping: its second write to a
            // page moves no ctime (issue 47).
            if (!writers.has(p)) writers.set(p, await mappedWriter(p));
            const size = statSync(p).size;
            const at = r.below(size);
            await writers.get(p).write(at, r.bytes(1 + r.below(16)));
            what = `write through a mapping at ${at}`;
          } else if (isFile(p) && kind <= 1) {
            const st = statSync(p);
            writeFileSync(p, r.bytes(st.size));
            utimesSync(p, st.atime, st.mtime);
            what = 'rewrite, same size and mtime';
          } else if (isFile(p) && kind === 2) {
            writeFileSync(p, r.bytes(statSync(p).size));
            utimesSync(p, NPM, NPM);
            what = 'npm rewrite';
          } else if (isFile(p) && kind === 3) {
            const now = Date.now() / 1000;
            utimesSync(p, now, now);
            what = 'touch';
          } else if (isFile(p) && kind === 4) {
            chmodSync(p, [0o644, 0o755, 0o600][r.below(3)]);
            what = 'chmod';
          } else if (isFile(p) && kind === 5) {
            renameSync(p, join(root, NAMES[r.below(NAMES.length)]));
            what = 'rename';
          } else if (isFile(p) && kind === 6) {
            unlinkSync(p);
            mkdirSync(p);
            writeFileSync(join(p, 'inner.txt'), r.bytes(4));
            what = 'file to directory';
          } else if (isFile(p) && kind === 7) {
            unlinkSync(p);
            symlinkSync('caf\xe9.txt', p);
            what = 'file to symlink';
          } else if (kind === 8) {
            rmSync(p, { recursive: true, force: true });
            what = 'delete';
          }
          if (side === 'sandbox') sb.adopt(R('out'));
          log.push(`${side} ${what} ${n}`);
        };
        const sandboxAction = () => {
          const n = NAMES[r.below(NAMES.length)];
          const p = sb.host(R(`in/${n}`));
          if (!isFile(p)) return;
          const kind = r.below(4);
          if (kind === 0) chmodSync(p, statSync(p).mode & 0o7777);
          else if (kind === 1) {
            linkSync(p, `${p}.lnk`);
            unlinkSync(`${p}.lnk`);
          } else if (kind === 2) {
            const now = Date.now() / 1000;
            utimesSync(p, now, now);
          } else {
            const st = statSync(p);
            writeFileSync(p, r.bytes(st.size));
            utimesSync(p, st.atime, st.mtime);
          }
          log.push(`sandbox ${['chmod to the same mode', 'link and unlink', 'touch', 'hidden edit'][kind]} in/${n}`);
        };
        await settle();
        await syncIn();
        await syncOut();
        for (let i = 0; i < STEPS; i++) {
          const pick = r.below(10);
          if (pick <= 2) await edit(src, 'host');
          else if (pick <= 4) await edit(outSrc, 'sandbox');
          else if (pick === 5) sandboxAction();
          else if (pick === 6) {
            await settle();
            log.push('settle');
          } else if (pick <= 8) await syncIn();
          else await syncOut();
        }
        await syncIn();
        await syncOut();
      } finally {
        for (const w of writers.values()) await w.close();
        sb.cleanup();
        rmSync(host, { recursive: true, force: true });
      }
    });
  });
}
