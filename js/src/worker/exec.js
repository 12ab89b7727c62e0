// sandbox-exec for the component, in the worker thread: each execution is
// the caller's `exec(argv, {stdin, stdout, timeoutMs, maxStderrBytes})`,
// run by the main thread (src/bridge.js), its bytes crossing as messages.
//
// Flow control: at most WINDOW bytes of stdin are in flight before a write
// blocks, and stdout is acknowledged as the component consumes it, so the
// main thread holds back the caller's stream (backpressure) in turn.
// Codecs run here, at the exact byte where the component switches them on:
// fflate's streaming gzip and fzstd's zstd decoder are synchronous, which a
// blocking import needs (Node's zlib streams are not, and Node 20 has no zstd).
// Decoding is bounded, step by step, by what the component reads (decode.js).

import { fstatSync, readSync } from 'node:fs';

import { closeFd } from '../beneath.js';
import { native } from '../native.js';
import { MSG, WINDOW } from '../protocol.js';
import { send, on, off, wait, poll } from './channel.js';
import { fflate } from './codecs.js';
import { Decoder, take } from './decode.js';
import { InputStream, OutputStream } from './streams.js';
import { SourceDirs } from './source-dirs.js';

/** Past its timeout, how long an exec may take to report before we stop waiting. */
const GRACE_MS = 5000;
/** How long finish waits for an aborted exec to report. */
const ABORT_GRACE_MS = 2000;
/** Bytes read from a host file per chunk. */
const FILE_CHUNK = 1 << 20;
/**
 * Most stdin bytes gathered into one message (the main thread hands them
 * on in 128 KiB pieces): on W3 each message cost ~150 us of waking the
 * main thread, a 4x larger one a quarter of that per byte.
 */
const STDIN_BATCH = 512 << 10;

let nextId = 1;
let settings = { compression: 'none', incremental: true, remote: true, stdinEnds: false, deadline: Infinity };

/** This call's transfer settings, and the deadline all its execs share. */
export function configure(s) {
  settings = s;
}

export function transferCompression() {
  return settings.compression;
}

export function transferIncremental() {
  return settings.incremental;
}

export function transferRemote() {
  return settings.remote;
}

export function transferStrictLinks() {
  return settings.strictLinks ?? false;
}

export function transferChecksum() {
  return settings.checksum ?? false;
}

export function start(argv, options) {
  return new Execution(argv, options);
}

class Exec {
  constructor(argv, options) {
    this.id = nextId++;
    this.deadline = Math.min(settings.deadline, Date.now() + Number(options.timeoutMs) + GRACE_MS);
    this.raw = []; // stdout chunks received, not yet read
    this.rawEnded = false;
    this.unacked = 0; // stdout bytes read but not yet acknowledged
    this.inFlight = 0; // stdin bytes sent but not yet acknowledged
    this.exit = null;
    this.aborted = false;
    this.encoder = null;
    this.decoder = null;
    this.batch = null; // stdin bytes queued (see queueRaw), reused
    this.batched = 0;
    this.readBuffer = null; // send-files' reads, reused
    on(this.id, (m) => this.deliver(m));
    send({
      type: MSG.EXEC,
      id: this.id,
      argv: [...argv],
      timeoutMs: Number(options.timeoutMs),
      maxStderrBytes: Number(options.maxStderrBytes),
    });
  }

  deliver(m) {
    switch (m.type) {
      case MSG.STDOUT:
        this.raw.push(m.chunk);
        break;
      case MSG.STDOUT_END:
        this.rawEnded = true;
        break;
      case MSG.STDIN_ACK:
        this.inFlight -= m.bytes;
        break;
      case MSG.EXIT:
        this.exit = m;
        break;
    }
  }

  /** Blocks for the next message; false once the deadline has passed. */
  block() {
    const left = this.deadline - Date.now();
    if (left <= 0) return false;
    wait(Math.min(left, 1000));
    return true;
  }

