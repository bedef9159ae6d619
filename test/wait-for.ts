/**
 * A bounded poll for integration tests: waits for something a real server does in its own time,
 * with a generous limit, and never asserts how long it took. And a wait for a test whose calls
 * must share one fixed window to start clear of that window's end.
 */

/** Polls `cond` until true; fails with `what` after `ms`. */
export async function waitFor(cond: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Waits, when less than `marginMs` is left of the current fixed window of `windowMs`, for the
 * next one. A fixed window runs from a multiple of its length on the clock of the store that
 * decides: Redis' (TIME, this machine's `Date.now()`, the default `now`), or for an embedded
 * store in this process its monotonic clock (pass `() => performance.now()`). A test whose calls
 * must share one window starts clear of its end: two calls a few ms apart across the end would
 * each find the limit unused.
 *
 * An embedded store in another process (a spawned `sluice serve`) counts from that process's
 * start, which this clock does not tell: its first window of `windowMs` begins when it starts.
 */
export async function clearOfWindowEnd(windowMs: number, marginMs: number, now: () => number = Date.now): Promise<void> {
  const left = windowMs - (now() % windowMs);
  if (left < marginMs) await new Promise((r) => setTimeout(r, left + 50));
}
