import { Limiter, ManualClock } from '@sluice/core';
import type { RuleStore } from '@sluice/rules';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LiveRules } from '../live-rules.js';
import { ServerMetrics } from '../metrics.js';
import { RateLimitService } from '../service/service.js';
import { ruleVersion } from '../../test/rule-version.js';
import { buildHttpApp } from './app.js';

const RULES = `
resources:
  api:one: { limits: { algorithm: fixed-window, limit: 2, windowMs: 10000 } }
  db:pool: { limits: { algorithm: concurrency, limit: 1 } }
  api:llm: { limits: { algorithm: token-bucket, limit: 100, windowMs: 60000 } }
  api:tenants:
    limits: { algorithm: fixed-window, limit: 10, windowMs: 60000 }
    tenants: { acme: { limits: { algorithm: fixed-window, limit: 1, windowMs: 60000 } } }
`;

describe('HTTP API', () => {
  let app: FastifyInstance;
  const metrics = new ServerMetrics();
  const limiter = new Limiter({ resources: {}, clock: new ManualClock(1_800_000_000_000), observer: metrics.observer });
  const rules = new LiveRules({ limiter, onApplied: (e) => metrics.rulesApplied(e.version, 0, 0, 0) });
  const post = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

  beforeAll(async () => {
    rules.apply(ruleVersion(RULES, 4));
    app = buildHttpApp({
      settings: { maxBodyBytes: 4096, maxBatch: 5, maxKeyLength: 64, maxWaitMs: 1000, adminToken: 'a'.repeat(16) },
      service: new RateLimitService(limiter, rules),
      rules,
      ruleStore: {} as RuleStore,
      metrics,
      logger: pino({ level: 'silent' }),
      readiness: async () => ({ ready: true, checks: { rules: 'version 4' } }),
    });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await limiter.close();
  });

  it('answers a check with the decision and RateLimit headers', async () => {
    const res = await post('/v1/check', { resource: 'api:one', key: 'k1' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      allowed: true,
      limit: 2,
      remaining: 1,
      retryAfterMs: 0,
      reason: 'allowed',
      source: 'store',
    });
    // The IETF draft's fields by default, named after the resource; not the earlier drafts'.
    expect(res.headers['ratelimit-policy']).toBe('"api:one";q=2;w=10');
    expect(res.headers.ratelimit).toBe('"api:one";r=1;t=10');
    expect(res.headers['ratelimit-limit']).toBeUndefined();
    expect(res.headers['retry-after']).toBeUndefined();
  });

  it('answers a denial 200 by default and 429 when asked, with Retry-After', async () => {
    await post('/v1/check', { resource: 'api:one', key: 'k2', cost: 2 });
    const denied = await post('/v1/check', { resource: 'api:one', key: 'k2' });
    expect(denied.statusCode).toBe(200);
    expect(denied.json()).toMatchObject({ allowed: false, reason: 'rate_limited', remaining: 0 });
    expect(denied.headers['retry-after']).toBe('10');
    const asked = await post('/v1/check?http429=1', { resource: 'api:one', key: 'k2' });
    expect(asked.statusCode).toBe(429);
    expect(asked.headers['retry-after']).toBe('10');
  });

  it('answers a batch item by item, errors included', async () => {
    const res = await post('/v1/check', {
      items: [
        { resource: 'api:one', key: 'b' },
        { resource: 'nope' },
        { resource: 'api:one', cost: 'x' },
        { resource: 'api:one', cost: 3 },
      ],
    });
    expect(res.statusCode).toBe(200);
    const { results } = res.json();
    expect(results).toHaveLength(4);
    expect(results[0]).toMatchObject({ allowed: true });
    expect(results[1]).toEqual({
      error: { code: 'SLUICE_ERR_UNKNOWN_RESOURCE', message: expect.any(String), field: 'resource' },
    });
    expect(results[2].error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'cost' });
    expect(results[3].error).toMatchObject({ code: 'SLUICE_ERR_COST_EXCEEDS_LIMIT' });
  });

  it('takes, refuses and releases concurrency permits', async () => {
    const first = await post('/v1/acquire', { resource: 'db:pool', maxWaitMs: 0 });
    expect(first.json()).toMatchObject({ allowed: true, permitId: expect.any(String) });
    const second = await post('/v1/check', { resource: 'db:pool' });
    expect(second.json()).toMatchObject({ allowed: false, reason: 'concurrency_limited' });
    // A concurrency limit has no window: no `w`.
    expect(second.headers['ratelimit-policy']).toBe('"db:pool";q=1');
    expect(second.json()).not.toHaveProperty('permitId');
    expect(second.json()).not.toHaveProperty('leaseId');
    const released = await post('/v1/release', { resource: 'db:pool', permitId: first.json().permitId });
    expect(released.json()).toEqual({ released: true });
    expect((await post('/v1/release', { resource: 'db:pool', permitId: first.json().permitId })).json()).toEqual({
      released: false,
    });
    expect((await post('/v1/acquire', { resource: 'db:pool', maxWaitMs: 0 })).json()).toMatchObject({ allowed: true });
  });

  it('names a permit permitId only, and refuses leaseId as an unknown field', async () => {
    const taken = (await post('/v1/acquire', { resource: 'db:pool', key: 'alias', maxWaitMs: 0 })).json();
    expect(taken.permitId).toEqual(expect.any(String));
    expect(taken).not.toHaveProperty('leaseId');
    const old = await post('/v1/release', { resource: 'db:pool', key: 'alias', leaseId: taken.permitId });
    expect(old.statusCode).toBe(400);
    expect(old.json().error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST' });
    const none = await post('/v1/release', { resource: 'db:pool' });
    expect(none.statusCode).toBe(400);
    expect(none.json().error).toMatchObject({
      code: 'SLUICE_ERR_INVALID_REQUEST',
      field: 'permitId',
      message: 'permitId: is required',
    });
    expect((await post('/v1/renew', { resource: 'db:pool', key: 'alias', permitId: taken.permitId })).json()).toEqual({
      renewed: true,
    });
    expect((await post('/v1/release', { resource: 'db:pool', key: 'alias', permitId: taken.permitId })).json()).toEqual({
      released: true,
    });
    expect((await post('/v1/release', { resource: 'db:pool', key: 'alias', permitId: taken.permitId })).json()).toEqual({
      released: false,
    });
  });

  it('adjusts by the real cost', async () => {
    await post('/v1/check', { resource: 'api:llm', key: 't', cost: 10 });
    expect((await post('/v1/adjust', { resource: 'api:llm', key: 't', delta: 60 })).json()).toEqual({ adjusted: true });
    expect((await post('/v1/check', { resource: 'api:llm', key: 't', cost: 0 })).json().remaining).toBe(30);
  });

  it("refunds the tenant's quota when the adjustment names the tenant", async () => {
    const check = async (): Promise<unknown> => (await post('/v1/check', { resource: 'api:tenants', tenant: 'acme' })).json();
    expect(await check()).toMatchObject({ allowed: true });
    expect(await check()).toMatchObject({ allowed: false, limitId: 'tenant:0' });
    expect((await post('/v1/adjust', { resource: 'api:tenants', delta: -1, tenant: 'acme' })).json()).toEqual({ adjusted: true });
    expect(await check()).toMatchObject({ allowed: true });
    const bad = await post('/v1/adjust', { resource: 'api:tenants', delta: -1, tenant: 'a|b' });
    expect(bad.statusCode).toBe(400);
  });

  it('answers malformed requests with 4xx and a stable code', async () => {
    const cases: [InjectOptions, number, string][] = [
      [
        { method: 'POST', url: '/v1/check', headers: { 'content-type': 'application/json' }, payload: '{bad' },
        400,
        'SLUICE_ERR_MALFORMED_BODY',
      ],
      [
        { method: 'POST', url: '/v1/check', headers: { 'content-type': 'application/json' }, payload: '' },
        400,
        'SLUICE_ERR_MALFORMED_BODY',
      ],
      [
        { method: 'POST', url: '/v1/check', headers: { 'content-type': 'text/plain' }, payload: 'x' },
        415,
        'SLUICE_ERR_UNSUPPORTED_MEDIA_TYPE',
      ],
      [
        {
          method: 'POST',
          url: '/v1/check',
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify({ resource: 'x'.repeat(5000) }),
        },
        413,
        'SLUICE_ERR_BODY_TOO_LARGE',
      ],
      [
        {
          method: 'POST',
          url: '/v1/check?foo=1',
          headers: { 'content-type': 'application/json' },
          payload: '{"resource":"api:one"}',
        },
        400,
        'SLUICE_ERR_INVALID_REQUEST',
      ],
      [
        { method: 'POST', url: '/v1/check', headers: { 'content-type': 'application/json' }, payload: '[1,2]' },
        400,
        'SLUICE_ERR_INVALID_REQUEST',
      ],
      [
        {
          method: 'POST',
          url: '/v1/check',
          headers: { 'content-type': 'application/json' },
          payload: '{"__proto__":{"x":1},"resource":"api:one"}',
        },
        400,
        'SLUICE_ERR_INVALID_REQUEST',
      ],
      [
        {
          method: 'POST',
          url: '/v1/check',
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify({ items: Array(6).fill({ resource: 'a' }) }),
        },
        413,
        'SLUICE_ERR_BATCH_TOO_LARGE',
      ],
      [{ method: 'GET', url: '/v1/check' }, 404, 'SLUICE_ERR_NOT_FOUND'],
      [{ method: 'GET', url: '/nowhere/%zz' }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      [
        {
          method: 'POST',
          url: '/v1/check',
          headers: { 'content-type': 'application/json' },
          payload: '{"resource":"api:one","key":"' + 'k'.repeat(65) + '"}',
        },
        400,
        'SLUICE_ERR_INVALID_REQUEST',
      ],
      [
        {
          method: 'POST',
          url: '/v1/acquire',
          headers: { 'content-type': 'application/json' },
          payload: '{"resource":"api:one","maxWaitMs":5000}',
        },
        400,
        'SLUICE_ERR_INVALID_REQUEST',
      ],
      [
        { method: 'POST', url: '/v1/check', headers: { 'content-type': 'application/json' }, payload: '{"resource":"bad|name"}' },
        404,
        'SLUICE_ERR_UNKNOWN_RESOURCE',
      ],
    ];
    for (const [request, status, code] of cases) {
      const res = await app.inject(request);
      expect(res.statusCode, JSON.stringify(request)).toBe(status);
      expect(res.json().error.code, JSON.stringify(request)).toBe(code);
      expect(typeof res.json().error.message).toBe('string');
    }
  });

  it('refuses the admin API without the token, before reading the body', async () => {
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: `Basic ${'a'.repeat(16)}` }]) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/admin/rules',
        headers: { ...headers, 'content-type': 'application/json' },
        payload: '{bad',
      });
      expect(res.statusCode).toBe(401);
      expect(res.json().error.code).toBe('SLUICE_ERR_UNAUTHORIZED');
      expect(res.headers['www-authenticate']).toBe('Bearer');
    }
  });

  it('serves health, readiness, stats and metrics', async () => {
    expect((await app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' });
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const stats = (await app.inject({ method: 'GET', url: '/v1/stats' })).json<{
      version: number;
      resources: { resource: string }[];
    }>();
    expect(stats.version).toBe(4);
    expect(stats.resources.find((r) => r.resource === 'api:one')).toMatchObject({
      allowed: expect.any(Number),
      denied: expect.any(Number),
      limit: 2,
    });
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(text).toMatch(/^sluice_rules_version 4$/m);
    expect(text).toMatch(/^sluice_decisions_total\{resource="api:one",mode="try",outcome="denied",source="store"\} [1-9]/m);
    expect(text).toMatch(/^sluice_prefilter_rejections_total\{resource="api:one"\} [1-9]/m);
    expect(text).toMatch(/^sluice_http_requests_total\{route="\/v1\/check",method="POST",status="200"\} [1-9]/m);
    expect(text).toMatch(/^sluice_http_requests_total\{route="unmatched",method="GET",status="404"\} [1-9]/m);
  });
});
