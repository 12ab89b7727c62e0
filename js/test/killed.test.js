// Issue 48: a sync whose worker thread is terminated at a random point
// (seeded: the same points each run), or whose whole Node process is
// SIGKILLed, in either direction, is followed by an incremental sync that
// lands exactly what a full sync lands, with nothing reserved left in the
// target or beside it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { after, before, test } from 'node:test';
import { localExec, performSyncIn, performSyncOut } from '../src/index.js';
import { describeTree } from './support/trees.js';

const INDEX = fileURLToPath(new URL('../src/index.js', import.meta.url));
const FILES = 1500;

let tmp;
before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'sandbox-sync-js-killed-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A seeded xorshift: the same points each run. */
function xorshift(seed) {
  let s = BigInt(seed);
  const M = (1n << 64n) - 1n;
  return () => {
    s ^= (s << 13n) & M;
    s ^= s >> 7n;
    s ^= (s << 17n) & M;
    return Number(s % 1_000_000n);
  };
}

function fill(dir) {
  for (let f = 0; f < FILES; f++) {
    mkdirSync(join(dir, 'many', `d${f % 30}`), { recursive: true });
    writeFileSync(join(dir, 'many', `d${f % 30}`, `f${f}.txt`), `${f}\n`.repeat(50));
  }
  symlinkSync('many/d1/f1.txt', join(dir, 'link'));
  writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(dir, 'run.sh'), 0o755);
}

/** Every provider worker this process starts, to terminate one mid-call. */
const started = [];
const post = Worker.prototype.postMessage;
Worker.prototype.postMessage = function (...args) {
  if (!started.includes(this)) started.push(this);
  return post.apply(this, args);
};

function spec(direction, remoteDir, source, target, extra = {}) {
  return {
    exec: localExec(),
    remoteDir,
    timeoutMs: 60_000,
    operations: [{ operationId: 'o', files: [{ sourcePath: source, targetPath: target, kind: 'directory' }] }],
    ...extra,
  };
}

const perform = (direction, s) => (direction === 'in' ? performSyncIn(s) : performSyncOut(s));

/** Host scratch a killed call could leave: nothing reserved anywhere under or beside `target`. */
function assertClean(parent, target, expected, at) {
  assert.deepEqual(readdirSync(parent).sort(), expected, `${at}: left beside the target`);
  const reserved = Object.keys(describeTree(target)).filter((p) => p.includes('.paperclip-upload'));
  assert.deepEqual(reserved, [], at);
}

async function killedThenExact(direction, seed, kill) {
  const root = mkdtempSync(join(tmp, `${direction}-`));
  const remote = join(root, 'remote');
  const [source, target] = direction === 'in' ? [join(root, 'src'), join(remote, 'ws')] : [join(remote, 'out'), join(root, 'results', 'target')];
  mkdirSync(source, { recursive: true });
  mkdirSync(direction === 'in' ? remote : join(root, 'results'), { recursive: true });
  fill(source);
  const next = xorshift(seed);
  await perform(direction, spec(direction, remote, source, target));
  for (let round = 0; round < 6; round++) {
    const f = next() % FILES;
    writeFileSync(join(source, 'many', `d${f % 30}`, `f${f}.txt`), `round ${round}\n`);
    writeFileSync(join(source, `new${round}`), 'n');
    if (round > 0) unlinkSync(join(source, `new${round - 1}`));
    const delay = next() % 600;
    const at = `${direction}, round ${round}, killed after ${delay} ms`;
    await kill(direction, spec(direction, remote, source, target), delay);
    await perform(direction, spec(direction, remote, source, target));
    const fullRemote = direction === 'in' ? join(root, `remote-full${round}`) : remote;
    const full = direction === 'in' ? join(fullRemote, 'ws') : join(root, `full${round}`);
    mkdirSync(fullRemote, { recursive: true });
    await perform(direction, spec(direction, fullRemote, source, full, { incremental: false }));
    assert.deepEqual(describeTree(target), describeTree(full), `${at}: not what a full sync lands`);
    assert.deepEqual(describeTree(target), describeTree(source), at);
    assertClean(direction === 'in' ? remote : join(root, 'results'), target, direction === 'in' ? ['ws'] : ['target'], at);
    rmSync(direction === 'in' ? fullRemote : full, { recursive: true });
  }
}

