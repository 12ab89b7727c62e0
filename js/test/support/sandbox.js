// Real sandboxes for the tests: a child `/bin/sh` with GNU userland on this
// machine, or Debian's busybox-static in a chroot (own mount and PID
// namespaces, /proc and the few device nodes a pod has, uid 65534), each
// behind an `exec` with the orchestrator's pod-exec contract.

import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { localExec } from '../../src/local-exec.js';

const BUSYBOX = '/bin/busybox';
const DEVICES = ['null', 'zero', 'full', 'random', 'urandom'];

/** A busybox-static root: every applet linked in /bin, mount points for /proc and /dev. */
function busyboxRoot(dir) {
  if (!existsSync(BUSYBOX)) throw new Error('BusyBox sandboxes need busybox-static (apt-get install busybox-static)');
  for (const d of ['bin', 'proc', 'dev', 'tmp']) mkdirSync(join(dir, d), { recursive: true });
  for (const d of DEVICES) writeFileSync(join(dir, 'dev', d), '');
  chmodSync(join(dir, 'tmp'), 0o1777);
  copyFileSync(BUSYBOX, join(dir, 'bin', 'busybox'));
  chmodSync(join(dir, 'bin', 'busybox'), 0o755);
  for (const applet of execFileSync(BUSYBOX, ['--list']).toString().split('\n')) {
    if (applet && applet !== 'busybox') symlinkSync('busybox', join(dir, 'bin', applet));
  }
  chmodSync(dir, 0o755);
}

/** Enters `root` as a pod would: new mount and PID namespaces, /proc, host devices bound, uid 65534. */
function jail(root) {
  const binds = DEVICES.map((d) => `mount --bind /dev/${d} "$0/dev/${d}" &&`).join(' ');
  return ['unshare', '-mpf', `--mount-proc=${join(root, 'proc')}`, 'sh', '-c', `${binds} exec chroot --userspec=65534:65534 "$0" "$@"`, root];
}

/**
 * A fresh sandbox of `userland` ('gnu' or 'busybox'): its remote dir (a
 * sandbox path), `host(p)` mapping a sandbox path to where the test sees
 * it, its exec, `adopt(p)` handing what the test wrote at sandbox path `p`
 * to the sandbox's user, and `cleanup()`.
 */
export function sandbox(userland = 'gnu') {
  const dir = mkdtempSync(join(tmpdir(), `sandbox-sync-js-${userland}-`));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  if (userland === 'gnu') {
    const remoteDir = join(dir, 'workspace');
    mkdirSync(remoteDir);
    return { userland, remoteDir, host: (p) => p, exec: localExec(), adopt: () => {}, cleanup };
  }
  busyboxRoot(dir);
  mkdirSync(join(dir, 'workspace'));
  chownSync(join(dir, 'workspace'), 65534, 65534);
  const host = (p) => join(dir, p);
  const adopt = (p) => execFileSync('chown', ['-hR', '65534:65534', host(p)]);
  return { userland, remoteDir: '/workspace', host, root: dir, exec: localExec(jail(dir)), adopt, cleanup };
}
