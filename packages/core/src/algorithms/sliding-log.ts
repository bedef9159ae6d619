import { EPS_PERMITS, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Exact sliding window log, stored as `[5, ts1, cost1, ts2, cost2, ...]` in time order. An entry
 * counts while `ts + windowMs > now`. Exact, at the price of state proportional to the admitted
 * calls in one window (the limit is therefore bounded, see POLICY_BOUNDS.maxLogLimit).
 * Policy changes need no conversion: the same entries are judged by the new window and limit.
 */
export const slidingLog: RateAlgorithm = {
  code: 5,

  evaluate(state, cost, now, limit) {
    const entries = live(state, now, limit.windowMs);
    const count = sumOf(entries);
    if (count + cost <= limit.limit + EPS_PERMITS) {
      const next = cost > 0 ? append(entries, now, cost) : entries;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - count - cost),
        retryAfterMs: 0,
        resetAfterMs: resetAfter(next, now, limit.windowMs),
        next: [5, ...next],
        ttlMs: resetAfter(next, now, limit.windowMs),
      };
    }
    let excess = count + cost - limit.limit;
    let retryAfterMs = 0;
    for (let i = 0; i < entries.length; i += 2) {
      excess -= entries[i + 1]!;
      if (excess <= EPS_PERMITS) {
        retryAfterMs = ceilMs(entries[i]! + limit.windowMs - now);
        break;
      }
    }
    const resetAfterMs = resetAfter(entries, now, limit.windowMs);
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - count),
      retryAfterMs,
      resetAfterMs,
      next: [5, ...entries],
      ttlMs: resetAfterMs,
    };
  },

  adjust(state, delta, now, limit) {
    let entries = live(state, now, limit.windowMs);
    if (delta > 0) {
      entries = append(entries, now, delta);
    } else {
      // Refunds remove the newest charges first.
      let left = -delta;
      entries = entries.slice();
      while (left > 0 && entries.length > 0) {
        const c = entries[entries.length - 1]!;
        if (c <= left) {
          entries.length -= 2;
          left -= c;
        } else {
          entries[entries.length - 1] = c - left;
          left = 0;
        }
      }
    }
    if (entries.length === 0) return { next: undefined, ttlMs: 0 };
    return { next: [5, ...entries], ttlMs: resetAfter(entries, now, limit.windowMs) };
  },

  usage(state, now, limit) {
    return sumOf(live(state, now, limit.windowMs));
  },

  fromUsage(used, now) {
    return used > 0 ? [5, now, used] : [5];
  },

  compatible() {
    return true;
  },
};

/** Entries still inside the window, as a flat [ts, cost, ...] array. */
function live(state: RateState | undefined, now: number, windowMs: number): number[] {
  if (state === undefined) return [];
  let i = 1;
  while (i < state.length && state[i]! + windowMs <= now) i += 2;
  return state.slice(i);
}

function sumOf(entries: readonly number[]): number {
  let s = 0;
  for (let i = 1; i < entries.length; i += 2) s += entries[i]!;
  return s;
}

/** Appends keeping time order even if the clock stepped back. */
function append(entries: readonly number[], now: number, cost: number): number[] {
  const lastTs = entries.length > 0 ? entries[entries.length - 2]! : now;
  return [...entries, Math.max(now, lastTs), cost];
}

function resetAfter(entries: readonly number[], now: number, windowMs: number): number {
  return entries.length === 0 ? 0 : ceilMs(entries[entries.length - 2]! + windowMs - now);
}
