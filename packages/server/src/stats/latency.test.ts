import { describe, expect, it, vi } from 'vitest';
import { histogramQuantile, LatencyWindow, type BucketSource } from './latency.js';

describe('histogramQuantile', () => {
  const bounds = [1, 2, 4];

  it('interpolates inside the bucket the rank falls in, the first bucket starting at 0', () => {
    // 100 values in (1, 2]: the 99th is 99% of the way through the bucket.
    expect(histogramQuantile(0.99, bounds, [0, 100, 0, 0])).toBeCloseTo(1.99, 12);
    // Half in (0, 1], half in (1, 2]: the median is the first bucket's top, the p99 98% into the second.
    expect(histogramQuantile(0.5, bounds, [50, 50, 0, 0])).toBeCloseTo(1, 12);
    expect(histogramQuantile(0.99, bounds, [50, 50, 0, 0])).toBeCloseTo(1.98, 12);
    // Empty buckets before and between are skipped: rank 9.9 of 10 is 0.9 into (2, 4] after 9 below.
    expect(histogramQuantile(0.99, bounds, [0, 9, 1, 0])).toBeCloseTo(2 + 2 * 0.9, 12);
    expect(histogramQuantile(1, bounds, [3, 0, 0, 0])).toBe(1);
  });

  it('answers the highest finite bound for a rank past it, and nothing for an empty histogram', () => {
    expect(histogramQuantile(0.99, bounds, [0, 0, 0, 10])).toBe(4);
    expect(histogramQuantile(0.99, bounds, [1, 0, 0, 99])).toBe(4);
    expect(histogramQuantile(0.99, bounds, [0, 0, 0, 0])).toBeUndefined();
  });

  it('lands in the bucket that holds the exact quantile of the observed values', () => {
    let seed = 7;
    const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    const edges = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1];
    for (let round = 0; round < 20; round++) {
      const values = Array.from({ length: 500 }, () => random() ** 3 * 0.12);
      const bucketOf = (v: number) => edges.findIndex((e) => v <= e);
      const counts = new Array<number>(edges.length + 1).fill(0);
      for (const v of values) {
        const b = bucketOf(v);
        counts[b === -1 ? edges.length : b]! += 1;
      }
      const exact = [...values].sort((a, b) => a - b)[Math.ceil(0.99 * values.length) - 1]!;
      const estimate = histogramQuantile(0.99, edges, counts)!;
      // Past the last bound both answer "beyond it": the estimate is that bound.
      if (bucketOf(exact) === -1) expect(estimate).toBe(edges.at(-1));
      else expect(bucketOf(estimate)).toBe(bucketOf(exact));
    }
  });

  it('refuses a quantile outside (0, 1] and counts that do not match the bounds', () => {
    expect(() => histogramQuantile(0, bounds, [1, 0, 0, 0])).toThrow(/quantile must be in \(0, 1\]/);
    expect(() => histogramQuantile(1.5, bounds, [1, 0, 0, 0])).toThrow(/quantile must be in/);
    expect(() => histogramQuantile(Number.NaN, bounds, [1, 0, 0, 0])).toThrow(/quantile must be in/);
    expect(() => histogramQuantile(0.5, bounds, [1, 0, 0])).toThrow(/3 bounds has 4 buckets, got 3/);
  });
});

/** A histogram of bounds [0.001, 0.01, 0.1] whose counts the test sets. */
function source(): BucketSource & { add(bucket: number, n: number): void; counts: number[] } {
  const counts = [0, 0, 0, 0];
  return {
    bounds: [0.001, 0.01, 0.1],
    counts,
    add(bucket, n) {
      counts[bucket]! += n;
    },
    bucketTotals(into) {
      into.set(counts);
      return into;
    },
  };
}

describe('LatencyWindow', () => {
  it('answers the window without a p99 until a decision is timed, then the p99 of the window only', () => {
    let now = 0;
    const h = source();
    const w = new LatencyWindow(h, { windowMs: 10_000, sampleMs: 1000, now: () => now });
    expect(w.p99()).toEqual({ windowSeconds: 10 });
    // Slow decisions first: all in (0.01, 0.1].
    h.add(2, 100);
    expect(w.p99().p99Seconds).toBeCloseTo(0.01 + 0.09 * 0.99, 12);
    for (let s = 1; s <= 10; s++) {
      now = s * 1000;
      w.sample();
    }
    // Then fast ones only; the slow ones are now older than the window's oldest reading.
    h.add(0, 100);
    now = 10_500;
    expect(w.p99().p99Seconds).toBeCloseTo(0.001 * 0.99, 12);
    // Nothing new for a whole window: no p99, not zero.
    for (let s = 11; s <= 22; s++) {
      now = s * 1000;
      w.sample();
    }
    expect(w.p99()).toEqual({ windowSeconds: 10 });
  });

  it('looks back no further than the window, mixing what the window holds', () => {
    let now = 0;
    const h = source();
    const w = new LatencyWindow(h, { windowMs: 5000, sampleMs: 1000, now: () => now });
    const second = (s: number) => {
      // One fast decision a second; in second 3, 50 slow ones too.
      h.add(0, 1);
      if (s === 3) h.add(2, 50);
      now = s * 1000;
      w.sample();
    };
    for (let s = 1; s <= 7; s++) second(s);
    // At 7 s the window starts at the reading of second 2: the slow ones of second 3 are in it.
    expect(w.p99().p99Seconds).toBeGreaterThan(0.01);
    second(8);
    now = 8500;
    // At 8.5 s it starts at the reading of second 4: the decisions of seconds 5 to 8, all fast.
    expect(w.p99().p99Seconds).toBeCloseTo(0.001 * 0.99, 12);
  });

  it('covers since the newest reading when the readings were held up past the window', () => {
    let now = 0;
    const h = source();
    const w = new LatencyWindow(h, { windowMs: 5000, sampleMs: 1000, now: () => now });
    h.add(2, 10);
    now = 1000;
    w.sample();
    h.add(1, 10);
    now = 60_000;
    expect(w.p99().p99Seconds).toBeGreaterThan(0.001);
    expect(w.p99().p99Seconds).toBeLessThanOrEqual(0.01);
  });

  it('counts a reset histogram as empty, never negative', () => {
    let now = 0;
    const h = source();
    const w = new LatencyWindow(h, { windowMs: 5000, sampleMs: 1000, now: () => now });
    h.add(1, 10);
    now = 1000;
    w.sample();
    h.counts.fill(0);
    now = 1500;
    expect(w.p99()).toEqual({ windowSeconds: 5 });
  });

  it('refuses a window or sampling that is not positive, or sampling longer than the window', () => {
    expect(() => new LatencyWindow(source(), { windowMs: 0 })).toThrow(/must be positive/);
    expect(() => new LatencyWindow(source(), { sampleMs: -1 })).toThrow(/must be positive/);
    expect(() => new LatencyWindow(source(), { windowMs: 1000, sampleMs: 2000 })).toThrow(/sampling within the window/);
  });

  it('reads on its timer once started and stops on close', () => {
    vi.useFakeTimers();
    try {
      const h = source();
      let reads = 0;
      const counted: BucketSource = {
        bounds: h.bounds,
        bucketTotals: (into) => {
          reads++;
          return h.bucketTotals(into);
        },
      };
      const w = new LatencyWindow(counted, { windowMs: 100, sampleMs: 10 }).start();
      expect(reads).toBe(1);
      vi.advanceTimersByTime(35);
      expect(reads).toBe(4);
      w.close();
      vi.advanceTimersByTime(100);
      expect(reads).toBe(4);
    } finally {
      vi.useRealTimers();
    }
  });
});
