import { describe, expect, it } from 'vitest';
import {
  ALGORITHMS,
  ALGORITHM_CODES,
  POLICY_BOUNDS,
  compileLimit,
  type Algorithm,
  type CompiledLimit,
  type LimitPolicy,
} from '../shared/policy.js';
import {
  ALGORITHM_TRAITS,
  RATE_ALGORITHMS,
  algorithmOf,
  concurrency,
  fixedWindow,
  gcra,
  normalizeState,
  slidingLog,
  slidingWindow,
  tokenBucket,
  type RateAlgorithm,
  type RateState,
} from './index.js';

import { busiestWindow, prng } from '../../test/support.js';

const lim = (p: LimitPolicy): CompiledLimit => compileLimit(p);

/** Runs requests (time, cost) through an algorithm, storing state only when admitted. */
function run(alg: RateAlgorithm, limit: CompiledLimit, requests: [number, number][]): boolean[] {
  let state: RateState | undefined;
  return requests.map(([t, cost]) => {
    const o = alg.evaluate(normalizeState(state, t, limit), cost, t, limit);
    if (o.allowed) state = o.next;
    return o.allowed;
  });
}

describe('token bucket', () => {
  const limit = lim({ algorithm: 'token-bucket', limit: 10, windowMs: 1000, burst: 5 });

  it('admits a burst, then refills at limit/window', () => {
    expect(
      run(tokenBucket, limit, [
        [0, 1],
        [0, 1],
        [0, 1],
        [0, 1],
        [0, 1],
        [0, 1],
      ]),
    ).toEqual([true, true, true, true, true, false]);
    const o = tokenBucket.evaluate([1, 5, 0], 1, 0, limit);
    expect(o.retryAfterMs).toBe(100);
    expect(tokenBucket.evaluate([1, 5, 0], 1, 100, limit).allowed).toBe(true);
    expect(tokenBucket.evaluate([1, 5, 0], 3, 100, limit).retryAfterMs).toBe(200);
  });

  it('never refunds time when the clock steps back', () => {
    const o = tokenBucket.evaluate([1, 5, 1000], 1, 500, limit);
    expect(o.allowed).toBe(false);
    expect(o.retryAfterMs).toBe(100);
  });

  it('keeps extra charges as a debt and caps refunds at zero usage', () => {
    const debt = tokenBucket.adjust([1, 5, 0], 10, 0, limit).next!;
    expect(debt[1]).toBe(15);
    expect(tokenBucket.evaluate(debt, 1, 0, limit).retryAfterMs).toBe(1100);
    expect(tokenBucket.adjust([1, 2, 0], -10, 0, limit).next).toBeUndefined();
  });
});

describe('gcra', () => {
  it('admits exactly what a token bucket with the same rate and burst admits', () => {
    const rnd = prng(7);
    for (let round = 0; round < 20; round++) {
      const policy: LimitPolicy = {
        algorithm: 'gcra',
        limit: 1 + Math.floor(rnd() * 50),
        windowMs: 100 + Math.floor(rnd() * 2000),
        burst: 1 + Math.floor(rnd() * 20),
      };
      const g = lim(policy);
      const tb = lim({ ...policy, algorithm: 'token-bucket' });
      let t = 0;
      const reqs: [number, number][] = [];
      for (let i = 0; i < 300; i++) {
        t += Math.floor(rnd() * 30);
        reqs.push([t, Math.floor(rnd() * 3)]);
      }
      expect(run(gcra, g, reqs)).toEqual(run(tokenBucket, tb, reqs));
    }
  });

  it('gives the exact retry-after', () => {
    const limit = lim({ algorithm: 'gcra', limit: 4, windowMs: 1000, burst: 1 });
    const first = gcra.evaluate(undefined, 1, 0, limit);
    const second = gcra.evaluate(first.next, 1, 10, limit);
    expect(second.allowed).toBe(false);
    expect(second.retryAfterMs).toBe(240);
    expect(gcra.evaluate(first.next, 1, 250, limit).allowed).toBe(true);
  });
});

