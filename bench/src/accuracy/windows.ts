/**
 * Most events in any window `[t, t + windowMs)` over sorted timestamps. The busiest window can
 * always be moved right until it starts at an event, so only windows starting at events are
 * examined (two pointers, linear time).
 */
export function maxInWindow(sorted: Float64Array, windowMs: number): number {
  let best = 0;
  let j = 0;
  for (let i = 0; i < sorted.length; i++) {
    const until = sorted[i]! + windowMs;
    if (j < i) j = i;
    while (j < sorted.length && sorted[j]! < until) j++;
    best = Math.max(best, j - i);
  }
  return best;
}

/** Events with `from <= t < to` in sorted timestamps. */
export function countBetween(sorted: Float64Array, from: number, to: number): number {
  return lowerBound(sorted, to) - lowerBound(sorted, from);
}

function lowerBound(sorted: Float64Array, value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]! < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Merges per-process timestamp lists into one sorted array, keeping `from <= t < to`. */
export function mergeTimestamps(lists: readonly (readonly number[])[], from: number, to: number): Float64Array {
  const all = new Float64Array(lists.reduce((n, l) => n + l.length, 0));
  let n = 0;
  for (const list of lists) {
    for (const t of list) if (t >= from && t < to) all[n++] = t;
  }
  return all.subarray(0, n).sort();
}
