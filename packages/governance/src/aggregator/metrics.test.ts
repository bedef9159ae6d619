import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventOutcome, MemoryTransport, encodeEvents, hashValue } from '@sluice/stream';
import { Aggregator } from './aggregator.js';
import { registerAggregatorMetrics } from './metrics.js';

const T0 = 1_700_000_000_000;
let close: () => Promise<void> = () => Promise.resolve();
afterEach(() => close());

describe('registerAggregatorMetrics', () => {
  it('exposes counters, decisions and the lag of each owned partition', async () => {
    const transport = new MemoryTransport({ partitions: 2 });
    const aggregator = new Aggregator({
      transport,
      rules: {
        burst: {
          id: 'burst',
          type: 'threshold',
          dimension: 'path',
          match: {},
          limit: 2,
          windowMs: 1000,
          slices: 10,
          blockMs: 1000,
        },
      },
      tickMs: 60_000,
      snapshotMs: 0,
      now: () => T0,
    });
    close = async () => {
      await aggregator.close();
      await transport.close();
    };
    const registry = new Registry();
    registerAggregatorMetrics(aggregator, { registry });
    await aggregator.start();
    const e = { resource: 1, path: hashValue('/a'), user: 0, ip: 0, tenant: 0, status: 200, outcome: EventOutcome.PASSED };
    await transport.publish(0, encodeEvents([0, 1, 2].map(() => ({ ...e, timestampMs: T0 - 1500 }))));
    // Written by a gateway that splits the stream into 8 partitions: counted, and reported.
    await transport.publish(
      0,
      encodeEvents(
        [0, 1, 2].map(() => ({ ...e, timestampMs: T0 - 200 })),
        { partitions: 8, version: 1 },
      ),
    );
    await transport.publish(1, new Uint8Array([7]));
    await vi.waitFor(() => expect(aggregator.stats().batches + aggregator.stats().malformedBatches).toBe(3));
    await aggregator.tick();
    const text = await registry.metrics();
    expect(text).toContain('sluice_aggregator_events_total 3');
    expect(text).toContain('sluice_aggregator_late_events_total 3');
    expect(text).toContain('sluice_aggregator_malformed_batches_total 1');
    expect(text).toContain('sluice_aggregator_decisions_total{action="block"} 1');
    expect(text).toContain('sluice_aggregator_active_blocks 1');
    expect(text).toContain('sluice_aggregator_partitions_owned 2');
    expect(text).toContain('sluice_aggregator_partitions 2');
    expect(text).toContain('sluice_aggregator_layout_mismatches_total{source="batch"} 1');
    expect(text).toContain('sluice_aggregator_layout_mismatches_total{source="announcement"} 0');
    expect(text).toContain('sluice_aggregator_yielded 0');
    expect(text).toContain('sluice_aggregator_ownership_conflicts_total 0');
    expect(text).toContain('sluice_stream_lag_seconds{partition="0"} 0.2');
    expect(text).toMatch(/sluice_stream_lag_batches\{partition="1"\} \d+/);
    // Every event aggregated, late ones too: three 1.5 s old, three 0.2 s.
    expect(text).toContain('sluice_aggregator_event_delay_seconds_bucket{le="0.1"} 0');
    expect(text).toContain('sluice_aggregator_event_delay_seconds_bucket{le="0.25"} 3');
    expect(text).toContain('sluice_aggregator_event_delay_seconds_bucket{le="1"} 3');
    expect(text).toContain('sluice_aggregator_event_delay_seconds_bucket{le="2.5"} 6');
    expect(text).toMatch(/^sluice_aggregator_event_delay_seconds_sum 5\.1\d*$/m);
    expect(text).toMatch(/^sluice_build_info\{version="\d+\.\d+\.\d+[^"]*",node_version="v\d+/m);
    // Counters only grow between scrapes.
    expect(await registry.metrics()).toContain('sluice_aggregator_events_total 3');
  });
});