describe('sliding window log', () => {
  it('never admits more than the limit in any window', () => {
    const rnd = prng(11);
    const limit = lim({ algorithm: 'sliding-log', limit: 20, windowMs: 1000 });
    let t = 0;
    const reqs: [number, number][] = [];
    for (let i = 0; i < 3000; i++) {
      t += rnd() * 10;
      reqs.push([t, 1]);
    }
    const admitted = run(slidingLog, limit, reqs);
    const taken = reqs.filter((_, i) => admitted[i]);
    expect(busiestWindow(taken, 1000)).toBe(20);
    // Under demand of ~200/s, an exact log admits the limit in every window.
    expect(taken.length).toBeGreaterThanOrEqual(20 * Math.floor(t / 1000));
  });

  it('says when the oldest entries leave the window', () => {
    const limit = lim({ algorithm: 'sliding-log', limit: 2, windowMs: 1000 });
    const o = slidingLog.evaluate([5, 100, 1, 300, 1], 1, 500, limit);
    expect(o.allowed).toBe(false);
    expect(o.retryAfterMs).toBe(600);
  });
});

describe('sliding window', () => {
  function admittedOf(limit: CompiledLimit, requests: [number, number][]): [number, number][] {
    const allowed = run(slidingWindow, limit, requests);
    return requests.filter((_, i) => allowed[i]);
  }

  /** Poisson arrivals at `perSecond` for `ms`, costs from `cost()`. */
  function poisson(rnd: () => number, perSecond: number, ms: number, cost = () => 1): [number, number][] {
    const out: [number, number][] = [];
    for (let t = -Math.log(1 - rnd()) * (1000 / perSecond); t < ms; t += -Math.log(1 - rnd()) * (1000 / perSecond)) {
      out.push([t, cost()]);
    }
    return out;
  }

  /** Adversarial patterns: floods late in a slice, bunches at slice edges, several callers, costs. */
  const patterns: Record<string, (rnd: () => number) => [number, number][]> = {
    'floods late in each slice': () => {
      const reqs: [number, number][] = [];
      for (let slice = 0; slice < 100; slice++) for (let i = 0; i < 60; i++) reqs.push([slice * 100 + 70 + i / 2, 1]);
      return reqs;
    },
    'bunches at slice edges': (rnd) => {
      const reqs: [number, number][] = [];
      for (let edge = 100; edge < 10_000; edge += 100) {
        for (let i = 0; i < 40; i++) reqs.push([edge - 1 + rnd() * 2, 1]);
      }
      return reqs.sort((x, y) => x[0] - y[0]);
    },
    'four callers, random costs': (rnd) =>
      [0, 1, 2, 3].flatMap(() => poisson(rnd, 150, 10_000, () => 1 + Math.floor(rnd() * 5))).sort((x, y) => x[0] - y[0]),
    'quiet, then a flood': (rnd) => [
      ...poisson(rnd, 20, 3000),
      ...poisson(rnd, 5000, 3000).map(([t, c]): [number, number] => [t + 3000, c]),
    ],
    'bursts of random size and gap': (rnd) => {
      const reqs: [number, number][] = [];
      for (let t = 0; t < 10_000; t += 1 + rnd() * 300) {
        const n = Math.floor(rnd() * 150);
        for (let i = 0; i < n; i++) reqs.push([t + rnd() * 3, 1 + Math.floor(rnd() * 3)]);
      }
      return reqs.sort((x, y) => x[0] - y[0]);
    },
  };

  for (const [name, make] of Object.entries(patterns)) {
    it(`never admits more than the limit in any exact window: ${name}`, () => {
      for (const slices of [1, 3, 10]) {
        const limit = lim({ algorithm: 'sliding-window', limit: 200, windowMs: 1000, slices });
        const admitted = admittedOf(limit, make(prng(slices)));
        expect(admitted.length).toBeGreaterThan(0);
        expect(busiestWindow(admitted, 1000)).toBeLessThanOrEqual(200);
      }
    });
  }

  it('admits at least 0.99 of the limit under sustained excess demand', { timeout: 60_000 }, () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 200, windowMs: 1000 });
    for (const [excess, seconds] of [
      [2, 60],
      [3, 30],
      [10, 10],
      [50, 5],
    ] as const) {
      const admitted = admittedOf(limit, poisson(prng(excess), 200 * excess, seconds * 1000));
      expect(admitted.length / (200 * seconds)).toBeGreaterThanOrEqual(0.99);
    }
    // Demand just above the limit leaves gaps no window can use: the exact log is the yardstick.
    const reqs = poisson(prng(7), 300, 60_000);
    const log = run(slidingLog, lim({ algorithm: 'sliding-log', limit: 200, windowMs: 1000 }), reqs).filter(Boolean);
    expect(admittedOf(limit, reqs).length / log.length).toBeGreaterThanOrEqual(0.98);
  });

  it('is the exact log while a window holds at most 8 x slices groups', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 8, windowMs: 1000, slices: 2 });
    const reqs = poisson(prng(11), 20, 20_000);
    expect(run(slidingWindow, limit, reqs)).toEqual(
      run(slidingLog, lim({ algorithm: 'sliding-log', limit: 8, windowMs: 1000 }), reqs),
    );
  });

  it('keeps at most 8 x slices groups, merging the cheapest neighbours forward', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 100, windowMs: 1000, slices: 1 });
    let state: RateState | undefined;
    const times = [0, 100, 200, 300, 310, 311, 400, 500];
    for (const t of times) state = slidingWindow.evaluate(state, 1, t, limit).next;
    expect(state).toEqual([3, 0, ...times.flatMap((t) => [t, 1])]);
    // A ninth group: 310 and 311 are the cheapest pair (1 permit x 1 ms), so 310's permit moves to 311.
    state = slidingWindow.evaluate(state, 2, 600, limit).next;
    expect(state).toEqual([3, 0, 0, 1, 100, 1, 200, 1, 300, 1, 311, 2, 400, 1, 500, 1, 600, 2]);
    // The moved permit leaves with the group it joined, not before.
    expect(slidingWindow.evaluate(state, 0, 1310.5, limit).remaining).toBe(94);
    expect(slidingWindow.evaluate(state, 0, 1311, limit).remaining).toBe(96);
  });

  it('tells a denied call exactly when it fits', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 10, windowMs: 1000 });
    let state: RateState | undefined;
    for (const [t, cost] of [
      [0, 4],
      [300, 3],
      [600, 3],
    ] as const) {
      state = slidingWindow.evaluate(state, cost, t, limit).next;
    }
    const denied = slidingWindow.evaluate(state, 5, 700, limit);
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(600); // 4 leave at 1000, 3 more at 1300
    expect(slidingWindow.evaluate(state, 5, 1299, limit).allowed).toBe(false);
    expect(slidingWindow.evaluate(state, 5, 1300, limit).allowed).toBe(true);
    expect(denied.resetAfterMs).toBe(900);
  });

  it('refunds the newest charges first', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 10, windowMs: 1000 });
    let state = slidingWindow.evaluate(undefined, 4, 0, limit).next;
    state = slidingWindow.evaluate(state, 3, 100, limit).next;
    const refunded = slidingWindow.adjust(state, -5, 200, limit).next!;
    expect(refunded).toEqual([3, 0, 0, 2]);
    expect(slidingWindow.adjust(refunded, -2, 200, limit).next).toBeUndefined();
  });

  it('counts a held charge (a lease) from the end of its hold, and never refunds it', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 10, windowMs: 1000 });
    let state = slidingWindow.evaluate(undefined, 2, 100, limit).next;
    state = slidingWindow.evaluate(state, 5, 100, limit, 200).next;
    state = slidingWindow.evaluate(state, 1, 150, limit).next;
    expect(state).toEqual([3, 0, 100, 2, 150, 1, 300, 5]);
    expect(slidingWindow.evaluate(state, 0, 1299, limit).remaining).toBe(5);
    expect(slidingWindow.evaluate(state, 0, 1300, limit).remaining).toBe(10);
    // A refund takes the newest charges made by now, never the held ones.
    expect(slidingWindow.adjust(state, -4, 160, limit).next).toEqual([3, 0, 300, 5]);
    // A refund naming the held charge's stamp returns its unused permits, and nothing else.
    expect(slidingWindow.adjust(state, -3, 160, limit, 300).next).toEqual([3, 0, 100, 2, 150, 1, 300, 2]);
    expect(slidingWindow.adjust(state, -9, 160, limit, 300).next).toEqual([3, 0, 100, 2, 150, 1]);
    // Merged forward, the charge is in the next group: at most what that group holds goes back.
    expect(slidingWindow.adjust([3, 0, 100, 2, 150, 1], -5, 160, limit, 120).next).toEqual([3, 0, 100, 2]);
  });

  it('reads counted slices of earlier versions conservatively', () => {
    const limit = lim({ algorithm: 'sliding-window', limit: 10, windowMs: 1000, slices: 2 });
    const old: RateState = [3, 500, 0, 2, 10, 20, 3, 100, 400, 1, 5, 5];
    const converted = normalizeState(old, 700, limit)!;
    expect(converted).toEqual([3, 0, 700, 6]);
    expect(slidingWindow.evaluate(converted, 5, 1699, limit).allowed).toBe(false);
    expect(slidingWindow.evaluate(converted, 5, 1700, limit).allowed).toBe(true);
  });
});

