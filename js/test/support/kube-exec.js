// A Kubernetes pod exec for the tests, on the real @kubernetes/client-node,
// behaving like the Paperclip Kubernetes plugin's `execInPodStreaming`
// (pod-exec.ts), plus a launcher for our Rust exec test server.
//
//   const server = await startK8sServer({ protocol: 'v5' });
//   const exec = kubeExec({ kubeconfig: server.kubeconfig, namespace, pod, container });
//   const { exitCode, stderr } = await exec(['sh', '-c', 'head -c 5 | cat'], { stdin, stdout });
//   await server.stop();
//
// Behaviour (the plugin's, re-implemented):
// - Stdin is piped into the exec, but client-node's stdin 'end' handler is
//   removed: ending stdin neither closes the socket (v4) nor sends the v5
//   CLOSE frame, so the pod never sees EOF. Commands that read stdin must
//   frame it themselves (`head -c N | …`).
// - It resolves only once the status frame has arrived AND the stdout sink
//   has emitted 'finish' (client-node ends it on the status frame).
// - Status `Success` is exit 0; otherwise the `details.causes` entry with
//   reason `ExitCode` gives the code; anything else (e.g. InternalError) is 1.
// - Stderr is collected up to `maxStderrBytes`; one byte more fails closed.
// - A watchdog rejects after `timeoutMs` with an Error whose `kind` is
//   'timeout' and drops the socket (the server then kills the process).
// Every rejection carries `partialStderr` and a `kind`: 'timeout',
// 'stderr_limit', 'setup' (no socket), 'connection_closed' or
// 'connection_error' (before the status frame), 'stdin' or 'stdout' (the
// caller's stream failed).

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { TARGET } from '../../scripts/cargo.mjs';

// client-node 1.x, as the orchestrator's Kubernetes plugin pins (^1.0.0);
// 2.x needs Node >= 22.19 through undici.
import { Exec, KubeConfig } from '@kubernetes/client-node';
export { Exec, KubeConfig };

/** Stderr kept when the caller sets no cap (the plugin's sync cap, 1 MiB). */
const DEFAULT_MAX_STDERR_BYTES = 1 << 20;

/**
 * Loads a kubeconfig file. client-node refuses `http://` servers unless the
 * cluster has `insecure-skip-tls-verify: true` ("HTTP protocol is not allowed
 * when skipTLSVerify is not set or false"); our test server is plain HTTP
 * with an unused CA and no credentials, so set the flag for http:// clusters
 * only (there is no TLS to verify).
 */
export function loadKubeConfig(path) {
  const file = new KubeConfig();
  file.loadFromFile(path);
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: file.clusters.map((c) =>
      c.server.startsWith('http:') ? { ...c, skipTLSVerify: true } : c,
    ),
    users: file.users,
    contexts: file.contexts,
    currentContext: file.currentContext,
  });
  return kc;
}

/** `(command, io) => Promise<{exitCode, stderr}>` for one pod container. */
export function kubeExec({ kubeconfig, namespace, pod, container }) {
  const kc = loadKubeConfig(kubeconfig);
  return (command, io) => execInPodStreaming(kc, namespace, pod, container, command, io);
}

/** The exit code a `metav1.Status` from the status channel stands for. */
export function exitCodeOf(status) {
  if (status?.status === 'Success') return 0;
  const cause = status?.details?.causes?.find((c) => c.reason === 'ExitCode');
  const code = Number(cause?.message);
  return Number.isInteger(code) ? code : 1;
}

/**
 * Runs `command` in the container. `io`: `stdin` (Readable), `stdout`
 * (Writable, ended by the exec; output is discarded without one),
 * `timeoutMs`, `maxStderrBytes`.
 */
