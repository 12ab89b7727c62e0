// The seed's input and result shapes, to and from the component's WIT types.

import { mkdirSync, rmdirSync, statSync } from 'node:fs';
import { dirname, isAbsolute } from 'node:path';

export const DEFAULTS = {
  timeoutMs: 300_000,
  maxOutputBytes: 8 * 1024 ** 3,
  maxStderrBytes: 1 << 20,
  maxEntries: 1_000_000,
  maxMetadataBytes: 256 << 20,
};

export const KINDS = new Set([
  'invalid-request',
  'confinement',
  'unsafe-archive',
  'command-failed',
  'limit-exceeded',
  'source-changed',
  'transport',
  'io',
]);

// C0, DEL and C1 control characters (Rust's `char::is_control`).
// eslint-disable-next-line no-control-regex
export const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;
const CONTROLS = new RegExp(CONTROL.source, 'gu');
const ESCAPES = { '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/**
 * `text` with its control characters escaped (`\r`, `\u001b`): messages
 * carry file names and the sandbox's stderr, and neither may drive the
 * terminal a caller prints them on. (`error.command.stderr` stays raw.)
 */
export function printable(text) {
  return text.replace(CONTROLS, (c) => ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A failed sync: `kind` is the component's typed error. */
export class SandboxSyncError extends Error {
  constructor(kind, message, command) {
    super(message);
    this.name = 'SandboxSyncError';
    this.kind = kind;
    /** For `command-failed`: {operationId, exitCode, timedOut, stderr}. */
    if (command) this.command = command;
  }

  /** From the component's `sync-error` variant. */
  static fromWit({ tag, val }) {
    if (tag !== 'command-failed') return new SandboxSyncError(KINDS.has(tag) ? tag : 'transport', printable(String(val)));
    const c = val;
    const stderr = c.stderr ? `: ${c.stderr.trim().replaceAll('\n', ' | ')}` : '';
    return new SandboxSyncError('command-failed', printable(`${c.message}${stderr}`), {
      operationId: c.operationId,
      exitCode: c.exitCode ?? null,
      timedOut: c.timedOut,
      stderr: c.stderr,
    });
  }
}

function invalid(message) {
  return new SandboxSyncError('invalid-request', message);
}

function u64(value, name) {
  if (!Number.isSafeInteger(value) || value < 0) throw invalid(`${name} must be a non-negative integer`);
  return BigInt(value);
}

function strings(list, name) {
  if (list === undefined) return [];
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) throw invalid(`${name} must be a list of strings`);
  return [...list];
}

function mapping(m) {
  if (typeof m?.sourcePath !== 'string' || typeof m?.targetPath !== 'string') {
    throw invalid('each file mapping needs a sourcePath and a targetPath');
  }
  if (m.kind !== 'file' && m.kind !== 'directory') throw invalid(`unknown mapping kind ${JSON.stringify(m.kind)}`);
  if (m.mode !== undefined && m.mode !== null && (!Number.isInteger(m.mode) || m.mode < 0 || m.mode > 0o7777)) {
    throw invalid(`mode ${m.mode} of ${m.targetPath} is not a permission mode`);
  }
  return {
    sourcePath: m.sourcePath,
    targetPath: m.targetPath,
    kind: m.kind,
    mode: m.mode ?? undefined,
    exclude: strings(m.exclude, 'exclude'),
    followSymlinks: Boolean(m.followSymlinks),
  };
}

function command(c) {
  if (typeof c?.command !== 'string') throw invalid('each post-upload command needs a command');
  if (c.cwd !== undefined && c.cwd !== null && typeof c.cwd !== 'string') throw invalid('a post-upload cwd must be a string');
  return {
    command: c.command,
    cwd: c.cwd ?? undefined,
    timeoutMs: c.timeoutMs === undefined || c.timeoutMs === null ? undefined : u64(c.timeoutMs, 'timeoutMs'),
  };
}

/** The WIT `sync-request` for `input` (the seed's performSync* input). */
export function toRequest(input) {
  if (typeof input?.exec !== 'function') throw invalid('exec must be a function');
  if (typeof input.remoteDir !== 'string') throw invalid('remoteDir must be a string');
  if (!Array.isArray(input.operations)) throw invalid('operations must be a list');
  const limit = (name) => u64(input[name] ?? DEFAULTS[name], name);
  return {
    remoteDir: input.remoteDir,
    operations: input.operations.map((op) => {
      if (typeof op?.operationId !== 'string') throw invalid('each operation needs an operationId');
      if (!Array.isArray(op.files)) throw invalid(`operation ${op.operationId} needs a files list`);
      return {
        operationId: op.operationId,
        files: op.files.map(mapping),
        postUploadCommands: (op.postUploadCommands ?? []).map(command),
      };
    }),
    limits: {
      timeoutMs: limit('timeoutMs'),
      maxOutputBytes: limit('maxOutputBytes'),
      maxStderrBytes: limit('maxStderrBytes'),
      maxEntries: limit('maxEntries'),
      maxMetadataBytes: limit('maxMetadataBytes'),
    },
  };
}

/**
 * One grant per mapping, in order, as the Rust shim makes them: a directory
 * mapping grants its host directory, a file mapping its host file's parent.
 * Sync-in sources are read-only (following symlinks where `tar -h` would);
 * sync-out targets are writable, their directories created first; each
 * directory created goes into `created` (shallowest first), so a failed
 * call can take it back (`removeCreated`).
 */
export function grantsFor(direction, request, { confineFollowedSymlinks = false } = {}, created = []) {
  const grants = [];
  for (const m of request.operations.flatMap((op) => op.files)) {
    const host = direction === 'in' ? m.sourcePath : m.targetPath;
    if (!isAbsolute(host)) throw invalid(`host path ${host} is not absolute`);
    const path = m.kind === 'directory' ? host : dirname(host);
    if (path === '/') throw new SandboxSyncError('confinement', `refusing to grant / to the provider`);
    if (direction === 'in') {
      try {
        statSync(path);
      } catch {
        throw invalid(`source ${host} does not exist`);
      }
    } else {
      try {
        const first = mkdirSync(path, { recursive: true });
        if (first !== undefined) {
          const made = [];
          for (let d = path; d.length >= first.length; d = dirname(d)) made.unshift(d);
          created.push(...made);
        }
      } catch (e) {
        throw new SandboxSyncError('io', `failed to create ${path}: ${e.message}`);
      }
    }
    const follow = (m.kind === 'directory' ? m.followSymlinks : true) && !confineFollowedSymlinks;
    grants.push({ path, writable: direction === 'out', followLinks: direction === 'in' && follow });
  }
  return grants;
}

/** Removes what `grantsFor` created, deepest first, where still empty. */
export function removeCreated(created) {
  for (const d of [...created].reverse()) {
    try {
      rmdirSync(d);
    } catch {
      // Not empty (something landed there), or gone: it stays as it is.
    }
  }
}

/** `rel` below the sandbox directory `top`. */
export function joinSandbox(top, rel) {
  return `${top.replace(/\/+$/, '')}/${rel}`;
}

/**
 * The seed's result shape. An operation whose sync-out left out symlinks
 * that leave their mapping also carries `skippedLinks` (the first 20, as
 * sandbox paths) and `skippedLinkCount`, as the Rust host's results do.
 */
export function toResult(results, degraded = [], skipped = []) {
  const result = {
    operations: results.map((r) => {
      const op = {
        operationId: r.operationId,
        filesTransferred: Number(r.filesTransferred),
        bytesTransferred: Number(r.bytesTransferred),
      };
      const mine = skipped.filter((s) => s.operationId === r.operationId);
      const count = mine.reduce((n, s) => n + s.total, 0);
      if (count > 0) {
        op.skippedLinks = mine.flatMap((s) => s.links.map((l) => joinSandbox(s.sourcePath, l.path))).slice(0, 20);
        op.skippedLinkCount = count;
      }
      return op;
    }),
  };
  // Only where the sandbox turned a feature off: else the seed's shape.
  if (degraded.length > 0) result.degraded = degraded;
  return result;
}
