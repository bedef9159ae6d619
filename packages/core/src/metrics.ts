/**
 * Prometheus metrics for a limiter, on a registry of the caller's choosing.
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { createPrometheusObserver } from '@sluice/core/metrics';
 * const registry = new Registry();
 * const limiter = new Limiter({ resources, observer: createPrometheusObserver({ registry }) });
 */
import type { ClockSkewObserver } from './shared/clock-skew.js';
import type { DecisionReason, DecisionSource } from './shared/decision.js';
import type { DecisionMode, LimiterObserver } from './shared/observer.js';
import type { StoreOperation } from './store/store.js';
import {
  DURATION_BUCKETS,
  promMetrics,
  registerBuildInfo,
  type CounterSeries,
  type HistogramSeries,
  type MetricsTarget,
} from './prom.js';

export {
  BUILD_INFO,
  DURATION_BUCKETS,
  promMetrics,
  registerBuildInfo,
  SeriesCounter,
  SeriesHistogram,
  type CounterSeries,
  type HistogramSeries,
  type MetricsTarget,
  type PromMetrics,
  type SeriesHistogramConfiguration,
} from './prom.js';

/** Options of {@link createPrometheusObserver}. */
export interface PrometheusObserverOptions extends MetricsTarget {
  /** Metric name prefix. @default 'sluice_' */
  prefix?: string;
  /** Wait histogram buckets in seconds. @default 1 ms .. 30 s */
  waitBuckets?: number[];
  /** Decision and store-call duration buckets in seconds. @default {@link DURATION_BUCKETS} (50 µs .. 2.5 s) */
  durationBuckets?: number[];
  /**
   * Export `sluice_build_info` with this package's version (`sluice serve` exports its own
   * instead). @default true
   */
  buildInfo?: boolean;
}

/** The series one resource's decisions are counted and timed in, made on first use. */
interface ResourceSeries {
  readonly decided: Partial<Record<DecisionMode, Partial<Record<string, Partial<Record<DecisionSource, CounterSeries>>>>>>;
  readonly rejected: Partial<Record<DecisionReason, CounterSeries>>;
  readonly durations: Partial<Record<DecisionSource, HistogramSeries>>;
}

/**
 * A {@link LimiterObserver} that counts decisions and rejections and records decision durations
 * and waits, labelled by resource, and times the store's calls by operation. Label values are
 * bounded by the configured resources, never by caller keys. What every decision touches is
 * counted in series found with a few lookups ({@link SeriesCounter}, {@link SeriesHistogram}),
 * not prom-client's label hashing.
 */
