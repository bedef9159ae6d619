import { describe, expect, it } from 'vitest';
import { compileLimit, type CompiledLimit, type LimitPolicy } from '../shared/policy.js';
import { gcra, slidingWindow, tokenBucket, type RateAlgorithm, type RateState } from './index.js';
import { prng } from '../../test/support.js';

/**
 * `admitInPlace` must decide as `evaluate` and leave in the held array what `evaluate` gives as
 * `next`: the in-memory store writes admitted calls over a key's slot with it.
 */
function compare(alg: RateAlgorithm, policy: LimitPolicy, seed: number): { inPlace: number; general: number } {
  const limit: CompiledLimit = compileLimit(policy);
  const random = prng(seed);
  let state: RateState | undefined;
  // A packed slot as the store keeps it: expiry, policy number, then the state.
  let held: number[] | undefined;
  let now = 1_700_000_000_000;
  const counts = { inPlace: 0, general: 0 };
  for (let n = 0; n < 5000; n++) {
    const r = random();
    // Mostly calls close together (fractional ms, as performance.now gives), now and then a
    // pause past the window, now and then the same instant.
    now += r < 0.05 ? limit.windowMs * 1.5 : r < 0.2 ? 0 : random() * (limit.windowMs / 200);
    const cost = random() < 0.9 ? 1 : Math.ceil(random() * limit.limit * 0.3);
    const verdict = alg.evaluate(state, cost, now, limit, 0);
    const before = held?.slice();
    const placed = held === undefined ? undefined : alg.admitInPlace!(held, 2, cost, now, limit);
    if (placed === undefined) {
      // Left to evaluate: untouched.
      if (held !== undefined) expect(held).toEqual(before);
      counts.general++;
      if (verdict.allowed) held = [0, 7, ...verdict.next];
    } else {
      counts.inPlace++;
      expect(verdict.allowed).toBe(true);
      const { next, ...rest } = verdict;
      expect(placed).toEqual(rest);
      expect(held!.slice(2)).toEqual(next);
    }
    if (verdict.allowed) state = verdict.next;
  }
  return counts;
}

describe('admitInPlace', () => {
  for (const [name, alg, policy] of [
    ['sliding window', slidingWindow, { algorithm: 'sliding-window', limit: 100, windowMs: 1000 }],
    ['sliding window, few slices', slidingWindow, { algorithm: 'sliding-window', limit: 40, windowMs: 500, slices: 2 }],
    ['token bucket', tokenBucket, { algorithm: 'token-bucket', limit: 50, windowMs: 1000, burst: 20 }],
    ['GCRA', gcra, { algorithm: 'gcra', limit: 50, windowMs: 1000, burst: 20 }],
  ] as const) {
    it(`decides as evaluate and leaves its next state in place: ${name}`, () => {
      for (const seed of [1, 2, 3]) {
        const counts = compare(alg, policy, seed);
        // Both paths were taken: the comparison means something.
        expect(counts.inPlace).toBeGreaterThan(500);
        expect(counts.general).toBeGreaterThan(50);
      }
    });
  }
});