  /** `block`, failing (and aborting the exec) past the deadline. */
  blockOrFail() {
    if (this.block()) return;
    this.abort();
    throw new Error('the sandbox process did not report within its timeout');
  }

  // -- stdin ----------------------------------------------------------------

  stdinFailure() {
    if (this.exit) return new Error('the sandbox process has exited');
    if (this.aborted) return new Error('the execution was aborted');
    return null;
  }

  /**
   * Queues bytes as they are (after the encoder, if any) into the batch
   * `flushStdin` sends: a message, and a pipe write on the main thread,
   * per file header and per small file cost more than copying them (W3
   * in: 20,000 messages and writes, a quarter of the main thread's time).
   */
  queueRaw(bytes) {
    if (bytes.length === 0) return;
    if (bytes.length >= STDIN_BATCH) {
      // A big file's chunk goes whole, after what is queued. Our own copy:
      // the caller's view may be wasm memory.
      this.flushStdin();
      this.post(bytes.slice());
      return;
    }
    this.batch ??= new Uint8Array(STDIN_BATCH);
    for (let at = 0; at < bytes.length; ) {
      const n = Math.min(bytes.length - at, STDIN_BATCH - this.batched);
      this.batch.set(bytes.subarray(at, at + n), this.batched);
      this.batched += n;
      at += n;
      if (this.batched === STDIN_BATCH) this.flushStdin();
    }
  }

  /**
   * Sends what is queued. Every import that writes stdin ends with this,
   * so no byte waits while the component does anything else.
   */
  flushStdin() {
    if (this.batched === 0) return;
    let chunk;
    if (this.batched >= STDIN_BATCH / 2) {
      // The batch itself goes (transferred, no copy); a new one is made.
      chunk = this.batch.subarray(0, this.batched);
      this.batch = null;
    } else {
      // A copy of its length: a small message must not hold a whole batch.
      chunk = this.batch.slice(0, this.batched);
    }
    this.batched = 0;
    this.post(chunk);
  }

  /** Sends `chunk` (ours, transferred) once the window has room. */
  post(chunk) {
    poll();
    while (this.inFlight >= WINDOW && !this.stdinFailure()) {
      this.blockOrFail();
    }
    const failure = this.stdinFailure();
    if (failure) throw failure;
    this.inFlight += chunk.length;
    send({ type: MSG.STDIN, id: this.id, chunk }, [chunk.buffer]);
  }

  /** The stdin stream's write: sent before the component goes on. */
  writeStdin(bytes) {
    this.queue(bytes);
    this.flushStdin();
  }

  /** Queues bytes for stdin, through the encoder if any. */
  queue(bytes) {
    if (!this.encoder) return this.queueRaw(bytes);
    const t = process.hrtime.bigint();
    this.encoder.plain += bytes.length;
    this.encoder.gzip.push(bytes, false);
    this.encoder.busy += process.hrtime.bigint() - t;
    this.flushEncoded();
  }

  flushEncoded() {
    const out = this.encoder.out.splice(0);
    for (const c of out) {
      this.encoder.wire += c.length;
      this.queueRaw(c);
    }
  }

  stdinCapacity() {
    poll();
    const failure = this.stdinFailure();
    if (failure) throw failure;
    return Math.max(0, WINDOW - this.inFlight);
  }

  closeStdin() {
    send({ type: MSG.STDIN_END, id: this.id });
  }

  compressStdin(codec) {
    if (this.encoder) throw 'stdin is already compressed';
    if (!settings.stdinEnds) throw 'stdin cannot end on this transport';
    if (codec !== 'gzip') throw `${codec} compression is not available in this Node host`;
    const out = [];
    const gzip = new (fflate().Gzip)({ level: 1 });
    gzip.ondata = (chunk) => out.push(chunk);
    this.encoder = { gzip, out, plain: 0, wire: 0, busy: 0n };
  }

