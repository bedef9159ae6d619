import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SeriesCounter } from './series-counter.js';

describe('SeriesCounter', () => {
  it("exposes what prom-client's Counter exposes for the same counts, at every read", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const config = { name: 'calls_total', help: 'Calls', labelNames: ['route', 'code'] as const };
    const fast = new SeriesCounter({ ...config, registers: [ours] });
    const reference = new Counter({ ...config, registers: [theirs] });
    const ok = fast.series({ route: '/a', code: '200' });
    ok.inc();
    ok.inc(2);
    reference.inc({ route: '/a', code: '200' }, 3);
    fast.series({ route: 'x"y\\z', code: '500' }).inc(0.5);
    reference.inc({ route: 'x"y\\z', code: '500' }, 0.5);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // Counted between reads: added at the next read, never twice.
    ok.inc(4);
    reference.inc({ route: '/a', code: '200' }, 4);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect((await fast.counter.get()).values.find((v) => v.labels.route === '/a')?.value).toBe(7);
  });

  it('keeps one series per label values and refuses what a counter cannot take', () => {
    const fast = new SeriesCounter({ name: 'c_total', help: 'C', labelNames: ['a'] as const, registers: [] });
    const s = fast.series({ a: '1' });
    expect(fast.series({ a: '1' })).toBe(s);
    expect(() => s.inc(-1)).toThrow(/finite amount >= 0/);
    expect(() => s.inc(Number.NaN)).toThrow(/finite amount >= 0/);
    expect(() => s.inc(Infinity)).toThrow(/finite amount >= 0/);
    expect(() => fast.series({} as { a: string })).toThrow(/label a must be a string/);
    expect(() => fast.series({ a: '2', b: '3' } as { a: string })).toThrow(/labels must be exactly a/);
  });
});
