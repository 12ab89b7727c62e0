// The messages between the main thread (index.js, bridge.js) and a provider
// worker (worker/main.js, worker/exec.js), named once. Each says who sends
// it and what it carries besides `type`.
//
// Between calls the worker takes its port's messages from its event loop;
// during a call its imports block, so exec messages from the main thread
// go on a dedicated port with a doorbell (worker/channel.js).

export const MSG = Object.freeze({
  // main -> worker, on the worker's port
  /** Run a sync: `direction` ('in' | 'out'), `request`, `grants`, `settings`. */
  CALL: 'call',
  /** Describe the component (its name, version, capabilities). */
  DESCRIBE: 'describe',

  // worker -> main
  /** The worker has loaded its component. */
  READY: 'ready',
  /** A call ended: `results` or `error` (a WIT error) or `trap`, and `retire`. */
  DONE: 'done',
  /** The answer to DESCRIBE: `info`, or `trap`. */
  DESCRIBED: 'described',
  /** The component made a scratch entry: `grant`, `name`, `dev`, `ino`. */
  SCRATCH: 'scratch',
  /** Start an execution: `id`, `argv`, `timeoutMs`, `maxStderrBytes`. */
  EXEC: 'exec',

  // worker -> main, about execution `id`
  /** Bytes for its stdin: `chunk` (transferred). */
  STDIN: 'stdin',
  /** Its stdin ends. */
  STDIN_END: 'stdin-end',
  /** The component consumed `bytes` more of its stdout. */
  STDOUT_ACK: 'stdout-ack',
  /** The component reads no more of its stdout: drop the rest. */
  FINISHING: 'finishing',
  /** Stop it. */
  ABORT: 'abort',

  // main -> worker, about execution `id`, on the doorbell port
  /** Bytes of its stdout: `chunk` (transferred). */
  STDOUT: 'stdout',
  /** Its stdout ended. */
  STDOUT_END: 'stdout-end',
  /** The caller's stdin took `bytes` more. */
  STDIN_ACK: 'stdin-ack',
  /** It ended: `exitCode`, `timedOut`, `stderr`, `stderrTruncated`, or `error`. */
  EXIT: 'exit',
});

/** Unacknowledged bytes allowed in flight each way, per execution. */
export const WINDOW = 4 << 20;
/** Most stdout bytes gathered into one STDOUT message. */
export const STDOUT_BATCH = 1 << 20;
