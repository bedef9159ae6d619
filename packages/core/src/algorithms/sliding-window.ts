import type { CompiledLimit } from '../policy.js';
import { EPS_PERMITS, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Sliding window counter over `slices` slices of `windowMs / slices` each, stored as
 * `[3, sliceMs, k, c(k-N), f(k-N), l(k-N), ..., c(k), f(k), l(k)]`: the index `k` of the newest
 * slice and, for each of the N+1 slices, its count and the offsets (ms into the slice) of its
 * first and last call. The window `(now - windowMs, now]` covers the N newest slices fully; of
 * the oldest slice it covers the calls not yet slid past, assuming they were spread evenly
 * between its first and last call:
 *
 *     estimate = c(k-N+1) + ... + c(k) + c(k-N) * share,
 *     share = clamp((l - x) / (l - f), 0, 1),  x = now - k*sliceMs   (a step at f when f = l)
 *
 * Keeping first and last matters under floods: a burst early in a slice leaves the window
 * early, and a burst that arrived late in its slice is not counted out before it leaves (a
 * plain counter assumes the whole slice and lets up to one slice's calls too many through).
 *
 * Trade-offs: O(N) state, close to exact; the error is bounded by the oldest slice's calls and
 * only arises when they cluster late between its first and last call. When the slicing
 * changes, the estimated usage is spread evenly over the new slices, so it decays over one
 * window instead of being reset.
 */
export const slidingWindow: RateAlgorithm = {
  code: 3,

  evaluate(state, cost, now, limit) {
    const w = view(state, now, limit);
    const estimate = estimateOf(w);
    const ttlMs = ceilMs((w.k + limit.slices + 1) * w.sliceMs - now);
    if (estimate + cost <= limit.limit + EPS_PERMITS) {
      const slots = w.slots.slice();
      if (cost > 0) charge(slots, limit.slices, cost, w.x);
      const after = { ...w, slots };
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - estimate - cost),
        retryAfterMs: 0,
        resetAfterMs: resetAfter(after),
        next: [3, w.sliceMs, w.k, ...slots],
        ttlMs,
      };
    }
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - estimate),
      retryAfterMs: retryAfter(w, estimate + cost - limit.limit),
      resetAfterMs: resetAfter(w),
      next: [3, w.sliceMs, w.k, ...w.slots],
      ttlMs,
    };
  },

  adjust(state, delta, now, limit) {
    const w = view(state, now, limit);
    const slots = w.slots.slice();
    const n = limit.slices;
    if (delta >= 0) {
      if (delta > 0) charge(slots, n, delta, w.x);
    } else {
      // A refund returns the newest charges first: they are the ones the call just made.
      let left = -delta;
      for (let i = n; i >= 0 && left > 0; i--) {
        const take = Math.min(slots[3 * i]!, left);
        slots[3 * i] = slots[3 * i]! - take;
        left -= take;
        if (slots[3 * i] === 0) slots[3 * i + 1] = slots[3 * i + 2] = 0;
      }
    }
    let any = false;
    for (let i = 0; i <= n; i++) if (slots[3 * i]! > 0) any = true;
    if (!any) return { next: undefined, ttlMs: 0 };
    return { next: [3, w.sliceMs, w.k, ...slots], ttlMs: ceilMs((w.k + n + 1) * w.sliceMs - now) };
  },

  usage(state, now) {
    const n = (state.length - 3) / 3 - 1;
    return estimateOf(shifted(state, state[1]!, n, now));
  },

  fromUsage(used, now, limit) {
    const sliceMs = limit.windowMs / limit.slices;
    const k = Math.floor(now / sliceMs);
    const slots = new Array<number>(3 * (limit.slices + 1)).fill(0);
    // Spread evenly over the N newest slices, each as if its calls filled the whole slice.
    for (let i = 1; i <= limit.slices; i++) {
      slots[3 * i] = used / limit.slices;
      slots[3 * i + 2] = sliceMs;
    }
    return [3, sliceMs, k, ...slots];
  },

  compatible(state, limit) {
    return state[1] === limit.windowMs / limit.slices && state.length === 3 * (limit.slices + 1) + 3;
  },
};

