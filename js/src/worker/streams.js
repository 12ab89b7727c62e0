// wasi:io (streams, poll, error) for the component, in the worker thread.
//
// We implement these ourselves instead of using preview2-shim's: every stream
// the component touches is ours (a host file, an exec's stdin or stdout), its
// blocking calls must block this thread on our own event channel, and
// preview2-shim 0.26.1 has traps here (`skip` returns the bytes instead of a
// count, `splice` throws and reads past its length, dropping an output stream
// does not end it). Each trap has a test in test/host-traps.test.js.
//
// A stream is a thin shell around a source or a sink:
//   source.read(max, blocking) -> Uint8Array (empty: nothing yet) | null (EOF);
//          may throw an Error (the read failed)
//   source.ready?() -> boolean   (a read would not block; default true)
//   source.wait?()               (block until ready; default: return)
//   source.close?()              (the component dropped the stream)
//   sink.write(bytes)            (may block; must copy bytes it keeps)
//   sink.capacity?() -> number   (bytes writable without blocking)
//   sink.wait?()                 (block until capacity > 0)
//   sink.flush?()                (block until written bytes are handed on)
//   sink.close?()                (the component dropped the stream: EOF)

/** Most bytes one read returns, whatever the component asks for. */
const MAX_READ = 1 << 20;

/** wasi:io/error `error`. */
export class IoError {
  constructor(message) {
    this.message = String(message);
  }
  toDebugString() {
    return this.message;
  }
}

/** wasi:io/poll `pollable`, backed by a readiness test and a blocking wait. */
export class Pollable {
  constructor(isReady, wait) {
    this.isReady = isReady;
    this.wait = wait;
  }
  ready() {
    return this.isReady();
  }
  block() {
    while (!this.isReady()) this.wait();
  }
}

/** wasi:io/poll `poll`: the indices of the ready pollables, blocking for one. */
export function poll(list) {
  for (;;) {
    const ready = [];
    list.forEach((p, i) => p.ready() && ready.push(i));
    if (ready.length > 0) return new Uint32Array(ready);
    list[0].wait();
  }
}

function failed(e) {
  return { tag: 'last-operation-failed', val: new IoError(e?.message ?? e) };
}

const CLOSED = { tag: 'closed' };

function clamp(len) {
  return Number(len > BigInt(MAX_READ) ? BigInt(MAX_READ) : len);
}

export class InputStream {
  constructor(source) {
    this.source = source;
    this.ended = false;
  }

  /** One read; `null` at EOF. Throws the WASI stream-error. */
  take(len, blocking) {
    if (this.ended) throw CLOSED;
    let chunk;
    try {
      chunk = this.source.read(clamp(len), blocking);
    } catch (e) {
      this.ended = true;
      throw failed(e);
    }
    if (chunk === null) {
      this.ended = true;
      throw CLOSED;
    }
    return chunk;
  }

  read(len) {
    // An ended stream reads as closed, zero bytes asked or not (the guest
    // tells a failed splice's side by it).
    if (len === 0n && this.ended) throw CLOSED;
    return len === 0n ? new Uint8Array(0) : this.take(len, false);
  }
  blockingRead(len) {
    return len === 0n ? new Uint8Array(0) : this.take(len, true);
  }
  // A count of bytes skipped (preview2-shim 0.26.1 returns the bytes).
  skip(len) {
    return len === 0n ? 0n : BigInt(this.take(len, false).length);
  }
  blockingSkip(len) {
    return len === 0n ? 0n : BigInt(this.take(len, true).length);
  }
  subscribe() {
    return new Pollable(
      () => this.ended || (this.source.ready?.() ?? true),
      () => this.source.wait?.(),
    );
  }
  [Symbol.dispose]() {
    this.ended = true;
    this.source.close?.();
  }
}

export class OutputStream {
  constructor(sink) {
    this.sink = sink;
    this.closed = false;
    this.error = null;
  }

  check() {
    if (this.error) throw failed(this.error);
    if (this.closed) throw CLOSED;
  }

  /** Runs a sink call, turning its failure into the WASI stream-error. */
  guard(fn) {
    this.check();
    try {
      return fn();
    } catch (e) {
      this.error = e;
      throw failed(e);
    }
  }

  checkWrite() {
    return this.guard(() => BigInt(Math.max(0, this.sink.capacity?.() ?? MAX_READ)));
  }
  write(contents) {
    this.guard(() => contents.length > 0 && this.sink.write(contents));
  }
  blockingWriteAndFlush(contents) {
    this.write(contents);
    this.blockingFlush();
  }
  flush() {
    this.guard(() => this.sink.flush?.());
  }
  blockingFlush() {
    this.flush();
  }
  writeZeroes(len) {
    this.write(new Uint8Array(Number(len)));
  }
  blockingWriteZeroesAndFlush(len) {
    this.blockingWriteAndFlush(new Uint8Array(Number(len)));
  }
  // Moves at most `len` bytes (preview2-shim 0.26.1 reads past it, or throws).
  splice(src, len) {
    const room = this.guard(() => this.sink.capacity?.() ?? MAX_READ);
    const n = len < BigInt(room) ? len : BigInt(room);
    if (n === 0n) return 0n;
    const chunk = src.read(n);
    this.write(chunk);
    return BigInt(chunk.length);
  }
  blockingSplice(src, len) {
    if (len === 0n) return 0n;
    const chunk = src.blockingRead(len);
    this.write(chunk);
    return BigInt(chunk.length);
  }
  subscribe() {
    return new Pollable(
      () => this.closed || this.error !== null || (this.sink.capacity?.() ?? 1) > 0,
      () => this.sink.wait?.(),
    );
  }
  // Dropping the stream ends it (preview2-shim 0.26.1 leaves the pipe open).
  [Symbol.dispose]() {
    if (this.closed) return;
    this.closed = true;
    try {
      this.sink.close?.();
    } catch {
      // The component has let go; a failed close surfaces in `finish`.
    }
  }
}
