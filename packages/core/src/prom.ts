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
import { readFileSync } from 'node:fs';
import {
  Counter,
  Gauge,
  Histogram,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
  type Registry,
} from 'prom-client';
import { SeriesCounter } from './series-counter.js';
import { SeriesHistogram, type SeriesHistogramConfiguration } from './series-histogram.js';

export { SeriesCounter, type CounterSeries } from './series-counter.js';
export { SeriesHistogram, type HistogramSeries, type SeriesHistogramConfiguration } from './series-histogram.js';

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
  /** A counter for hot paths, counted through series its callers keep (see {@link SeriesCounter}). */
  seriesCounter<T extends string = string>(config: Omit<CounterConfiguration<T>, 'registers' | 'collect'>): SeriesCounter<T>;
  /** A histogram for hot paths, observed through series its callers keep (see {@link SeriesHistogram}). */
  seriesHistogram<T extends string = string>(config: Omit<SeriesHistogramConfiguration<T>, 'registers'>): SeriesHistogram<T>;
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
    seriesCounter: (config) => new SeriesCounter({ ...config, name: prefix + config.name, registers }),
    seriesHistogram: (config) => new SeriesHistogram({ ...config, name: prefix + config.name, registers }),
  };
}

/**
 * Buckets of Sluice's duration histograms, in seconds: from 50 µs (a decision answered in
 * process) to 2.5 s (a wait or a store call near its timeout).
 */
export const DURATION_BUCKETS: readonly number[] = Object.freeze([
  0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
]);

/** The name of the build-information gauge every Sluice package exports. */
export const BUILD_INFO = 'sluice_build_info';

/**
 * Sets `sluice_build_info{version, node_version}` to 1 on the registry: `version` is the
 * package's whose manifest (`package.json`) `manifest` points to, `unknown` when it cannot be
 * read (the package was bundled into another file, say): the metrics still work, and the series
 * says what is not known. One family for every Sluice package on a registry (not prefixed): a
 * package that finds it registered adds its series to it, so packages of one release share one
 * series.
 *
 * @example registerBuildInfo(registry, new URL('../package.json', import.meta.url));
 */
export function registerBuildInfo(registry: Registry, manifest: URL): void {
  const version = versionIn(manifest) ?? 'unknown';
  const found = registry.getSingleMetric(BUILD_INFO);
  if (found !== undefined && !(found instanceof Gauge)) throw new TypeError(`${BUILD_INFO} is registered, and is no gauge`);
  const gauge =
    found ??
    new Gauge({
      name: BUILD_INFO,
      help: 'The version of the Sluice package exporting these metrics, and of Node.js (always 1)',
      labelNames: ['version', 'node_version'] as const,
      registers: [registry],
    });
  gauge.set({ version, node_version: process.version }, 1);
}

/** The `version` of a `package.json`; undefined when it cannot be read or has none. */
function versionIn(manifest: URL): string | undefined {
  try {
    const { version } = JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown };
    return typeof version === 'string' && version !== '' ? version : undefined;
  } catch {
    return undefined;
  }
}
