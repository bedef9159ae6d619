/**
 * The one way Sluice packages make their Prometheus metrics: on the registry the caller gives,
 * each name after the caller's prefix (or the package's default). Reached through
 * `@sluice/core/metrics`, never through the main entry, so prom-client stays an optional peer.
 *
 * @example
 * import { promMetrics, type MetricsTarget } from '@sluice/core/metrics';
 * export function createQueueMetrics(options: MetricsTarget) {
 *   const m = promMetrics(options, 'sluice_queue_');
 *   const waits = m.counter({ name: 'waits_total', help: 'Waits', labelNames: ['resource'] as const });
 *   return { waited: (resource: string) => waits.inc({ resource }) };
 * }
 */
import {
  Counter,
  Gauge,
  Histogram,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
  type Registry,
} from 'prom-client';

/** Where a package's metrics go: what every `create...Metrics(options)` of Sluice takes. */
export interface MetricsTarget {
  /** Where the metrics are registered. */
  registry: Registry;
  /** Metric name prefix. @default the package's own (e.g. `sluice_`, `sluice_gateway_`) */
  prefix?: string;
}

/**
 * Makes metrics on one registry; `name` is given without the prefix. Everything else is
 * prom-client's own configuration (labels, buckets, `collect`). A name registered twice on one
 * registry throws, as prom-client does.
 */
export interface PromMetrics {
  counter<T extends string = string>(config: Omit<CounterConfiguration<T>, 'registers'>): Counter<T>;
  gauge<T extends string = string>(config: Omit<GaugeConfiguration<T>, 'registers'>): Gauge<T>;
  histogram<T extends string = string>(config: Omit<HistogramConfiguration<T>, 'registers'>): Histogram<T>;
}

/**
 * Metrics on `target.registry`, named `target.prefix` (else `defaultPrefix`) + name.
 *
 * @param defaultPrefix the package's prefix when the caller gives none @default ''
 */
export function promMetrics(target: MetricsTarget, defaultPrefix = ''): PromMetrics {
  const prefix = target.prefix ?? defaultPrefix;
  const registers = [target.registry];
  return {
    counter: (config) => new Counter({ ...config, name: prefix + config.name, registers }),
    gauge: (config) => new Gauge({ ...config, name: prefix + config.name, registers }),
    histogram: (config) => new Histogram({ ...config, name: prefix + config.name, registers }),
  };
}
