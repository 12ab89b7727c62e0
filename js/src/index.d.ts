import type { Readable, Writable } from 'node:stream';

/** The orchestrator's pod exec: run `command`, streaming stdin and stdout. */
export type PodStreamExec = (
  command: string[],
  io: { stdin?: Readable; stdout?: Writable; timeoutMs?: number; maxStderrBytes?: number },
) => Promise<{ exitCode: number | null; stderr: string | Uint8Array }>;

export interface PluginSyncFileMapping {
  sourcePath: string;
  targetPath: string;
  kind: 'file' | 'directory';
  mode?: number;
  exclude?: string[];
  followSymlinks?: boolean;
}

export interface PluginPostUploadCommand {
  command: string;
  cwd?: string;
  timeoutMs?: number;
}

export interface PluginSyncOperation {
  operationId: string;
  files: PluginSyncFileMapping[];
  postUploadCommands?: PluginPostUploadCommand[];
}

export interface SyncInput {
  exec: PodStreamExec;
  operations: PluginSyncOperation[];
  /** The sandbox-side root every sandbox path must stay under. */
  remoteDir: string;
  /** Wall time for the whole call (default 300000). */
  timeoutMs?: number;
  /** Most bytes the sandbox may send on sync-out (default 8 GiB). */
  maxOutputBytes?: number;
  /** Most stderr bytes kept from the sandbox; more fails the sync (default 1 MiB). */
  maxStderrBytes?: number;
  /** Most archive entries accepted from the sandbox (default 1000000). */
  maxEntries?: number;
  /** Most bytes of names, link targets and extension records accepted (default 256 MiB). */
  maxMetadataBytes?: number;
  /** Transport compression (default 'auto'; sync-in compresses only with gzip, and only when `stdinEnds`); the Rust host's name for it. */
  compress?: 'auto' | 'gzip' | 'zstd' | 'none';
  /** The same as `compress` (which wins when both are given). */
  compression?: 'auto' | 'gzip' | 'zstd' | 'none';
  /** Keep target files that already match instead of sending them again (default true). */
  incremental?: boolean;
  /**
   * With `incremental`, judge every file by its content, as rsync's `-c`
   * (default false): exact even against a writer that never moves a
   * file's ctime (a shared mapping held on tmpfs), for a read of every
   * kept file on the sending side.
   */
  checksum?: boolean;
  /**
   * Whether ending the stdin Readable reaches the sandbox as EOF (default
   * false: the orchestrator's pod exec never forwards it, so the component
   * frames what it sends).
   */
  stdinEnds?: boolean;
  /** Refuse, instead of dereferencing, a followed symlink that leads out of its source. */
  confineFollowedSymlinks?: boolean;
  /**
   * Sync-out: refuse a symlink that leads outside its mapping (absolute, or
   * climbing above the mapping's top) instead of leaving it out (default false).
   */
  strictLinks?: boolean;
  /** Where the warning for left-out symlinks goes, one per directory mapping, in the orchestrator module's words (default `console.warn`). */
  onWarning?: (line: string) => void;
  /** The provider to run (default: the shipped tar-stream component). */
  provider?: Provider;
}

export interface SyncResult {
  operations: {
    operationId: string;
    filesTransferred: number;
    bytesTransferred: number;
    /** Sync-out: the first 20 symlinks left out because they lead outside their mapping, as sandbox paths. Absent when none. */
    skippedLinks?: string[];
    /** How many symlinks were left out in all. Absent when none. */
    skippedLinkCount?: number;
  }[];
  /**
   * Features the sandbox turned off for this call for want of a tool
   * (`incremental-out`, `compressed-sync-in`, ...; see the README, "What the
   * sandbox needs"), each with what it lacks (`a|b`: neither). Absent when
   * it turned nothing off.
   */
  degraded?: { feature: string; missing: string[] }[];
}

export type SyncErrorKind =
  | 'invalid-request'
  | 'confinement'
  | 'unsafe-archive'
  | 'command-failed'
  | 'limit-exceeded'
  | 'source-changed'
  | 'transport'
  | 'io';

export class SandboxSyncError extends Error {
  kind: SyncErrorKind;
  command?: { operationId: string; exitCode: number | null; timedOut: boolean; stderr: string };
}

export interface ProviderInfo {
  name: string;
  version: string;
  witVersion: string;
  capabilities: string[];
}

export interface Provider {
  readonly info: ProviderInfo;
  performSyncIn(input: Omit<SyncInput, 'provider'>): Promise<SyncResult>;
  performSyncOut(input: Omit<SyncInput, 'provider'>): Promise<SyncResult>;
  /** Stops its idle worker threads. */
  close(): void;
}

/** The shipped components' transpilations, by name. */
export const BUILTIN: Record<'tar-stream' | 'base64-fallback', string>;
export const WIT_VERSION: string;
export const DEFAULTS: Required<Pick<SyncInput, 'timeoutMs' | 'maxOutputBytes' | 'maxStderrBytes' | 'maxEntries' | 'maxMetadataBytes'>>;

/** 'tar-stream' (default), 'base64-fallback', a component `.wasm` file, or a jco transpilation directory. */
export function loadProvider(which?: string): Promise<Provider>;
export function performSyncIn(input: SyncInput): Promise<SyncResult>;
export function performSyncOut(input: SyncInput): Promise<SyncResult>;

/**
 * Throws a `SandboxSyncError` unless `candidate` is an absolute sandbox path
 * equal to or beneath `remoteDir` (no `..`, no control character, no reserved
 * scratch name); returns it normalized. The replaced module's export, with
 * the component's rule.
 */
export function assertConfinedSandboxPath(remoteDir: string, candidate: string, label: string): string;

/** An exec running `[...prefix, ...command]` as a local child process (a sandbox on this machine). */
export function localExec(prefix?: string[]): PodStreamExec;