/** Terminates the call's worker thread after `delay` ms (the call fails, or finishes first). */
async function terminateThread(direction, s, delay) {
  started.length = 0;
  const call = perform(direction, s).catch(() => {});
  await new Promise((ok) => setTimeout(ok, delay));
  // The call's worker (a new one, or the idle one it took) has been posted its call.
  for (const w of started.splice(0)) await w.terminate();
  await call;
  // The sandbox program the call started ends once its execs are aborted.
  await new Promise((ok) => setTimeout(ok, 300));
}

/** Runs the call in a Node process of its own and SIGKILLs it after `delay` ms. */
async function killProcess(direction, s, delay) {
  const { exec, ...rest } = s;
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const m = await import(${JSON.stringify(INDEX)}); const s = JSON.parse(process.argv[1]);
       await (s.direction === 'in' ? m.performSyncIn : m.performSyncOut)({ ...s, exec: m.localExec() });`,
      JSON.stringify({ direction, ...rest }),
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise((ok) => child.on('exit', ok));
  await new Promise((ok) => setTimeout(ok, delay));
  child.kill('SIGKILL');
  await exited;
  // The sandbox program it started ends with its pipes.
  await new Promise((ok) => setTimeout(ok, 300));
}

test('a sync-out whose worker thread is terminated is followed by an exact one', () => killedThenExact('out', 0x5eed48, terminateThread));
test('a sync-in whose worker thread is terminated is followed by an exact one', () => killedThenExact('in', 0x511748, terminateThread));
test('a sync-out whose process is killed is followed by an exact one', () => killedThenExact('out', 0x770a48, killProcess));
test('a sync-in whose process is killed is followed by an exact one', () => killedThenExact('in', 0xe11a48, killProcess));

test('what a gone process left beside a target goes with the next sync-out, and only that', async () => {
  const root = mkdtempSync(join(tmp, 'beside-'));
  const remote = join(root, 'remote');
  mkdirSync(join(remote, 'out'), { recursive: true });
  writeFileSync(join(remote, 'out', 'a'), 'a');
  const parent = join(root, 'results');
  const target = join(parent, 'target');
  mkdirSync(target, { recursive: true });
  // No pid is this high (pid_max is at most 2^22); the parent process lives.
  const gone = ['.paperclip-upload-replace-4194305-0', '.paperclip-upload-old-4194305-0a1b2c3d4e5f'];
  const live = `.paperclip-upload-old-${process.ppid}-0`;
  for (const n of [...gone, live]) mkdirSync(join(parent, n, 'old'), { recursive: true });
  await performSyncOut(spec('out', remote, join(remote, 'out'), target));
  assert.deepEqual(readdirSync(parent).sort(), [live, 'target']);
});

test('a swap cut between its renames is settled by the main thread: the old tree back, the new one gone', async () => {
  const { removeScratch } = await import('../src/scratch.js');
  const { lstatSync, renameSync, readFileSync } = await import('node:fs');
  const parent = mkdtempSync(join(tmp, 'settle-'));
  const grant = join(parent, 'target');
  mkdirSync(grant);
  writeFileSync(join(grant, 'old-file'), 'old');
  const staged = join(parent, '.paperclip-upload-replace-1-ab');
  mkdirSync(staged);
  const st = (p) => lstatSync(p, { bigint: true });
  const entries = [
    { name: '.paperclip-upload-replace-1-ab', dev: st(staged).dev, ino: st(staged).ino, beside: 'staged' },
    { name: '.paperclip-upload-old-1-cd', dev: st(grant).dev, ino: st(grant).ino, beside: 'old' },
  ];
  // Cut after the grant went aside, before the staged tree took its name.
  renameSync(grant, join(parent, '.paperclip-upload-old-1-cd'));
  assert.deepEqual(removeScratch(grant, entries), []);
  assert.deepEqual(readdirSync(parent), ['target']);
  assert.equal(readFileSync(join(grant, 'old-file'), 'utf8'), 'old');
  // Cut after the swap, before the old tree was removed: the old tree goes.
  const old = join(parent, '.paperclip-upload-old-1-cd');
  renameSync(grant, old);
  mkdirSync(grant);
  assert.deepEqual(removeScratch(grant, [entries[1]]), []);
  assert.deepEqual(readdirSync(parent), ['target']);
  assert.deepEqual(readdirSync(grant), []);
});
