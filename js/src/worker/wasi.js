// The WASI imports a provider component uses besides its streams: an empty
// environment, clocks, randomness, and stdout/stderr (its `tracing` output)
// forwarded to the host process's stderr. No filesystem, no sockets: the
// component reaches the host only through host-fs and sandbox-exec.

import { randomBytes, randomFillSync } from 'node:crypto';
import { writeSync } from 'node:fs';
import { IoError, InputStream, OutputStream, Pollable, poll } from './streams.js';

const ORIGIN = process.hrtime.bigint();

/** The end of the component's diagnostics, where Rust reports a failed allocation. */
let tail = '';
const text = new TextDecoder();

/** Where the component's own stdout and stderr go: the host's stderr. */
const diagnostics = new OutputStream({
  write(bytes) {
    tail = (tail + text.decode(bytes)).slice(-256);
    try {
      writeSync(2, bytes);
    } catch {
      // Diagnostics must never fail a sync.
    }
  },
});
const noInput = new InputStream({ read: () => null });

export function clearDiagnostics() {
  tail = '';
}

/** The bytes of the allocation the component last reported failing, or 0. */
export function failedAllocation() {
  return Number(/memory allocation of (\d+) bytes failed/.exec(tail)?.[1] ?? 0);
}

function sleepUntil(ns) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    const left = Number((ns - process.hrtime.bigint()) / 1_000_000n);
    if (left <= 0) return;
    Atomics.wait(cell, 0, 0, left);
  }
}

function timer(at) {
  return new Pollable(
    () => process.hrtime.bigint() >= at,
    () => sleepUntil(at),
  );
}

/** Thrown by `exit`: the instance must not be used again. */
export class ComponentExit extends Error {}

export const wasiImports = {
  'wasi:cli/environment': {
    getEnvironment: () => [],
    getArguments: () => [],
    initialCwd: () => undefined,
  },
  'wasi:cli/exit': {
    exit: (status) => {
      throw new ComponentExit(`the component exited (${status.tag})`);
    },
  },
  'wasi:cli/stderr': { getStderr: () => diagnostics },
  'wasi:cli/stdout': { getStdout: () => diagnostics },
  'wasi:cli/stdin': { getStdin: () => noInput },
  'wasi:cli/terminal-input': { TerminalInput: class TerminalInput {} },
  'wasi:cli/terminal-output': { TerminalOutput: class TerminalOutput {} },
  'wasi:cli/terminal-stdin': { getTerminalStdin: () => undefined },
  'wasi:cli/terminal-stdout': { getTerminalStdout: () => undefined },
  'wasi:cli/terminal-stderr': { getTerminalStderr: () => undefined },
  'wasi:clocks/monotonic-clock': {
    now: () => process.hrtime.bigint() - ORIGIN,
    resolution: () => 1n,
    subscribeInstant: (at) => timer(at + ORIGIN),
    subscribeDuration: (ns) => timer(process.hrtime.bigint() + ns),
  },
  'wasi:clocks/wall-clock': {
    now: () => {
      const ms = BigInt(Date.now());
      return { seconds: ms / 1000n, nanoseconds: Number(ms % 1000n) * 1_000_000 };
    },
    resolution: () => ({ seconds: 0n, nanoseconds: 1_000_000 }),
  },
  'wasi:io/error': { Error: IoError },
  'wasi:io/poll': { Pollable, poll },
  'wasi:io/streams': { InputStream, OutputStream },
  'wasi:random/random': {
    getRandomBytes: (len) => new Uint8Array(randomBytes(Number(len))),
    getRandomU64: () => randomFillSync(new BigUint64Array(1))[0],
  },
  'wasi:random/insecure-seed': {
    insecureSeed: () => {
      const [a, b] = randomFillSync(new BigUint64Array(2));
      return [a, b];
    },
  },
};
