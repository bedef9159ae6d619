/**
 * Prometheus metrics for a gateway, on a registry of the caller's choosing. prom-client is an
 * optional peer dependency: import this module only when you use it.
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { createGatewayMetrics } from '@sluice/gateway/metrics';
 * const registry = new Registry();
 * const gateway = new Gateway({ transport, observer: createGatewayMetrics({ registry }) });
 */
import { DURATION_BUCKETS, promMetrics, registerBuildInfo, type MetricsTarget } from '@sluice/core/metrics';
import { DROP_REASONS, type GatewayObserver } from './observer.js';

/** Options of {@link createGatewayMetrics}. */
export interface GatewayMetricsOptions extends MetricsTarget {
  /** Metric name prefix. @default 'sluice_gateway_' */
  prefix?: string;
}

/**
 * A {@link GatewayObserver} that counts events sent and dropped (by reason), batches, publish
 * errors, 429s (by dimension or limiter), rejections counted in tallies and not counted, decisions applied and malformed decision messages,
 * aggregators that split the stream otherwise,
 * times each publish, and tracks the number of active blocks; and exports `sluice_build_info`
 * with this package's version. Label values come from fixed sets, never from requests.
 */
export function createGatewayMetrics(options: GatewayMetricsOptions): GatewayObserver {
  const m = promMetrics(options, 'sluice_gateway_');
  registerBuildInfo(options.registry, new URL('../package.json', import.meta.url));
  const sent = m.counter({ name: 'events_sent_total', help: 'Events accepted by the event stream' });
  const dropped = m.counter({
    name: 'events_dropped_total',
    help: 'Events dropped instead of sent (buffer_full, publish_error, closed, invalid)',
    labelNames: ['reason'] as const,
  });
  for (const reason of DROP_REASONS) dropped.inc({ reason }, 0);
  const batches = m.counter({ name: 'batches_total', help: 'Event batches accepted by the event stream' });
  const publishErrors = m.counter({
    name: 'publish_errors_total',
    help: 'Event batches the event stream rejected',
  });
  const publishes = m.histogram({
    name: 'publish_duration_seconds',
    help: 'Time to publish a batch (of events or rejection tallies) to the event stream, from the call to its answer or failure',
    buckets: [...DURATION_BUCKETS],
  });
  const blocked = m.counter({
    name: 'blocked_requests_total',
    help: 'Requests answered 429 by the gateway, by the dimension that was blocked (or limiter)',
    labelNames: ['source'] as const,
  });
  const decisions = m.counter({
    name: 'decisions_total',
    help: 'Governance decisions applied to the local cache',
    labelNames: ['action'] as const,
  });
  const malformed = m.counter({
    name: 'decisions_malformed_total',
    help: 'Decision messages that could not be decoded and were skipped',
  });
  const limiterErrors = m.counter({
    name: 'limiter_errors_total',
    help: 'Exact limiter calls that failed (the request was let through)',
  });
  const tallied = m.counter({
    name: 'rejections_tallied_total',
    help: 'Rejected requests counted in rejection tallies the event stream accepted',
  });
  const uncounted = m.counter({
    name: 'rejections_uncounted_total',
    help: 'Rejected requests that could not be counted (tally table full, publish failed, probe closed)',
  });
  const mismatches = m.counter({
    name: 'layout_mismatches_total',
    help: "Aggregator announcements whose partition count or layout version differ from this gateway's probe",
  });
  const active = m.gauge({ name: 'active_blocks', help: 'Blocks held in the local decision cache' });
  return {
    batchSent(events) {
      sent.inc(events);
      batches.inc();
    },
    eventsDropped(reason, count) {
      dropped.inc({ reason }, count);
    },
    publishFailed() {
      publishErrors.inc();
    },
    published(durationMs) {
      publishes.observe(durationMs / 1000);
    },
    rejectionsTallied(rejected) {
      tallied.inc(rejected);
    },
    rejectionsUncounted(count) {
      uncounted.inc(count);
    },
    requestBlocked(source) {
      blocked.inc({ source });
    },
    decisionApplied(action) {
      decisions.inc({ action });
    },
    decisionMalformed() {
      malformed.inc();
    },
    layoutMismatch() {
      mismatches.inc();
    },
    blocksChanged(size) {
      active.set(size);
    },
    limiterFailed() {
      limiterErrors.inc();
    },
  };
}
