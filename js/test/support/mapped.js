// A writer through a shared mapping, as numpy.memmap, LMDB with
// MDB_WRITEMAP or a database's buffer pool write: Python's own mmap in a
// process of its own, which keeps the file mapped until closed. Linux
// stamps the file's ctime and mtime only when such a writer first writes
// a clean page; later writes to that page leave both as they are until
// writeback cleans it. (The Rust suite's twin: tests/src/mapped.rs; the
// writer itself: tests/mapped_writer.py.)

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

// The writer, shared with the Rust suite.
const PROGRAM = readFileSync(new URL('../../../tests/mapped_writer.py', import.meta.url), 'utf8');

/**
 * Maps the file at `path` (a latin1 string: one char per byte; it must
 * not be empty) for writing. `write(offset, bytes)` writes through the
 * mapping, cut at the file's end (no msync: the page stays dirty).
 */
export async function mappedWriter(path) {
  // The path's bytes as hex: argv would carry it as UTF-8.
  const child = spawn('python3', ['-c', PROGRAM, Buffer.from(path, 'latin1').toString('hex')], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const answer = async () => (await lines.next()).value;
  const first = await answer();
  if (first !== 'mapped') throw new Error(`python3 could not map ${path}`);
  return {
    async write(offset, bytes) {
      child.stdin.write(`${offset} ${Buffer.from(bytes).toString('hex')}\n`);
      if ((await answer()) !== 'ok') throw new Error('the mapped writer failed');
    },
    async close() {
      child.stdin.end();
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)));
    },
  };
}
