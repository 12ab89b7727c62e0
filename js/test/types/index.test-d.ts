// Type tests for src/index.d.ts, checked by test/types.test.js (`tsc
// --noEmit --strict`): the calls a provider makes compile, and each
// misuse below must stay an error (`@ts-expect-error` fails the check
// when the line compiles).

import { Readable, Writable } from 'node:stream';
import {
  assertConfinedSandboxPath,
  BUILTIN,
  DEFAULTS,
  loadProvider,
  localExec,
  performSyncIn,
  performSyncOut,
  SandboxSyncError,
  WIT_VERSION,
  type PodStreamExec,
  type Provider,
  type SyncErrorKind,
  type SyncInput,
  type SyncResult,
} from '../../src/index.js';

// The orchestrator's pod exec, as its Kubernetes plugin writes it.
const exec: PodStreamExec = async (command, io) => {
  const stdin: Readable | undefined = io.stdin;
  const stdout: Writable | undefined = io.stdout;
  void [command.join(' '), stdin, stdout, io.timeoutMs, io.maxStderrBytes];
  return { exitCode: 0, stderr: '' };
};

const input: SyncInput = {
  exec,
  remoteDir: '/workspace',
  operations: [
    {
      operationId: 'workspace',
      files: [
        { sourcePath: '/host/ws', targetPath: '/workspace', kind: 'directory', exclude: ['node_modules'], followSymlinks: false },
        { sourcePath: '/host/cfg.json', targetPath: '/workspace/cfg.json', kind: 'file', mode: 0o600 },
      ],
      postUploadCommands: [{ command: 'npm ci', cwd: '/workspace', timeoutMs: 60_000 }],
    },
  ],
  timeoutMs: 300_000,
  compress: 'zstd',
  compression: 'gzip',
  incremental: true,
  stdinEnds: false,
  confineFollowedSymlinks: true,
};

async function uses(): Promise<number> {
  const result: SyncResult = await performSyncIn(input);
  const back: SyncResult = await performSyncOut({ ...input, exec: localExec(['chroot', '/sandbox']) });
  const provider: Provider = await loadProvider('base64-fallback');
  const viaProvider = await provider.performSyncIn({ exec, remoteDir: '/w', operations: [] });
  provider.close();
  const path: string = assertConfinedSandboxPath('/workspace', '/workspace/a', 'target');
  const defaults: number = DEFAULTS.timeoutMs + DEFAULTS.maxOutputBytes + DEFAULTS.maxEntries;
  void [path, defaults, WIT_VERSION, BUILTIN['tar-stream'], provider.info.witVersion];
  return result.operations[0].filesTransferred + back.operations.length + viaProvider.operations.length;
}

function typed(e: unknown): SyncErrorKind | undefined {
  if (!(e instanceof SandboxSyncError)) return undefined;
  const code: number | null | undefined = e.command?.exitCode;
  void code;
  return e.kind;
}

// -- misuse ------------------------------------------------------------------

// @ts-expect-error an operation needs its files
const noFiles: SyncInput = { exec, remoteDir: '/w', operations: [{ operationId: 'x' }] };
// @ts-expect-error a mapping kind is 'file' or 'directory'
const badKind: SyncInput = { exec, remoteDir: '/w', operations: [{ operationId: 'x', files: [{ sourcePath: 'a', targetPath: 'b', kind: 'link' }] }] };
// @ts-expect-error no such codec
const badCodec: SyncInput = { exec, remoteDir: '/w', operations: [], compress: 'brotli' };
// @ts-expect-error remoteDir is required
const noRoot: SyncInput = { exec, operations: [] };
// @ts-expect-error a provider's own calls take no provider
void ((p: Provider) => p.performSyncIn({ exec, remoteDir: '/w', operations: [], provider: p }));
// @ts-expect-error no such kind
const badErrorKind: SyncErrorKind = 'timeout';
// @ts-expect-error no such built-in component
void BUILTIN['rsync'];

void [uses, typed, noFiles, badKind, badCodec, noRoot, badErrorKind];
