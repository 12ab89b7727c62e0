// The main thread's side of a provider worker: it runs the caller's `exec`
// for each execution the component starts, and moves that exec's bytes to
// and from the worker (see worker/channel.js for the other side).

import { Readable, Writable } from 'node:stream';
import { MessageChannel, Worker } from 'node:worker_threads';
import { MSG, STDOUT_BATCH, WINDOW } from './protocol.js';

const WORKER = new URL('./worker/main.js', import.meta.url);
/** Largest chunk handed to the caller's stdin. */
const STDIN_PIECE = 128 << 10;

/**
 * The host's Node flags a provider worker keeps: those deciding which files
 * its imports load. A Worker inherits all of them by default, and they are
 * the host's: `--input-type` (a `node -e` host) fails the worker's start,
 * and `--import`/`--require` would run the host's preloads in it. V8 flags
 * (`--expose-gc`, `--max-old-space-size`) are process-wide, so the worker
 * has them anyway (a Worker's `execArgv` refuses them); the inspector is
 * the process's, and sees workers through its own session; NODE_OPTIONS
 * still reaches every worker.
 */
const WORKER_FLAGS = new Set(['--preserve-symlinks', '--preserve-symlinks-main']);

function workerExecArgv() {
  return process.execArgv.filter((flag) => WORKER_FLAGS.has(flag));
}

/** Reads a caller's exec rejection as a timeout, as the seed's pod exec reports one. */
function isTimeout(err) {
  return err?.kind === 'timeout' || err?.timedOut === true || /timed out/i.test(err?.message ?? '');
}

function asBytes(stderr) {
  if (stderr == null) return new Uint8Array(0);
  return typeof stderr === 'string' ? new TextEncoder().encode(stderr) : new Uint8Array(stderr);
}

/** One execution, run by the caller's `exec`. */
class Execution {
  constructor(worker, { id, argv, timeoutMs, maxStderrBytes }, exec) {
    this.worker = worker;
    this.id = id;
    this.over = false;
    this.stdinAcks = 0; // bytes pushed beyond the Readable's buffer, to acknowledge on read
    this.stdoutOut = 0; // bytes posted to the worker, not yet acknowledged
    this.stdoutWaiting = null;
    this.discard = false;
    this.aborted = false;
    this.batch = []; // stdout chunks not yet posted
    this.batchBytes = 0;
    this.stdin = new Readable({
      highWaterMark: 1 << 20,
      read: () => this.ackStdin(),
    });
    this.stdout = new Writable({
      highWaterMark: 1 << 20,
      write: (chunk, _enc, done) => this.forward(chunk, done),
      final: (done) => {
        this.flushStdout();
        this.post({ type: MSG.STDOUT_END });
        done();
      },
    });
    // The component reads stdin's failure from the exit status; a caller
    // that stops reading stdin must not crash the process.
    this.stdin.on('error', () => {});
    this.stdout.on('error', () => {});
    Promise.resolve()
      .then(() => exec(argv, { stdin: this.stdin, stdout: this.stdout, timeoutMs, maxStderrBytes: maxStderrBytes + 1 }))
      .then(
        (r) => {
          const stderr = asBytes(r?.stderr);
          return {
            exitCode: Number.isInteger(r?.exitCode) ? r.exitCode : null,
            timedOut: r?.timedOut === true,
            stderr: stderr.slice(0, maxStderrBytes),
            stderrTruncated: stderr.length > maxStderrBytes,
          };
        },
        (err) =>
          isTimeout(err)
            ? { exitCode: null, timedOut: true, stderr: asBytes(err?.partialStderr).slice(0, maxStderrBytes), stderrTruncated: false }
            : { error: `the sandbox exec failed: ${err?.message ?? err}` },
      )
      .then(async (status) => {
        await this.stdoutFlushed();
        this.exit(status);
      });
  }

  post(message, transfer) {
    if (!this.over) this.worker.post({ id: this.id, ...message }, transfer);
  }

  /** From the worker. */
  deliver(m) {
    switch (m.type) {
      case MSG.STDIN: {
        const chunk = Buffer.from(m.chunk.buffer, m.chunk.byteOffset, m.chunk.length);
        // An exec may send each chunk as one message (client-node: one
        // WebSocket frame), so keep chunks to a size any server takes.
        let ok = true;
        for (let at = 0; at < chunk.length; at += STDIN_PIECE) ok = this.stdin.push(chunk.subarray(at, at + STDIN_PIECE));
        if (ok) this.post({ type: MSG.STDIN_ACK, bytes: chunk.length });
        else this.stdinAcks += chunk.length;
        break;
      }
      case MSG.STDIN_END:
        this.stdin.push(null);
        break;
      case MSG.STDOUT_ACK:
        this.stdoutOut -= m.bytes;
        if (this.stdoutOut < WINDOW) this.releaseStdout();
        break;
      case MSG.FINISHING:
        // The component reads no more: drop the rest, as a closed pipe would.
        this.discard = true;
        this.releaseStdout();
        break;
      case MSG.ABORT:
        this.abort();
        break;
    }
  }

  releaseStdout() {
    const done = this.stdoutWaiting;
    this.stdoutWaiting = null;
    done?.();
  }

