import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AdaptiveTimeout, ranked } from './adaptive-timeout.js';
import { FailureStreak } from './failure-streak.js';

describe('AdaptiveTimeout', () => {
  it('stays at its floor while the store answers fast', () => {
    const t = new AdaptiveTimeout();
    for (let i = 0; i < 5000; i++) t.observe(0.3 + (i % 7) * 0.1);
    expect(t.currentMs).toBe(50);
  });

  it('follows a multiple of the recent high percentile, capped', () => {
    const t = new AdaptiveTimeout({ minMs: 50, maxMs: 1000, multiplier: 3, percentile: 0.999, sampleSize: 1000 });
    for (let i = 0; i < 1000; i++) t.observe(i < 995 ? 2 : 120);
    // Five slow replies in a thousand: p99.9 is 120 ms, so the timeout is 360 ms.
    expect(t.currentMs).toBe(360);
    // A rise is acted on at once (no waiting for the next recomputation).
    t.observe(900);
    t.observe(900);
    expect(t.currentMs).toBe(1000);
  });

  it('forgets old latencies once the bounded sample has rolled over', () => {
    const t = new AdaptiveTimeout({ sampleSize: 100 });
    for (let i = 0; i < 100; i++) t.observe(200);
    expect(t.currentMs).toBe(600);
    // A fall shows within one recomputation (every 16 replies) after the sample rolled over.
    for (let i = 0; i < 116; i++) t.observe(1);
    expect(t.currentMs).toBe(50);
  });

  it('waits the longest until the first reply, then follows replies from the first one', () => {
    const t = new AdaptiveTimeout({ minMs: 50, maxMs: 1000 });
    expect(t.currentMs).toBe(1000);
    t.timedOut();
    expect(t.currentMs).toBe(1000);
    t.observe(400, true); // a late first reply is a latency too
    expect(t.currentMs).toBe(1000);
    t.observe(2);
    expect(t.currentMs).toBe(1000); // p99.9 of {400, 2} is 400: x3 is past the cap
    const fresh = new AdaptiveTimeout({ minMs: 50, maxMs: 1000 });
    fresh.observe(3);
    expect(fresh.currentMs).toBe(50);
  });

  it('doubles on each timeout up to the cap, and returns to its base on a reply in time', () => {
    const t = new AdaptiveTimeout({ minMs: 50, maxMs: 1000 });
    t.observe(1);
    const seen: number[] = [];
    for (let i = 0; i < 6; i++) {
      seen.push(t.currentMs);
      t.timedOut();
    }
    expect(seen).toEqual([50, 100, 200, 400, 800, 1000]);
    t.observe(230, true); // a late reply: still backing off, but learnt from
    expect(t.currentMs).toBe(1000);
    t.observe(1);
    expect(t.currentMs).toBe(690);
  });

  it('doubles once for calls that time out together', () => {
    const t = new AdaptiveTimeout({ minMs: 50, maxMs: 1000 });
    t.observe(1);
    const budget = t.currentMs;
    for (let i = 0; i < 100; i++) t.timedOut(budget);
    expect(t.currentMs).toBe(100);
    t.timedOut(t.currentMs);
    expect(t.currentMs).toBe(200);
  });

  it('never adapts a fixed timeout', () => {
    const t = new AdaptiveTimeout({ fixedMs: 75 });
    t.observe(500);
    t.timedOut();
    expect(t.currentMs).toBe(75);
    expect(t.adaptive).toBe(false);
  });

  it('rejects bad options with a stable code', () => {
    expect(() => new AdaptiveTimeout({ minMs: 100, maxMs: 50 })).toThrow(
      expect.objectContaining({ code: 'SLUICE_ERR_INVALID_OPTIONS' }),
    );
    expect(() => new AdaptiveTimeout({ percentile: 0 })).toThrow(expect.objectContaining({ code: 'SLUICE_ERR_INVALID_OPTIONS' }));
  });
});

describe('ranked', () => {
  it('finds the value a full sort puts at the index, near the top by a scan and lower down by a sort', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1e4, noNaN: true }), { minLength: 1, maxLength: 300 }),
        fc.nat(),
        (values, pick) => {
          const samples = Float64Array.from([...values, 7, 7]);
          const n = values.length;
          const at = pick % n;
          expect(ranked(samples, n, at)).toBe(samples.slice(0, n).sort()[at]);
        },
      ),
    );
  });
});

describe('FailureStreak', () => {
  it('counts calls that fail together once', () => {
    const s = new FailureStreak(3);
    const wave = [s.begin(), s.begin(), s.begin(), s.begin()];
    expect(wave.map((t) => s.failed(t))).toEqual([false, false, false, false]);
    expect(s.count).toBe(1);
  });

  it('reaches its threshold on consecutive failures, and a success ends the streak', () => {
    const s = new FailureStreak(3);
    expect(s.failed(s.begin())).toBe(false);
    expect(s.failed(s.begin())).toBe(false);
    s.succeeded();
    expect(s.failed(s.begin())).toBe(false);
    expect(s.failed(s.begin())).toBe(false);
    expect(s.failed(s.begin())).toBe(true);
  });
});
