// `assertConfinedSandboxPath`, the replaced module's export, against the
// component's own confinement (what `performSyncIn` refuses before any exec):
// the same verdict and kind on every case, so a caller that pre-checks paths
// with it never accepts what the sync then refuses, or the reverse.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { assertConfinedSandboxPath, performSyncIn, SandboxSyncError } from '../src/index.js';

const ROOT = '/workspace';
const TARGETS = [
  '/workspace',
  '/workspace/',
  '/workspace/a',
  '/workspace//a/./b/',
  '/workspace/a b/c\'d"e$(x)`y`',
  '/workspace/é/日本',
  '/workspace/a/..',
  '/workspace/../etc',
  '/workspace/a/../../etc',
  '/workspacex',
  '/workspace-other/a',
  '/',
  '/etc/passwd',
  'workspace/a',
  'a',
  '',
  '.',
  '/workspace/.paperclip-upload',
  '/workspace/a/.paperclip-upload-x/b',
  '/workspace/a.paperclip-upload',
  '/workspace/a\nb',
  '/workspace/a\tb',
  '/workspace/a\rb',
  '/workspace/a\u0085b',
  '/workspace/a\u007fb',
  '/workspace/a\u0000b',
];
const ROOTS = ['/workspace', '/workspace/', '/w//x/.', '/', '', 'relative', '/a/../b', '/a\nb'];

/** The component's verdict: the error kind it refuses `target` with, or 'accepted'. */
async function componentVerdict(remoteDir, target, source) {
  const exec = async () => {
    throw new Error('reached the exec');
  };
  try {
    await performSyncIn({ exec, remoteDir, timeoutMs: 5000, operations: [{ operationId: 'op', files: [{ sourcePath: source, targetPath: target, kind: 'directory' }] }] });
    return 'accepted';
  } catch (e) {
    if (e instanceof SandboxSyncError && (e.kind === 'confinement' || e.kind === 'invalid-request')) return e.kind;
    return 'accepted';
  }
}

function jsVerdict(remoteDir, target) {
  try {
    assertConfinedSandboxPath(remoteDir, target, 'target');
    return 'accepted';
  } catch (e) {
    assert.ok(e instanceof SandboxSyncError && e instanceof Error, `${e}`);
    return e.kind;
  }
}

describe('assertConfinedSandboxPath', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sandbox-sync-confine-'));
  // A directory mapping: a file one may not target the remote dir itself.
  const source = join(dir, 'src');
  mkdirSync(source);
  writeFileSync(join(source, 'f'), 'x');
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('agrees with the component on every target', async () => {
    for (const target of TARGETS) {
      assert.equal(jsVerdict(ROOT, target), await componentVerdict(ROOT, target, source), `target ${JSON.stringify(target)}`);
    }
  });

  test('agrees with the component on every remote dir', async () => {
    for (const root of ROOTS) {
      const target = `${root.replace(/\/+$/, '')}/t`;
      assert.equal(jsVerdict(root, target), await componentVerdict(root, target, source), `remote dir ${JSON.stringify(root)}`);
    }
  });

  test('returns the path normalized, and speaks the replaced module\'s texts', () => {
    assert.equal(assertConfinedSandboxPath('/workspace/', '/workspace//a/./b/', 'target'), '/workspace/a/b');
    assert.throws(() => assertConfinedSandboxPath(ROOT, '/workspace/../etc', 'source'), {
      kind: 'confinement',
      message: 'Kubernetes sync source path is not a confined absolute path: /workspace/../etc',
    });
    assert.throws(() => assertConfinedSandboxPath(ROOT, '/etc', 'target'), {
      kind: 'confinement',
      message: 'Kubernetes sync target path escapes the workspace remote dir: /etc',
    });
  });
});
