// A failure's message carries file names and the sandbox's stderr; printed
// on a terminal, neither may drive it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SandboxSyncError } from '../src/index.js';

test('messages show control characters escaped; the command details keep stderr as it came', () => {
  const io = SandboxSyncError.fromWit({ tag: 'io', val: 'failed to write back/Icon\r: \u001b[2J\u0085' });
  assert.equal(io.kind, 'io');
  assert.equal(io.message, 'failed to write back/Icon\\r: \\u001b[2J\\u0085');
  const failed = SandboxSyncError.fromWit({
    tag: 'command-failed',
    val: { message: 'post-upload command failed', operationId: 'op', exitCode: 1, timedOut: false, stderr: 'one\ntwo\u0007\n' },
  });
  assert.equal(failed.message, 'post-upload command failed: one | two\\u0007');
  assert.equal(failed.command.stderr, 'one\ntwo\u0007\n');
});
