/**
 * Priority tiers and the boost pool on real Redis: the same answers as the in-memory store, and
 * the bound `limit + boost.limit` holding for many concurrent callers with stores of their own.
 */
import { Limiter, ManualClock, type Decision, type ResourceOptions } from '@sluice/core';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, cluster, standalone, type Target } from './helpers.js';

// A day-long bucket: no permit comes back during a test, so the counts are exact.
const day = 86_400_000;
const payments: ResourceOptions = {
  limits: { algorithm: 'token-bucket', limit: 20, windowMs: day },
  priority: {
    tiers: [{ name: 'vip', share: 0.2 }, { name: 'standard', share: 0.3 }, { name: 'bulk' }],
    default: 'standard',
  },
  boost: { limit: 5, windowMs: day, algorithm: 'token-bucket', tiers: ['vip'] },
};

/**
 * A fixed mix of calls: each tier in turn on two keys, 25 calls of each tier per key, more than
 * the limit and the pool together hold (so vip fills both).
 */
const CALLS: readonly { priority: string; key: string }[] = Array.from({ length: 150 }, (_, i) => ({
  priority: ['bulk', 'standard', 'vip'][i % 3]!,
  key: i % 2 === 0 ? 'acct-1' : 'acct-2',
}));

const summary = (d: Decision) => ({ allowed: d.allowed, boosted: d.boosted === true, reason: d.reason, remaining: d.remaining });

for (const target of [standalone('tiers'), cluster('tiers')] satisfies Target[]) {
  describe(`tiers and the boost pool on redis ${target.name}`, () => {
    afterAll(() => cleanUp(target.admin(), target.prefix));

    it('answers as the in-memory store does, call by call', async () => {
      const memory = new Limiter({ clock: new ManualClock(), resources: { payments } });
      const store = target.store();
      const redis = new Limiter({ store, resources: { payments } });
      try {
        const want: unknown[] = [];
        const got: unknown[] = [];
        for (const call of CALLS) {
          want.push(summary(await memory.try('payments', call)));
          got.push(summary(await redis.try('payments', call)));
        }
        expect(got).toEqual(want);
        // Per key, vip has more calls than the limit: the limit is used up, and the pool too.
        const admitted = got.filter((d) => (d as { allowed: boolean }).allowed).length;
        expect(admitted).toBe(2 * (20 + 5));
        expect(got.filter((d) => (d as { boosted: boolean }).boosted)).toHaveLength(2 * 5);
      } finally {
        await memory.close();
        await redis.close();
        await store.close();
      }
    });

    it('admits at most limit + boost.limit to concurrent callers of many processes', async () => {
      const stores = Array.from({ length: 4 }, () => target.store());
      const limiters = stores.map((store) => new Limiter({ store, resources: { payments } }));
      try {
        const key = `race-${target.name}`;
        const tiers = limiters.flatMap((_, i) => Array.from({ length: 30 }, (_, j) => ((i + j) % 2 === 0 ? 'vip' : 'bulk')));
        const decisions = await Promise.all(tiers.map((priority, n) => limiters[n % 4]!.try('payments', { key, priority })));
        const allowed = decisions.filter((d) => d.allowed);
        const boosted = decisions.filter((d) => d.boosted === true);
        expect(allowed.length).toBe(20 + 5);
        expect(boosted.length).toBe(5);
        // Bulk never saw more than its half of the limit, and never the pool.
        const bulk = decisions.filter((d, n) => tiers[n] === 'bulk');
        expect(bulk.filter((d) => d.allowed).length).toBeLessThanOrEqual(10);
        expect(bulk.some((d) => d.boosted === true)).toBe(false);
      } finally {
        for (const l of limiters) await l.close();
        for (const s of stores) await s.close();
      }
    });
  });
}
