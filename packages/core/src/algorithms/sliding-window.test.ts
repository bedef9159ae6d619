import { describe, expect, it } from 'vitest';
import { compileLimit } from '../shared/policy.js';
import type { CompiledLimit } from '../shared/limits.js';
import { prng } from '../../test/support.js';
import { maxGroups, slidingWindow } from './sliding-window.js';
import { appendEntry, liveEntries, resetAfterEntries, sumEntries } from './timed-log.js';
import { EPS_PERMITS, wholePermits, type RateState } from './types.js';

/** The window as its doc describes it: the live groups, the charge appended, the cheapest merges. */
function reference(state: RateState | undefined, cost: number, now: number, limit: CompiledLimit, holdMs: number) {
  const merge = (out: number[]) => {
    while (out.length > 2 * maxGroups(limit)) {
      let best = 0;
      for (let i = 0; i + 2 < out.length; i += 2) {
        if (out[i + 1]! * (out[i + 2]! - out[i]!) < out[best + 1]! * (out[best + 2]! - out[best]!)) best = i;
      }
      out[best + 3] = out[best + 3]! + out[best + 1]!;
      out.splice(best, 2);
    }
    return out;
  };
  const entries = merge(liveEntries(state, 2, now, limit.windowMs));
  const count = sumEntries(entries);
  if (count + cost > limit.limit + EPS_PERMITS) return { allowed: false };
  const next = merge(appendEntry(entries, now + holdMs, cost));
  return {
    allowed: true,
    remaining: wholePermits(limit.limit - count - cost),
    resetAfterMs: resetAfterEntries(next, now, limit.windowMs),
    next: [3, 0, ...next],
  };
}

describe('sliding window admissions', () => {
  it('decide and store as the log of groups with its merges, whatever the arrivals, costs and leases', () => {
    const random = prng(7);
    for (const slices of [1, 2, 10]) {
      const limit = compileLimit({ algorithm: 'sliding-window', limit: 500, windowMs: 1000, slices });
      let state: RateState | undefined;
      let now = 0;
      for (let i = 0; i < 5000; i++) {
        now += Math.floor(random() * 40) + (random() < 0.3 ? 0 : random());
        const cost = 1 + Math.floor(random() * 20);
        const holdMs = random() < 0.1 ? Math.floor(random() * 300) : 0;
        const want = reference(state, cost, now, limit, holdMs);
        const got = slidingWindow.evaluate(state, cost, now, limit, holdMs);
        expect(got.allowed).toBe(want.allowed);
        if (!want.allowed) continue;
        expect({ remaining: got.remaining, resetAfterMs: got.resetAfterMs, next: got.next }).toEqual({
          remaining: want.remaining,
          resetAfterMs: want.resetAfterMs,
          next: want.next,
        });
        state = got.next;
      }
    }
  });
});
