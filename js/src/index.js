// sandbox-sync for Node: the same provider components (.wasm) the Rust host
// loads, as a drop-in for the orchestrator's Kubernetes file-sync module:
// `performSyncIn({exec, operations, remoteDir, timeoutMs})`.
//
// Each provider runs in worker threads (one call at a time per worker, a
// worker per concurrent call), with every import implemented in ./worker.

import { createHash, timingSafeEqual } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ProviderWorker } from './bridge.js';
import { isLocalExec } from './local-exec.js';
import { DEFAULTS, SandboxSyncError, grantsFor, removeCreated, toRequest, toResult } from './request.js';
import { MSG } from './protocol.js';
import { privateDir, seal } from './private-dir.js';
import { lockTargets } from './target-lock.js';
import { removeScratch, sweepBeside } from './scratch.js';

export { SandboxSyncError };
export { assertConfinedSandboxPath } from './confine.js';
export { localExec } from './local-exec.js';

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** The components this package ships, transpiled at build time. */
export const BUILTIN = {
  'tar-stream': join(PACKAGE, 'components', 'tar-stream'),
  'base64-fallback': join(PACKAGE, 'components', 'base64-fallback'),
};
/** The WIT this host implements; a component must match its major.minor. */
export const WIT_VERSION = '0.2.10';
const REQUIRED_CAPABILITIES = ['sync-in', 'sync-out'];
/** Past the call's timeout, how long the component may take to report. */
const HOST_GRACE_MS = 1500;
/** Past the call's timeout, how long each exec may take (shared deadline). */
const EXEC_GRACE_MS = 900;
/** Idle workers kept per provider. */
const IDLE_WORKERS = 2;

/** The cache directory the environment names, as the Rust host reads it; null without one. */
function cacheBase() {
  return (
    process.env.SANDBOX_SYNC_CACHE_DIR ??
    (process.env.XDG_CACHE_HOME && join(process.env.XDG_CACHE_HOME, 'sandbox-sync')) ??
    (process.env.HOME && join(process.env.HOME, '.cache', 'sandbox-sync')) ??
    null
  );
}

/**
 * Where transpilations are cached: a directory only this user could have
 * written, with its key (see private-dir.js); null where there is none.
 */
function cacheDir() {
  const base = cacheBase();
  return base && privateDir(join(base, 'jco'));
}

/**
 * Where incremental sync-out keeps its account of what it landed (shared
 * with the Rust host's records, sealed the same way): `{dir, key}`, or
 * null without a private cache directory.
 */
function recordsDir() {
  const base = cacheBase();
  const d = base && privateDir(join(base, 'records'));
  return d && { dir: d.path, key: d.key };
}

/** What a transpilation's seal names: its files and their digests. */
function manifest(dir) {
  const lines = [];
  const walk = (rel) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      if (r === 'SEAL') continue;
      const st = lstatSync(join(dir, r));
      if (st.isDirectory()) walk(r);
      else lines.push(`${r}\0${st.isFile() ? createHash('sha256').update(readFileSync(join(dir, r))).digest('hex') : 'not a file'}`);
    }
  };
  walk('');
  return lines.join('\n');
}

/** Whether `dir` holds exactly the transpilation its SEAL was written for. */
function sealedTranspilation(cache, dir) {
  try {
    const stored = readFileSync(join(dir, 'SEAL'));
    return timingSafeEqual(stored, seal(cache.key, 'jco', manifest(dir)));
  } catch {
    return false;
  }
}

/**
 * jco, an optional peer: only a custom `.wasm` needs it (the shipped
 * components are transpiled when the package is packed), and it is most of
 * an install's size.
 */
async function importJco() {
  try {
    return await import('@bytecodealliance/jco');
  } catch (e) {
    if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !String(e.message).includes('@bytecodealliance/jco')) throw e;
    throw new SandboxSyncError(
      'invalid-request',
      'a component .wasm file needs @bytecodealliance/jco to transpile it: `npm install @bytecodealliance/jco@^1.35.0` (the shipped components and transpiled directories do not)',
    );
  }
}

