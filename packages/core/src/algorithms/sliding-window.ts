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
import { EPS_PERMITS, admittedInPlace, ceilMs, wholePermits, type RateAlgorithm, type RateState } from './types.js';

/**
 * Sliding window with bounded state, stored as `[3, 0, ts1, cost1, ts2, cost2, ...]`: at most
 * `8 * slices` groups of admitted calls in time order (see `timed-log.ts`), each stamped with the
 * time of its newest call. A group counts in full while its stamp is inside the window
 * `(now - windowMs, now]`. (The `0` tells this layout from the counted slices `[3, sliceMs, k,
 * ...]` of earlier versions, read conservatively: all their calls count as made when they are
 * first read.)
 *
 * The bound is hard: a group's calls were all made at or before its stamp, so every admitted
 * call inside the window is counted, and no window of `windowMs` on the store's clock ever holds
 * more than `limit` admitted permits, whatever the arrival pattern, costs or number of callers.
 *
 * The price of bounded state is throughput, never accuracy: when a call would make more groups
 * than the cap, the two neighbours whose merging wastes the fewest permit-milliseconds (the older
 * group's permits times the gap to the newer one) become one group stamped at the newer time, so
 * those permits are held a little longer than a log would hold them. Under sustained excess
 * demand the window still admits close to the limit (see docs/algorithms.md for the figures and
 * the tests that check them); with at most `8 * slices` calls per window it is the exact log.
 */
export const slidingWindow: RateAlgorithm = {
  name: 'sliding-window',
  code: ALGORITHM_CODES['sliding-window'],
  rate: true,
  windowed: true,
  fastPath: false,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit) => limit.limit,

  evaluate(state, cost, now, limit, holdMs = 0) {
    const admitted = cost > 0 ? admitInOneCopy(state, cost, now, limit, holdMs) : undefined;
    if (admitted !== undefined) return admitted;
    const entries = liveOf(state, now, limit);
    const count = sumEntries(entries);
    if (count + cost <= limit.limit + EPS_PERMITS) {
      const next = cost > 0 ? merged(appendEntry(entries, now + holdMs, cost), limit) : entries;
      const resetAfterMs = resetAfterEntries(next, now, limit.windowMs);
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - count - cost),
        retryAfterMs: 0,
        resetAfterMs,
        next: [3, 0, ...next],
        ttlMs: resetAfterMs,
      };
    }
    const resetAfterMs = resetAfterEntries(entries, now, limit.windowMs);
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - count),
      retryAfterMs: retryAfterEntries(entries, count + cost - limit.limit, EPS_PERMITS, now, limit.windowMs),
      resetAfterMs,
      next: [3, 0, ...entries],
      ttlMs: resetAfterMs,
    };
  },

  admitInPlace(held, at, cost, now, limit) {
    // This layout only; the state's own two numbers stay as they are.
    if (cost <= 0 || held[at] !== ALGORITHM_CODES['sliding-window'] || held[at + 1] !== 0) return undefined;
    const head = at + 2;
    const windowMs = limit.windowMs;
    const length = held.length;
    let from = head;
    while (from < length && held[from]! + windowMs <= now) from += 2;
    let count = 0;
    for (let i = from + 1; i < length; i += 2) count += held[i]!;
    const cap = maxGroups(limit);
    if ((length - from) / 2 > cap || count + cost > limit.limit + EPS_PERMITS) return undefined;
    // A group stamped after now (a reservation's hold): evaluate puts the charge before it.
    if (length > from && held[length - 2]! > now) return undefined;
    const joins = length > from && held[length - 2] === now;
    // As admitInOneCopy with no hold (the groups gone from the window dropped, the charge joined
    // to a group stamped now or appended, then the merge), never longer than the array was: a
    // key's slot keeps its size, and the store holds no spare room in it. Loops by hand:
    // copyWithin took most of the call.
    if (joins || from > head) {
      const drop = from - head;
      for (let i = from; i < length; i++) held[i - drop] = held[i]!;
      if (joins) {
        held.length = length - drop;
        held[held.length - 1] = held[held.length - 1]! + cost;
      } else {
        held.length = length - drop + 2;
        held[held.length - 2] = now;
        held[held.length - 1] = cost;
        mergeAfter(held, head, cap);
      }
    } else {
      // Appended to the live groups: only at the cap, with one merge, is there room for it.
      if ((length - head) / 2 < cap) return undefined;
      let best = head;
      let bestWaste = Infinity;
      for (let i = head; i + 2 < length; i += 2) {
        const waste = held[i + 1]! * (held[i + 2]! - held[i]!);
        if (waste < bestWaste) {
          bestWaste = waste;
          best = i;
        }
      }
      // The last group's neighbour is the charge.
      if (held[length - 1]! * (now - held[length - 2]!) < bestWaste) best = length - 2;
      if (best === length - 2) {
        held[best] = now;
        held[best + 1] = held[best + 1]! + cost;
      } else {
        held[best + 3] = held[best + 3]! + held[best + 1]!;
        for (let i = best + 2; i < length; i++) held[i - 2] = held[i]!;
        held[length - 2] = now;
        held[length - 1] = cost;
      }
    }
    return admittedInPlace(wholePermits(limit.limit - count - cost), ceilMs(held[held.length - 2]! + windowMs - now));
  },

  adjust(state, delta, now, limit, at = 0) {
    const live = liveOf(state, now, limit);
    // As the sliding log: a charge counts at most `limit` permits.
    const entries =
      delta > 0 ? merged(appendEntry(live, now, Math.min(delta, limit.limit)), limit) : refund(live, -delta, now, at);
    if (entries.length === 0) return { next: undefined, ttlMs: 0 };
    return { next: [3, 0, ...entries], ttlMs: resetAfterEntries(entries, now, limit.windowMs) };
  },

  usage(state, now, limit) {
    if (state[1] === 0) return sumEntries(liveEntries(state, 2, now, limit.windowMs));
    // Counted slices of an earlier version: every call they hold, wherever it was in its slice.
    let used = 0;
    for (let i = 3; i < state.length; i += 3) used += state[i]!;
    return used;
  },

  fromUsage(used, now) {
    // Calls of unknown times: counted as if made now, so the bound holds across the change.
    return used > 0 ? [3, 0, now, used] : [3, 0];
  },

  compatible(state) {
    return state[1] === 0;
  },

  startOf(state, cost, from, _now, limit) {
    return startOfEntries(state, 2, cost, from, limit.limit, limit.windowMs);
  },

  claimSpan() {
    return Infinity;
  },

  book(state, cost, _start, end, now, limit) {
    // Stamped at the span's end, as a lease's charge: counted in every window a use can fall in.
    return windowOf(merged(appendEntry(liveOf(state, now, limit), end, cost), limit), now, limit);
  },

  unbook(state, cost, _start, end, now, limit) {
    // Once its stamp has left the window the charge is gone, or merged into a later group that
    // cannot be told apart: nothing is taken back then.
    if (end + limit.windowMs <= now) return windowOf(liveOf(state, now, limit), now, limit);
    return windowOf(refundAt(liveOf(state, now, limit), cost, end), now, limit);
  },

  claim(state, cost, end, now, limit) {
    const live = refundAt(liveOf(state, now, limit), cost, end);
    return windowOf(merged(appendEntry(live, now, cost), limit), now, limit);
  },
};

