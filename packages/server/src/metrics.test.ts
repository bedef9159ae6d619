import { createRequire } from 'node:module';
import type { Decision } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { OVERRIDES, RolloutMetrics, ServerMetrics } from './metrics.js';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

const allowed: Decision = {
  allowed: true,
  limit: 10,
  remaining: 9,
  retryAfterMs: 0,
  resetAfterMs: 100,
  reason: 'allowed',
  limitId: '0',
  statuses: [],
};

/** The value of one sample line of the exposition. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('server metrics', () => {
  it('time requests by route and method, and calls by method, in seconds', async () => {
    const metrics = new ServerMetrics();
    metrics.httpRequest('/v1/check', 'POST', 200, 0.0003);
    metrics.httpRequest('/v1/check', 'POST', 429, 0.002);
    metrics.httpRequest('unmatched', 'GET', 404, 0.00001);
    metrics.grpcRequest('ShouldRateLimit', 0, 0.004);
    const text = await metrics.registry.metrics();
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="/v1/check",method="POST"}')).toBe(2);
    expect(sample(text, 'sluice_http_request_duration_seconds_bucket{le="0.0005",route="/v1/check",method="POST"}')).toBe(1);
    expect(sample(text, 'sluice_http_request_duration_seconds_sum{route="/v1/check",method="POST"}')).toBeCloseTo(0.0023, 9);
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="unmatched",method="GET"}')).toBe(1);
    expect(sample(text, 'sluice_http_requests_total{route="/v1/check",method="POST",status="429"}')).toBe(1);
    expect(sample(text, 'sluice_grpc_request_duration_seconds_bucket{le="0.0025",method="ShouldRateLimit"}')).toBe(0);
    expect(sample(text, 'sluice_grpc_request_duration_seconds_bucket{le="0.005",method="ShouldRateLimit"}')).toBe(1);
  });

  it("time decisions under the resource label the counters use (every override as one), and the store's calls", async () => {
    const metrics = new ServerMetrics();
    metrics.observer.decided?.({ resource: 'api', mode: 'try', decision: allowed, durationMs: 2 });
    metrics.observer.decided?.({ resource: 'envoy:/override/a', mode: 'try', decision: allowed, durationMs: 1 });
    metrics.observer.decided?.({
      resource: 'envoy:/override/b',
      mode: 'try',
      decision: { ...allowed, source: 'prefilter' },
      durationMs: 0,
    });
    metrics.observer.storeCalled?.({ operation: 'consume', durationMs: 0.5 });
    metrics.observer.storeCalled?.({ operation: 'consume', durationMs: 50, error: new Error('timed out') });
    const text = await metrics.registry.metrics();
    expect(sample(text, 'sluice_decision_duration_seconds_count{resource="api",source="store"}')).toBe(1);
    expect(sample(text, `sluice_decision_duration_seconds_count{resource="${OVERRIDES}",source="store"}`)).toBe(1);
    expect(sample(text, `sluice_decision_duration_seconds_count{resource="${OVERRIDES}",source="prefilter"}`)).toBe(1);
    expect(text).not.toContain('override/a');
    expect(sample(text, 'sluice_store_call_duration_seconds_count{operation="consume"}')).toBe(2);
    expect(sample(text, 'sluice_store_call_errors_total{operation="consume"}')).toBe(1);
  });

  it("export the server's version once, and the rollout's share as a ratio", async () => {
    const metrics = new ServerMetrics();
    const rollout = new RolloutMetrics(metrics);
    let text = await metrics.registry.metrics();
    expect(text.match(/^sluice_build_info\{.*$/gm)).toEqual([
      `sluice_build_info{version="${version}",node_version="${process.version}"} 1`,
    ]);
    expect(sample(text, 'sluice_rollout_ratio')).toBe(0);
    rollout.cohorts(3, 4, 10);
    text = await metrics.registry.metrics();
    expect(sample(text, 'sluice_rollout_ratio')).toBe(0.1);
    expect(sample(text, 'sluice_rules_version{cohort="candidate"}')).toBe(4);
  });
});
