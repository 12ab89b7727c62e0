// Trees on disk for the tests: build one from a spec, describe one for
// comparison (type, mode, size, content hash, link target), count calls.

import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, symlinkSync, writeFileSync, chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** A fresh host directory. */
export function hostDir(tag = 'host') {
  return mkdtempSync(join(tmpdir(), `sandbox-sync-js-${tag}-`));
}

/**
 * Writes `spec` under `root`: `'name': 'text' | Buffer` a file,
 * `'name/': {}` a directory, `'name': {link: 'target'}` a symlink,
 * `'name': {data, mode}` a file with a mode.
 */
export function build(root, spec) {
  mkdirSync(root, { recursive: true });
  for (const [name, v] of Object.entries(spec)) {
    const p = join(root, name);
    mkdirSync(dirname(p), { recursive: true });
    // Strings have a `link` method: look at objects only.
    const o = typeof v === 'object' && !Buffer.isBuffer(v) ? v : {};
    if (name.endsWith('/')) mkdirSync(p, { recursive: true });
    else if (o.link !== undefined) symlinkSync(o.link, p);
    else if (o.data !== undefined) {
      writeFileSync(p, o.data);
      chmodSync(p, o.mode);
    } else writeFileSync(p, v);
  }
  return root;
}

/** `{relative path: 'd755' | 'f644 <size> <sha256-prefix>' | 'l -> target'}`. */
export function describeTree(root) {
  const out = {};
  const walk = (rel) => {
    for (const name of readdirSync(join(root, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const p = join(root, r);
      const st = lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out[r] = `l -> ${readlinkSync(p)}`;
      else if (st.isDirectory()) {
        out[r] = `d${mode}`;
        walk(r);
      } else {
        const h = createHash('sha256').update(readFileSync(p)).digest('hex').slice(0, 16);
        out[r] = `f${mode} ${st.size} ${h}`;
      }
    }
  };
  walk('');
  return out;
}

/**
 * `describeTree` by name bytes, names that are not UTF-8 included: keys
 * are paths as latin1 (one char per byte), link targets likewise.
 */
export function describeBytes(root) {
  const out = {};
  const bytes = { encoding: 'buffer' };
  const walk = (rel) => {
    const dir = Buffer.concat([Buffer.from(root), rel]);
    for (const name of readdirSync(dir, bytes).sort(Buffer.compare)) {
      const r = Buffer.concat([rel, name]);
      const p = Buffer.concat([Buffer.from(root), r]);
      const key = r.subarray(1).toString('latin1');
      const st = lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out[key] = `l -> ${readlinkSync(p, bytes).toString('latin1')}`;
      else if (st.isDirectory()) {
        out[key] = `d${mode}`;
        walk(Buffer.concat([r, Buffer.from('/')]));
      } else {
        const h = createHash('sha256').update(readFileSync(p)).digest('hex').slice(0, 16);
        out[key] = `f${mode} ${st.size} ${h}`;
      }
    }
  };
  walk(Buffer.from('/'));
  return out;
}

/** Wraps an exec to count its calls and keep their argv. */
export function counted(exec) {
  const calls = [];
  const wrapped = (argv, io) => {
    calls.push(argv);
    return exec(argv, io);
  };
  wrapped.calls = calls;
  return wrapped;
}
