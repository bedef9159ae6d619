import { EPS_PERMITS, wholePermits, type RateAlgorithm } from './types.js';
import { ALGORITHM_CODES, POLICY_BOUNDS, type CompiledLimit } from '../shared/limits.js';
import {
  appendEntry,
  liveEntries,
  refund,
  refundAt,
  resetAfterEntries,
  retryAfterEntries,
  startOfEntries,
  sumEntries,
} from './timed-log.js';

/**
 * Exact sliding window log, stored as `[5, ts1, cost1, ts2, cost2, ...]` in time order (see
 * `timed-log.ts`). An entry counts while `ts + windowMs > now`. Exact, at the price of state
 * proportional to the admitted calls in one window (the limit is therefore bounded, see
 * POLICY_BOUNDS.maxLogLimit). Policy changes need no conversion: the same entries are judged by
 * the new window and limit.
 */
export const slidingLog: RateAlgorithm = {
  name: 'sliding-log',
  code: ALGORITHM_CODES['sliding-log'],
  rate: true,
  windowed: true,
  fastPath: false,
  largestLimit: POLICY_BOUNDS.maxLogLimit,
  capacity: (limit) => limit.limit,

  evaluate(state, cost, now, limit, holdMs = 0) {
    const entries = liveEntries(state, 1, now, limit.windowMs);
    const count = sumEntries(entries);
    if (count + cost <= limit.limit + EPS_PERMITS) {
      const next = cost > 0 ? appendEntry(entries, now + holdMs, cost) : entries;
      const resetAfterMs = resetAfterEntries(next, now, limit.windowMs);
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - count - cost),
        retryAfterMs: 0,
        resetAfterMs,
        next: [5, ...next],
        ttlMs: resetAfterMs,
      };
    }
    const resetAfterMs = resetAfterEntries(entries, now, limit.windowMs);
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - count),
      retryAfterMs: retryAfterEntries(entries, count + cost - limit.limit, EPS_PERMITS, now, limit.windowMs),
      resetAfterMs,
      next: [5, ...entries],
      ttlMs: resetAfterMs,
    };
  },

  adjust(state, delta, now, limit, at = 0) {
    const live = liveEntries(state, 1, now, limit.windowMs);
    // A charge counts at most `limit` permits: more could not block longer than one window.
    const entries = delta > 0 ? appendEntry(live, now, Math.min(delta, limit.limit)) : refund(live, -delta, now, at);
    if (entries.length === 0) return { next: undefined, ttlMs: 0 };
    return { next: [5, ...entries], ttlMs: resetAfterEntries(entries, now, limit.windowMs) };
  },

  usage(state, now, limit) {
    return sumEntries(liveEntries(state, 1, now, limit.windowMs));
  },

  fromUsage(used, now) {
    return used > 0 ? [5, now, used] : [5];
  },

  compatible() {
    return true;
  },

  startOf(state, cost, from, _now, limit) {
    return startOfEntries(state, 1, cost, from, limit.limit, limit.windowMs);
  },

  claimSpan() {
    return Infinity;
  },

  book(state, cost, _start, end, now, limit) {
    // Stamped at the span's end: counted in every window any use in the span can fall in.
    return logOf(appendEntry(liveEntries(state, 1, now, limit.windowMs), end, cost), now, limit);
  },

  unbook(state, cost, _start, end, now, limit) {
    // Once its stamp has left the window the charge is gone, or merged into a later group that
    // cannot be told apart: nothing is taken back then.
    if (end + limit.windowMs <= now) return logOf(liveEntries(state, 1, now, limit.windowMs), now, limit);
    return logOf(refundAt(liveEntries(state, 1, now, limit.windowMs), cost, end), now, limit);
  },

  claim(state, cost, end, now, limit) {
    const live = refundAt(liveEntries(state, 1, now, limit.windowMs), cost, end);
    return logOf(appendEntry(live, now, cost), now, limit);
  },
};

function logOf(entries: number[], now: number, limit: CompiledLimit) {
  if (entries.length === 0) return { next: undefined, ttlMs: 0 };
  return { next: [5, ...entries], ttlMs: resetAfterEntries(entries, now, limit.windowMs) };
}
