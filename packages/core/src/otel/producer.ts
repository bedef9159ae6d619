/**
 * The Prometheus registry as an OpenTelemetry {@link MetricProducer}: the registry stays the one
 * definition of Sluice's metrics, and what OTLP exports is read from it at each collection, so
 * both carry the same families under the same names.
 */
import { ValueType, type Attributes, type HrTime } from '@opentelemetry/api';
import { emptyResource } from '@opentelemetry/resources';
import {
  AggregationTemporality,
  DataPointType,
  type CollectionResult,
  type DataPoint,
  type Histogram,
  type MetricData,
  type MetricProducer,
} from '@opentelemetry/sdk-metrics';
import type { Registry } from 'prom-client';

/** The instrumentation scope of the metrics read from a registry. */
export const PROMETHEUS_SCOPE = { name: '@sluice/core/otel' } as const;

/** What `registry.getMetricsAsJSON()` gives for one family (prom-client's shape). */
interface PromFamily {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly values: readonly { value: number; labels: Record<string, string | number | undefined>; metricName?: string }[];
}

/** Options of {@link prometheusProducer}. */
export interface PrometheusProducerOptions {
  /**
   * When the cumulative series began (ms since the epoch): the start time of every sum and
   * histogram point. @default when the producer is made
   */
  readonly startTimeMs?: number;
  /** The clock of each collection's end time (ms since the epoch). @default Date.now */
  readonly now?: () => number;
}

const hrTime = (ms: number): HrTime => {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)];
};

/**
 * A producer for `PeriodicExportingMetricReader`'s `metricProducers`: each collection reads the
 * registry and hands the SDK counters as cumulative monotonic sums, gauges as gauges and
 * histograms as explicit-bucket histograms with the registry's own bounds, named as on
 * `/metrics`. Summaries (Sluice makes none) have no OTLP twin and are left out.
 */
export function prometheusProducer(registry: Registry, options: PrometheusProducerOptions = {}): MetricProducer {
  const now = options.now ?? Date.now;
  const start = hrTime(options.startTimeMs ?? now());
  return {
    async collect(): Promise<CollectionResult> {
      const families = (await registry.getMetricsAsJSON()) as unknown as PromFamily[];
      const end = hrTime(now());
      const metrics: MetricData[] = [];
      for (const family of families) {
        const metric = toMetric(family, start, end);
        if (metric !== undefined) metrics.push(metric);
      }
      return { resourceMetrics: { resource: emptyResource(), scopeMetrics: [{ scope: PROMETHEUS_SCOPE, metrics }] }, errors: [] };
    },
  };
}

/** The unit UCUM names for a family's base-unit suffix (Prometheus names carry their unit). */
function unitOf(name: string): string {
  const base = name.replace(/_total$/, '');
  if (base.endsWith('_seconds')) return 's';
  if (base.endsWith('_bytes')) return 'By';
  return '';
}

function attributesOf(labels: Record<string, string | number | undefined>): Attributes {
  const attributes: Attributes = {};
  for (const [k, v] of Object.entries(labels)) if (v !== undefined) attributes[k] = String(v);
  return attributes;
}

function toMetric(family: PromFamily, start: HrTime, end: HrTime): MetricData | undefined {
  const descriptor = { name: family.name, description: family.help, unit: unitOf(family.name), valueType: ValueType.DOUBLE };
  const aggregationTemporality = AggregationTemporality.CUMULATIVE;
  switch (family.type) {
    case 'counter':
      return {
        descriptor,
        aggregationTemporality,
        dataPointType: DataPointType.SUM,
        isMonotonic: true,
        dataPoints: family.values.map((v) => ({
          startTime: start,
          endTime: end,
          attributes: attributesOf(v.labels),
          value: v.value,
        })),
      };
    case 'gauge':
      return {
        descriptor,
        aggregationTemporality,
        dataPointType: DataPointType.GAUGE,
        dataPoints: family.values.map((v) => ({
          startTime: end,
          endTime: end,
          attributes: attributesOf(v.labels),
          value: v.value,
        })),
      };
    case 'histogram':
      return {
        descriptor,
        aggregationTemporality,
        dataPointType: DataPointType.HISTOGRAM,
        dataPoints: histogramPoints(family, start, end),
      };
    default:
      return undefined;
  }
}

/**
 * prom-client gives a histogram as `_bucket` values (cumulative, one per `le`), `_sum` and
 * `_count`, each with the series' labels; OTLP wants one point per series with the finite bounds
 * and the count in each bucket (not cumulative), the last bucket above every bound.
 */
function histogramPoints(family: PromFamily, start: HrTime, end: HrTime): DataPoint<Histogram>[] {
  interface Series {
    attributes: Attributes;
    buckets: { le: number; cumulative: number }[];
    sum: number;
    count: number;
  }
  const bySeries = new Map<string, Series>();
  for (const v of family.values) {
    const { le, ...labels } = v.labels;
    const attributes = attributesOf(labels);
    const id = JSON.stringify(Object.entries(attributes).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    let series = bySeries.get(id);
    if (series === undefined) {
      series = { attributes, buckets: [], sum: 0, count: 0 };
      bySeries.set(id, series);
    }
    const suffix = v.metricName?.slice(family.name.length);
    if (suffix === '_bucket') series.buckets.push({ le: le === '+Inf' ? Infinity : Number(le), cumulative: v.value });
    else if (suffix === '_sum') series.sum = v.value;
    else if (suffix === '_count') series.count = v.value;
  }
  return [...bySeries.values()].map((s) => {
    s.buckets.sort((a, b) => a.le - b.le);
    const boundaries = s.buckets.filter((b) => Number.isFinite(b.le)).map((b) => b.le);
    const counts: number[] = [];
    let below = 0;
    for (const b of s.buckets) {
      counts.push(b.cumulative - below);
      below = b.cumulative;
    }
    // No +Inf bucket among the values (prom-client always writes one): the rest is above every bound.
    if (counts.length === boundaries.length) counts.push(s.count - below);
    return {
      startTime: start,
      endTime: end,
      attributes: s.attributes,
      value: { buckets: { boundaries, counts }, sum: s.sum, count: s.count },
    };
  });
}
