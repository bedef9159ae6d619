/**
 * How long a denied attempt waits before it asks again: the activity gate's `nextRetryDelay`
 * and the workflow helper's durable sleep both come from here. Workflow-safe: plain arithmetic
 * that imports nothing, as it also runs in Temporal's workflow sandbox.
 */

/** What a denial's wait is made of (see {@link retryDelayMs}). */
export interface RetryDelayPolicy {
  /** The shortest wait, in ms. */
  readonly minMs: number;
  /** Jitter added to the wait, as a fraction of it (0..1). */
  readonly jitter: number;
  /** A number in [0, 1): the gate's injected source, or the sandbox's deterministic `Math.random`. */
  readonly random: () => number;
}

/**
 * The wait after a denial: its retry-after rounded up to whole ms (at least the minimum), plus
 * up to `jitter` of that at random, so attempts denied together do not all come back together.
 */
export function retryDelayMs(retryAfterMs: number, policy: RetryDelayPolicy): number {
  const base = Math.max(policy.minMs, Math.ceil(retryAfterMs));
  return base + Math.floor(policy.random() * base * policy.jitter);
}

/**
 * The wait after a booked denial: until its slot starts, less `leadMs` (how late Temporal
 * delivers a retry, so it still arrives in time and waits the rest inside the attempt), at least
 * `minMs`. No jitter: the slot is the attempt's alone.
 */
export function bookedRetryDelayMs(startsInMs: number, leadMs: number, minMs: number): number {
  return Math.max(minMs, Math.ceil(startsInMs - leadMs));
}