describe('fixed window', () => {
  it('resets at the window boundary', () => {
    const limit = lim({ algorithm: 'fixed-window', limit: 2, windowMs: 1000 });
    expect(
      run(fixedWindow, limit, [
        [100, 1],
        [200, 1],
        [300, 1],
        [999, 1],
        [1000, 1],
      ]),
    ).toEqual([true, true, false, false, true]);
    expect(fixedWindow.evaluate([4, 1000, 2], 1, 300, limit).retryAfterMs).toBe(700);
  });
});

describe('adjustments are bounded', () => {
  const algorithms: [string, RateAlgorithm, LimitPolicy][] = [
    ['token bucket', tokenBucket, { algorithm: 'token-bucket', limit: 10, windowMs: 1000, burst: 5 }],
    ['gcra', gcra, { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 5 }],
    ['fixed window', fixedWindow, { algorithm: 'fixed-window', limit: 10, windowMs: 1000 }],
    ['sliding log', slidingLog, { algorithm: 'sliding-log', limit: 10, windowMs: 1000 }],
    ['sliding window', slidingWindow, { algorithm: 'sliding-window', limit: 10, windowMs: 1000, slices: 4 }],
  ];

  /** Calls of cost 1 admitted at `t`, one after another, until one is denied (at most 1000). */
  function admitsAt(alg: RateAlgorithm, limit: CompiledLimit, start: RateState | undefined, t: number): number {
    let state = normalizeState(start, t, limit);
    let n = 0;
    for (; n < 1000; n++) {
      const o = alg.evaluate(state, 1, t, limit);
      if (!o.allowed) break;
      state = o.next;
    }
    return n;
  }

  for (const [name, alg, policy] of algorithms) {
    const limit = lim(policy);
    const capacity = policy.burst ?? policy.limit;

    it(`${name}: no refund lifts a key above its capacity`, () => {
      const random = prng(7);
      for (let round = 0; round < 200; round++) {
        let state: RateState | undefined;
        let t = 0;
        // Random use, then a refund of any size (up to far more than was ever taken).
        for (let i = 0; i < 20; i++) {
          t += Math.floor(random() * 80);
          const o = alg.evaluate(normalizeState(state, t, limit), 1 + Math.floor(random() * 3), t, limit);
          if (o.allowed) state = o.next;
        }
        const refund = -Math.ceil(random() * 1e9 * (random() < 0.5 ? 1e-8 : 1));
        state = alg.adjust(normalizeState(state, t, limit), refund, t, limit).next;
        expect(admitsAt(alg, limit, state, t)).toBeLessThanOrEqual(capacity);
      }
    });

    it(`${name}: no charge blocks a key for longer than one window`, () => {
      for (const delta of [1, 10, 11, 1e3, 1e9]) {
        for (const used of [0, 3, 10]) {
          let state: RateState | undefined;
          if (used > 0) state = alg.evaluate(undefined, used > capacity ? capacity : used, 0, limit).next;
          state = alg.adjust(normalizeState(state, 0, limit), delta, 0, limit).next;
          const retry = alg.evaluate(normalizeState(state, 0, limit), 1, 0, limit).retryAfterMs;
          // A smooth limit admits one call one emission interval after the debt is paid.
          const bound = limit.windowMs + limit.windowMs / limit.limit;
          expect(retry, `charge ${delta} after ${used}`).toBeLessThanOrEqual(bound);
          expect(admitsAt(alg, limit, state, bound)).toBeGreaterThanOrEqual(1);
        }
      }
    });
  }

  it('keeps debt a policy change left beyond one window (a charge never lowers usage)', () => {
    const limit = lim({ algorithm: 'token-bucket', limit: 10, windowMs: 1000 });
    const next = tokenBucket.adjust([1, 50, 0], 1, 0, limit).next!;
    expect(next[1]).toBe(50);
  });
});

