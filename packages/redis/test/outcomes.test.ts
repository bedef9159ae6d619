import { Limiter } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { RedisStore } from '../src/redis-store.js';

const policy = {
  windowMs: 10_000,
  buckets: 10,
  minimumCalls: 4,
  failureRateThreshold: 0.5,
  slowCallRateThreshold: 1,
  openDurationMs: 60_000,
  halfOpenProbes: 1,
};
const totals = (calls: number, failures = 0, slow = 0, totalDurationMs = calls) => ({ calls, failures, slow, totalDurationMs });

describe('RedisStore outcomes', () => {
  let store: RedisStore;
  beforeAll(() => {
    store = new RedisStore({ url: redisUrl(), prefix: randomPrefix('outcomes'), commandTimeoutMs: 5000 });
  });
  afterAll(async () => {
    await store.close();
  });

  it('tallies reports of every process, by cohort too', async () => {
    const other = new RedisStore({ url: redisUrl(), prefix: store.options.prefix, commandTimeoutMs: 5000 });
    await store.outcomes({
      resource: 'db',
      totals: totals(3, 1, 1, 1500.5),
      cohorts: [{ cohort: 'candidate', totals: totals(2, 1, 0, 20) }],
    });
    await other.outcomes({ resource: 'db', totals: totals(1) });
    await other.close();
    expect(await store.outcomeTotals('db', 60_000)).toEqual({ calls: 4, failures: 1, slow: 1, totalDurationMs: 1501.5 });
    expect(await store.outcomeTotals('db', 60_000, 'candidate')).toEqual({ calls: 2, failures: 1, slow: 0, totalDurationMs: 20 });
    expect(await store.outcomeTotals('db', 60_000, 'baseline')).toEqual(totals(0, 0, 0, 0));
    expect(await store.outcomeTotals('other', 60_000)).toEqual(totals(0, 0, 0, 0));
  });

  it('reads whole buckets only when asked: the second in progress is left out', async () => {
    const second = async (): Promise<number> => Math.floor((await store.time()) / 1000);
    // Retried when Redis' second turns between the report and the read (the case is then moot).
    let checked = false;
    for (let attempt = 0; attempt < 10 && !checked; attempt++) {
      const resource = `whole${attempt}`;
      const before = await second();
      await store.outcomes({ resource, totals: totals(3, 3) });
      const partial = await store.outcomeTotals(resource, 1000);
      const whole = await store.outcomeTotals(resource, 600_000, undefined, { complete: true });
      if ((await second()) !== before) continue;
      expect(partial).toMatchObject({ calls: 3, failures: 3 });
      expect(whole).toMatchObject({ calls: 0 });
      // Once the second has ended, a whole-bucket read of 1 s is that second.
      while ((await second()) === before) await new Promise((r) => setTimeout(r, 50));
      if ((await second()) !== before + 1) continue;
      const ended = await store.outcomeTotals(resource, 1000, undefined, { complete: true });
      if ((await second()) !== before + 1) continue;
      expect(ended).toMatchObject({ calls: 3, failures: 3 });
      checked = true;
    }
    expect(checked).toBe(true);
  });

  it('judges a fleet breaker as core does: opens, hands out limited probes', async () => {
    const r = 'api:payments';
    expect((await store.outcomes({ resource: r, totals: totals(3, 3), breaker: policy })).breaker?.state).toBe('closed');
    const opened = await store.outcomes({ resource: r, totals: totals(1, 1), breaker: policy });
    expect(opened.breaker).toMatchObject({ state: 'open', probe: false });
    expect(opened.breaker!.retryAfterMs).toBeGreaterThan(50_000);
    const asked = await store.outcomes({ resource: r, totals: totals(0), breaker: policy, takeProbe: true });
    expect(asked.breaker).toMatchObject({ state: 'open', probe: false });
    // A breaker with a short open duration: half-open soon, then one probe for the fleet.
    const quick = { ...policy, openDurationMs: 1000 };
    const q = 'api:quick';
    await store.outcomes({ resource: q, totals: totals(4, 4), breaker: quick });
    await vi.waitFor(
      async () =>
        expect((await store.outcomes({ resource: q, totals: totals(0), breaker: quick })).breaker?.state).toBe('half_open'),
      { timeout: 10_000, interval: 50 },
    );
    const probes = await Promise.all(
      [1, 2, 3].map(() => store.outcomes({ resource: q, totals: totals(0), breaker: quick, takeProbe: true })),
    );
    expect(probes.filter((p) => p.breaker?.probe).length).toBe(1);
    const closed = await store.outcomes({ resource: q, totals: totals(1), breaker: quick });
    expect(closed.breaker?.state).toBe('closed');
  });

  it('refuses malformed reports before sending them', async () => {
    await expect(store.outcomes({ resource: 'db', totals: totals(1, 2) })).rejects.toMatchObject({
      code: 'SLUICE_ERR_INVALID_OPTIONS',
    });
    await expect(store.outcomeTotals('db', 0)).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_OPTIONS' });
    await expect(store.outcomeTotals('db', 1000, 'x'.repeat(65))).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_OPTIONS' });
  });

  it('serves a limiter with tallyOutcomes', async () => {
    const limiter = new Limiter({ store, tallyOutcomes: true, resources: { svc: { algorithm: 'gcra', limit: 100 } } });
    await limiter.call('svc', async () => 1);
    await expect(limiter.call('svc', () => Promise.reject(new Error('down')))).rejects.toThrow('down');
    await limiter.close();
    expect(await store.outcomeTotals('svc', 10_000)).toMatchObject({ calls: 2, failures: 1 });
  });
});
