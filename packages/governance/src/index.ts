/**
 * `@sluice/governance`: the aggregators of gateway traffic. Each aggregator owns a share of the
 * event partitions of an `EventTransport` (`@sluice/stream`), counts their events in sliding
 * windows per rule and value, evaluates the governance rules (threshold, correlated, CEL) and
 * broadcasts block and lift decisions back to every gateway. Partition ownership lives in an
 * `OwnershipStore`: in memory (one process) or in Redis, with window snapshots for a successor.
 * Prometheus metrics are the subpath `@sluice/governance/metrics`.
 *
 * @example
 * import { Aggregator, RedisOwnershipStore } from '@sluice/governance';
 * import { RedisStreamsTransport } from '@sluice/stream/redis';
 * const aggregator = new Aggregator({
 *   transport: new RedisStreamsTransport({ partitions: 16, url }),
 *   rules: ruleStore,
 *   ownership: new RedisOwnershipStore({ url }),
 * });
 * await aggregator.start();
 */
export { Aggregator } from './aggregator/aggregator.js';
export type { AggregatorStats, ConsumeMode, PartitionStats } from './aggregator/stats.js';
export { compileAggregatorOptions, type AggregatorOptions, type CompiledAggregatorOptions } from './aggregator/options.js';
export { STAT_FIELDS, windowShape, type WindowShape, type WindowStats } from './aggregator/window.js';
export { MemoryOwnershipStore, type MemoryOwnershipStoreOptions, type OwnershipStore } from './ownership/store.js';
export { RedisOwnershipStore, type RedisOwnershipStoreOptions } from './ownership/redis-store.js';