describe('policy changes carry usage over', () => {
  it('converts between algorithms through usage', () => {
    const tb = lim({ algorithm: 'token-bucket', limit: 10, windowMs: 1000 });
    const fw = lim({ algorithm: 'fixed-window', limit: 10, windowMs: 1000 });
    const converted = normalizeState([1, 6, 0], 0, fw)!;
    expect(converted[0]).toBe(4);
    expect(fixedWindow.evaluate(converted, 1, 0, fw).remaining).toBe(3);
    expect(normalizeState([1, 6, 0], 0, tb)).toEqual([1, 6, 0]);
  });

  it('rescales a GCRA state when the interval changes', () => {
    const slow = lim({ algorithm: 'gcra', limit: 10, windowMs: 1000 });
    const fast = lim({ algorithm: 'gcra', limit: 20, windowMs: 1000 });
    const state = gcra.evaluate(undefined, 6, 0, slow).next;
    expect(gcra.evaluate(normalizeState(state, 0, fast), 1, 0, fast).remaining).toBe(13);
  });
});

describe('concurrency', () => {
  const limit = lim({ algorithm: 'concurrency', limit: 2, permitTtlMs: 1000 });

  it('holds permits until release or expiry', () => {
    const a = concurrency.acquire(undefined, 'a', 1, 0, limit);
    const b = concurrency.acquire(a.next, 'b', 1, 0, limit);
    const c = concurrency.acquire(b.next, 'c', 1, 500, limit);
    expect([a.allowed, b.allowed, c.allowed]).toEqual([true, true, false]);
    expect(c.retryAfterMs).toBe(500);
    expect(concurrency.acquire(b.next, 'c', 1, 1000, limit).allowed).toBe(true);
    const released = concurrency.release(b.next, 'a', 10);
    expect(released.found).toBe(true);
    expect(concurrency.usage(released.next, 10)).toBe(1);
    expect(concurrency.renew(b.next, 'a', 1000, limit).found).toBe(false);
  });
});

