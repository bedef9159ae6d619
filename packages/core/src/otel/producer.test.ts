import { DataPointType, AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { Counter, Gauge, Histogram, Registry, Summary } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { prometheusProducer } from './producer.js';

/** A reader the test collects from itself (the SDK's periodic one collects the same way). */
class TestReader extends MetricReader {
  protected onShutdown = () => Promise.resolve();
  protected onForceFlush = () => Promise.resolve();
}

function registryWithOneOfEach(): Registry {
  const registry = new Registry();
  const decisions = new Counter({
    name: 'sluice_decisions_total',
    help: 'Decisions',
    labelNames: ['resource', 'outcome'],
    registers: [registry],
  });
  decisions.inc({ resource: 'api', outcome: 'allowed' }, 3);
  decisions.inc({ resource: 'api', outcome: 'denied' });
  new Gauge({ name: 'sluice_store_healthy', help: 'Healthy', registers: [registry] }).set(1);
  const durations = new Histogram({
    name: 'sluice_decision_duration_seconds',
    help: 'Durations',
    labelNames: ['resource'],
    buckets: [0.001, 0.01, 0.1],
    registers: [registry],
  });
  for (const v of [0.0005, 0.005, 0.005, 0.05, 1]) durations.observe({ resource: 'api' }, v);
  durations.observe({ resource: 'web' }, 0.002);
  new Summary({ name: 'some_summary', help: 'A summary', registers: [registry] }).observe(1);
  return registry;
}

describe('prometheusProducer', () => {
  it('hands the SDK the registry’s families under their names: sums, gauges, histograms with the same bounds', async () => {
    const reader = new TestReader({
      metricProducers: [prometheusProducer(registryWithOneOfEach(), { startTimeMs: 1_000, now: () => 5_500 })],
    });
    const provider = new MeterProvider({ resource: resourceFromAttributes({ 'service.name': 'test' }), readers: [reader] });
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    expect(resourceMetrics.resource.attributes['service.name']).toBe('test');
    const metrics = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics);
    // The summary has no OTLP twin.
    expect(metrics.map((m) => m.descriptor.name)).toEqual([
      'sluice_decisions_total',
      'sluice_store_healthy',
      'sluice_decision_duration_seconds',
    ]);

    const [sum, gauge, histogram] = metrics;
    expect(sum).toMatchObject({
      dataPointType: DataPointType.SUM,
      isMonotonic: true,
      aggregationTemporality: AggregationTemporality.CUMULATIVE,
    });
    expect(sum!.dataPoints.map((p) => [p.attributes, p.value, p.startTime, p.endTime])).toEqual([
      [{ resource: 'api', outcome: 'allowed' }, 3, [1, 0], [5, 500_000_000]],
      [{ resource: 'api', outcome: 'denied' }, 1, [1, 0], [5, 500_000_000]],
    ]);
    expect(gauge).toMatchObject({ dataPointType: DataPointType.GAUGE, dataPoints: [{ attributes: {}, value: 1 }] });
    expect(histogram!.descriptor.unit).toBe('s');
    expect(histogram!.dataPointType).toBe(DataPointType.HISTOGRAM);
    expect(histogram!.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{ resource: 'api' }, { buckets: { boundaries: [0.001, 0.01, 0.1], counts: [1, 2, 1, 1] }, sum: 1.0605, count: 5 }],
      [{ resource: 'web' }, { buckets: { boundaries: [0.001, 0.01, 0.1], counts: [0, 1, 0, 0] }, sum: 0.002, count: 1 }],
    ]);
    await provider.shutdown();
  });

  it('reads the registry at each collection: the next export carries what was counted since', async () => {
    const registry = new Registry();
    const c = new Counter({ name: 'n_total', help: 'n', registers: [registry] });
    const reader = new TestReader({ metricProducers: [prometheusProducer(registry)] });
    const provider = new MeterProvider({ readers: [reader] });
    const value = async () => {
      const { resourceMetrics } = await reader.collect();
      const metric = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === 'n_total');
      return metric?.dataPoints[0]?.value;
    };
    expect(await value()).toBe(0);
    c.inc(7);
    expect(await value()).toBe(7);
    await provider.shutdown();
  });
});