export function execInPodStreaming(kc, namespace, pod, container, command, io = {}) {
  const { stdin, stdout, timeoutMs, maxStderrBytes = DEFAULT_MAX_STDERR_BYTES } = io;
  return new Promise((resolvePromise, rejectPromise) => {
    let socket = null;
    let settled = false;
    let status = null;
    let stdoutFinished = false;
    const stderrChunks = [];
    let stderrBytes = 0;
    const stderrText = () => Buffer.concat(stderrChunks).toString('utf8');

    const settle = (error, value) => {
      if (settled) return;
      settled = true;
      clearTimeout(watchdog);
      if (stdin) {
        stdin.unpipe(stdinStream);
        stdinStream.destroy();
      }
      if (error) {
        // Drop the connection without a close handshake: the server treats
        // that as the client going away and kills the process.
        socket?.terminate();
        rejectPromise(error);
      } else {
        socket?.close();
        resolvePromise(value);
      }
    };
    const fail = (kind, message, cause) => {
      const error = new Error(`kubernetes exec ${namespace}/${pod}/${container}: ${message}`, {
        cause,
      });
      error.kind = kind;
      error.partialStderr = stderrText();
      settle(error);
    };
    const maybeDone = () => {
      if (status && stdoutFinished) settle(null, { exitCode: exitCodeOf(status), stderr: stderrText() });
    };

    const watchdog =
      timeoutMs > 0
        ? setTimeout(() => fail('timeout', `timed out after ${timeoutMs} ms`), timeoutMs)
        : undefined;

    const sink = stdout ?? new Writable({ write: (_chunk, _enc, done) => done() });
    sink.once('finish', () => {
      stdoutFinished = true;
      maybeDone();
    });
    sink.once('error', (e) => fail('stdout', `stdout sink failed: ${e.message}`, e));

    const stderrSink = new Writable({
      write(chunk, _enc, done) {
        stderrBytes += chunk.length;
        if (stderrBytes > maxStderrBytes) {
          fail('stderr_limit', `stderr exceeded ${maxStderrBytes} bytes`);
        } else {
          // client-node hands us views into WebSocket message buffers.
          stderrChunks.push(Buffer.from(chunk));
        }
        done();
      },
    });

    // client-node reads stdin with 'data' (no backpressure towards the
    // socket) and on 'end' closes the socket (v4) or sends CLOSE (v5). We
    // give it our own PassThrough, delete its 'end' handler once exec()
    // returns, and only then pipe the caller's stream in, so 'end' can never
    // fire before the handler is gone.
    const stdinStream = stdin ? new PassThrough() : null;
    stdin?.once('error', (e) => fail('stdin', `stdin failed: ${e.message}`, e));

    new Exec(kc)
      .exec(namespace, pod, container, command, sink, stderrSink, stdinStream, false, (s) => {
        status = s;
        maybeDone();
      })
      .then(
        (ws) => {
          socket = ws;
          if (settled) {
            ws.terminate();
            return;
          }
          // client-node only reports errors before the socket opens.
          ws.on('error', (e) => fail('connection_error', `socket error: ${e.message}`, e));
          ws.on('close', (code) => {
            if (!status) fail('connection_closed', `socket closed (${code}) before the status frame`);
          });
          if (stdin) {
            stdinStream.removeAllListeners('end');
            stdin.pipe(stdinStream);
          }
        },
        (e) => fail('setup', `exec failed to start: ${e?.message ?? e}`, e),
      );
  });
}

/** The test server binary, `cargo build -p sandbox-sync-tests --example k8s-server`. */
export function k8sServerBinary() {
  return join(TARGET, 'debug', 'examples', 'k8s-server');
}

/**
 * Starts tests/examples/k8s-server.rs (plain HTTP on 127.0.0.1, one pod
 * sandboxes/agent-pod/agent whose execs run on this machine). `protocol`
 * 'v4' makes it refuse v5. Resolves once the kubeconfig is written.
 */
export async function startK8sServer({ protocol = 'v5' } = {}) {
  const binary = k8sServerBinary();
  if (!existsSync(binary)) {
    throw new Error(`${binary} is missing: cargo build -p sandbox-sync-tests --example k8s-server`);
  }
  const dir = await mkdtemp(join(tmpdir(), 'k8s-server-'));
  const kubeconfig = join(dir, 'kubeconfig');
  const child = spawn(binary, [kubeconfig, protocol], { stdio: ['ignore', 'ignore', 'pipe'] });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);

  // The server writes the kubeconfig and then prints "serving on …"; waiting
  // for that line (rather than for the file to appear) never sees a
  // half-written file.
  try {
    await new Promise((ready, failed) => {
      let log = '';
      const timer = setTimeout(() => failed(new Error(`k8s-server did not start: ${log}`)), 10_000);
      child.once('error', failed);
      child.once('exit', (code, signal) => failed(new Error(`k8s-server exited (${code ?? signal}): ${log}`)));
      child.stderr.setEncoding('utf8').on('data', (text) => {
        log += text;
        if (log.includes('serving on') && existsSync(kubeconfig)) {
          clearTimeout(timer);
          ready();
        }
      });
    });
  } catch (e) {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  child.removeAllListeners('exit');

  return {
    kubeconfig,
    namespace: 'sandboxes',
    pod: 'agent-pod',
    container: 'agent',
    async stop() {
      process.removeListener('exit', killOnExit);
      if (child.exitCode === null && child.signalCode === null) {
        const exited = once(child, 'exit');
        child.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
