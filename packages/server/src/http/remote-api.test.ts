import { Limiter, ManualClock } from '@sluice/core';
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
  api:leased:
    limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 }
    lease: { ttlMs: 300, maxBatch: 50 }
    onStoreFailure: closed
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 5000 } }
  api:split: { limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 }, split: 2 }
  api:prio: { limits: { algorithm: fixed-window, limit: 100, windowMs: 60000 }, priority: { coreShare: 0.2 } }
`;

describe('endpoints for remote clients', () => {
  let app: FastifyInstance;
  const clock = new ManualClock(1_800_000_000_000);
  const metrics = new ServerMetrics();
  const limiter = new Limiter({ resources: {}, clock });
  const rules = new LiveRules({ limiter });
  const clients = new ClientCounter(60_000, () => clock.now());
  const post = (url: string, payload: unknown, headers: Record<string, string> = {}) =>
    app.inject({
      method: 'POST',
      url,
      headers: { 'content-type': 'application/json', ...headers },
      payload: JSON.stringify(payload),
    });

  beforeAll(async () => {
    rules.apply(ruleVersion(RULES, 7));
    app = buildHttpApp({
      settings: { maxBodyBytes: 4096, maxBatch: 5, maxKeyLength: 64, maxWaitMs: 1000, adminToken: 'a'.repeat(16) },
      service: new RateLimitService(limiter, rules, clients),
      rules,
      ruleStore: {} as RuleStore,
      metrics,
      logger: pino({ level: 'silent' }),
      readiness: async () => ({ ready: true, checks: {} }),
    });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await limiter.close();
  });

  it('lists resources with limits, lease settings, policy, version and clients', async () => {
    await post('/v1/check', { resource: 'api:leased' }, { 'sluice-client-id': 'c-1' });
    await post('/v1/check', { resource: 'api:leased' }, { 'sluice-client-id': 'c-2' });
    await post('/v1/check', { resource: 'api:leased' }, { 'sluice-client-id': 'not valid!' });
    const res = await app.inject({ method: 'GET', url: '/v1/resources' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['sluice-rules-version']).toBe('7');
    const body = res.json();
    expect(body.version).toBe(7);
    expect(body.clients).toBe(2);
    expect(body.truncated).toBe(false);
    expect(Object.keys(body.resources as object).sort()).toEqual(['api:leased', 'api:prio', 'api:split', 'db:pool']);
    expect(body.resources['api:leased']).toMatchObject({
      onStoreFailure: 'closed',
      lease: { ttlMs: 300, maxBatch: 50 },
      limits: [{ id: '0', algorithm: 'fixed-window', limit: 100, windowMs: 60000 }],
    });
    expect(body.resources['db:pool'].lease).toBeUndefined();
    expect(body.resources['api:leased'].reservable).toBe(true);
    for (const r of ['db:pool', 'api:split', 'api:prio']) expect(body.resources[r].reservable).toBe(false);
    expect(body.resources['db:pool'].onStoreFailure).toBe('local');
    const bad = await app.inject({ method: 'GET', url: '/v1/resources?x=1' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('SLUICE_ERR_INVALID_REQUEST');
  });

  it('carries the rule version on decision answers and statuses when asked', async () => {
    const res = await post('/v1/check?statuses=1', { resource: 'api:leased', key: 's' });
    expect(res.headers['sluice-rules-version']).toBe('7');
    expect(res.json().statuses).toEqual([expect.objectContaining({ id: '0', allowed: true, limit: 100 })]);
    const plain = await post('/v1/check', { resource: 'api:leased', key: 's' });
    expect(plain.json().statuses).toBeUndefined();
  });

  it('reserves between min and max permits, and grants 0 when fewer than min are left', async () => {
    const a = await post('/v1/reserve', { resource: 'api:leased', key: 'r', min: 1, max: 60 });
    expect(a.statusCode).toBe(200);
    expect(a.json()).toMatchObject({ granted: 60, allowed: true, source: 'store' });
    expect(a.json().statuses).toHaveLength(1);
    const b = await post('/v1/reserve', { resource: 'api:leased', key: 'r', min: 1, max: 60 });
    expect(b.json().granted).toBe(40);
    const c = await post('/v1/reserve', { resource: 'api:leased', key: 'r', min: 1, max: 5 });
    expect(c.json()).toMatchObject({ granted: 0, allowed: false, reason: 'rate_limited' });
    // Leftovers come back through adjust.
    await post('/v1/adjust', { resource: 'api:leased', key: 'r', delta: -10 });
    const d = await post('/v1/reserve', { resource: 'api:leased', key: 'r', min: 10, max: 10 });
    expect(d.json().granted).toBe(10);
  });

  it('refuses bad reservations with stable codes', async () => {
    const cases: [unknown, number, string][] = [
      [{ resource: 'api:leased', min: 5, max: 2 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'api:leased', min: 0, max: 2 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'api:leased', max: 2 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'api:leased', min: 1, max: 2, extra: 1 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool', min: 1, max: 2 }, 400, 'SLUICE_ERR_INVALID_OPTIONS'],
      [{ resource: 'api:split', min: 1, max: 2 }, 400, 'SLUICE_ERR_INVALID_OPTIONS'],
      [{ resource: 'api:prio', min: 1, max: 2 }, 400, 'SLUICE_ERR_INVALID_OPTIONS'],
      [{ resource: 'nope', min: 1, max: 2 }, 404, 'SLUICE_ERR_UNKNOWN_RESOURCE'],
      [{ resource: 'api:leased', min: 500, max: 500 }, 400, 'SLUICE_ERR_COST_EXCEEDS_LIMIT'],
      [[1, 2], 400, 'SLUICE_ERR_INVALID_REQUEST'],
    ];
    for (const [body, status, code] of cases) {
      const res = await post('/v1/reserve', body);
      expect({ body, status: res.statusCode, code: res.json().error?.code }).toEqual({ body, status, code });
    }
  });

  it('renews a concurrency permit, with a ttl, and refuses bad renewals', async () => {
    const taken = (await post('/v1/check', { resource: 'db:pool', key: 'w' })).json();
    expect(taken.allowed).toBe(true);
    const renewed = await post('/v1/renew', { resource: 'db:pool', key: 'w', permitId: taken.permitId, ttlMs: 20_000 });
    expect(renewed.json()).toEqual({ renewed: true });
    clock.advance(10_000);
    // Past the rule's 5 s TTL but within the renewed 20 s: still held.
    expect((await post('/v1/check', { resource: 'db:pool', key: 'w' })).json().allowed).toBe(false);
    expect((await post('/v1/renew', { resource: 'db:pool', key: 'w', permitId: 'gone' })).json()).toEqual({ renewed: false });
    const bad: [unknown, string][] = [
      [{ resource: 'db:pool', permitId: '' }, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool', leaseId: '' }, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool', permitId: 'x', leaseId: 'y' }, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool', permitId: 'x', ttlMs: 0 }, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool', permitId: 'x', ttlMs: 1.5 }, 'SLUICE_ERR_INVALID_REQUEST'],
      [{ resource: 'db:pool' }, 'SLUICE_ERR_INVALID_REQUEST'],
    ];
    for (const [body, code] of bad) {
      const res = await post('/v1/renew', body);
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe(code);
    }
    const batch = await post('/v1/renew', {
      items: [{ resource: 'db:pool', key: 'w', permitId: taken.permitId }, { resource: 'x' }],
    });
    expect(batch.json().results).toEqual([
      { renewed: true },
      { error: expect.objectContaining({ code: 'SLUICE_ERR_INVALID_REQUEST' }) },
    ]);
  });
});
