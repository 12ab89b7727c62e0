// An `exec` (the orchestrator's pod-exec contract) that runs argv as a local
// child process: for a local sandbox, the plugin worker, and the tests.

import { spawn } from 'node:child_process';
import { finished } from 'node:stream';

/** How long the pipes may outlive the shell (as the Rust local backend allows). */
const STDIO_GRACE_MS = 2000;

/** The execs localExec made: a wrapper around one is another exec, as remote as any. */
const LOCAL = new WeakSet();

/**
 * Whether `exec` runs on this machine: bytes then cost no network link, so
 * (as the Rust host's local backend) `auto` compresses nothing and a
 * sync-out lists nothing it does not need.
 */
export const isLocalExec = (exec) => LOCAL.has(exec);

/**
 * `exec(argv, {stdin?, stdout?, timeoutMs?, maxStderrBytes?}) -> {exitCode, stderr}`
 * running `[...prefix, ...argv]` (a prefix such as `chroot ROOT`).
 *
 * The child leads its own process group, and the whole group is killed at
 * the timeout, when the caller's stdin or stdout fails (an aborted sync), and
 * soon after the shell exits: a leftover grandchild (a killed command's
 * child) would otherwise hold the pipes open. It settles after 'close', not
 * 'exit' (Node drops a child's unread stdout at exit), and once `io.stdout`
 * has finished taking every byte, as the orchestrator's pod exec does. Stderr keeps one byte past
 * `maxStderrBytes`, so the caller can tell the cap was passed.
 */
export function localExec(prefix = []) {
  const exec = (argv, io = {}) =>
    new Promise((resolve, reject) => {
      const [cmd, ...args] = [...prefix, ...argv];
      const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      const cap = io.maxStderrBytes ?? 1 << 20;
      const stderr = [];
      let stderrBytes = 0;
      let timedOut = false;
      const kill = () => {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // The group is gone already (or never started).
        }
      };
      const timer = io.timeoutMs
        ? setTimeout(() => {
            timedOut = true;
            kill();
          }, io.timeoutMs)
        : undefined;
      // A child that exits without reading all of stdin makes the pipe fail.
      child.stdin.on('error', () => {});
      if (io.stdin) {
        io.stdin.on('error', kill);
        io.stdin.pipe(child.stdin);
      } else child.stdin.end();
      if (io.stdout) {
        io.stdout.on('error', kill);
        child.stdout.pipe(io.stdout);
      } else child.stdout.resume();
      child.stderr.on('data', (d) => {
        if (stderrBytes <= cap) stderr.push(d.subarray(0, cap + 1 - stderrBytes));
        stderrBytes += d.length;
      });
      child.on('error', (err) => {
        clearTimeout(timer);
        kill();
        reject(err);
      });
      child.on('exit', () => setTimeout(kill, STDIO_GRACE_MS).unref());
      child.on('close', (exitCode) => {
        clearTimeout(timer);
        kill();
        const collected = Buffer.concat(stderr).toString();
        if (timedOut) {
          const err = new Error(`local exec timed out after ${io.timeoutMs} ms`);
          reject(Object.assign(err, { kind: 'timeout', partialStderr: collected }));
        } else if (io.stdout) {
          // Settle once the sink has taken every byte (or failed).
          finished(io.stdout, () => resolve({ exitCode, stderr: collected }));
        } else resolve({ exitCode, stderr: collected });
      });
    });
  LOCAL.add(exec);
  return exec;
}
