// A sandbox's compressed stdout, decoded as the component reads it.
//
// fflate and fzstd decode all the input they are given at once, and a
// sandbox chooses how much that makes: a few KiB of gzip or zstd can stand
// for gigabytes. So each is fed a bounded slice, and the next slice only
// once the component has read what the last one made: the decoded bytes
// held here stay within a few MiB, whatever the stream.

import { fflate, fzstd } from './codecs.js';
import { ZstdFrames } from './zstd-frames.js';

/**
 * gzip input per step. Deflate makes at most 1032 bytes of an input byte
 * (a 258-byte match in two bits), so a step makes at most ~4 MiB, plus a
 * stored block (64 KiB) fflate may have held back.
 */
export const GZIP_SLICE = 4 << 10;
/**
 * Undecoded gzip input fflate may hold: a stored block or a header's extra
 * field (64 KiB each). A header's name or comment that never ends would
 * be held, and copied at every step, to the end of the stream.
 */
const GZIP_PENDING = 256 << 10;
/**
 * zstd blocks per step, each at most 128 KiB decoded: 1 MiB, plus the few
 * blocks fzstd may hold back in the 18 bytes it gathers for a frame header.
 */
export const ZSTD_BLOCKS = 8;

/** At most `max` bytes from the head of `queue`, a list of chunks. */
export function take(queue, max) {
  const chunk = queue[0];
  if (chunk.length <= max) return queue.shift();
  queue[0] = chunk.subarray(max);
  return chunk.subarray(0, max);
}

export class Decoder {
  constructor(codec, maxWire) {
    this.codec = codec;
    this.maxWire = maxWire;
    this.wire = 0;
    this.input = new Uint8Array(0); // compressed bytes not yet decoded
    this.out = []; // decoded bytes not yet read
    this.complete = false;
    this.ended = false;
    const sink = (chunk, final) => {
      if (chunk.length > 0) this.out.push(chunk);
      if (final) this.complete = true;
    };
    if (codec === 'gzip') {
      const gunzip = new (fflate().Gunzip)(sink);
      this.engine = gunzip;
      this.cut = (bytes) => {
        // `p` is fflate 0.8's pending input.
        if (gunzip.p.length > GZIP_PENDING) {
          throw new Error(`corrupt gzip stream from the sandbox: more than ${GZIP_PENDING >> 10} KiB it cannot decode yet`);
        }
        return Math.min(bytes.length, GZIP_SLICE);
      };
    } else {
      this.engine = new (fzstd().Decompress)(sink);
      const frames = new ZstdFrames();
      this.cut = (bytes) => frames.cut(bytes, ZSTD_BLOCKS);
    }
  }

  /** Decoded bytes (at most `max`); empty: it needs input; null: the end. */
  read(max) {
    while (this.out.length === 0 && this.input.length > 0) {
      const n = this.cut(this.input);
      this.push(this.input.subarray(0, n), false);
      this.input = this.input.subarray(n);
    }
    if (this.out.length > 0) return take(this.out, max);
    return this.ended ? null : new Uint8Array(0);
  }

  /** True when `read` would not need input. */
  ready() {
    return this.out.length > 0 || this.input.length > 0 || this.ended;
  }

  /** The next compressed bytes, once `read` has asked for them. */
  write(bytes) {
    this.wire += bytes.length;
    if (this.wire > this.maxWire) throw new Error(`compressed stdout exceeded ${this.maxWire} bytes`);
    this.input = bytes;
  }

  /** The compressed stream's end. */
  end() {
    this.push(new Uint8Array(0), true);
    if (!this.complete) throw new Error(`the ${this.codec} stream from the sandbox was cut short`);
    this.ended = true;
  }

  push(bytes, final) {
    try {
      this.engine.push(bytes, final);
    } catch (e) {
      throw new Error(`corrupt ${this.codec} stream from the sandbox: ${e.message}`);
    }
  }
}