interface WindowView {
  sliceMs: number;
  k: number;
  /** Offset of `now` into the current slice, in [0, sliceMs]. */
  x: number;
  /** N+1 slices of (count, first, last), oldest (partly covered) first. */
  slots: number[];
}

function view(state: RateState | undefined, now: number, limit: CompiledLimit): WindowView {
  const sliceMs = limit.windowMs / limit.slices;
  if (state === undefined) {
    const k = Math.floor(now / sliceMs);
    return { sliceMs, k, x: now - k * sliceMs, slots: new Array<number>(3 * (limit.slices + 1)).fill(0) };
  }
  return shifted(state, sliceMs, limit.slices, now);
}

/** Moves the ring forward to the slice containing `now` (never backwards). */
function shifted(state: RateState, sliceMs: number, n: number, now: number): WindowView {
  const stored = state[2]!;
  const k = Math.max(stored, Math.floor(now / sliceMs));
  const d = k - stored;
  const slots = new Array<number>(3 * (n + 1));
  for (let i = 0; i <= n; i++) {
    const src = i + d;
    for (let j = 0; j < 3; j++) slots[3 * i + j] = src <= n ? state[3 + 3 * src + j]! : 0;
  }
  const x = Math.min(sliceMs, Math.max(0, now - k * sliceMs));
  return { sliceMs, k, x, slots };
}

/** Adds `cost` calls at offset `x` of the newest slice, keeping its first and last offsets. */
function charge(slots: number[], n: number, cost: number, x: number): void {
  const c = 3 * n;
  if (slots[c] === 0) {
    slots[c + 1] = x;
    slots[c + 2] = x;
  } else {
    slots[c + 1] = Math.min(slots[c + 1]!, x);
    slots[c + 2] = Math.max(slots[c + 2]!, x);
  }
  slots[c] = slots[c]! + cost;
}

/** Share of a slice's calls still inside the window when the window's edge is at offset `y`. */
function share(first: number, last: number, y: number): number {
  if (y >= last) return 0;
  if (y < first) return 1;
  return (last - y) / (last - first);
}

function estimateOf(w: WindowView): number {
  let sum = 0;
  for (let i = 1; 3 * i < w.slots.length; i++) sum += w.slots[3 * i]!;
  return sum + w.slots[0]! * share(w.slots[1]!, w.slots[2]!, w.x);
}

/**
 * Time until `excess` permits have slid out of the window. The oldest slice leaves during the
 * current slice, between its first and last offsets; each newer one during the following one.
 */
function retryAfter(w: WindowView, excess: number): number {
  let left = excess;
  let base = -w.x;
  for (let i = 0; 3 * i < w.slots.length; i++) {
    const c = w.slots[3 * i]!;
    const first = w.slots[3 * i + 1]!;
    const last = w.slots[3 * i + 2]!;
    // From offset `from` of the slice in which this one leaves, `inside` of it remain.
    const from = i === 0 ? w.x : 0;
    const inside = c * share(first, last, from);
    if (c > 0 && inside >= left - EPS_PERMITS) {
      const target = Math.max(0, (inside - left) / c);
      const y = last > first ? last - target * (last - first) : last;
      return ceilMs(base + Math.max(from, y));
    }
    left -= inside;
    base += w.sliceMs;
  }
  return ceilMs(base);
}

/** Time until every counted permit has slid out of the window. */
function resetAfter(w: WindowView): number {
  for (let i = w.slots.length / 3 - 1; i >= 0; i--) {
    if (w.slots[3 * i]! > 0) return ceilMs(i * w.sliceMs + w.slots[3 * i + 2]! - w.x);
  }
  return 0;
}
