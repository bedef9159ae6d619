/**
 * Prometheus metrics for the Temporal integration, on a registry of the caller's choosing.
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { createTemporalMetrics } from '@sluice/temporal/metrics';
 * const registry = new Registry();
 * const interceptors = createSluiceInterceptors({ limiter, activities, observer: createTemporalMetrics({ registry }) });
 */
import { promMetrics, registerBuildInfo, type MetricsTarget } from '@sluice/core/metrics';
import type { SluiceTemporalObserver } from './observer.js';

/** Options of {@link createTemporalMetrics}. */
export interface TemporalMetricsOptions extends MetricsTarget {
  /** Metric name prefix. @default 'sluice_temporal_' */
  prefix?: string;
  /** Permit wait histogram buckets in seconds. @default 5 ms .. 5 min */
  waitBuckets?: number[];
}

/**
 * A {@link SluiceTemporalObserver} exporting, per activity type and resource: permit waits
 * (histogram), denials, retries scheduled, bookings, concurrency permits held (gauge) and limiter
 * faults; and `sluice_build_info` with this package's version.
 */
export function createTemporalMetrics(options: TemporalMetricsOptions): SluiceTemporalObserver {
  const m = promMetrics(options, 'sluice_temporal_');
  registerBuildInfo(options.registry, new URL('../package.json', import.meta.url));
  const labels = ['activity_type', 'resource'] as const;
  const waits = m.histogram({
    name: 'permit_wait_seconds',
    help: 'Time activities spent waiting for a permit in blocking mode',
    labelNames: [...labels, 'outcome'] as const,
    buckets: options.waitBuckets ?? [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  });
  const denials = m.counter({
    name: 'denials_total',
    help: 'Permits the limiter denied to activities, by reason',
    labelNames: [...labels, 'reason'] as const,
  });
  const retries = m.counter({
    name: 'retries_scheduled_total',
    help: 'Activity attempts failed with SluiceRateLimited, to be retried by Temporal after the retry-after',
    labelNames: labels,
  });
  const bookings = m.counter({
    name: 'bookings_total',
    help: 'Non-blocking attempts by what their booking came to (admitted, booked, claimed, denied, missing)',
    labelNames: [...labels, 'outcome'] as const,
  });
  const held = m.gauge({
    name: 'permits_held',
    help: 'Concurrency permits held by running activities in this process',
    labelNames: labels,
  });
  const faults = m.counter({
    name: 'limiter_faults_total',
    help: 'Limiter faults seen by activities (error: the limiter threw; fallback: the store-failure policy decided)',
    labelNames: [...labels, 'kind'] as const,
  });
  return {
    waited({ activityType, resource, waitedMs, outcome }) {
      waits.observe({ activity_type: activityType, resource, outcome }, waitedMs / 1000);
    },
    denied({ activityType, resource, reason }) {
      denials.inc({ activity_type: activityType, resource, reason });
    },
    retryScheduled({ activityType, resource }) {
      retries.inc({ activity_type: activityType, resource });
    },
    booked({ activityType, resource, outcome }) {
      bookings.inc({ activity_type: activityType, resource, outcome });
    },
    permitHeld({ activityType, resource, delta }) {
      held.inc({ activity_type: activityType, resource }, delta);
    },
    fault({ activityType, resource, kind }) {
      faults.inc({ activity_type: activityType, resource, kind });
    },
  };
}
