import { ALGORITHM_CODES, POLICY_BOUNDS } from '../shared/limits.js';
import { EPS_PERMITS, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Fixed window, stored as `[4, windowEnd, count]`, followed by `windowEnd, count` pairs for
 * windows ahead that hold bookings (see booking.ts), in time order. Windows are aligned to
 * multiples of `windowMs` on the store's clock. A running window keeps its end when the policy
 * changes, so a change neither resets the count nor double counts; the next window uses the new
 * length.
 *
 * Trade-offs: cheapest and easiest to explain, but up to `2 * limit` can pass across a window
 * boundary.
 */
export const fixedWindow: RateAlgorithm = {
  name: 'fixed-window',
  code: ALGORITHM_CODES['fixed-window'],
  rate: true,
  windowed: false,
  fastPath: true,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit) => limit.limit,

  evaluate(state, cost, now, limit) {
    const w = windowsOf(state, now, limit.windowMs);
    const end = w[0]!;
    const count = w[1]!;
    const resetAfterMs = ceilMs(end - now);
    const ttlMs = ceilMs(w[w.length - 2]! - now);
    if (count + cost <= limit.limit + EPS_PERMITS) {
      w[1] = count + cost;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - count - cost),
        retryAfterMs: 0,
        resetAfterMs,
        next: [4, ...w],
        ttlMs,
      };
    }
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - count),
      retryAfterMs: resetAfterMs,
      resetAfterMs,
      next: [4, ...w],
      ttlMs,
    };
  },

  adjust(state, delta, now, limit) {
    const w = windowsOf(state, now, limit.windowMs);
    const count = w[1]!;
    // A charge counts at most `limit` permits: more could not block past the window's end.
    w[1] = delta <= 0 ? Math.max(0, count + delta) : count + Math.min(delta, limit.limit);
    return stateOf(w, now);
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

  startOf(state, cost, from, now, limit) {
    // The first window from `from` on with room: the running one, a booked one, or one with
    // nothing in it yet (always room: a cost never exceeds the limit).
    const w = windowsOf(state, now, limit.windowMs);
    let t = from;
    for (let i = 0; i < w.length; i += 2) {
      const end = w[i]!;
      if (end <= t) continue;
      if (end - limit.windowMs > t && i > 0) break; // a gap before this booked window: free
      if (w[i + 1]! + cost <= limit.limit + EPS_PERMITS) return t;
      t = end;
    }
    return t;
  },

  claimSpan(state, _cost, start, now, limit) {
    return windowAt(windowsOf(state, now, limit.windowMs), start, limit.windowMs) - start;
  },

  book(state, cost, start, _end, now, limit) {
    const w = windowsOf(state, now, limit.windowMs);
    const end = windowAt(w, start, limit.windowMs);
    const i = indexOfEnd(w, end);
    if (i >= 0) w[i + 1] = w[i + 1]! + cost;
    else w.splice(insertionPoint(w, end), 0, end, cost);
    return stateOf(w, now);
  },

  unbook(state, cost, start, _end, now, limit) {
    const w = windowsOf(state, now, limit.windowMs);
    // The booking's window, if it has not ended (then its count no longer matters).
    const i = start < w[0]! - limit.windowMs ? -1 : indexOfEnd(w, windowAt(w, start, limit.windowMs));
    if (i >= 0) w[i + 1] = Math.max(0, w[i + 1]! - cost);
    return stateOf(w, now);
  },

  claim(state, _cost, _end, now, limit) {
    return stateOf(windowsOf(state, now, limit.windowMs), now);
  },
};

function windowEnd(now: number, windowMs: number): number {
  return (Math.floor(now / windowMs) + 1) * windowMs;
}

/**
 * The windows that matter at `now`, as a fresh `[end, count, end, count, ...]`: first the running
 * one (kept with its end, or a new one), then the booked windows after it.
 */
function windowsOf(state: RateState | undefined, now: number, windowMs: number): number[] {
  if (state === undefined) return [windowEnd(now, windowMs), 0];
  if (now < state[1]!) return state.slice(1);
  const ahead: number[] = [];
  for (let i = 3; i + 1 < state.length; i += 2) if (state[i]! > now) ahead.push(state[i]!, state[i + 1]!);
  // A booked window that has begun is the running one.
  if (ahead.length > 0 && (ahead[0]! - windowMs <= now || ahead[0]! <= windowEnd(now, windowMs))) return ahead;
  return [windowEnd(now, windowMs), 0, ...ahead];
}

/** The end of the window holding `t`: the running or a booked one, else the aligned one. */
function windowAt(w: readonly number[], t: number, windowMs: number): number {
  for (let i = 0; i < w.length; i += 2) {
    const end = w[i]!;
    if (end > t) return i === 0 || end - windowMs <= t ? end : windowEnd(t, windowMs);
  }
  return windowEnd(t, windowMs);
}

function indexOfEnd(w: readonly number[], end: number): number {
  for (let i = 0; i < w.length; i += 2) if (w[i] === end) return i;
  return -1;
}

function insertionPoint(w: readonly number[], end: number): number {
  let i = 0;
  while (i < w.length && w[i]! < end) i += 2;
  return i;
}

/** The state to store for windows `w`: none once nothing is counted or booked. */
function stateOf(w: number[], now: number) {
  let counted = false;
  for (let i = 1; i < w.length; i += 2) if (w[i]! > 0) counted = true;
  if (!counted) return { next: undefined, ttlMs: ceilMs(w[0]! - now) };
  return { next: [4, ...w], ttlMs: ceilMs(w[w.length - 2]! - now) };
}