  /**
   * Settles once every byte the caller wrote to stdout has been posted: a
   * pipe may settle the exec while chunks still wait in the Writable's
   * buffer behind our backpressure, and the exit must come after them.
   */
  async stdoutFlushed() {
    const out = this.stdout;
    // The Writable's buffer empties as the worker acknowledges (or its
    // deadline aborts the exec): a short poll is simpler than tracking
    // which of its events will come.
    while (!out.destroyed && !out.writableFinished && (out.writableEnded || out.writableLength > 0 || this.stdoutWaiting)) {
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  ackStdin() {
    if (this.stdinAcks > 0) {
      this.post({ type: MSG.STDIN_ACK, bytes: this.stdinAcks });
      this.stdinAcks = 0;
    }
  }

  forward(chunk, done) {
    if (this.over || this.aborted) return done(new Error('the sync no longer reads this exec'));
    if (this.discard) return done();
    // Chunks are gathered into one message per turn of the event loop (or
    // per STDOUT_BATCH): a message per 64 KiB pipe read cost more than the copy.
    this.batch.push(chunk);
    this.batchBytes += chunk.length;
    this.stdoutOut += chunk.length;
    if (this.batchBytes >= STDOUT_BATCH) this.flushStdout();
    else if (this.batch.length === 1) setImmediate(() => this.flushStdout());
    if (this.stdoutOut < WINDOW) done();
    else this.stdoutWaiting = done;
  }

  flushStdout() {
    if (this.batch.length === 0) return;
    const joined = new Uint8Array(this.batchBytes);
    let at = 0;
    for (const c of this.batch) {
      joined.set(c, at);
      at += c.length;
    }
    this.batch = [];
    this.batchBytes = 0;
    this.post({ type: MSG.STDOUT, chunk: joined }, [joined.buffer]);
  }

  /** Stops feeding and reading; the caller's exec sees its streams fail. */
  abort() {
    this.stdin.destroy();
    this.stdout.destroy(new Error('the sync aborted this exec'));
    // Its exit still reaches the worker, which waits for the real status.
    this.aborted = true;
  }

  exit(status) {
    this.flushStdout();
    // Whatever the caller wrote to stdout before it settled is ahead of this.
    this.post({ type: MSG.EXIT, ...status });
    this.over = true;
    this.worker.execs.delete(this.id);
    this.stdin.destroy();
  }
}

/** A worker thread running one provider component. */
export class ProviderWorker {
  constructor(componentDir) {
    const { port1, port2 } = new MessageChannel();
    this.port = port1;
    this.bell = new Int32Array(new SharedArrayBuffer(4));
    this.execs = new Map();
    this.call = null;
    this.exec = null;
    this.failed = null;
    this.worker = new Worker(WORKER, {
      workerData: { componentDir, port: port2, doorbell: this.bell.buffer },
      transferList: [port2],
      execArgv: workerExecArgv(),
    });
    // Referenced while it starts and while it runs a call; an idle worker
    // must not keep the caller's process alive.
    this.ready = new Promise((resolve, reject) => {
      this.onReady = () => {
        this.worker.unref();
        resolve();
      };
      this.worker.once('error', reject);
    });
    this.worker.on('message', (m) => this.onMessage(m));
    this.worker.on('error', (e) => this.fail(e));
    this.worker.on('exit', () => this.fail(new Error('the provider worker exited')));
  }

  /** Posts to the worker and wakes it if it is blocked. */
  post(message, transfer) {
    this.port.postMessage(message, transfer);
    Atomics.add(this.bell, 0, 1);
    Atomics.notify(this.bell, 0);
  }

  onMessage(m) {
    switch (m.type) {
      case MSG.READY:
        this.onReady();
        break;
      case MSG.EXEC:
        this.execs.set(m.id, new Execution(this, m, this.exec));
        break;
      case MSG.SCRATCH:
        this.call?.scratch.push(m);
        break;
      case MSG.DONE:
      case MSG.DESCRIBED:
        this.call?.resolve(m);
        break;
      default:
        this.execs.get(m.id)?.deliver(m);
    }
  }

  fail(err) {
    this.failed ??= err;
    for (const x of this.execs.values()) x.abort();
    this.execs.clear();
    this.call?.reject(err);
  }

  /**
   * Runs one request in the worker. `exec` serves its executions, and
   * `scratch` collects the scratch entries the component created; past
   * `deadlineMs` the worker is terminated, whatever the component does.
   */
  async run(message, exec, deadlineMs, scratch) {
    if (this.failed) throw this.failed;
    this.exec = exec;
    this.worker.ref();
    let timer;
    try {
      return await new Promise((resolve, reject) => {
        this.call = { resolve, reject, scratch };
        timer = setTimeout(() => {
          const err = new Error(`the provider did not finish within ${deadlineMs} ms`);
          err.timedOut = true;
          this.fail(err);
          this.worker.terminate();
        }, deadlineMs);
        this.worker.postMessage(message);
      });
    } finally {
      clearTimeout(timer);
      // A call that ended (a trap, an error) with execs still running stops them.
      for (const x of this.execs.values()) x.abort();
      this.execs.clear();
      this.call = null;
      this.exec = null;
      this.worker.unref();
    }
  }

  terminate() {
    return this.worker.terminate();
  }
}
