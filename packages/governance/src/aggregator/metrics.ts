/**
 * Prometheus metrics of an aggregator, on a registry of the caller's choosing. prom-client is an
 * optional peer dependency: only this module (`@sluice/governance/metrics`) loads it, through
 * `@sluice/core/metrics`.
 *
 * @example
 * import { Registry } from 'prom-client';
 * import { registerAggregatorMetrics } from '@sluice/governance/metrics';
 * const registry = new Registry();
 * registerAggregatorMetrics(aggregator, { registry });
 */
import { DURATION_BUCKETS, promMetrics, registerBuildInfo, type MetricsTarget } from '@sluice/core/metrics';
import type { Aggregator } from './aggregator.js';
import type { AggregatorStats } from './stats.js';

/** Options of {@link registerAggregatorMetrics}. */
export interface AggregatorMetricsOptions extends MetricsTarget {
  /** Metric name prefix. @default 'sluice_' */
  prefix?: string;
}

type CounterField = {
  [K in keyof AggregatorStats]: AggregatorStats[K] extends number ? K : never;
}[keyof AggregatorStats];

const COUNTERS: readonly [CounterField, string, string][] = [
  ['batches', 'aggregator_batches_total', 'Event batches counted'],
  ['events', 'aggregator_events_total', 'Events counted by at least one governance rule'],
  ['tallyBatches', 'aggregator_tally_batches_total', 'Rejection tally batches counted'],
  ['rejected', 'aggregator_rejected_requests_total', 'Requests rejected by gateways, counted as offered load'],
  ['malformedBatches', 'aggregator_malformed_batches_total', 'Batches skipped because they were not event batches'],
  ['sampledBatches', 'aggregator_sampled_batches_total', 'Batches counted by sampling while the partition lagged'],
  ['shedBatches', 'aggregator_shed_batches_total', 'Batches skipped unread because the partition was far behind'],
  ['lateEvents', 'aggregator_late_events_total', "Events older than their rule's window on arrival"],
  ['evictions', 'aggregator_window_evictions_total', 'Values evicted from full window tables'],
  ['expressionErrors', 'aggregator_expression_errors_total', 'Expression rule evaluations that failed'],
  ['broadcastFailures', 'aggregator_broadcast_failures_total', 'Decision messages the stream did not accept'],
  ['snapshotsSaved', 'aggregator_snapshots_saved_total', 'Partition snapshots saved'],
  ['snapshotsRestored', 'aggregator_snapshots_restored_total', 'Partition snapshots restored on takeover'],
  ['snapshotFailures', 'aggregator_snapshot_failures_total', 'Snapshots that could not be saved or restored'],
  ['acquisitions', 'aggregator_partitions_acquired_total', 'Partitions taken (at start or over from another aggregator)'],
  ['releases', 'aggregator_partitions_released_total', 'Partitions given up or lost'],
  [
    'ownershipConflicts',
    'aggregator_ownership_conflicts_total',
    'Announcements of another aggregator of the group owning partitions this one owned',
  ],
  ['announcementsSent', 'aggregator_announcements_total', 'Announcements this aggregator broadcast'],
  ['announcementFailures', 'aggregator_announcement_failures_total', 'Announcements the stream did not accept'],
];

/**
 * Registers the aggregator's counters and gauges; values are read from `aggregator.stats()` at
 * each scrape. `sluice_stream_lag_batches` and `sluice_stream_lag_seconds` are per partition
 * (label values bounded by the partition count). `sluice_aggregator_event_delay_seconds` times
 * each event aggregated from its gateway's stamp to its aggregation; `sluice_build_info` gives
 * this package's version.
 */
