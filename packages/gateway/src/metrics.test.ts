import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createGatewayMetrics } from './metrics.js';

describe('createGatewayMetrics', () => {
  it('counts on the given registry', async () => {
    const registry = new Registry();
    const o = createGatewayMetrics({ registry });
    o.batchSent!(100);
    o.batchSent!(20);
    o.eventsDropped!('buffer_full', 7);
    o.publishFailed!(new Error('x'));
    o.requestBlocked!('user');
    o.decisionApplied!('block');
    o.decisionMalformed!(new Error('x'));
    o.blocksChanged!(3);
    o.limiterFailed!(new Error('x'));
    o.rejectionsTallied!(500);
    o.rejectionsTallied!(12);
    o.rejectionsUncounted!(4);
    const text = await registry.metrics();
    expect(text).toContain('sluice_gateway_events_sent_total 120');
    expect(text).toContain('sluice_gateway_batches_total 2');
    expect(text).toContain('sluice_gateway_events_dropped_total{reason="buffer_full"} 7');
    expect(text).toContain('sluice_gateway_events_dropped_total{reason="publish_error"} 0');
    expect(text).toContain('sluice_gateway_publish_errors_total 1');
    expect(text).toContain('sluice_gateway_blocked_requests_total{source="user"} 1');
    expect(text).toContain('sluice_gateway_decisions_total{action="block"} 1');
    expect(text).toContain('sluice_gateway_decisions_malformed_total 1');
    expect(text).toContain('sluice_gateway_active_blocks 3');
    expect(text).toContain('sluice_gateway_limiter_errors_total 1');
    expect(text).toContain('sluice_gateway_rejections_tallied_total 512');
    expect(text).toContain('sluice_gateway_rejections_uncounted_total 4');
  });
});
