import { ClockSkewMonitor, Limiter, ManualClock } from '@sluice/core';
import type { RuleStore } from '@sluice/rules';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { ruleVersion } from '../test/rule-version.js';
import type { ServerClock } from './clock-skew.js';
import { buildHttpApp } from './http/app.js';
import { LiveRules } from './live-rules.js';
import { ServerMetrics } from './metrics.js';
import { RateLimitService } from './service/service.js';

const EPOCH = 1_800_000_000_000;

/** An app whose store clock runs `storeAheadMs` ahead of this host's, read through a fake source. */
function setup(clock?: (metrics: ServerMetrics) => ServerClock) {
  const metrics = new ServerMetrics();
  const limiter = new Limiter({ resources: {}, clock: new ManualClock(EPOCH) });
  const rules = new LiveRules({ limiter });
  rules.apply(ruleVersion('resources:\n  api: { limits: { algorithm: fixed-window, limit: 1, windowMs: 1000 } }\n', 1));
  const serverClock = clock?.(metrics);
  const app = buildHttpApp({
    settings: { maxBodyBytes: 4096, maxBatch: 5, maxKeyLength: 64, maxWaitMs: 1000, adminToken: undefined },
    service: new RateLimitService(limiter, rules, undefined, serverClock === undefined ? {} : { clock: serverClock }),
    rules,
    ruleStore: {} as RuleStore,
    metrics,
    logger: pino({ level: 'silent' }),
    readiness: async () => ({ ready: true, checks: {} }),
  });
  return { app, limiter, metrics, serverClock };
}

describe('the server clock check', () => {
  const open: { close(): Promise<unknown> }[] = [];
  afterEach(async () => {
    for (const o of open.splice(0)) await o.close();
  });

  it('reports the measured skew in /v1/stats, /v1/time and /metrics', async () => {
    const manual = new ManualClock(0);
    const wall = () => EPOCH + manual.now();
    let monitor: ClockSkewMonitor | undefined;
    const { app, limiter } = setup((metrics) => {
      monitor = new ClockSkewMonitor({
        // Redis 2500 ms ahead, 4 ms round trip.
        source: () => {
          manual.advance(2);
          const timeMs = wall() + 2500;
          manual.advance(2);
          return Promise.resolve({ timeMs });
        },
        wallClock: wall,
        clock: manual,
        logger: false,
        observer: metrics.clockSkew,
      });
      return { monitor, thresholdMs: 1000 };
    });
    open.push(app, limiter, monitor!);
    // Not read yet: no time to offer clients.
    const early = await app.inject({ method: 'GET', url: '/v1/time' });
    expect(early.statusCode).toBe(503);
    expect(early.json().error.code).toBe('SLUICE_ERR_NOT_READY');
    await monitor!.sample();
    const stats = (await app.inject({ method: 'GET', url: '/v1/stats' })).json();
    expect(stats.clockSkew).toMatchObject({
      store: 'redis',
      measured: true,
      offsetMs: 2500,
      uncertaintyMs: 2,
      skewed: true,
      thresholdMs: 1000,
      warnings: 1,
    });
    expect((await app.inject({ method: 'GET', url: '/v1/time' })).json()).toEqual({
      timeMs: wall() + 2500,
      uncertaintyMs: 2,
      store: 'redis',
    });
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(text).toMatch(/^sluice_clock_skew_seconds 2.5$/m);
    expect(text).toMatch(/^sluice_clock_skew_uncertainty_seconds 0.002$/m);
    expect(text).toMatch(/^sluice_clock_skew_warnings_total 1$/m);
  });

  it("answers the server's own clock on the embedded store", async () => {
    const { app, limiter } = setup();
    open.push(app, limiter);
    const stats = (await app.inject({ method: 'GET', url: '/v1/stats' })).json();
    expect(stats.clockSkew).toEqual({ store: 'embedded', thresholdMs: 1000 });
    const before = Date.now();
    const time = (await app.inject({ method: 'GET', url: '/v1/time' })).json();
    expect(time).toMatchObject({ uncertaintyMs: 0, store: 'embedded' });
    expect(time.timeMs).toBeGreaterThanOrEqual(before);
    expect(time.timeMs).toBeLessThanOrEqual(Date.now());
  });
});
