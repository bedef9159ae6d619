import type { CompiledLimit } from '../policy.js';
import { EPS_PERMITS, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Sliding window counter over `slices` slices of `windowMs / slices` each, stored as
 * `[3, sliceMs, k, c(k-N), ..., c(k)]`: the index `k` of the newest slice and N+1 counts. The
 * window `(now - windowMs, now]` covers the N newest slices fully (the current one partly
 * elapsed) and the oldest one for the fraction not yet slid past, assuming its calls were
 * spread evenly:
 *
 *     estimate = c(k-N+1) + ... + c(k) + c(k-N) * (1 - frac),  frac = (now - k*sliceMs) / sliceMs
 *
 * Trade-offs: O(N) state, close to exact (the error is bounded by the oldest slice's count and
 * shrinks as N grows). When the slicing changes, the estimated usage is spread evenly over the
 * new slices, so it decays over one window instead of being reset.
 */
export const slidingWindow: RateAlgorithm = {
  code: 3,

  evaluate(state, cost, now, limit) {
    const w = view(state, now, limit);
    const estimate = estimateOf(w.counts, w.frac);
    const ttlMs = ceilMs((w.k + limit.slices + 1) * w.sliceMs - now);
    if (estimate + cost <= limit.limit + EPS_PERMITS) {
      const counts = w.counts.slice();
      counts[limit.slices] = counts[limit.slices]! + cost;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - estimate - cost),
        retryAfterMs: 0,
        resetAfterMs: resetAfter(counts, w.frac, w.sliceMs),
        next: [3, w.sliceMs, w.k, ...counts],
        ttlMs,
      };
    }
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - estimate),
      retryAfterMs: retryAfter(w.counts, w.frac, w.sliceMs, estimate + cost - limit.limit),
      resetAfterMs: resetAfter(w.counts, w.frac, w.sliceMs),
      next: [3, w.sliceMs, w.k, ...w.counts],
      ttlMs,
    };
  },

  adjust(state, delta, now, limit) {
    const w = view(state, now, limit);
    const counts = w.counts.slice();
    const n = limit.slices;
    if (delta >= 0) {
      counts[n] = counts[n]! + delta;
    } else {
      // A refund returns the newest charges first: they are the ones the call just made.
      let left = -delta;
      for (let i = n; i >= 0 && left > 0; i--) {
        const take = Math.min(counts[i]!, left);
        counts[i] = counts[i]! - take;
        left -= take;
      }
    }
    if (counts.every((c) => c === 0)) return { next: undefined, ttlMs: 0 };
    return { next: [3, w.sliceMs, w.k, ...counts], ttlMs: ceilMs((w.k + n + 1) * w.sliceMs - now) };
  },

  usage(state, now) {
    const sliceMs = state[1]!;
    const n = state.length - 4;
    const w = shifted(state, sliceMs, n, now);
    return estimateOf(w.counts, w.frac);
  },

  fromUsage(used, now, limit) {
    const sliceMs = limit.windowMs / limit.slices;
    const k = Math.floor(now / sliceMs);
    const counts = new Array<number>(limit.slices + 1).fill(used / limit.slices);
    counts[0] = 0;
    return [3, sliceMs, k, ...counts];
  },

  compatible(state, limit) {
    return state[1] === limit.windowMs / limit.slices && state.length === limit.slices + 4;
  },
};

interface WindowView {
  sliceMs: number;
  k: number;
  frac: number;
  /** N+1 counts, oldest (partly covered) first. */
  counts: number[];
}

function view(state: RateState | undefined, now: number, limit: CompiledLimit): WindowView {
  const sliceMs = limit.windowMs / limit.slices;
  if (state === undefined) {
    const k = Math.floor(now / sliceMs);
    return { sliceMs, k, frac: (now - k * sliceMs) / sliceMs, counts: new Array<number>(limit.slices + 1).fill(0) };
  }
  return shifted(state, sliceMs, limit.slices, now);
}

/** Moves the ring forward to the slice containing `now` (never backwards). */
function shifted(state: RateState, sliceMs: number, n: number, now: number): WindowView {
  const stored = state[2]!;
  const k = Math.max(stored, Math.floor(now / sliceMs));
  const d = k - stored;
  const counts = new Array<number>(n + 1);
  for (let i = 0; i <= n; i++) {
    const src = i + d;
    counts[i] = src <= n ? state[3 + src]! : 0;
  }
  const frac = Math.min(1, Math.max(0, (now - k * sliceMs) / sliceMs));
  return { sliceMs, k, frac, counts };
}

function estimateOf(counts: readonly number[], frac: number): number {
  let sum = 0;
  for (let i = 1; i < counts.length; i++) sum += counts[i]!;
  return sum + counts[0]! * (1 - frac);
}

/**
 * Time until `excess` permits have slid out of the window. The oldest slice drains linearly
 * during the current slice; each newer one drains during the following slice.
 */
function retryAfter(counts: readonly number[], frac: number, sliceMs: number, excess: number): number {
  let left = excess;
  const first = counts[0]! * (1 - frac);
  if (first >= left - EPS_PERMITS && counts[0]! > 0) {
    return ceilMs((left / counts[0]!) * sliceMs);
  }
  left -= first;
  let elapsed = (1 - frac) * sliceMs;
  for (let i = 1; i < counts.length; i++) {
    const c = counts[i]!;
    if (c > 0 && c >= left - EPS_PERMITS) return ceilMs(elapsed + (left / c) * sliceMs);
    left -= c;
    elapsed += sliceMs;
  }
  return ceilMs(elapsed);
}

/** Time until every counted permit has slid out of the window. */
function resetAfter(counts: readonly number[], frac: number, sliceMs: number): number {
  for (let i = counts.length - 1; i >= 0; i--) {
    if (counts[i]! > 0) return ceilMs((1 - frac) * sliceMs + i * sliceMs);
  }
  return 0;
}
