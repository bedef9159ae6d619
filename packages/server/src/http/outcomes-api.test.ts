import { Limiter, ManualClock, MemoryStore } from '@sluice/core';
import type { RuleStore } from '@sluice/rules';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LiveRules } from '../live-rules.js';
import { ServerMetrics } from '../metrics.js';
import { RateLimitService } from '../service/service.js';
import { ruleVersion } from '../../test/rule-version.js';
import { buildHttpApp } from './app.js';
import { ClientCounter } from '../clients/client-ids.js';

const RULES = `
resources:
  db:
    limits: { algorithm: fixed-window, limit: 1000, windowMs: 60000 }
    breaker: { scope: fleet, minimumCalls: 4, failureRateThreshold: 0.5, openDurationMs: 5000, syncMs: 100 }
  api: { limits: { algorithm: fixed-window, limit: 1000, windowMs: 60000 } }
`;

describe('POST /v1/outcomes', () => {
  let app: FastifyInstance;
  const clock = new ManualClock(1_000_000);
  const store = new MemoryStore({ clock, sweepIntervalMs: 0 });
  const limiter = new Limiter({ resources: {}, clock, store, tallyOutcomes: true });
  const rules = new LiveRules({ limiter });
  const post = (payload: unknown) =>
    app.inject({
      method: 'POST',
      url: '/v1/outcomes',
      // Reports need a credential; the admin token is one.
      headers: { 'content-type': 'application/json', authorization: `Bearer ${'a'.repeat(16)}` },
      payload: JSON.stringify(payload),
    });

  beforeAll(async () => {
    rules.apply(ruleVersion(RULES, 1));
    app = buildHttpApp({
      settings: { maxBodyBytes: 4096, maxBatch: 5, maxKeyLength: 64, maxWaitMs: 1000, adminToken: 'a'.repeat(16) },
      service: new RateLimitService(limiter, rules, new ClientCounter(), {
        cohortOf: (_resource, key) => (key.startsWith('canary-') ? 'candidate' : undefined),
      }),
      rules,
      ruleStore: {} as RuleStore,
      metrics: new ServerMetrics(),
      logger: pino({ level: 'silent' }),
      readiness: async () => ({ ready: true, checks: {} }),
    });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await limiter.close();
    await store.close();
  });

  it('feeds the fleet breaker: reported failures open it, and checks are refused', async () => {
    expect((await limiter.try('db')).allowed).toBe(true);
    const res = await post({ items: [1, 2, 3, 4].map(() => ({ resource: 'db', ok: false, durationMs: 12 })) });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ results: [1, 2, 3, 4].map(() => ({ recorded: true })) });
    await clock.advanceAsync(100);
    await clock.advanceAsync(100);
    expect(limiter.fleetBreakerOf('db')?.state).toBe('open');
    expect(await limiter.try('db')).toMatchObject({ allowed: false, reason: 'circuit_open' });
  });

  it('tallies by cohort through the cohortOf hook', async () => {
    const res = await post({
      items: [
        { resource: 'api', key: 'canary-1', ok: false, durationMs: 2500, count: 3 },
        { resource: 'api', key: 'plain', ok: true, durationMs: 10 },
      ],
    });
    expect(res.statusCode).toBe(200);
    await clock.advanceAsync(1000);
    expect(await store.outcomeTotals('api', 60_000)).toEqual({ calls: 4, failures: 3, slow: 3, totalDurationMs: 7510 });
    expect(await store.outcomeTotals('api', 60_000, 'candidate')).toEqual({
      calls: 3,
      failures: 3,
      slow: 3,
      totalDurationMs: 7500,
    });
  });

  it('answers bad items one by one, and a single bad item with its error', async () => {
    const res = await post({
      items: [
        { resource: 'api', ok: true, durationMs: 1 },
        { resource: 'api', ok: 'yes', durationMs: 1 },
        { resource: 'nope', ok: true, durationMs: 1 },
        { resource: 'api', ok: true, durationMs: -1 },
        { resource: 'api', ok: true, durationMs: 1, count: 0 },
      ],
    });
    const results = res.json<{ results: { error?: { code: string } }[] }>().results;
    expect(results.map((r) => r.error?.code)).toEqual([
      undefined,
      'SLUICE_ERR_INVALID_REQUEST',
      'SLUICE_ERR_UNKNOWN_RESOURCE',
      'SLUICE_ERR_INVALID_REQUEST',
      'SLUICE_ERR_INVALID_REQUEST',
    ]);
    const single = await post({ resource: 'api', ok: true });
    expect(single.statusCode).toBe(400);
    const many = await post({ items: Array.from({ length: 6 }, () => ({ resource: 'api', ok: true, durationMs: 1 })) });
    expect(many.statusCode).toBe(413);
  });
});