  finishCompressedStdin() {
    const e = this.encoder;
    if (!e || e.finished) throw 'stdin is not compressed';
    e.finished = true;
    const t = process.hrtime.bigint();
    e.gzip.push(new Uint8Array(0), true);
    e.busy += process.hrtime.bigint() - t;
    try {
      this.flushEncoded();
      this.flushStdin();
    } catch (err) {
      throw String(err.message);
    }
    return { plainBytes: BigInt(e.plain), wireBytes: BigInt(e.wire), busyUs: e.busy / 1000n };
  }

  // -- stdout ---------------------------------------------------------------

  /** The next raw stdout bytes (at most `max`); empty: none yet; null: EOF. */
  readRaw(max, blocking) {
    for (;;) {
      poll();
      if (this.raw.length > 0) {
        const chunk = take(this.raw, max);
        this.ack(chunk.length);
        return chunk;
      }
      if (this.rawEnded || this.exit || this.aborted) return null;
      if (!blocking) return new Uint8Array(0);
      this.blockOrFail();
    }
  }

  ack(bytes) {
    this.unacked += bytes;
    if (this.unacked >= WINDOW / 4 || this.raw.length === 0) {
      send({ type: MSG.STDOUT_ACK, id: this.id, bytes: this.unacked });
      this.unacked = 0;
    }
  }

  readStdout(max, blocking) {
    const d = this.decoder;
    if (!d) return this.readRaw(max, blocking);
    for (;;) {
      const out = d.read(max);
      if (out === null || out.length > 0) return out;
      const raw = this.readRaw(FILE_CHUNK, blocking);
      if (raw === null) d.end();
      else if (raw.length === 0) return raw;
      else d.write(raw);
    }
  }

  stdoutReady() {
    poll();
    if (this.decoder?.ready()) return true;
    return this.raw.length > 0 || this.rawEnded || this.exit !== null || this.aborted;
  }

  decompressStdout(codec, maxWire) {
    if (this.decoder) throw 'stdout is already decompressed';
    this.decoder = new Decoder(codec, Number(maxWire));
  }

  // -- the process ----------------------------------------------------------

  abort() {
    if (this.aborted || this.exit) return;
    this.aborted = true;
    this.deadline = Math.min(this.deadline, Date.now() + ABORT_GRACE_MS);
    send({ type: MSG.ABORT, id: this.id });
  }

  finish() {
    if (!this.finishing) {
      this.finishing = true;
      send({ type: MSG.FINISHING, id: this.id });
    }
    for (;;) {
      poll();
      if (this.exit) break;
      if (!this.block()) {
        this.abort();
        off(this.id);
        return { exitCode: undefined, timedOut: true, stderr: new Uint8Array(0), stderrTruncated: false };
      }
    }
    off(this.id);
    const x = this.exit;
    if (x.error) throw x.error;
    return {
      exitCode: x.exitCode ?? undefined,
      timedOut: x.timedOut,
      stderr: x.stderr,
      stderrTruncated: x.stderrTruncated,
    };
  }

  /** send-files: each file's prefix, then exactly its planned bytes. */
  sendFiles(grant, files) {
    const dirs = new SourceDirs();
    try {
      for (const f of files) {
        this.put(f.prefix);
        let opened;
        try {
          opened = grant.openFd(f.path, dirs);
        } catch (e) {
          throw { tag: e?.tag === 'not-found' ? 'source-changed' : 'read-failed', val: String(e?.val ?? e) };
        }
        try {
          this.sendFile(opened, f);
        } finally {
          closeFd(opened.fd);
        }
      }
      this.stdinFailed(() => this.flushStdin());
    } catch (e) {
      // The component aborts the exec (or its stdin failed): what is queued is moot.
      this.batched = 0;
      throw e;
    } finally {
      dirs.close();
    }
  }

  put(bytes) {
    this.stdinFailed(() => this.queue(bytes));
  }

  /** Runs `fn`, a failure as send-files' stdin-failed. */
  stdinFailed(fn) {
    try {
      fn();
    } catch (e) {
      throw { tag: 'stdin-failed', val: String(e.message ?? e) };
    }
  }

