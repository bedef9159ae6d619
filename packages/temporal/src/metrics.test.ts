import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { createTemporalMetrics } from './metrics.js';

describe('createTemporalMetrics', () => {
  it('exports waits, denials, retries, held permits and faults per activity type and resource', async () => {
    const registry = new Registry();
    const m = createTemporalMetrics({ registry });
    const at = { activityType: 'charge', resource: 'api:payments' };
    m.waited!({ ...at, waitedMs: 1500, outcome: 'granted' });
    m.denied!({ ...at, reason: 'rate_limited' });
    m.retryScheduled!({ ...at, delayMs: 1200 });
    m.permitHeld!({ ...at, delta: 1 });
    m.permitHeld!({ ...at, delta: 1 });
    m.permitHeld!({ ...at, delta: -1 });
    m.fault!({ ...at, kind: 'fallback' });
    const text = await registry.metrics();
    const labels = 'activity_type="charge",resource="api:payments"';
    expect(text).toContain(`sluice_temporal_permit_wait_seconds_sum{${labels},outcome="granted"} 1.5`);
    expect(text).toContain(`sluice_temporal_denials_total{${labels},reason="rate_limited"} 1`);
    expect(text).toContain(`sluice_temporal_retries_scheduled_total{${labels}} 1`);
    expect(text).toContain(`sluice_temporal_permits_held{${labels}} 1`);
    expect(text).toContain(`sluice_temporal_limiter_faults_total{${labels},kind="fallback"} 1`);
    const { version } = createRequire(import.meta.url)('../package.json') as { version: string };
    expect(text).toContain(`sluice_build_info{version="${version}",node_version="${process.version}"} 1`);
  });

  it('takes a prefix so two integrations can share a registry', async () => {
    const registry = new Registry();
    createTemporalMetrics({ registry });
    createTemporalMetrics({ registry, prefix: 'other_' });
    expect((await registry.getMetricsAsJSON()).map((x) => x.name)).toContain('other_denials_total');
    // One build family for both (it is not prefixed).
    expect((await registry.metrics()).match(/^sluice_build_info\{/gm)).toHaveLength(1);
  });
});
