// The framing of a zstd stream (RFC 8878 section 3.1), walked ahead of
// fzstd. fzstd takes a frame's header on trust: it allocates whatever
// window the frame asks for (up to 2 GiB) and decodes a block of any size
// its 21-bit field gives. The walker refuses both as the Rust host's
// libzstd does (a window past 8 MiB, its window_log_max 23; a block past
// Block_Maximum_Size), before fzstd sees them, and tells how much input
// holds a given number of block ends: what one decoding step may take.

/** Largest window accepted, as the Rust host's window_log_max 23. */
const MAX_WINDOW = 8 << 20;
/** Largest block content (Block_Maximum_Size is at most this). */
const MAX_BLOCK = 128 << 10;

const ZSTD_MAGIC = 0xfd2fb528;
const DICT_ID_BYTES = [0, 1, 2, 4];
const CONTENT_SIZE_BYTES = [0, 2, 4, 8];
const RLE = 1;
const RESERVED = 3;

function corrupt(why) {
  return new Error(`corrupt zstd stream from the sandbox: ${why}`);
}

/** Little-endian, exact up to 2^53 (enough to compare with MAX_WINDOW). */
function le(bytes, at, n) {
  let v = 0;
  for (let i = n - 1; i >= 0; i--) v = v * 256 + bytes[at + i];
  return v;
}

function size(bytes) {
  const [unit, scale] = bytes >= 2 ** 30 ? ['GiB', 2 ** 30] : ['MiB', 2 ** 20];
  return `${Number((bytes / scale).toFixed(1))} ${unit}`;
}

export class ZstdFrames {
  constructor() {
    this.head = new Uint8Array(18); // the header being gathered (a frame's is at most 18 bytes)
    this.have = 0;
    this.want = 0;
    this.skip = 0; // bytes to pass over: block content, a checksum, a skippable frame
    this.then = null; // what follows the gather or the skip
    this.blockMax = 0;
    this.checksum = false;
    this.last = false;
    this.ended = 0;
    this.frameEnd();
  }

  /**
   * How many of `bytes` (the input after what was cut before) to decode
   * next: all of them, or up to the `blocks`-th block end. Throws on a
   * frame or block fzstd must not be given.
   */
  cut(bytes, blocks) {
    this.ended = 0;
    let at = 0;
    while (at < bytes.length && this.ended < blocks) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, bytes.length - at);
        this.skip -= n;
        at += n;
        if (this.skip === 0) this.then();
      } else {
        const n = Math.min(this.want - this.have, bytes.length - at);
        this.head.set(bytes.subarray(at, at + n), this.have);
        this.have += n;
        at += n;
        if (this.have === this.want) this.then();
      }
    }
    return at;
  }

  gather(n, then) {
    this.want = n;
    this.then = then;
  }

  pass(n, then) {
    this.skip = n;
    this.then = then;
    if (n === 0) then.call(this);
  }

  frameEnd() {
    this.have = 0;
    this.gather(4, this.magic);
  }

  magic() {
    const m = le(this.head, 0, 4);
    if (m === ZSTD_MAGIC) this.gather(5, this.descriptor);
    else if (m >>> 4 === 0x184d2a5) this.gather(8, () => this.pass(le(this.head, 4, 4), this.frameEnd));
    else throw corrupt('not a zstd frame');
  }

  /** Frame_Header_Descriptor: how long the rest of the header is. */
  descriptor() {
    const fhd = this.head[4];
    if (fhd & 8) throw corrupt('a reserved frame header bit is set');
    const single = fhd & 0x20;
    const fcs = CONTENT_SIZE_BYTES[fhd >> 6] || (single ? 1 : 0);
    this.gather(5 + (single ? 0 : 1) + DICT_ID_BYTES[fhd & 3] + fcs, this.frameHeader);
  }

  frameHeader() {
    const fhd = this.head[4];
    let window;
    if (fhd & 0x20) {
      // A single-segment frame's window is its content size, the header's last field.
      const n = CONTENT_SIZE_BYTES[fhd >> 6] || 1;
      window = le(this.head, this.want - n, n) + (n === 2 ? 256 : 0);
    } else {
      const wd = this.head[5];
      const base = 2 ** (10 + (wd >> 3));
      window = base + (base / 8) * (wd & 7);
    }
    if (window > MAX_WINDOW) {
      throw new Error(`the sandbox's zstd stream asks for a ${size(window)} window (at most ${size(MAX_WINDOW)})`);
    }
    this.blockMax = Math.min(window, MAX_BLOCK);
    this.checksum = (fhd & 4) !== 0;
    this.blockStart();
  }

  blockStart() {
    this.have = 0;
    this.gather(3, this.blockHeader);
  }

  blockHeader() {
    const b = le(this.head, 0, 3);
    const type = (b >> 1) & 3;
    const n = b >>> 3;
    if (type === RESERVED) throw corrupt('a block of the reserved type');
    if (n > this.blockMax) throw corrupt(`a block of ${n} bytes (at most ${this.blockMax})`);
    this.last = (b & 1) === 1;
    this.pass(type === RLE ? 1 : n, this.blockEnd);
  }

  blockEnd() {
    this.ended += 1;
    if (!this.last) this.blockStart();
    else this.pass(this.checksum ? 4 : 0, this.frameEnd);
  }
}
