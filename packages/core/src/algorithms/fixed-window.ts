import { EPS_PERMITS, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Fixed window, stored as `[4, windowEnd, count]`. Windows are aligned to multiples of
 * `windowMs` on the store's clock. A running window keeps its end when the policy changes, so
 * a change neither resets the count nor double counts; the next window uses the new length.
 *
 * Trade-offs: cheapest and easiest to explain, but up to `2 * limit` can pass across a window
 * boundary.
 */
export const fixedWindow: RateAlgorithm = {
  code: 4,

  evaluate(state, cost, now, limit) {
    const [end, count] = current(state, now, limit.windowMs);
    const ttlMs = ceilMs(end - now);
    if (count + cost <= limit.limit + EPS_PERMITS) {
      const after = count + cost;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - after),
        retryAfterMs: 0,
        resetAfterMs: ttlMs,
        next: [4, end, after],
        ttlMs,
      };
    }
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - count),
      retryAfterMs: ttlMs,
      resetAfterMs: ttlMs,
      next: [4, end, count],
      ttlMs,
    };
  },

  adjust(state, delta, now, limit) {
    const [end, count] = current(state, now, limit.windowMs);
    // A charge counts at most `limit` permits: more could not block past the window's end.
    const after = delta <= 0 ? Math.max(0, count + delta) : count + Math.min(delta, limit.limit);
    return { next: after > 0 ? [4, end, after] : undefined, ttlMs: ceilMs(end - now) };
  },

  usage(state, now) {
    return now < state[1]! ? state[2]! : 0;
  },

  fromUsage(used, now, limit) {
    return [4, windowEnd(now, limit.windowMs), used];
  },

  compatible() {
    return true;
  },
};

function windowEnd(now: number, windowMs: number): number {
  return (Math.floor(now / windowMs) + 1) * windowMs;
}

function current(state: RateState | undefined, now: number, windowMs: number): [number, number] {
  if (state !== undefined && now < state[1]!) return [state[1]!, state[2]!];
  return [windowEnd(now, windowMs), 0];
}