describe('algorithm traits', () => {
  it('names every algorithm once, under its own name and code', () => {
    expect(Object.keys(ALGORITHM_TRAITS).sort()).toEqual([...ALGORITHMS].sort());
    for (const name of ALGORITHMS) {
      expect(ALGORITHM_TRAITS[name].name).toBe(name);
      expect(ALGORITHM_TRAITS[name].code).toBe(ALGORITHM_CODES[name]);
      expect(algorithmOf(lim({ algorithm: name, limit: 5 }))).toBe(ALGORITHM_TRAITS[name]);
    }
  });

  it('say what each algorithm holds, stamps and may take', () => {
    const capacity = (algorithm: Algorithm) => {
      const l = lim({ algorithm, limit: 5, burst: 8 });
      return algorithmOf(l).capacity(l);
    };
    expect(ALGORITHMS.map((a) => [a, capacity(a)])).toEqual([
      ['token-bucket', 8],
      ['gcra', 8],
      ['sliding-window', 5],
      ['sliding-log', 5],
      ['fixed-window', 5],
      ['concurrency', 5],
    ]);
    expect(ALGORITHMS.filter((a) => ALGORITHM_TRAITS[a].windowed)).toEqual(['sliding-window', 'sliding-log']);
    expect(ALGORITHMS.filter((a) => ALGORITHM_TRAITS[a].fastPath)).toEqual(['token-bucket', 'gcra', 'fixed-window']);
    expect(RATE_ALGORITHMS).toEqual(ALGORITHMS.filter((a) => a !== 'concurrency'));
    expect(ALGORITHM_TRAITS['sliding-log'].largestLimit).toBe(POLICY_BOUNDS.maxLogLimit);
    expect(ALGORITHM_TRAITS.gcra.largestLimit).toBe(POLICY_BOUNDS.maxLimit);
  });
});
