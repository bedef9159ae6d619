/**
 * A bounded poll for integration tests: waits for something a real server does in its own time,
 * with a generous limit, and never asserts how long it took.
 */

/** Polls `cond` until true; fails with `what` after `ms`. */
export async function waitFor(cond: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
