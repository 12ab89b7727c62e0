// The package as a user installs it: `npm pack`, then `npm install` of the
// tarball into a fresh project (from the npm cache where it can), then syncs
// both ways from that project. What a platform team sees on day one: its
// size, its files, its peers, and a clear error where an optional peer is
// missing.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { PACKAGE, TARGET } from '../scripts/cargo.mjs';

const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const npm = (cwd, args) => execFileSync(NPM, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const json = (p) => JSON.parse(readFileSync(p, 'utf8'));

/** Every file under `dir`, relative. */
function walk(dir, rel = '') {
  return readdirSync(join(dir, rel), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(dir, join(rel, e.name)) : [join(rel, e.name)],
  );
}

function du(dir) {
  return walk(dir).reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
}

/**
 * A fresh project holding `deps` (tarballs) installed as `npm install`
 * would. Not `--offline`: `npm ci` caches tarballs but not the registry
 * documents a range is resolved from, so a fresh machine has to ask.
 */
function project(root, name, tarballs) {
  const dir = join(root, name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true, type: 'module' }));
  npm(dir, ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs]);
  return dir;
}

describe('the packed package, installed as a user would', () => {
  let root;
  let tarball;
  let installed;
  before(() => {
    root = mkdtempSync(join(tmpdir(), 'sandbox-sync-pack-'));
    // The test script built components/ already; packing runs no script.
    const name = npm(PACKAGE, ['pack', '--ignore-scripts', '--loglevel=error', '--pack-destination', root]).trim().split('\n').pop();
    tarball = join(root, name);
    installed = project(root, 'app', [tarball]);
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  test('pulls only the package and its two small dependencies, under 20 MB', () => {
    const modules = join(installed, 'node_modules');
    const names = readdirSync(modules).filter((n) => !n.startsWith('.')).flatMap((n) => (n.startsWith('@') ? readdirSync(join(modules, n)).map((m) => `${n}/${m}`) : [n]));
    assert.deepEqual(names.sort(), ['@sandbox-sync/node', 'fflate', 'fzstd']);
    const size = du(modules);
    assert.ok(size < 20e6, `node_modules holds ${size} bytes`);
  });

  test('ships README, LICENSE and the components, and no path of the build machine', () => {
    const pkg = join(installed, 'node_modules', '@sandbox-sync', 'node');
    const files = walk(pkg);
    for (const f of ['README.md', 'LICENSE', 'package.json', 'src/index.js', 'src/index.d.ts', 'paperclip/worker.js', 'paperclip/plugin.d.ts']) {
      assert.ok(files.includes(f), `${f} is missing from the tarball`);
    }
    for (const c of ['tar-stream', 'base64-fallback']) {
      assert.ok(files.includes(`components/${c}/provider.js`), `components/${c} is missing`);
      assert.match(readFileSync(join(pkg, 'components', c, 'SOURCE'), 'utf8'), /^sandbox_sync_\w+\.wasm sha256:[0-9a-f]{64}\n$/);
    }
    // The addon the build made for this machine, and its source.
    for (const f of ['native/at.c', `native/${process.platform}-${process.arch}/at.node`]) {
      assert.ok(files.includes(f), `${f} is missing from the tarball`);
    }
    assert.equal(createRequire(import.meta.url)(join(pkg, 'native', `${process.platform}-${process.arch}`, 'at.node')).held(), 0);
    assert.ok(!files.some((f) => f.includes('test/') || f.endsWith('.tgz')), 'tests or tarballs were packed');
    const machine = [PACKAGE, TARGET, tmpdir() === '/tmp' ? null : tmpdir()].filter(Boolean);
    for (const f of files) {
      const text = readFileSync(join(pkg, f), 'latin1');
      for (const path of machine) assert.ok(!text.includes(path), `${f} names ${path}`);
    }
    assert.match(readFileSync(join(pkg, 'README.md'), 'utf8'), /performSyncIn[\s\S]*performSyncOut[\s\S]*## Errors[\s\S]*## Differences/);
  });

  test('syncs both ways from the installed copy', () => {
    const sandbox = join(root, 'sandbox');
    const src = join(root, 'src');
    const back = join(root, 'back');
    mkdirSync(join(src, 'd'), { recursive: true });
    mkdirSync(sandbox);
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    writeFileSync(join(src, 'd', 'b.bin'), Buffer.alloc(70_000, 7));
    const script = `
      import { localExec, performSyncIn, performSyncOut, assertConfinedSandboxPath } from '@sandbox-sync/node';
      const [sandbox, src, back] = process.argv.slice(2);
      const exec = localExec();
      const files = (from, to) => [{ operationId: 'op', files: [{ sourcePath: from, targetPath: to, kind: 'directory' }] }];
      const into = await performSyncIn({ exec, remoteDir: sandbox, operations: files(src, sandbox + '/ws') });
      const out = await performSyncOut({ exec, remoteDir: sandbox, operations: files(sandbox + '/ws', back) });
      console.log(JSON.stringify({ into, out, confined: assertConfinedSandboxPath(sandbox, sandbox + '//ws/.', 'target') }));
    `;
    writeFileSync(join(installed, 'sync.js'), script);
    const report = JSON.parse(execFileSync(process.execPath, ['sync.js', sandbox, src, back], { cwd: installed, encoding: 'utf8' }));
    assert.equal(report.into.operations[0].filesTransferred, 2);
    assert.equal(report.confined, `${sandbox}/ws`);
    assert.equal(readFileSync(join(back, 'a.txt'), 'utf8'), 'alpha\n');
    assert.deepEqual(readFileSync(join(back, 'd', 'b.bin')), Buffer.alloc(70_000, 7));
  });

  test('a custom .wasm without jco installed fails naming the missing peer', () => {
    writeFileSync(join(installed, 'custom.wasm'), Buffer.from([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]));
    writeFileSync(
      join(installed, 'custom.js'),
      `import { loadProvider } from '@sandbox-sync/node';
       try { await loadProvider(process.argv[2]); console.log('loaded'); }
       catch (e) { console.log(JSON.stringify({ kind: e.kind, message: e.message })); }`,
    );
    const out = JSON.parse(execFileSync(process.execPath, ['custom.js', join(installed, 'custom.wasm')], { cwd: installed, encoding: 'utf8' }));
    assert.equal(out.kind, 'invalid-request');
    assert.match(out.message, /@bytecodealliance\/jco/);
  });

  test('installs beside any release line of the plugin SDK (a canary included)', () => {
    // A stand-in SDK at a canary version: npm refuses (ERESOLVE) a peer
    // range that does not admit it.
    const sdk = join(root, 'sdk');
    mkdirSync(sdk);
    writeFileSync(join(sdk, 'package.json'), JSON.stringify({ name: '@paperclipai/plugin-sdk', version: '2026.999.0-canary.3', type: 'module' }));
    writeFileSync(join(sdk, 'index.js'), 'export const definePlugin = (p) => p;\n');
    const sdkTarball = join(root, npm(sdk, ['pack', '--loglevel=error', '--pack-destination', root]).trim().split('\n').pop());
    const dir = project(root, 'with-canary-sdk', [sdkTarball, tarball]);
    assert.equal(json(join(dir, 'node_modules', '@paperclipai', 'plugin-sdk', 'package.json')).version, '2026.999.0-canary.3');
  });
});
