// A worker thread that runs one provider component, one sync call at a time.
//
// Every import the component calls is synchronous (a blocking read of the
// sandbox's stdout, a file write), so the component cannot run on the main
// thread without freezing its event loop for the whole sync. Here it may
// block: the main thread keeps running the caller's exec and streams.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parentPort, workerData } from 'node:worker_threads';
import { connect, send } from './channel.js';
import * as exec from './exec.js';
import { GrantedDir } from './hostfs.js';
import { wasiImports } from './wasi.js';

const { componentDir, port, doorbell } = workerData;
connect(port, doorbell);

const { instantiate } = await import(pathToFileURL(join(componentDir, 'provider.js')).href);
const modules = new Map();
function getCoreModule(name) {
  if (!modules.has(name)) modules.set(name, new WebAssembly.Module(readFileSync(join(componentDir, name))));
  return modules.get(name);
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
  },
  'sandbox-sync:provider/sandbox-toolbox': {
    available: () => false,
    upload: NO_TOOLBOX,
    run: NO_TOOLBOX,
    download: NO_TOOLBOX,
    remove: NO_TOOLBOX,
  },
  'sandbox-sync:provider/types': {},
};

/** Calls one instance serves before a fresh one (its heap never shrinks). */
const MAX_CALLS = 100;
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
    current = instantiate(getCoreModule, imports).sync;
    calls = 0;
  }
  calls += 1;
  return current;
}

function describe() {
  const info = instance().describe();
  return { ...info, capabilities: [...info.capabilities] };
}

function call({ direction, request, grants, settings }) {
  exec.configure(settings);
  const dirs = [];
  try {
    grants.forEach((g, grant) => {
      dirs.push(
        new GrantedDir({
          ...g,
          onScratch: (name, dev, ino) => send({ type: 'scratch', grant, name, dev, ino }),
        }),
      );
    });
    const results = instance()[direction === 'in' ? 'syncIn' : 'syncOut'](request, dirs);
    send({ type: 'done', results });
  } catch (e) {
    if (e?.payload !== undefined) send({ type: 'done', error: e.payload });
    else {
      current = null;
      send({ type: 'done', trap: String(e?.stack ?? e) });
    }
  } finally {
    for (const d of dirs) d.close?.();
  }
}

parentPort.on('message', (m) => {
  if (m.type === 'call') call(m);
  else if (m.type === 'describe') {
    try {
      send({ type: 'described', info: describe() });
    } catch (e) {
      current = null;
      send({ type: 'described', trap: String(e?.stack ?? e) });
    }
  }
});
send({ type: 'ready' });
