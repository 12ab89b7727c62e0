// Watches the event loop while a sync runs: the largest gap between ticks
// of a 10 ms interval is how long the loop was frozen.

export function watchLoop() {
  let last = Date.now();
  let gap = 0;
  const ticker = setInterval(() => {
    gap = Math.max(gap, Date.now() - last);
    last = Date.now();
  }, 10);
  /** Stops watching; the largest gap seen, in ms. */
  return () => {
    clearInterval(ticker);
    return gap;
  };
}
