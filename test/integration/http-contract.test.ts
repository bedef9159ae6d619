import { Limiter, ManualClock, type ResourceConfig } from '@sluice/core';
import { FakeService } from '@sluice/client/testing';
import type { RuleStore } from '@sluice/rules';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { buildHttpApp } from '../../packages/server/src/http/app.js';
import { LiveRules } from '../../packages/server/src/live-rules.js';
import { ServerMetrics } from '../../packages/server/src/metrics.js';
import { RateLimitService } from '../../packages/server/src/service/service.js';
import { ruleVersion } from '../../packages/server/test/rule-version.js';

// Three a second in bursts of three: a denial's retry is a third of a second, never a whole ms.
const RESOURCES: Record<string, ResourceConfig> = {
  api: { limits: { algorithm: 'token-bucket', limit: 3, burst: 3 } },
  pool: { limits: { algorithm: 'concurrency', limit: 1 } },
};
const RULES = `
resources:
  api: { limits: { algorithm: token-bucket, limit: 3, burst: 3 } }
  pool: { limits: { algorithm: concurrency, limit: 1 } }
`;

/**
 * `sluice serve`'s HTTP API (in process, on a manual clock) and the client's FakeService (on its
 * own manual clock at the same time), deciding the same resources: every answer must be the
 * same bytes, for the JSON contract has one encoder.
 */
function pair() {
  const serverClock = new ManualClock(1_000_000);
  const fakeClock = new ManualClock(1_000_000);
  const limiter = new Limiter({ resources: {}, clock: serverClock });
  const rules = new LiveRules({ limiter });
  rules.apply(ruleVersion(RULES, 1));
  const app: FastifyInstance = buildHttpApp({
    settings: { maxBodyBytes: 65_536, maxBatch: 10, maxKeyLength: 64, maxWaitMs: 1000, adminToken: undefined },
    service: new RateLimitService(limiter, rules),
    rules,
    ruleStore: {} as RuleStore,
    metrics: new ServerMetrics(),
    logger: pino({ level: 'silent' }),
    readiness: async () => ({ ready: true, checks: {} }),
  });
  const fake = new FakeService(RESOURCES, fakeClock);
  const both = async (path: string, body: object): Promise<[unknown, unknown]> => {
    const served = await app.inject({ method: 'POST', url: path, payload: body });
    const faked = await fake.call(path, { body, timeoutMs: 1000 });
    return [served.json(), JSON.parse(JSON.stringify(faked.body))];
  };
  const advance = (ms: number) => {
    serverClock.advance(ms);
    fakeClock.advance(ms);
  };
  return { app, limiter, fake, both, advance };
}

describe('the HTTP JSON contract', () => {
  const open: { close(): Promise<unknown> }[] = [];
  afterEach(async () => {
    for (const o of open.splice(0)) await o.close();
  });

  it('is answered alike by sluice serve and the FakeService, retryAfterMs rounded up on both', async () => {
    const { app, limiter, fake, both, advance } = pair();
    open.push(app, limiter, fake.limiter);
    const check = { items: [{ resource: 'api', key: 'k' }] };
    for (let i = 0; i < 3; i++) {
      const [served, faked] = await both('/v1/check?statuses=1', check);
      expect(faked).toEqual(served);
    }
    const [served, faked] = await both('/v1/check?statuses=1', check);
    expect(faked).toEqual(served);
    const denied = (served as { results: { allowed: boolean; retryAfterMs: number }[] }).results[0]!;
    expect(denied.allowed).toBe(false);
    // A token comes back every third of a second (333.33 ms): the retry is rounded up to a whole ms.
    expect(denied.retryAfterMs).toBe(Math.ceil(1000 / 3));
    advance(100);
    const [later, laterFaked] = await both('/v1/check?statuses=1', check);
    expect(laterFaked).toEqual(later);
    expect((later as { results: { retryAfterMs: number }[] }).results[0]!.retryAfterMs).toBe(Math.ceil(1000 / 3 - 100));
    // Without statuses asked for, neither answers them.
    const [plain, plainFaked] = await both('/v1/check', check);
    expect(plainFaked).toEqual(plain);
    expect((plain as { results: object[] }).results[0]).not.toHaveProperty('statuses');
  });

  it('names a permit permitId alike, and takes it back by that name only', async () => {
    const { app, limiter, fake, both } = pair();
    open.push(app, limiter, fake.limiter);
    const [served, faked] = await both('/v1/acquire?statuses=1', { resource: 'pool', key: 'p' });
    const permit = (served as { permitId?: string }).permitId;
    expect(typeof permit).toBe('string');
    expect(served).not.toHaveProperty('leaseId');
    // Permit ids are random: everything else is the same.
    expect({ ...(faked as object), permitId: permit }).toEqual(served);
    const fakePermit = (faked as { permitId: string }).permitId;
    const released = await app.inject({
      method: 'POST',
      url: '/v1/release',
      payload: { resource: 'pool', key: 'p', permitId: permit },
    });
    const fakeReleased = await fake.call('/v1/release', {
      body: { resource: 'pool', key: 'p', permitId: fakePermit },
      timeoutMs: 1000,
    });
    expect(fakeReleased.body).toEqual(released.json());
    expect(released.json()).toEqual({ released: true });
  });

  it('answers a reservation alike', async () => {
    const { app, limiter, fake, both } = pair();
    open.push(app, limiter, fake.limiter);
    const [served, faked] = await both('/v1/reserve', { resource: 'api', key: 'r', min: 1, max: 2 });
    expect(faked).toEqual(served);
    expect(served).toMatchObject({ granted: 2, allowed: true });
    expect(served).toHaveProperty('statuses');
  });
});
