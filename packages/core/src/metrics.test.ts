import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ManualClock } from './shared/clock.js';
import { Limiter } from './admission/limiter.js';
import { createPrometheusObserver } from './metrics.js';

describe('Prometheus observer', () => {
  it('counts decisions and rejections and records waits per resource', async () => {
    const registry = new Registry();
    const clock = new ManualClock();
    const limiter = new Limiter({
      resources: { 'api:pay': { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 1 } },
      clock,
      random: () => 0,
      observer: createPrometheusObserver({ registry }),
    });
    await limiter.try('api:pay');
    await limiter.try('api:pay');
    const waited = limiter.acquire('api:pay', { maxWaitMs: 1000 });
    await clock.advanceAsync(200);
    await waited;
    const text = await registry.metrics();
    expect(text).toContain('sluice_decisions_total{resource="api:pay",mode="try",outcome="allowed",source="store"} 1');
    expect(text).toContain('sluice_decisions_total{resource="api:pay",mode="try",outcome="denied",source="store"} 1');
    expect(text).toContain('sluice_decisions_total{resource="api:pay",mode="acquire",outcome="allowed",source="store"} 1');
    expect(text).toContain('sluice_store_healthy 1');
    expect(text).toContain('sluice_rejections_total{resource="api:pay",reason="rate_limited"} 1');
    expect(text).toContain('sluice_wait_seconds_count{resource="api:pay",outcome="granted"} 1');
    expect(text).toContain('sluice_wait_seconds_bucket{le="0.1",resource="api:pay",outcome="granted"} 1');
    expect(text).toContain('sluice_wait_seconds_bucket{le="0.05",resource="api:pay",outcome="granted"} 0');
    await limiter.close();
  });
});

describe('lease metrics', () => {
  it('counts refills and leased permits per resource', async () => {
    const registry = new Registry();
    const limiter = new Limiter({
      resources: { 'api:hot': { limits: { algorithm: 'token-bucket', limit: 1000 }, lease: true } },
      clock: new ManualClock(),
      observer: createPrometheusObserver({ registry }),
    });
    for (let i = 0; i < 10; i++) await limiter.try('api:hot');
    const text = await registry.metrics();
    expect(text).toMatch(/sluice_lease_refills_total\{resource="api:hot"\} [1-9]/);
    expect(text).toMatch(/sluice_leased_permits_total\{resource="api:hot"\} (1\d|[1-9]\d+)/);
    await limiter.close();
  });
});
