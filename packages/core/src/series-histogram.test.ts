import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SeriesHistogram } from './series-histogram.js';

describe('SeriesHistogram', () => {
  it("exposes what prom-client's Histogram exposes for the same observations", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const config = { help: 'Durations', labelNames: ['route', 'method'] as const, buckets: [0.001, 0.01, 0.1, 1] };
    const fast = new SeriesHistogram({ ...config, name: 'd_seconds', registers: [ours] });
    const reference = new Histogram({ ...config, name: 'd_seconds', registers: [theirs] });
    const get = fast.series({ route: '/v1/check', method: 'GET' });
    const values = [0.0004, 0.001, 0.002, 0.05, 0.5, 7, 0.01];
    for (const v of values) {
      get.observe(v);
      reference.observe({ route: '/v1/check', method: 'GET' }, v);
    }
    fast.observe({ route: 'a"b\\c', method: 'POST' }, 0.3);
    reference.observe({ route: 'a"b\\c', method: 'POST' }, 0.3);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // The same objects to JSON readers (exemplars aside: there are none).
    const json = async (r: Registry) =>
      (await r.getMetricsAsJSON()).map((m) => ({ ...m, values: m.values.map(({ value, labels }) => ({ value, labels })) }));
    expect(await json(ours)).toEqual(await json(theirs));
  });

  it('keeps one series per label values, zeroes them on reset, and keeps the handles valid', async () => {
    const registry = new Registry();
    const h = new SeriesHistogram({ name: 'x', help: 'X', labelNames: ['a'] as const, buckets: [1], registers: [registry] });
    const s = h.series({ a: '1' });
    expect(h.series({ a: '1' })).toBe(s);
    s.observe(2);
    registry.resetMetrics();
    s.observe(0.5);
    const text = await registry.metrics();
    expect(text).toContain('x_bucket{le="1",a="1"} 1\nx_bucket{le="+Inf",a="1"} 1\nx_sum{a="1"} 0.5\nx_count{a="1"} 1');
  });

  it('adds up every series per bucket for bucketTotals, into a given array too', () => {
    const h = new SeriesHistogram({ name: 't', help: 'T', labelNames: ['a'] as const, buckets: [1, 2], registers: [] });
    expect([...h.bucketTotals()]).toEqual([0, 0, 0]);
    h.observe({ a: '1' }, 0.5);
    h.observe({ a: '1' }, 1.5);
    h.observe({ a: '2' }, 1);
    h.observe({ a: '2' }, 3);
    expect(h.bounds).toEqual([1, 2]);
    const into = new Float64Array([9, 9, 9]);
    expect(h.bucketTotals(into)).toBe(into);
    expect([...into]).toEqual([2, 1, 1]);
    expect(() => h.bucketTotals(new Float64Array(2))).toThrow(/needs 3 numbers, got 2/);
  });

  it('refuses bad buckets, labels and values, and a name registered twice', () => {
    const registry = new Registry();
    const make = (buckets: number[], labelNames: string[] = []) =>
      new SeriesHistogram({ name: 'y', help: 'Y', labelNames, buckets, registers: [] });
    expect(() => make([])).toThrow(/ascending/);
    expect(() => make([1, 1])).toThrow(/ascending/);
    expect(() => make([2, 1])).toThrow(/ascending/);
    expect(() => make([1, Infinity])).toThrow(/ascending/);
    expect(() => make([1], ['le'])).toThrow(/invalid label name "le"/);
    expect(() => make([1], ['a-b'])).toThrow(/invalid label name/);
    const h = new SeriesHistogram({ name: 'z', help: 'Z', labelNames: ['a'] as const, buckets: [1], registers: [registry] });
    expect(() => h.series({} as { a: string })).toThrow(/label a must be a string/);
    expect(() => h.series({ a: '1', b: '2' } as { a: string })).toThrow(/labels must be exactly a/);
    expect(() => h.observe({ a: '1' }, Number.NaN)).toThrow(/not a valid number/);
    expect(() => new SeriesHistogram({ name: 'z', help: 'Z', buckets: [1], registers: [registry] })).toThrow(
      /already been registered/,
    );
  });
});
