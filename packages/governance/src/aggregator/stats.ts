/** Counters and gauges an aggregator reports (`Aggregator.stats()`); `@sluice/governance/metrics` exposes them to Prometheus. */

/** How a partition is being consumed: normally, sampled (lagging) or shedding batches (far behind). */
export type ConsumeMode = 'normal' | 'sample' | 'shed';

/** One owned partition, as {@link Aggregator.stats} reports it. */
export interface PartitionStats {
  readonly partition: number;
  /** Batches behind, as the transport last reported (0 when it does not know). */
  readonly lagBatches: number;
  /** Age of the newest event of the last batch, ms. */
  readonly lagMs: number;
  readonly mode: ConsumeMode;
  readonly trackedValues: number;
}

/** Counters and gauges of an aggregator. Counters only grow. */
export interface AggregatorStats {
  readonly id: string;
  readonly partitions: readonly PartitionStats[];
  /** Batches decoded and counted. */
  readonly batches: number;
  /** Events counted by at least one rule. */
  readonly events: number;
  /** Rejection tally batches decoded and counted (see `decodeTallies`). */
  readonly tallyBatches: number;
  /** Requests that gateways rejected, counted (as offered load) by at least one rule. */
  readonly rejected: number;
  /** Batches that were not event batches (foreign, truncated): skipped. */
  readonly malformedBatches: number;
  /** Batches read while sampling. */
  readonly sampledBatches: number;
  /** Batches skipped unread because the partition was too far behind. */
  readonly shedBatches: number;
  /** Events older than their rule's window on arrival. */
  readonly lateEvents: number;
  /** Values evicted from full tables. */
  readonly evictions: number;
  /** Expression evaluations that failed. */
  readonly expressionErrors: number;
  readonly blocksSent: number;
  readonly liftsSent: number;
  /** Values currently blocked by this aggregator. */
  readonly activeBlocks: number;
  readonly broadcastFailures: number;
  readonly snapshotsSaved: number;
  readonly snapshotsRestored: number;
  /** Snapshots that could not be saved or restored (store down, malformed). */
  readonly snapshotFailures: number;
  /** The rule store version in force (0 for rules given directly or before the first version). */
  readonly ruleVersion: number;
  /** Partitions taken over (acquired) and given up or lost since start. */
  readonly acquisitions: number;
  readonly releases: number;
}
