import { FailoverMachine, ManualClock, cohortAt } from '@sluice/core';
import { afterEach, describe, expect, it } from 'vitest';
import { PolicyFallback } from './fallback.js';
import { viewFromBody } from './wire.js';

const limit = (n: number) => ({
  limits: [{ id: '0', algorithm: 'fixed-window', limit: n, windowMs: 3_600_000 }],
  onStoreFailure: 'local',
  reservable: true,
});

const open: PolicyFallback[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((f) => f.close()));
});

describe('PolicyFallback during a rule rollout', () => {
  it('decides candidate keys on the candidate limits, by the same hash as the service', async () => {
    const clock = new ManualClock();
    const health = new FailoverMachine({ clock, probe: () => Promise.resolve() });
    const fallback = new PolicyFallback(clock, 256, 0, health);
    open.push(fallback);
    const view = viewFromBody({
      version: 3,
      clients: 1,
      resources: { orders: limit(5) },
      rollout: { id: 'r-1', percent: 30, resources: { orders: limit(1) } },
    });
    expect(view.rollout?.resources.get('orders')?.policies[0]?.limit).toBe(1);
    fallback.sync(view, { count: 1, known: true });
    const keys = Array.from({ length: 60 }, (_, i) => `k${i}`);
    for (const key of keys) {
      const call = { resource: 'orders', view: view.resources.get('orders')!, key, cost: 1 };
      const allowed: boolean[] = [];
      for (let i = 0; i < 3; i++) allowed.push((await fallback.decide(call, 'try', true)).allowed);
      expect(allowed).toEqual(cohortAt(30, 'r-1', 'orders', key) === 'candidate' ? [true, false, false] : [true, true, true]);
    }
    expect(keys.some((k) => cohortAt(30, 'r-1', 'orders', k) === 'candidate')).toBe(true);
  });

  it('leaves a malformed rollout out: nothing is split', () => {
    const view = viewFromBody({ version: 3, resources: { orders: limit(5) }, rollout: { id: 7 } });
    expect(view.rollout).toBeUndefined();
    expect(view.resources.has('orders')).toBe(true);
  });
});
