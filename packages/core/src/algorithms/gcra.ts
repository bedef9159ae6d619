import { ALGORITHM_CODES, POLICY_BOUNDS, type CompiledLimit } from '../shared/limits.js';
import { EPS_MS, admittedInPlace, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Generic cell rate algorithm, stored as the theoretical arrival time and the emission interval
 * it was computed with: `[2, tat, T]` where `T = windowMs / limit`. A request of `cost` passes if
 * `max(tat, now) + cost*T - now <= burst*T`.
 *
 * Trade-offs: the same admissions as a token bucket with one timestamp of state; retry-after is
 * exact. When `T` changes, the time still owed is rescaled to the new interval (usage carries
 * over).
 */
export const gcra: RateAlgorithm = {
  name: 'gcra',
  code: ALGORITHM_CODES['gcra'],
  rate: true,
  windowed: false,
  fastPath: true,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit) => limit.burst,

  evaluate(state, cost, now, limit) {
    const T = limit.windowMs / limit.limit;
    const tau = limit.burst * T;
    const tat = state === undefined ? now : Math.max(state[1]!, now);
    const newTat = tat + cost * T;
    if (newTat - now <= tau + EPS_MS) {
      const resetAfterMs = ceilMs(newTat - now);
      return {
        allowed: true,
        remaining: wholePermits((tau - (newTat - now)) / T),
        retryAfterMs: 0,
        resetAfterMs,
        next: [2, newTat, T],
        ttlMs: resetAfterMs,
      };
    }
    const resetAfterMs = ceilMs(tat - now);
    return {
      allowed: false,
      remaining: wholePermits((tau - (tat - now)) / T),
      retryAfterMs: ceilMs(newTat - tau - now),
      resetAfterMs,
      next: state ?? [2, now, T],
      ttlMs: resetAfterMs,
    };
  },

  admitInPlace(held, at, cost, now, limit) {
    const T = limit.windowMs / limit.limit;
    // A state of this algorithm with this emission interval (see compatible), else evaluate.
    if (held[at] !== ALGORITHM_CODES.gcra || held.length !== at + 3 || held[at + 2] !== T) return undefined;
    const tau = limit.burst * T;
    const newTat = Math.max(held[at + 1]!, now) + cost * T;
    if (!(newTat - now <= tau + EPS_MS)) return undefined;
    held[at + 1] = newTat;
    return admittedInPlace(wholePermits((tau - (newTat - now)) / T), ceilMs(newTat - now));
  },

  adjust(state, delta, now, limit) {
    const T = limit.windowMs / limit.limit;
    const tat = state === undefined ? now : Math.max(state[1]!, now);
    // As the token bucket: a refund stops at a full bucket, a charge at one window of debt.
    const newTat =
      delta <= 0
        ? Math.max(now, tat + delta * T)
        : Math.max(tat, Math.min(tat + delta * T, now + (limit.burst + limit.limit) * T));
    const ttlMs = ceilMs(newTat - now);
    return { next: newTat > now ? [2, newTat, T] : undefined, ttlMs };
  },

  usage(state, now) {
    return Math.max(0, state[1]! - now) / state[2]!;
  },

  fromUsage(used, now, limit) {
    const T = limit.windowMs / limit.limit;
    return [2, now + used * T, T];
  },

  compatible(state: RateState, limit) {
    return state[2] === limit.windowMs / limit.limit;
  },

  startOf(state, cost, from, now, limit) {
    const T = limit.windowMs / limit.limit;
    const tat = state === undefined ? now : Math.max(state[1]!, now);
    return Math.max(from, tat + cost * T - limit.burst * T);
  },

  claimSpan(_state, cost, _start, _now, limit) {
    // The spare burst, but at least one emission interval: with `burst = cost` (burst 1) a span
    // of 0 could never be claimed. The longer span is not charged for (see book).
    return Math.max(spareSpan(cost, limit), limit.windowMs / limit.limit);
  },

  book(state, cost, start, end, now, limit) {
    // Judged as an admission at the end of the spare burst (the span's end, unless the span was
    // raised to one emission interval), and conforming at its start: a use in the spare burst is
    // a conforming arrival (start >= newTat - tau, use <= newTat - cost*T); a use after it is at
    // most end - start - spare late, which adds less than one permit to the count over a window
    // (docs/algorithms.md, bookings). Charging at the span's end instead would idle the key for
    // that extra time on every such booking.
    const T = limit.windowMs / limit.limit;
    const tat = state === undefined ? now : Math.max(state[1]!, now);
    const newTat = Math.max(tat, Math.min(end, start + spareSpan(cost, limit))) + cost * T;
    return { next: [2, newTat, T], ttlMs: ceilMs(newTat - now) };
  },

  unbook(state, cost, _start, _end, now, limit, newest) {
    return newest ? gcra.adjust(state, -cost, now, limit) : kept(state, now);
  },

  claim(state, _cost, _end, now) {
    return kept(state, now);
  },
};

/** The spare burst (`burst - cost`) in ms: a booking's span when it has one. */
function spareSpan(cost: number, limit: CompiledLimit): number {
  return (limit.burst - cost) * (limit.windowMs / limit.limit);
}

/** The state as it is (a claim charges nothing more), with its lifetime. */
function kept(state: RateState | undefined, now: number) {
  return state === undefined || state[1]! <= now
    ? { next: undefined, ttlMs: 0 }
    : { next: state, ttlMs: ceilMs(state[1]! - now) };
}
