/**
 * Helpers shared by the core's unit tests (outside src/, so not part of the built package).
 */

/** A small deterministic PRNG (mulberry32), so property checks are reproducible. */
export function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The most permits admitted in any exact window (t - windowMs, t] of the store's clock, from
 * (time, cost) pairs in time order: it is enough to check the windows that end at an admission.
 */
export function busiestWindow(admitted: readonly (readonly [number, number])[], windowMs: number): number {
  let max = 0;
  let lo = 0;
  let sum = 0;
  for (let hi = 0; hi < admitted.length; hi++) {
    sum += admitted[hi]![1];
    while (admitted[lo]![0] <= admitted[hi]![0] - windowMs) sum -= admitted[lo++]![1];
    max = Math.max(max, sum);
  }
  return max;
}
