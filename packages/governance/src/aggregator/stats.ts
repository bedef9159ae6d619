/** Counters and gauges an aggregator reports (`Aggregator.stats()`); `@sluice/governance/metrics` exposes them to Prometheus. */
import type { OwnershipKind } from '@sluice/stream';

/** How a partition is being consumed: normally, sampled (lagging) or shedding batches (far behind). */
export type ConsumeMode = 'normal' | 'sample' | 'shed';

/** One owned partition, as {@link Aggregator.stats} reports it. */
export interface PartitionStats {
  readonly partition: number;
  /** Batches behind, as the transport last reported (0 when it does not know). */
  readonly lagBatches: number;
  /** Age of the newest event (or rejection tally) of the last batch when it was read, ms. */
  readonly lagMs: number;
  readonly mode: ConsumeMode;
  readonly trackedValues: number;
}

/** A partition layout unlike the aggregator's, as it last saw one. */
export interface LayoutMismatch {
  /** Where it was seen: a batch a gateway wrote, or another aggregator's announcement. */
  readonly source: 'batch' | 'announcement';
  /** The other side's partition count. */
  readonly partitions: number;
  /** The other side's layout version. */
  readonly layoutVersion: number;
  /** The partition the batch was read from (`batch`), or the other aggregator's id (`announcement`). */
  readonly partition?: number;
  readonly aggregator?: string;
  /** When it was seen, epoch ms. */
  readonly atMs: number;
}

/** Another aggregator of the group owning partitions this one owns at the same time. */
export interface OwnershipConflict {
  /** The other aggregator's id. */
  readonly peer: string;
  /** The other aggregator's ownership store. */
  readonly peerOwnership: OwnershipKind;
  /** The partitions both owned. */
  readonly partitions: readonly number[];
  /** Whether this aggregator stopped owning partitions because of it (see governance.md). */
  readonly yielded: boolean;
  /** When it was seen, epoch ms. */
  readonly atMs: number;
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
  /** How this aggregator splits the stream: its transport's partitions and the layout version it expects. */
  readonly layout: { readonly partitions: number; readonly version: number };
  /** Its ownership store, as it announces it. */
  readonly ownership: OwnershipKind;
  /** Batches written by a gateway with another partition count or layout version (counted all the same). */
  readonly layoutMismatchedBatches: number;
  /** Announcements of aggregators of the group with another partition count or layout version. */
  readonly layoutMismatchedAnnouncements: number;
  /** The last layout mismatch seen, if any. */
  readonly lastLayoutMismatch: LayoutMismatch | undefined;
  /** Announcements of another aggregator of the group that owned partitions this one owned. */
  readonly ownershipConflicts: number;
  /** The last such conflict, if any. */
  readonly lastOwnershipConflict: OwnershipConflict | undefined;
  /** True once this aggregator stopped owning partitions because of a conflict: it counts nothing until restarted. */
  readonly yielded: boolean;
  /** Announcements broadcast, and broadcasts of them the stream refused. */
  readonly announcementsSent: number;
  readonly announcementFailures: number;
}