  sendFile({ fd, stat }, f) {
    const changed = (what) => ({ tag: 'source-changed', val: `${f.path} ${what} since it was planned` });
    if (!same(stat, f)) throw changed('changed');
    const size = Number(f.size);
    // A small file is read straight into the stdin batch (one copy fewer);
    // a big one, or any under an encoder, through one buffer for every file
    // (queued bytes are copied: a small buffer each cost more than its read).
    const direct = !this.encoder && size < STDIN_BATCH / 2;
    if (direct) {
      if (this.batched + size > STDIN_BATCH) this.stdinFailed(() => this.flushStdin());
      this.batch ??= new Uint8Array(STDIN_BATCH);
    } else {
      this.readBuffer ??= new Uint8Array(FILE_CHUNK);
    }
    for (let sent = 0; sent < size; ) {
      const [buf, at] = direct ? [this.batch, this.batched] : [this.readBuffer, 0];
      let n;
      try {
        n = readSync(fd, buf, at, Math.min(buf.length - at, size - sent), sent);
      } catch (e) {
        throw { tag: 'read-failed', val: `${f.path}: ${e.message}` };
      }
      if (n === 0) throw changed('shrank');
      if (direct) this.batched += n;
      else this.put(buf.subarray(0, n));
      sent += n;
    }
    // The handle that was read must still be the planned file.
    if (!stillSame(fd, f)) throw changed('changed');
  }
}

/** Whether open file `fd` is still file-send `f`'s planned file: by the addon where it loads, else by a bigint fstat. */
const stillSame = native
  ? (fd, f) => {
      const r = native.same(fd, f.device, f.inode, f.size, f.mtimeSec, f.mtimeNsec);
      if (r < 0) throw { tag: 'read-failed', val: `${f.path}: fstat failed (errno ${-r})` };
      return r === 1;
    }
  : (fd, f) => same(fstatSync(fd, { bigint: true }), f);

function same(st, f) {
  return (
    st.dev === f.device &&
    st.ino === f.inode &&
    st.size === f.size &&
    st.mtimeNs / 1_000_000_000n === f.mtimeSec &&
    Number(st.mtimeNs % 1_000_000_000n) === f.mtimeNsec
  );
}

function stringError(fn) {
  try {
    return fn();
  } catch (e) {
    throw typeof e === 'string' ? e : String(e?.message ?? e);
  }
}

/** The `execution` resource. */
export class Execution {
  constructor(argv, options) {
    this.x = new Exec(argv, options);
    this.tookStdin = false;
    this.tookStdout = false;
  }

  stdin() {
    if (this.tookStdin) throw 'stdin was already taken';
    this.tookStdin = true;
    const x = this.x;
    return new OutputStream({
      write: (bytes) => x.writeStdin(bytes),
      capacity: () => x.stdinCapacity(),
      wait: () => x.blockOrFail(),
      close: () => x.closeStdin(),
    });
  }

  stdout() {
    if (this.tookStdout) throw 'stdout was already taken';
    this.tookStdout = true;
    const x = this.x;
    return new InputStream({
      read: (max, blocking) => x.readStdout(max, blocking),
      ready: () => x.stdoutReady(),
      wait: () => x.blockOrFail(),
    });
  }

  sendFiles(source, files) {
    if (!this.tookStdin) throw { tag: 'stdin-failed', val: 'stdin was not taken' };
    this.x.sendFiles(source, files);
  }

  stdinEnds() {
    return settings.stdinEnds;
  }

  compressStdin(codec) {
    stringError(() => this.x.compressStdin(codec));
  }

  finishCompressedStdin() {
    return stringError(() => this.x.finishCompressedStdin());
  }

  decompressStdout(codec, maxWireBytes) {
    if (!this.tookStdout) throw 'stdout was not taken';
    stringError(() => this.x.decompressStdout(codec, maxWireBytes));
  }

  abort() {
    this.x.abort();
  }

  finish() {
    return stringError(() => this.x.finish());
  }

  [Symbol.dispose]() {
    if (!this.x.exit) this.x.abort();
    off(this.x.id);
  }
}
