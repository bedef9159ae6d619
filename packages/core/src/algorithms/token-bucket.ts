import { ALGORITHM_CODES, POLICY_BOUNDS, type CompiledLimit } from '../shared/limits.js';
import {
  EPS_PERMITS,
  adjustedUsage,
  admittedInPlace,
  ceilMs,
  wholePermits,
  type RateAlgorithm,
  type RateState,
} from './types.js';

/**
 * Token bucket, stored as the permits *used* and when that was measured: `[1, used, ts]`.
 * Usage drains at `limit / windowMs` per ms; a request passes if `used + cost <= burst`.
 * Storing usage instead of tokens makes policy changes carry over: the same usage is judged
 * against the new burst and drains at the new rate. Extra charges may push usage above the
 * burst (a debt paid back by waiting).
 *
 * Trade-offs: O(1) state, smooth refill, allows bursts of `burst`; the admitted count in any
 * window of length `windowMs` is at most `burst + limit`.
 */
export const tokenBucket: RateAlgorithm = {
  name: 'token-bucket',
  code: ALGORITHM_CODES['token-bucket'],
  rate: true,
  windowed: false,
  fastPath: true,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit) => limit.burst,

  evaluate(state, cost, now, limit) {
    const rate = limit.limit / limit.windowMs;
    const used = state === undefined ? 0 : drained(state, now, rate);
    const ts = state === undefined ? now : Math.max(now, state[2]!);
    if (used + cost <= limit.burst + EPS_PERMITS) {
      const after = used + cost;
      const resetAfterMs = ceilMs(after / rate);
      return {
        allowed: true,
        remaining: wholePermits(limit.burst - after),
        retryAfterMs: 0,
        resetAfterMs,
        next: [1, after, ts],
        ttlMs: resetAfterMs,
      };
    }
    const resetAfterMs = ceilMs(used / rate);
    return {
      allowed: false,
      remaining: wholePermits(limit.burst - used),
      retryAfterMs: ceilMs((used + cost - limit.burst) / rate),
      resetAfterMs,
      next: state ?? [1, 0, now],
      ttlMs: resetAfterMs,
    };
  },

  admitInPlace(held, at, cost, now, limit) {
    if (held[at] !== ALGORITHM_CODES['token-bucket'] || held.length !== at + 3) return undefined;
    const rate = limit.limit / limit.windowMs;
    const stamp = held[at + 2]!;
    const after = Math.max(0, held[at + 1]! - Math.max(0, now - stamp) * rate) + cost;
    if (!(after <= limit.burst + EPS_PERMITS)) return undefined;
    held[at + 1] = after;
    held[at + 2] = Math.max(now, stamp);
    return admittedInPlace(wholePermits(limit.burst - after), ceilMs(after / rate));
  },

  adjust(state, delta, now, limit) {
    const rate = limit.limit / limit.windowMs;
    // A charge takes the key at most one window into debt: it admits again within windowMs.
    const used = adjustedUsage(state === undefined ? 0 : drained(state, now, rate), delta, limit.burst + limit.limit);
    const ts = state === undefined ? now : Math.max(now, state[2]!);
    const ttlMs = ceilMs(used / rate);
    return { next: used > 0 ? [1, used, ts] : undefined, ttlMs };
  },

  usage(state, now, limit) {
    return drained(state, now, limit.limit / limit.windowMs);
  },

  fromUsage(used, now) {
    return [1, used, now];
  },

  compatible() {
    return true;
  },

  startOf(state, cost, from, now, limit) {
    const rate = limit.limit / limit.windowMs;
    const used = state === undefined ? 0 : drained(state, now, rate);
    return Math.max(from, now + (used + cost - limit.burst) / rate);
  },

  claimSpan(_state, cost, _start, _now, limit) {
    return Math.max(spareSpan(cost, limit), limit.windowMs / limit.limit);
  },

  book(state, cost, start, end, now, limit) {
    // As GCRA's booking in terms of usage: the permits are charged as if admitted at the span's
    // end, or at the end of its spare burst when the span is one emission interval longer (see
    // gcra.ts), and usage now includes the drain until then. May exceed the burst (a debt).
    const rate = limit.limit / limit.windowMs;
    const used = state === undefined ? 0 : drained(state, now, rate);
    const ts = state === undefined ? now : Math.max(now, state[2]!);
    const at = Math.min(end, start + spareSpan(cost, limit));
    const after = Math.max(used, (at - now) * rate) + cost;
    return { next: [1, after, ts], ttlMs: ceilMs(after / rate) };
  },

  unbook(state, cost, _start, _end, now, limit, newest) {
    return newest ? tokenBucket.adjust(state, -cost, now, limit) : kept(state, now, limit);
  },

  claim(state, _cost, _end, now, limit) {
    return kept(state, now, limit);
  },
};

/** How long the spare burst (`burst - cost`) takes to drain, in ms: a booking's span when it has one. */
function spareSpan(cost: number, limit: CompiledLimit): number {
  return (limit.burst - cost) / (limit.limit / limit.windowMs);
}

function drained(state: RateState, now: number, rate: number): number {
  const elapsed = Math.max(0, now - state[2]!);
  return Math.max(0, state[1]! - elapsed * rate);
}

/** Exposed for the GCRA conversion and tests. */
export function tokenBucketRate(limit: CompiledLimit): number {
  return limit.limit / limit.windowMs;
}

/** The state as it is (a claim charges nothing more), with its lifetime. */
function kept(state: RateState | undefined, now: number, limit: CompiledLimit) {
  const used = state === undefined ? 0 : drained(state, now, limit.limit / limit.windowMs);
  return used <= 0 ? { next: undefined, ttlMs: 0 } : { next: state, ttlMs: ceilMs(used / (limit.limit / limit.windowMs)) };
}