export function registerAggregatorMetrics(aggregator: Aggregator, options: AggregatorMetricsOptions): void {
  const m = promMetrics(options, 'sluice_');
  registerBuildInfo(options.registry, new URL('../../package.json', import.meta.url));
  const delays = m.seriesHistogram({
    name: 'aggregator_event_delay_seconds',
    help: "Time from an event's stamp at its gateway to its aggregation here (late events included, shed ones not; 0 when the gateway's clock is ahead)",
    buckets: DURATION_BUCKETS,
  });
  const delay = delays.series({});
  aggregator.onEventsAggregated((events, now) => {
    for (const e of events) delay.observe(Math.max(0, now - e.timestampMs) / 1000);
  });
  let stats: AggregatorStats | undefined;
  let statsAt = -1;
  // One stats() call per scrape, shared by every metric's collect.
  const read = (): AggregatorStats => {
    const now = Date.now();
    if (stats === undefined || now - statsAt > 50) {
      stats = aggregator.stats();
      statsAt = now;
    }
    return stats;
  };
  for (const [field, name, help] of COUNTERS) {
    let seen = 0;
    m.counter({
      name,
      help,
      collect() {
        const v = read()[field];
        if (v > seen) this.inc(v - seen);
        seen = Math.max(seen, v);
      },
    });
  }
  const decisions = { block: 0, lift: 0 };
  m.counter({
    name: 'aggregator_decisions_total',
    help: 'Decisions broadcast (block includes refreshes)',
    labelNames: ['action'] as const,
    collect() {
      const s = read();
      if (s.blocksSent > decisions.block) this.inc({ action: 'block' }, s.blocksSent - decisions.block);
      if (s.liftsSent > decisions.lift) this.inc({ action: 'lift' }, s.liftsSent - decisions.lift);
      decisions.block = Math.max(decisions.block, s.blocksSent);
      decisions.lift = Math.max(decisions.lift, s.liftsSent);
    },
  });
  const mismatches = { batch: 0, announcement: 0 };
  m.counter({
    name: 'aggregator_layout_mismatches_total',
    help: 'Batches (of gateways) and announcements (of aggregators) with another partition count or layout version than this aggregator',
    labelNames: ['source'] as const,
    collect() {
      const s = read();
      if (s.layoutMismatchedBatches > mismatches.batch)
        this.inc({ source: 'batch' }, s.layoutMismatchedBatches - mismatches.batch);
      if (s.layoutMismatchedAnnouncements > mismatches.announcement) {
        this.inc({ source: 'announcement' }, s.layoutMismatchedAnnouncements - mismatches.announcement);
      }
      mismatches.batch = Math.max(mismatches.batch, s.layoutMismatchedBatches);
      mismatches.announcement = Math.max(mismatches.announcement, s.layoutMismatchedAnnouncements);
      // Both series exist from the first scrape, so a rate() over them never starts at a gap.
      this.inc({ source: 'batch' }, 0);
      this.inc({ source: 'announcement' }, 0);
    },
  });
  m.gauge({
    name: 'aggregator_partitions',
    help: 'Partitions this aggregator splits the stream into (its transport has)',
    collect() {
      this.set(read().layout.partitions);
    },
  });
  m.gauge({
    name: 'aggregator_yielded',
    help: '1 once this aggregator stopped owning partitions because another owned them too (it counts nothing until restarted)',
    collect() {
      this.set(read().yielded ? 1 : 0);
    },
  });
  m.gauge({
    name: 'aggregator_active_blocks',
    help: 'Values blocked by this aggregator now',
    collect() {
      this.set(read().activeBlocks);
    },
  });
  m.gauge({
    name: 'aggregator_rule_version',
    help: 'Rule store version in force (0 when rules are given directly)',
    collect() {
      this.set(read().ruleVersion);
    },
  });
  m.gauge({
    name: 'aggregator_partitions_owned',
    help: 'Partitions this aggregator consumes now',
    collect() {
      this.set(read().partitions.length);
    },
  });
  m.gauge({
    name: 'stream_lag_batches',
    help: 'Batches waiting behind the last one read, per owned partition (when the transport knows)',
    labelNames: ['partition'] as const,
    collect() {
      this.reset();
      for (const p of read().partitions) this.set({ partition: String(p.partition) }, p.lagBatches);
    },
  });
  m.gauge({
    name: 'stream_lag_seconds',
    help: 'Age of the newest event or rejection tally of the last batch read, per owned partition',
    labelNames: ['partition'] as const,
    collect() {
      this.reset();
      for (const p of read().partitions) this.set({ partition: String(p.partition) }, p.lagMs / 1000);
    },
  });
  m.gauge({
    name: 'aggregator_degraded',
    help: 'Per owned partition: 0 normal, 1 sampling, 2 shedding batches',
    labelNames: ['partition'] as const,
    collect() {
      this.reset();
      for (const p of read().partitions)
        this.set({ partition: String(p.partition) }, p.mode === 'normal' ? 0 : p.mode === 'sample' ? 1 : 2);
    },
  });
}
