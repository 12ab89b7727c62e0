// The component's linear memory, capped as the Rust host caps it (wasmtime's
// StoreLimits, GUEST_MEMORY_BYTES): V8 lets a memory with no maximum grow
// to 4 GiB, so the core module that defines a memory gets a maximum in its
// memory section. Past it memory.grow fails inside the guest, whose
// allocation then fails, exactly as under wasmtime.

/** Guest linear memory cap, the Rust host's GUEST_MEMORY_BYTES. */
export const GUEST_MEMORY_BYTES = 512 << 20;
const PAGE = 64 << 10;
const MEMORY_SECTION = 5;
const HAS_MAX = 0x01;

function readLeb(bytes, at) {
  let value = 0;
  let shift = 0;
  let b;
  do {
    b = bytes[at++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [value, at];
}

function leb(value) {
  const out = [];
  do {
    let b = value % 128;
    value = Math.floor(value / 128);
    if (value > 0) b |= 0x80;
    out.push(b);
  } while (value > 0);
  return out;
}

/** `wasm` (a core module) with every memory it defines at most GUEST_MEMORY_BYTES. */
export function capMemory(wasm) {
  const bytes = new Uint8Array(wasm.buffer, wasm.byteOffset, wasm.length);
  const cap = GUEST_MEMORY_BYTES / PAGE;
  let at = 8; // past the magic number and version
  while (at < bytes.length) {
    const id = bytes[at];
    const [size, body] = readLeb(bytes, at + 1);
    if (id === MEMORY_SECTION) {
      let [count, p] = readLeb(bytes, body);
      const limits = leb(count);
      for (; count > 0; count--) {
        const flags = bytes[p];
        let min;
        let max = cap;
        [min, p] = readLeb(bytes, p + 1);
        if (flags & HAS_MAX) {
          let declared;
          [declared, p] = readLeb(bytes, p);
          max = Math.min(declared, cap);
        }
        limits.push(flags | HAS_MAX, ...leb(min), ...leb(max));
      }
      const section = Uint8Array.from([MEMORY_SECTION, ...leb(limits.length), ...limits]);
      const out = new Uint8Array(at + section.length + bytes.length - (body + size));
      out.set(bytes.subarray(0, at));
      out.set(section, at);
      out.set(bytes.subarray(body + size), at + section.length);
      return out;
    }
    at = body + size;
  }
  return bytes;
}
