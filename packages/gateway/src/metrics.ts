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
import { Counter, Gauge, type Registry } from 'prom-client';
import { DROP_REASONS, type GatewayObserver } from './observer.js';

/** Options of {@link createGatewayMetrics}. */
export interface GatewayMetricsOptions {
  /** Where the metrics are registered. */
  registry: Registry;
  /** Metric name prefix. @default 'sluice_gateway_' */
  prefix?: string;
}

/**
 * A {@link GatewayObserver} that counts events sent and dropped (by reason), batches, publish
 * errors, 429s (by dimension or limiter), rejections counted in tallies and not counted, decisions applied and malformed decision messages,
 * and tracks the number of active blocks. Label values come from fixed sets, never from requests.
 */
export function createGatewayMetrics(options: GatewayMetricsOptions): GatewayObserver {
  const prefix = options.prefix ?? 'sluice_gateway_';
  const registers = [options.registry];
  const sent = new Counter({ name: `${prefix}events_sent_total`, help: 'Events accepted by the event stream', registers });
  const dropped = new Counter({
    name: `${prefix}events_dropped_total`,
    help: 'Events dropped instead of sent (buffer_full, publish_error, closed, invalid)',
    labelNames: ['reason'] as const,
    registers,
  });
  for (const reason of DROP_REASONS) dropped.inc({ reason }, 0);
  const batches = new Counter({ name: `${prefix}batches_total`, help: 'Event batches accepted by the event stream', registers });
  const publishErrors = new Counter({
    name: `${prefix}publish_errors_total`,
    help: 'Event batches the event stream rejected',
    registers,
  });
  const blocked = new Counter({
    name: `${prefix}blocked_requests_total`,
    help: 'Requests answered 429 by the gateway, by the dimension that was blocked (or limiter)',
    labelNames: ['source'] as const,
    registers,
  });
  const decisions = new Counter({
    name: `${prefix}decisions_total`,
    help: 'Governance decisions applied to the local cache',
    labelNames: ['action'] as const,
    registers,
  });
  const malformed = new Counter({
    name: `${prefix}decisions_malformed_total`,
    help: 'Decision messages that could not be decoded and were skipped',
    registers,
  });
  const limiterErrors = new Counter({
    name: `${prefix}limiter_errors_total`,
    help: 'Exact limiter calls that failed (the request was let through)',
    registers,
  });
  const tallied = new Counter({
    name: `${prefix}rejections_tallied_total`,
    help: 'Rejected requests counted in rejection tallies the event stream accepted',
    registers,
  });
  const uncounted = new Counter({
    name: `${prefix}rejections_uncounted_total`,
    help: 'Rejected requests that could not be counted (tally table full, publish failed, probe closed)',
    registers,
  });
  const active = new Gauge({ name: `${prefix}active_blocks`, help: 'Blocks held in the local decision cache', registers });
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
    blocksChanged(size) {
      active.set(size);
    },
    limiterFailed() {
      limiterErrors.inc();
    },
  };
}
