// sync-state (wit/provider.wit) for the worker: the component's records
// between calls, one file per key in a private directory, exactly as the
// Rust host keeps them (src/records.rs there), so either host reads the
// other's: each sealed with the directory's key for its own key
// (private-dir.js), so a forged or moved record reads as none. Losing a
// record only makes the next sync send more: writes are whole-file
// renames, failures are reported to the component and dropped.

import { createHash, randomBytes } from 'node:crypto';
import { fsyncSync, openSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

import { closeFd } from '../beneath.js';
import { SEAL_BYTES, sealed, unseal } from '../private-dir.js';

/** The largest record kept (as the Rust host). */
export const MAX_RECORD_BYTES = 64n << 20n;
/** Records kept before the oldest go. */
const MAX_RECORDS = 4096;

const name = (key) => createHash('sha256').update(key).digest('hex');
const file = (dir, key) => join(dir, `${name(key)}.rec`);
/** What a record's seal names: its key. */
const label = (key) => `record ${name(key)}`;

/** The record store in `records.dir` with its seal key (checked private by the main thread), or none. */
export function recordStore(records) {
  const { dir, key: sealKey } = records ?? {};
  if (!dir) {
    return {
      load: () => undefined,
      store: () => {
        throw 'this host keeps no records';
      },
      maxRecordBytes: () => 0n,
    };
  }
  return {
    load(key) {
      try {
        const p = file(dir, key);
        if (BigInt(statSync(p).size) > MAX_RECORD_BYTES + BigInt(SEAL_BYTES)) return undefined;
        const value = unseal(sealKey, label(key), readFileSync(p));
        return value && new Uint8Array(value);
      } catch {
        return undefined;
      }
    },
    store(key, value) {
      const p = file(dir, key);
      if (BigInt(value.length) > MAX_RECORD_BYTES) {
        try {
          unlinkSync(p);
        } catch {
          // None to drop.
        }
        throw `a record of ${value.length} bytes is over the ${MAX_RECORD_BYTES}-byte limit`;
      }
      const tmp = join(dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
      try {
        const fd = openSync(tmp, 'wx', 0o600);
        try {
          const bytes = sealed(sealKey, label(key), value);
          for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
          fsyncSync(fd);
        } finally {
          closeFd(fd);
        }
        renameSync(tmp, p);
      } catch (e) {
        for (const f of [tmp, p]) {
          try {
            unlinkSync(f);
          } catch {
            // Gone already.
          }
        }
        throw `cannot write ${p}: ${e?.message ?? e}`;
      }
      prune(dir);
    },
    maxRecordBytes: () => MAX_RECORD_BYTES,
  };
}

/** Removes the oldest records beyond MAX_RECORDS. */
function prune(dir) {
  let names;
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.rec'));
  } catch {
    return;
  }
  if (names.length <= MAX_RECORDS) return;
  const aged = names
    .map((n) => {
      try {
        return [statSync(join(dir, n)).mtimeMs, n];
      } catch {
        return null;
      }
    })
    .filter(Boolean)
    .sort((a, b) => a[0] - b[0]);
  for (const [, n] of aged.slice(0, aged.length - MAX_RECORDS)) {
    try {
      unlinkSync(join(dir, n));
    } catch {
      // Another call pruned it.
    }
  }
}
