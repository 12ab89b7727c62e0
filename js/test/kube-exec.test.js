// The test pod exec (test/support/kube-exec.js) against our Rust Kubernetes
// exec server, once per subprotocol. Also pins down what client-node 1.4.0
// itself does with stdin EOF, which is why the exec frames stdin with
// `head -c N` instead of relying on EOF.

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { PassThrough, Readable, Writable } from 'node:stream';

import { Exec, kubeExec, loadKubeConfig, startK8sServer } from './support/kube-exec.js';

/** A Writable that keeps everything and when each chunk arrived. */
function collector() {
  const chunks = [];
  const times = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      chunks.push(Buffer.from(chunk));
      times.push(Date.now());
      done();
    },
  });
  return { sink, times, bytes: () => Buffer.concat(chunks) };
}

/** Runs `command` with client-node's own Exec, stdin ended right away. */
async function rawExecWithStdinEnd(server, command, input) {
  const kc = loadKubeConfig(server.kubeconfig);
  const out = collector();
  const stdin = new PassThrough();
  let status = null;
  const ws = await new Exec(kc).exec(
    server.namespace, server.pod, server.container, command,
    out.sink, new PassThrough(), stdin, false, (s) => (status = s),
  );
  const closed = new Promise((resolve) => ws.once('close', resolve));
  stdin.end(input);
  await closed;
  return { protocol: ws.protocol, status, stdout: out.bytes().toString() };
}

for (const protocol of ['v4', 'v5']) {
  describe(`kube exec over ${protocol}`, () => {
    let server;
    let exec;
    before(async () => {
      server = await startK8sServer({ protocol });
      exec = kubeExec(server);
    });
    after(() => server?.stop());

    test(`client-node 1.4.0 offers v5 first; the server picks ${protocol}`, async () => {
      const { protocol: negotiated } = await rawExecWithStdinEnd(server, ['true'], '');
      assert.equal(negotiated, `${protocol}.channel.k8s.io`);
    });

    // What plain client-node does on stdin 'end': v5 sends CLOSE [255, 0]
    // and the pod sees EOF; v4 closes the whole socket, so the process is
    // killed and no status arrives (its output may, if it raced the close).
    test('plain client-node: stdin end is EOF on v5, a hang-up on v4', async () => {
      const r = await rawExecWithStdinEnd(server, ['cat'], 'hello\n');
      if (protocol === 'v5') {
        assert.deepEqual(r.status, { metadata: {}, status: 'Success' });
        assert.equal(r.stdout, 'hello\n');
      } else {
        assert.equal(r.status, null);
      }
    });

    // kubeExec removes that handler (as the plugin does), so on either
    // protocol `cat` never sees EOF and only the watchdog ends it.
    test('kubeExec: stdin end does not reach the pod', async () => {
      const out = collector();
      await assert.rejects(
        exec(['cat'], { stdin: Readable.from([Buffer.from('hello\n')]), stdout: out.sink, timeoutMs: 1000 }),
        { kind: 'timeout' },
      );
      assert.equal(out.bytes().toString(), 'hello\n');
    });

    test('stdout streams into the Writable before the exec ends', async () => {
      const out = collector();
      const script = 'for i in 1 2 3; do echo $i; sleep 0.3; done';
      const result = await exec(['sh', '-c', script], { stdout: out.sink });
      const ended = Date.now();
      assert.deepEqual(result, { exitCode: 0, stderr: '' });
      assert.equal(out.bytes().toString(), '1\n2\n3\n');
      assert.ok(ended - out.times[0] >= 500, `first chunk only ${ended - out.times[0]} ms before the end`);
      assert.ok(out.sink.writableFinished);
    });

    test('stdin from a Readable, framed by head -c', async () => {
      const out = collector();
      const result = await exec(['sh', '-c', 'head -c 13 | cat'], {
        stdin: Readable.from([Buffer.from('hello, '), Buffer.from('world!')]),
        stdout: out.sink,
        timeoutMs: 5000,
      });
      assert.equal(result.exitCode, 0);
      assert.equal(out.bytes().toString(), 'hello, world!');
    });

    test('8 MiB of stdin arrives byte-exact', async () => {
      const data = randomBytes(8 << 20);
      const out = collector();
      const chunks = [];
      for (let i = 0; i < data.length; i += 100_000) chunks.push(data.subarray(i, i + 100_000));
      const result = await exec(['sh', '-c', `head -c ${data.length} | sha256sum`], {
        stdin: Readable.from(chunks),
        stdout: out.sink,
        timeoutMs: 30_000,
      });
      assert.equal(result.exitCode, 0);
      const sha = createHash('sha256').update(data).digest('hex');
      assert.equal(out.bytes().toString().split(' ')[0], sha);
    });

    test('exit codes and stderr', async () => {
      assert.deepEqual(await exec(['sh', '-c', 'exit 0']), { exitCode: 0, stderr: '' });
      assert.deepEqual(await exec(['sh', '-c', 'echo oops >&2; exit 3']), { exitCode: 3, stderr: 'oops\n' });
      // A process that cannot start ends with an InternalError status.
      assert.equal((await exec(['/nonexistent/program'])).exitCode, 1);
    });

    test('stderr is capped and fails closed', async () => {
      const atCap = await exec(['sh', '-c', 'head -c 1000 /dev/zero | tr "\\0" x >&2'], { maxStderrBytes: 1000 });
      assert.equal(atCap.stderr, 'x'.repeat(1000));
      await assert.rejects(
        exec(['sh', '-c', 'head -c 1001 /dev/zero | tr "\\0" x >&2'], { maxStderrBytes: 1000 }),
        (e) => e.kind === 'stderr_limit' && e.partialStderr.length <= 1000,
      );
    });

    test('the watchdog rejects with kind timeout', async () => {
      const started = Date.now();
      await assert.rejects(exec(['sleep', '30'], { timeoutMs: 500 }), { kind: 'timeout' });
      const took = Date.now() - started;
      assert.ok(took >= 500 && took < 2000, `took ${took} ms`);
    });

    test('50 MiB of stdout arrives byte-exact', async (t) => {
      const size = 50 << 20;
      const hash = createHash('sha256');
      let received = 0;
      let firstByte;
      const sink = new Writable({
        write(chunk, _enc, done) {
          firstByte ??= process.hrtime.bigint();
          hash.update(chunk);
          received += chunk.length;
          done();
        },
      });
      // The pod hashes what it sends and reports that on stderr.
      const script = `f=$(mktemp) && head -c ${size} /dev/urandom >"$f" && sha256sum <"$f" >&2 && cat "$f"; rm -f "$f"`;
      const started = process.hrtime.bigint();
      const result = await exec(['sh', '-c', script], { stdout: sink, timeoutMs: 60_000 });
      const ended = process.hrtime.bigint();
      const seconds = Number(ended - started) / 1e9;
      const streaming = Number(ended - firstByte) / 1e9;
      t.diagnostic(
        `${protocol}: 50 MiB in ${seconds.toFixed(2)} s including the pod's urandom + sha256sum; ` +
          `first byte to end ${streaming.toFixed(2)} s (${(50 / streaming).toFixed(0)} MiB/s)`,
      );
      assert.equal(result.exitCode, 0);
      assert.equal(received, size);
      assert.equal(hash.digest('hex'), result.stderr.split(' ')[0]);
    });
  });
}
