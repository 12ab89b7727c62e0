// A worker thread that runs one provider component, one sync call at a time.
//
// Every import the component calls is synchronous (a blocking read of the
// sandbox's stdout, a file write), so the component cannot run on the main
// thread without freezing its event loop for the whole sync. Here it may
// block: the main thread keeps running the caller's exec and streams.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { getHeapStatistics } from 'node:v8';
import { parentPort, workerData } from 'node:worker_threads';
import { connect, send } from './channel.js';
import * as exec from './exec.js';
import { GrantedDir } from './hostfs.js';
import { GUEST_MEMORY_BYTES, capMemory } from './memory-cap.js';
import { recordStore } from './records.js';
import { clearDiagnostics, failedAllocation, wasiImports } from './wasi.js';
import { MSG } from '../protocol.js';

const { componentDir, port, doorbell } = workerData;
connect(port, doorbell);

const { instantiate } = await import(pathToFileURL(join(componentDir, 'provider.js')).href);
const modules = new Map();
function getCoreModule(name) {
  if (!modules.has(name)) modules.set(name, new WebAssembly.Module(capMemory(readFileSync(join(componentDir, name)))));
  return modules.get(name);
}

/** The current instance's linear memories. */
let memories = [];
function instantiateCore(module, importObject) {
  const core = new WebAssembly.Instance(module, importObject);
  for (const e of Object.values(core.exports)) if (e instanceof WebAssembly.Memory) memories.push(e);
  return core;
}

function memoryBytes() {
  return memories.reduce((n, m) => n + m.buffer.byteLength, 0);
}

const NO_TOOLBOX = () => {
  throw 'this host reaches its sandbox through an exec, not a toolbox';
};

const imports = {
  ...wasiImports,
  'sandbox-sync:provider/host-fs': { GrantedDir },
  'sandbox-sync:provider/sandbox-exec': {
    Execution: exec.Execution,
    start: exec.start,
    transferCompression: exec.transferCompression,
    transferIncremental: exec.transferIncremental,
    transferRemote: exec.transferRemote,
    transferStrictLinks: exec.transferStrictLinks,
    transferChecksum: exec.transferChecksum,
  },
  'sandbox-sync:provider/sync-state': {
    load: (key) => records.load(key),
    store: (key, value) => records.store(key, value),
    maxRecordBytes: () => records.maxRecordBytes(),
  },
  'sandbox-sync:provider/sandbox-toolbox': {
    available: () => false,
    upload: NO_TOOLBOX,
    run: NO_TOOLBOX,
    download: NO_TOOLBOX,
    remove: NO_TOOLBOX,
  },
  'sandbox-sync:provider/sync-report': {
    degraded: (feature, missing) => {
      // Bounded as in the Rust host: any component may call this.
      if (degraded.length < 16 && feature.length <= 64 && !degraded.some((d) => d.feature === feature)) {
        degraded.push({ feature, missing: [...missing].filter((m) => m.length <= 64).slice(0, 8) });
      }
    },
    linksSkipped: (operationId, sourcePath, links, total) => noteSkipped(operationId, sourcePath, links, total),
  },
  'sandbox-sync:provider/types': {},
};

/** Features the sandbox turned off in this call (sync-report). */
let degraded = [];

/**
 * The symlinks this call's sync-out left out, a mapping at a time
 * (sync-report), bounded as in the Rust host: the first SKIPPED_NAMED of a
 * mapping with their targets and a count, for at most SKIPPING_MAPPINGS.
 */
let skipped = [];
const SKIPPED_NAMED = 20;
const SKIPPING_MAPPINGS = 4096;
const MAX_SKIPPED_PATH = 2 * 4096 + 1;
function noteSkipped(operationId, sourcePath, links, total) {
  if (skipped.length >= SKIPPING_MAPPINGS) return;
  const named = links
    .filter(({ path, target }) => path.length <= MAX_SKIPPED_PATH && target.length <= MAX_SKIPPED_PATH)
    .slice(0, SKIPPED_NAMED)
    .map(({ path, target }) => ({ path, target }));
  // A component counts at least what it names.
  const count = BigInt(total) > BigInt(links.length) ? BigInt(total) : BigInt(links.length);
  skipped.push({ operationId, sourcePath, links: named, total: Number(count) });
}

/** This call's record store (see records.js). */
let records = recordStore(null);

/** Calls one instance serves before a fresh one (its heap never shrinks). */
const MAX_CALLS = 100;
/**
 * Past these after a call, this thread is not kept for the next: a wasm
 * memory never shrinks, and an idle thread's heap keeps its garbage (no
 * GC runs while it waits).
 */
const RETIRE_MEMORY_BYTES = 64 << 20;
const RETIRE_HEAP_BYTES = 128 << 20;
let current = null;
let calls = 0;

/**
 * The instance for the next call. jco's glue takes ~12 ms to instantiate
 * (it builds every trampoline anew), more than a small sync itself, so an
 * instance serves successive calls; the component keeps no state between
 * calls. One that trapped or exited is never used again.
 */
function instance() {
  if (!current || calls >= MAX_CALLS) {
    memories = [];
    current = instantiate(getCoreModule, imports, instantiateCore).sync;
    calls = 0;
  }
  calls += 1;
  return current;
}

function describe() {
  const info = instance().describe();
  return { ...info, capabilities: [...info.capabilities] };
}

/**
 * A trap after the component reported an allocation its capped memory
 * could not grow to: the limit ended the call, as in the Rust host.
 */
function trapped(e, memory) {
  const wanted = failedAllocation();
  if (wanted > 0 && memory + wanted > GUEST_MEMORY_BYTES) {
    const val = `the provider component needed more than its ${GUEST_MEMORY_BYTES >> 20} MiB of memory (lower maxEntries or maxMetadataBytes to fail sooner)`;
    return { error: { tag: 'limit-exceeded', val } };
  }
  return { trap: String(e?.stack ?? e) };
}

function call({ direction, request, grants, settings }) {
  exec.configure(settings);
  records = recordStore(settings.records);
  degraded = [];
  skipped = [];
  clearDiagnostics();
  const dirs = [];
  let done;
  try {
    grants.forEach((g, grant) => {
      dirs.push(
        new GrantedDir({
          ...g,
          onScratch: (name, dev, ino, beside = null) => send({ type: MSG.SCRATCH, grant, name, dev, ino, beside }),
        }),
      );
    });
    done = { results: instance()[direction === 'in' ? 'syncIn' : 'syncOut'](request, dirs), degraded, skipped };
  } catch (e) {
    if (e?.payload !== undefined) done = { error: e.payload };
    else {
      current = null;
      done = trapped(e, memoryBytes());
    }
  } finally {
    for (const d of dirs) d.close?.();
  }
  const heap = getHeapStatistics();
  const retire = memoryBytes() > RETIRE_MEMORY_BYTES || heap.total_heap_size + heap.external_memory > RETIRE_HEAP_BYTES;
  send({ type: MSG.DONE, ...done, retire });
}

parentPort.on('message', (m) => {
  if (m.type === MSG.CALL) call(m);
  else if (m.type === MSG.DESCRIBE) {
    try {
      send({ type: MSG.DESCRIBED, info: describe() });
    } catch (e) {
      current = null;
      send({ type: MSG.DESCRIBED, trap: String(e?.stack ?? e) });
    }
  }
});
send({ type: MSG.READY });