/**
 * `evaluate` of a call that is admitted and charges permits, on a state holding at most
 * `maxGroups` live groups (the usual case), written in one copy: the live groups with the new
 * charge put in place, then the one merge the cap may ask for. It decides exactly as the general
 * path (`liveOf`, `appendEntry`, `merged`), which copies the whole log three times more; undefined
 * when that path must decide (a denial, more live groups than the cap after a policy change).
 */
function admitInOneCopy(state: RateState | undefined, cost: number, now: number, limit: CompiledLimit, holdMs: number) {
  // An earlier version's layout (see above) is read by the general path.
  if (state !== undefined && state[1] !== 0) return undefined;
  const windowMs = limit.windowMs;
  const length = state === undefined ? 2 : state.length;
  let from = 2;
  while (from < length && state![from]! + windowMs <= now) from += 2;
  let count = 0;
  for (let i = from + 1; i < length; i += 2) count += state![i]!;
  const cap = maxGroups(limit);
  if ((length - from) / 2 > cap || count + cost > limit.limit + EPS_PERMITS) return undefined;
  const at = now + holdMs;
  // Where the charge goes: after every group stamped at or before it (joining one stamped at it).
  let end = length;
  while (end > from && state![end - 2]! > at) end -= 2;
  const joins = end > from && state![end - 2] === at;
  const next = new Array<number>(2 + (length - from) + (joins ? 0 : 2));
  next[0] = 3;
  next[1] = 0;
  let o = 2;
  for (let i = from; i < end; i++) next[o++] = state![i]!;
  if (joins) next[o - 1] = next[o - 1]! + cost;
  else {
    next[o++] = at;
    next[o++] = cost;
  }
  for (let i = end; i < length; i++) next[o++] = state![i]!;
  mergeAfter(next, 2, cap);
  const resetAfterMs = ceilMs(next[next.length - 2]! + windowMs - now);
  return {
    allowed: true,
    remaining: wholePermits(limit.limit - count - cost),
    retryAfterMs: 0,
    resetAfterMs,
    next,
    ttlMs: resetAfterMs,
  };
}

/** {@link merged} on the groups of `out` after its first `head` numbers. */
function mergeAfter(out: number[], head: number, cap: number): void {
  while (out.length - head > 2 * cap) {
    let best = head;
    let bestWaste = Infinity;
    for (let i = head; i + 2 < out.length; i += 2) {
      const waste = out[i + 1]! * (out[i + 2]! - out[i]!);
      if (waste < bestWaste) {
        bestWaste = waste;
        best = i;
      }
    }
    out[best + 3] = out[best + 3]! + out[best + 1]!;
    out.splice(best, 2);
  }
}

function windowOf(entries: number[], now: number, limit: CompiledLimit) {
  if (entries.length === 0) return { next: undefined, ttlMs: 0 };
  return { next: [3, 0, ...entries], ttlMs: resetAfterEntries(entries, now, limit.windowMs) };
}

/** The most groups a window keeps for `limit`. */
export function maxGroups(limit: CompiledLimit): number {
  return 8 * limit.slices;
}

function liveOf(state: RateState | undefined, now: number, limit: CompiledLimit): number[] {
  return merged(liveEntries(state, 2, now, limit.windowMs), limit);
}

/**
 * Merges neighbouring groups of a fresh array (in place) until at most `maxGroups` remain. Each
 * merge moves the older group's permits forward to the newer stamp (never back: the bound holds),
 * choosing the pair that wastes the fewest permit-milliseconds; ties go to the oldest pair.
 */
function merged(out: number[], limit: CompiledLimit): number[] {
  const cap = maxGroups(limit);
  while (out.length > 2 * cap) {
    let best = 0;
    let bestWaste = Infinity;
    for (let i = 0; i + 2 < out.length; i += 2) {
      const waste = out[i + 1]! * (out[i + 2]! - out[i]!);
      if (waste < bestWaste) {
        bestWaste = waste;
        best = i;
      }
    }
    out[best + 3] = out[best + 3]! + out[best + 1]!;
    out.splice(best, 2);
  }
  return out;
}