/** Transpiles a component file with jco, once per content where a cache can be kept. */
async function transpiled(file) {
  const bytes = readFileSync(file);
  const key = createHash('sha256').update(bytes).digest('hex').slice(0, 32);
  const cache = cacheDir();
  const dir = cache ? join(cache.path, key) : mkdtempSync(join(tmpdir(), 'sandbox-sync-jco-'));
  // The JS a worker imports: only a transpilation sealed with this user's
  // key; any other is made anew.
  if (cache && existsSync(dir)) {
    if (sealedTranspilation(cache, dir)) return dir;
    console.warn(`sandbox-sync: ${dir} has no valid seal: transpiling anew`);
    rmSync(dir, { recursive: true, force: true });
  }
  const { transpile } = await importJco();
  const { files } = await transpile(bytes, { name: 'provider', instantiation: { tag: 'sync' }, noTypescript: true });
  const tmp = cache ? mkdtempSync(`${dir}.`) : dir;
  for (const [name, data] of Object.entries(files)) {
    mkdirSync(dirname(join(tmp, name)), { recursive: true });
    writeFileSync(join(tmp, name), data);
  }
  if (tmp === dir) return dir;
  writeFileSync(join(tmp, 'SEAL'), seal(cache.key, 'jco', manifest(tmp)), { mode: 0o600 });
  try {
    renameSync(tmp, dir);
  } catch {
    // Another process won the race with the same content.
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

/**
 * Warns of the symlinks each directory mapping's sync-out left out, as the
 * orchestrator's Kubernetes module does (one warning a mapping, its lines
 * in that module's words: the first 20 links, then the total), through
 * `input.onWarning` where the caller gives one, else `console.warn`.
 */
function warnSkipped(skipped = [], input) {
  const warn = typeof input.onWarning === 'function' ? input.onWarning : console.warn;
  for (const { sourcePath, links, total } of skipped) {
    const lines = links.map((l) => `syncOut: skipped symlink whose target leaves the synced directory: ${l.path} -> ${l.target}`);
    if (total > links.length) lines.push(`syncOut: skipped ${total} symlinks in total whose target leaves the synced directory`);
    warn(`[sandbox-sync] syncOut of ${sourcePath}:\n${lines.join('\n')}`);
  }
}

class Provider {
  constructor(componentDir, info) {
    this.componentDir = componentDir;
    this.info = info;
    this.idle = [];
  }

  async worker() {
    // An idle worker may have died since (terminated, or its thread failed).
    let w = this.idle.pop();
    while (w?.failed) w = this.idle.pop();
    w ??= new ProviderWorker(this.componentDir);
    await w.ready;
    return w;
  }

  /** Keeps `w` idle for the next call, unless its call left it holding much memory (`retire`). */
  release(w, retire = false) {
    if (!w.failed && !retire && this.idle.length < IDLE_WORKERS) this.idle.push(w);
    else w.terminate();
  }

  async sync(direction, input) {
    const request = toRequest(input);
    // A failed call leaves no host directory it created.
    const created = [];
    let unlock = null;
    try {
      const grants = grantsFor(direction, request, input, created);
      const timeoutMs = Number(request.limits.timeoutMs);
      // Held for the whole call (see target-lock.js).
      if (direction === 'out') {
        unlock = await lockTargets(request, Date.now() + timeoutMs);
        for (const op of request.operations) for (const m of op.files) if (m.kind === 'directory') sweepBeside(m.targetPath);
      }
      // The caller's exec is a pod's or a remote sandbox's, unless localExec made it.
      const remote = input.remote ?? !isLocalExec(input.exec);
      const settings = {
        compression: compression(direction, input.compress ?? input.compression, remote),
        incremental: input.incremental ?? true,
        strictLinks: input.strictLinks ?? false,
        checksum: input.checksum ?? false,
        remote,
        records: input.incremental === false ? null : recordsDir(),
        stdinEnds: input.stdinEnds ?? false,
        deadline: Date.now() + timeoutMs + EXEC_GRACE_MS,
      };
      return await this.call(direction, request, grants, settings, input);
    } catch (e) {
      removeCreated(created);
      throw e;
    } finally {
      unlock?.();
    }
  }

  /** One call on a worker, with the grants and settings `sync` made. */
  async call(direction, request, grants, settings, input) {
    const w = await this.worker();
    const timeoutMs = Number(request.limits.timeoutMs);
    const scratch = [];
    let done;
    try {
      done = await w.run({ type: MSG.CALL, direction, request, grants, settings }, input.exec, timeoutMs + HOST_GRACE_MS, scratch);
    } catch (e) {
      if (e?.timedOut) {
        throw new SandboxSyncError('limit-exceeded', `the sync did not finish within ${timeoutMs + HOST_GRACE_MS} ms`);
      }
      throw new SandboxSyncError('transport', `the provider worker failed: ${e?.message ?? e}`);
    } finally {
      this.release(w, done?.retire);
      // Whatever ended the call, scratch the component left at a grant's top goes.
      for (const s of scratch) removeScratch(grants[s.grant].path, [s]);
    }
    if (done.error) throw SandboxSyncError.fromWit(done.error);
    if (done.trap) throw new SandboxSyncError('transport', `the provider component trapped: ${done.trap}`);
    const result = toResult(done.results, done.degraded, done.skipped);
    warnSkipped(done.skipped, input);
    return result;
  }

  /** Host -> sandbox. */
  performSyncIn(input) {
    return this.sync('in', input);
  }

  /** Sandbox -> host. */
  performSyncOut(input) {
    return this.sync('out', input);
  }

  /** Stops the idle workers (busy ones stop when their call ends). */
  close() {
    for (const w of this.idle.splice(0)) w.terminate();
  }
}

/**
 * The component policy this host can honour: `auto` is `none` on a local
 * exec (as the Rust host's local backend: no link to save bytes on, only
 * CPU to spend). Node has no zstd compressor here (fzstd only decodes), so
 * a sync-in that would compress with zstd prefers gzip; `auto` then
 * compresses whenever the sandbox has gzip.
 */
function compression(direction, asked = 'auto', remote = true) {
  if (!['auto', 'gzip', 'zstd', 'none'].includes(asked)) {
    throw new SandboxSyncError('invalid-request', `unknown compression ${JSON.stringify(asked)}`);
  }
  if (asked === 'auto' && !remote) return 'none';
  return direction === 'in' && asked !== 'none' ? 'gzip' : asked;
}

const loaded = new Map();

/**
 * A provider component: 'tar-stream' (the default), 'base64-fallback', a
 * `.wasm` component file (transpiled on first load, cached by content) or
 * a directory holding a jco transpilation (`provider.js`).
 */
export function loadProvider(which = 'tar-stream') {
  // A component file swapped in place is a new provider.
  const key = which.endsWith('.wasm') ? `${which}:${statSync(which, { throwIfNoEntry: false })?.mtimeMs}` : which;
  if (!loaded.has(key)) {
    const p = load(which);
    loaded.set(key, p);
    p.catch(() => loaded.delete(key));
  }
  return loaded.get(key);
}

async function load(which) {
  const wasm = !BUILTIN[which] && which.endsWith('.wasm');
  if (wasm && !existsSync(which)) throw new SandboxSyncError('invalid-request', `no provider component at ${which}`);
  const dir = BUILTIN[which] ?? (wasm ? await transpiled(which) : resolve(which));
  if (!existsSync(join(dir, 'provider.js'))) {
    throw new SandboxSyncError('invalid-request', `no provider component at ${which}`);
  }
  const w = new ProviderWorker(dir);
  await w.ready;
  const m = await w.run({ type: MSG.DESCRIBE }, null, 30_000, []);
  if (m.trap) throw new SandboxSyncError('transport', `provider at ${which} failed to start: ${m.trap}`);
  const info = m.info;
  const majorMinor = (v) => v.split('.').slice(0, 2).join('.');
  if (majorMinor(info.witVersion) !== majorMinor(WIT_VERSION)) {
    throw new SandboxSyncError('invalid-request', `${info.name} ${info.version} was built against WIT ${info.witVersion}, this host speaks ${WIT_VERSION}`);
  }
  for (const cap of REQUIRED_CAPABILITIES) {
    if (!info.capabilities.includes(cap)) {
      throw new SandboxSyncError('invalid-request', `${info.name} does not declare the ${JSON.stringify(cap)} capability`);
    }
  }
  const provider = new Provider(dir, info);
  provider.release(w);
  return provider;
}

/** Host -> sandbox with `input.provider`, else the tar-stream component. */
export async function performSyncIn(input) {
  return (input?.provider ?? (await loadProvider())).performSyncIn(input);
}

/** Sandbox -> host with `input.provider`, else the tar-stream component. */
export async function performSyncOut(input) {
  return (input?.provider ?? (await loadProvider())).performSyncOut(input);
}

export { DEFAULTS };