export function createPrometheusObserver(options: PrometheusObserverOptions): LimiterObserver {
  const m = promMetrics(options, 'sluice_');
  if (options.buildInfo !== false) registerBuildInfo(options.registry, new URL('../package.json', import.meta.url));
  const decisions = m.seriesCounter({
    name: 'decisions_total',
    help: 'Rate-limit decisions returned to callers',
    // source: store (global), prefilter (local tier), fallback (store away), breaker.
    labelNames: ['resource', 'mode', 'outcome', 'source'] as const,
  });
  const rejections = m.seriesCounter({
    name: 'rejections_total',
    help: 'Denied decisions by reason',
    labelNames: ['resource', 'reason'] as const,
  });
  const waits = m.histogram({
    name: 'wait_seconds',
    help: 'Time callers spent queued in acquire',
    labelNames: ['resource', 'outcome'] as const,
    buckets: options.waitBuckets ?? [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  });
  const durationBuckets = options.durationBuckets ?? DURATION_BUCKETS;
  const durations = m.seriesHistogram({
    name: 'decision_duration_seconds',
    help: 'Time from a call to its decision, by who decided (source: store, lease, prefilter, fallback, breaker); acquire calls that queued include their wait',
    labelNames: ['resource', 'source'] as const,
    buckets: durationBuckets,
  });
  const byResource = new Map<string, ResourceSeries>();
  const seriesOf = (resource: string): ResourceSeries => {
    let r = byResource.get(resource);
    if (r === undefined) {
      r = { decided: {}, rejected: {}, durations: {} };
      byResource.set(resource, r);
    }
    return r;
  };
  const storeCalls = m.seriesHistogram({
    name: 'store_call_duration_seconds',
    help: 'Calls to the store that left the process (round trips), by operation, from the call to its answer or failure',
    labelNames: ['operation'] as const,
    buckets: durationBuckets,
  });
  const storeCallOf = new Map<StoreOperation, HistogramSeries>();
  const storeErrors = m.counter({
    name: 'store_call_errors_total',
    help: 'Calls to the store that failed (timed out, unreachable, refused), by operation',
    labelNames: ['operation'] as const,
  });
  const switches = m.counter({
    name: 'store_switches_total',
    help: 'Switches between the store and the store-failure policy (to: fallback | store)',
    labelNames: ['to'] as const,
  });
  const healthy = m.gauge({
    name: 'store_healthy',
    help: '1 while the store answers, 0 while decisions follow the store-failure policy',
  });
  healthy.set(1);
  const refills = m.counter({
    name: 'lease_refills_total',
    help: 'Round trips that refilled a client-side lease',
    labelNames: ['resource'] as const,
  });
  const leased = m.counter({
    name: 'leased_permits_total',
    help: 'Permits taken into client-side leases',
    labelNames: ['resource'] as const,
  });
  const tableFull = m.counter({
    name: 'memory_store_full_total',
    help: 'New keys that met the in-memory store full: evicted (a key at rest made room), demoted (a larger resource gave a live key to its summary), summarized (decided on its resource summary) or refused (denied: it needed a slot of its own)',
    labelNames: ['outcome'] as const,
  });
  const breakerTransitions = m.counter({
    name: 'fleet_breaker_transitions_total',
    help: 'Fleet-wide circuit breaker state changes this process learned of, by the state entered',
    labelNames: ['resource', 'to'] as const,
  });
  const reportsFailed = m.counter({
    name: 'outcome_reports_failed_total',
    help: 'Reports of downstream outcomes the store did not take (their outcomes are dropped)',
    labelNames: ['resource'] as const,
  });
  return {
    fleetBreakerChanged({ resource, to }) {
      breakerTransitions.inc({ resource, to });
    },
    outcomesFailed({ resource }) {
      reportsFailed.inc({ resource });
    },
    decided({ resource, mode, decision, durationMs }) {
      // Shadow-mode admissions that would have been denied are told apart, not hidden.
      const outcome = decision.shadow ? 'shadow_denied' : decision.allowed ? 'allowed' : 'denied';
      const source = decision.source ?? 'store';
      const r = seriesOf(resource);
      const byOutcome = (r.decided[mode] ??= {});
      const bySource = (byOutcome[outcome] ??= {});
      (bySource[source] ??= decisions.series({ resource, mode, outcome, source })).inc();
      if (!decision.allowed) {
        const reason = decision.reason;
        (r.rejected[reason] ??= rejections.series({ resource, reason })).inc();
      }
      (r.durations[source] ??= durations.series({ resource, source })).observe(durationMs / 1000);
    },
    storeCalled({ operation, durationMs, error }) {
      let series = storeCallOf.get(operation);
      if (series === undefined) {
        series = storeCalls.series({ operation });
        storeCallOf.set(operation, series);
      }
      series.observe(durationMs / 1000);
      if (error !== undefined) storeErrors.inc({ operation });
    },
    leaseRefilled({ resource, granted }) {
      refills.inc({ resource });
      leased.inc({ resource }, granted);
    },
    storeSwitched({ healthy: isHealthy }) {
      switches.inc({ to: isHealthy ? 'store' : 'fallback' });
      healthy.set(isHealthy ? 1 : 0);
    },
    waited({ resource, waitedMs, outcome }) {
      waits.observe({ resource, outcome }, waitedMs / 1000);
    },
    keyTableFull({ outcome }) {
      tableFull.inc({ outcome });
    },
  };
}

/** Options of {@link createClockSkewObserver}. */
export interface ClockSkewMetricsOptions extends MetricsTarget {
  /** Metric name prefix. @default 'sluice_' */
  prefix?: string;
}

/**
 * A {@link ClockSkewObserver} exporting a `ClockSkewMonitor`'s estimate: `clock_skew_seconds`
 * (store clock minus this host's), `clock_skew_uncertainty_seconds`, `clock_skew_warnings_total`
 * (times the skew went over the threshold) and `clock_skew_probe_failures_total`.
 */
export function createClockSkewObserver(options: ClockSkewMetricsOptions): ClockSkewObserver {
  const m = promMetrics(options, 'sluice_');
  const skew = m.gauge({
    name: 'clock_skew_seconds',
    help: "The store's clock minus this host's wall clock, in seconds, as last measured (0 until measured)",
  });
  const uncertainty = m.gauge({
    name: 'clock_skew_uncertainty_seconds',
    help: 'How far the measured clock skew may be off, in seconds (half the round trip of the reading it comes from)',
  });
  const warnings = m.counter({
    name: 'clock_skew_warnings_total',
    help: "Times the skew between this host's clock and the store's went over the warning threshold",
  });
  const failures = m.counter({
    name: 'clock_skew_probe_failures_total',
    help: "Readings of the store's clock that failed",
  });
  return {
    sampled(estimate) {
      skew.set(estimate.offsetMs / 1000);
      uncertainty.set(estimate.uncertaintyMs / 1000);
    },
    thresholdCrossed({ over }) {
      if (over) warnings.inc();
    },
    failed() {
      failures.inc();
    },
  };
}
