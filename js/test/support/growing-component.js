// A stand-in provider component (a jco transpilation's shape: provider.js
// and its core module) whose sync-out grows its linear memory, 64 MiB at a
// time, touching every page, by as many MiB as its first operation's id
// says. A growth its memory refuses ends as a Rust guest's does: std's
// "memory allocation of N bytes failed" on stderr, then `unreachable`. It
// stands for any workload that makes the real component big, whatever the
// guest's own bounds are this week.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// (module
//   (memory (export "memory") 1)
//   (func (export "grow") (param i32) (result i32) local.get 0 memory.grow)
//   (func (export "fill") (param i32 i32) local.get 0 i32.const 1 local.get 1 memory.fill))
const CORE = Uint8Array.from([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
  0x01, 0x0b, 0x02, 0x60, 0x01, 0x7f, 0x01, 0x7f, 0x60, 0x02, 0x7f, 0x7f, 0x00,
  0x03, 0x03, 0x02, 0x00, 0x01,
  0x05, 0x03, 0x01, 0x00, 0x01,
  0x07, 0x18, 0x03,
  0x06, 0x6d, 0x65, 0x6d, 0x6f, 0x72, 0x79, 0x02, 0x00,
  0x04, 0x67, 0x72, 0x6f, 0x77, 0x00, 0x00,
  0x04, 0x66, 0x69, 0x6c, 0x6c, 0x00, 0x01,
  0x0a, 0x14, 0x02,
  0x06, 0x00, 0x20, 0x00, 0x40, 0x00, 0x0b,
  0x0b, 0x00, 0x20, 0x00, 0x41, 0x01, 0x20, 0x01, 0xfc, 0x0b, 0x00, 0x0b,
]);

const PROVIDER_JS = `
const STEP = 64 << 20;
export function instantiate(getCoreModule, imports, instantiateCore = (module, i) => new WebAssembly.Instance(module, i)) {
  const { grow, fill } = instantiateCore(getCoreModule('provider.core.wasm'), {}).exports;
  const stderr = imports['wasi:cli/stderr'].getStderr();
  return {
    sync: {
      describe: () => ({ name: 'growing', version: '0.0.0', witVersion: '0.2.4', capabilities: ['sync-in', 'sync-out'] }),
      syncIn() {
        throw { payload: { tag: 'io', val: 'sync-in is not grown' } };
      },
      syncOut(request) {
        const op = request.operations[0];
        for (let left = Number(op.operationId.split(' ')[1]) << 20; left > 0; left -= STEP) {
          const at = grow(STEP >> 16);
          if (at < 0) {
            stderr.blockingWriteAndFlush(new TextEncoder().encode('memory allocation of ' + STEP + ' bytes failed\\n'));
            throw new WebAssembly.RuntimeError('unreachable');
          }
          fill(at << 16, STEP);
        }
        return [{ operationId: op.operationId, filesTransferred: 0n, bytesTransferred: 0n }];
      },
    },
  };
}
`;

/** Writes the component into `dir`, which loadProvider then takes. */
export function growingComponent(dir) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'provider.core.wasm'), CORE);
  writeFileSync(join(dir, 'provider.js'), PROVIDER_JS);
  return dir;
}
