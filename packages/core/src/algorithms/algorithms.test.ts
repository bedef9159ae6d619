import { describe, expect, it } from 'vitest';
import { compileLimit, type CompiledLimit, type LimitPolicy } from '../policy.js';
import {
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

/** A small deterministic PRNG so property checks are reproducible. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function maxInWindow(times: number[], windowMs: number): number {
  let max = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    while (times[hi]! - times[lo]! >= windowMs) lo++;
    max = Math.max(max, hi - lo + 1);
  }
  return max;
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
    const times = reqs.filter((_, i) => admitted[i]).map(([time]) => time);
    expect(maxInWindow(times, 1000)).toBe(20);
    // Under demand of ~200/s, an exact log admits the limit in every window.
    expect(times.length).toBeGreaterThanOrEqual(20 * Math.floor(t / 1000));
  });

  it('says when the oldest entries leave the window', () => {
    const limit = lim({ algorithm: 'sliding-log', limit: 2, windowMs: 1000 });
    const o = slidingLog.evaluate([5, 100, 1, 300, 1], 1, 500, limit);
    expect(o.allowed).toBe(false);
    expect(o.retryAfterMs).toBe(600);
  });
});

describe('sliding window counter', () => {
  it('stays close to the limit in any window under steady demand', () => {
    const rnd = prng(3);
    const limit = lim({ algorithm: 'sliding-window', limit: 100, windowMs: 1000, slices: 10 });
    let t = 0;
    const reqs: [number, number][] = [];
    for (let i = 0; i < 20000; i++) {
      t += rnd() * 2;
      reqs.push([t, 1]);
    }
    const admitted = run(slidingWindow, limit, reqs);
    const times = reqs.filter((_, i) => admitted[i]).map(([time]) => time);
    expect(maxInWindow(times, 1000)).toBeLessThanOrEqual(110);
    expect(times.length / (t / 1000)).toBeGreaterThan(95);
  });

  const limit = lim({ algorithm: 'sliding-window', limit: 10, windowMs: 1000, slices: 10 });
  /** A state whose newest slice is slice 0, holding `count` calls between `first` and `last` ms. */
  const slice0 = (count: number, first: number, last: number): RateState => [
    3,
    100,
    0,
    ...new Array<number>(30).fill(0),
    count,
    first,
    last,
  ];

  it('holds the limit in every exact window under a flood that starts mid-slice', () => {
    const big = lim({ algorithm: 'sliding-window', limit: 1000, windowMs: 1000, slices: 10 });
    const reqs: [number, number][] = [];
    for (let t = 37; t < 6000; t++) for (let i = 0; i < 50; i++) reqs.push([t, 1]);
    const admitted = run(slidingWindow, big, reqs);
    const times = reqs.filter((_, i) => admitted[i]).map(([time]) => time);
    expect(maxInWindow(times, 1000)).toBeLessThanOrEqual(1000);
    expect(times.length / 6).toBeGreaterThan(950);
  });

  it('lets the oldest slice slide out between its first and last call', () => {
    // 10 calls spread over slice 0; at t=1050 half of them are still inside the window.
    const o = slidingWindow.evaluate(slice0(10, 0, 100), 1, 1050, limit);
    expect(o.allowed).toBe(true);
    expect(o.remaining).toBe(4);
  });

  it('keeps a burst in the window until the burst itself leaves', () => {
    // 10 calls at once, 30 ms into slice 0: they leave at t=1030, not gradually from t=1000.
    const burst = slice0(10, 30, 30);
    const early = slidingWindow.evaluate(burst, 1, 1020, limit);
    expect(early.allowed).toBe(false);
    expect(early.retryAfterMs).toBe(10);
    expect(slidingWindow.evaluate(burst, 10, 1030, limit).allowed).toBe(true);
  });

  it('records the first and last call of the current slice', () => {
    let state = slidingWindow.evaluate(undefined, 2, 1012, limit).next;
    state = slidingWindow.evaluate(state, 3, 1047, limit).next;
    expect(state.slice(-3)).toEqual([5, 12, 47]);
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
  const limit = lim({ algorithm: 'concurrency', limit: 2, leaseTtlMs: 1000 });

  it('holds leases until release or expiry', () => {
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
