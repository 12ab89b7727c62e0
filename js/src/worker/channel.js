// The worker's side of the bridge to the main thread.
//
// The component's imports are synchronous, so this thread cannot take
// messages from its event loop while a call runs. The main thread posts
// each message on a dedicated MessagePort and then rings a doorbell (an
// Int32 in a SharedArrayBuffer); this side blocks on the doorbell with
// Atomics.wait and takes the messages with receiveMessageOnPort.

import { parentPort, receiveMessageOnPort } from 'node:worker_threads';

let port = null;
let bell = null;
const handlers = new Map();

export function connect(messagePort, doorbell) {
  port = messagePort;
  bell = new Int32Array(doorbell);
}

/** Posts to the main thread (asynchronous on its side). */
export function send(message, transfer) {
  parentPort.postMessage(message, transfer);
}

/** Routes messages carrying `id` to `handler` until `off(id)`. */
export function on(id, handler) {
  handlers.set(id, handler);
}

export function off(id) {
  handlers.delete(id);
}

/** Delivers every message that has arrived; true when there was one. */
function drain() {
  let any = false;
  for (let m = receiveMessageOnPort(port); m; m = receiveMessageOnPort(port)) {
    any = true;
    handlers.get(m.message.id)?.(m.message);
  }
  return any;
}

/** Delivers what has arrived, or blocks for the next message (at most `ms`). */
export function wait(ms) {
  const rung = Atomics.load(bell, 0);
  if (drain()) return;
  Atomics.wait(bell, 0, rung, Math.max(0, ms));
  drain();
}

/** Delivers what has arrived without blocking. */
export function poll() {
  drain();
}
