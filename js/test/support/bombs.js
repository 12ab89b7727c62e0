// Compressed streams a hostile sandbox may answer with, built at test time:
// a few KiB that decode to gigabytes, or ask for a huge zstd window.

import { execFileSync } from 'node:child_process';
import { constants, deflateRawSync } from 'node:zlib';

const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];
const MAX_BLOCK = 128 << 10;

/** A zstd block header: `type` 0 raw, 1 RLE, 2 compressed. */
function blockHeader(size, type, last) {
  const v = (size << 3) | (type << 1) | (last ? 1 : 0);
  return [v & 0xff, (v >> 8) & 0xff, v >> 16];
}

/** A frame of `blocks` RLE blocks of 128 KiB zeros (4 bytes each), then an empty last block. */
export function zstdRle(blocks, windowDescriptor = 9 << 3) {
  const out = [...ZSTD_MAGIC, 0x00, windowDescriptor];
  for (let i = 0; i < blocks; i++) out.push(...blockHeader(MAX_BLOCK, 1, false), 0);
  out.push(...blockHeader(0, 0, true));
  return Buffer.from(out);
}

/** A single-segment frame whose 8-byte content size (its window) is `bytes`, then RLE blocks. */
export function zstdSingleSegment(bytes, blocks) {
  const fcs = Buffer.alloc(8);
  fcs.writeBigUInt64LE(BigInt(bytes));
  const out = [...ZSTD_MAGIC, 0xe0, ...fcs];
  for (let i = 0; i < blocks; i++) out.push(...blockHeader(MAX_BLOCK, 1, false), 0);
  out.push(...blockHeader(0, 0, true));
  return Buffer.from(out);
}

/** A skippable frame holding `n` bytes. */
export function zstdSkippable(n) {
  const header = Buffer.from([0x5a, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]);
  header.writeUInt32LE(n, 4);
  return Buffer.concat([header, Buffer.alloc(n, 0xaa)]);
}

/** `zstd` (the CLI) over `head -c bytes /dev/zero`, with its `args`. */
export function zstdCli(bytes, args) {
  return execFileSync('sh', ['-c', `head -c ${bytes} /dev/zero | zstd -q -c ${args.join(' ')}`], { maxBuffer: 64 << 20 });
}

/**
 * One gzip member of `bytes` of zeros (a multiple of 64 MiB): a deflate
 * segment of 64 MiB (full-flushed, so it stands alone) repeated, then the
 * final block. The trailer is left zero: fflate does not check it.
 */
export function gzipBomb(bytes) {
  const segment = deflateRawSync(Buffer.alloc(64 << 20), { level: 9, finishFlush: constants.Z_FULL_FLUSH });
  const header = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
  return Buffer.concat([header, ...Array(bytes / (64 << 20)).fill(segment), Buffer.from([3, 0]), Buffer.alloc(8)]);
}

