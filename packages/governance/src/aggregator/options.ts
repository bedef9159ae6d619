import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { ErrorCodes, clockOffsetOption, intOption, invalid, storeClock, type ClockOffset, type Logger } from '@sluice/core';
import type { GovernanceRules, RuleStore } from '@sluice/rules';
import {
  DEFAULT_DECISION_TTL_MS,
  MAX_DECISION_TTL_MS,
  STREAM_NAME_RULE,
  isStreamName,
  type EventTransport,
} from '@sluice/stream';
import { MAX_OWNER_LENGTH, type OwnershipStore } from '../ownership/store.js';

/** Options of an {@link Aggregator}. */
export interface AggregatorOptions {
  /** Where events come from and decisions go to. */
  transport: EventTransport;
  /**
   * The governance rules: a rule set's `governance` section, or the versioned rule store the
   * service uses (the aggregator follows its current version live).
   */
  rules: GovernanceRules | RuleStore;
  /**
   * Partition ownership and snapshots: the store every aggregator of the stream shares (a
   * `RedisOwnershipStore`), or `'single-instance'` for a `MemoryOwnershipStore` of this
   * aggregator's own, when it is the only aggregator of the stream. Required unless the
   * transport is in-process (`MemoryTransport`): a memory store is private to its process, so
   * two aggregators on one broker, each with its own, would both own every partition.
   * @default a MemoryOwnershipStore, on an in-process transport only
   */
  ownership?: OwnershipStore | 'single-instance';
  /**
   * How often this aggregator announces itself (id, ownership store, partition layout, the
   * partitions it owns) on the decision channel, in ms; 0 = never. Aggregators of the group
   * find a second owner of their partitions from them, gateways a partition layout unlike
   * theirs. Gateways of 0.1 count each announcement as a malformed decision message.
   * @default 1000
   */
  announceMs?: number;
  /** Consumer group shared by every aggregator of the stream. @default 'sluice-aggregators' */
  group?: string;
  /** This aggregator's owner id (1..128 characters). @default `<hostname>:<pid>:<random>` */
  id?: string;
  /** How often rules are evaluated, in ms. @default 100 */
  tickMs?: number;
  /** How often an active block is broadcast again, in ms. @default 1000 */
  refreshMs?: number;
  /** TTL of each block message, in ms (more than `refreshMs`). @default 3000 */
  ttlMs?: number;
  /** Partition ownership TTL: a dead aggregator's partitions move within about this long. @default 3000 */
  ownershipTtlMs?: number;
  /** How often windows are snapshotted for a successor, in ms; 0 = never. @default 1000 */
  snapshotMs?: number;
  /** Most values tracked per rule and partition (a flood of users or IPs evicts the idlest). @default 10000 */
  maxValues?: number;
  /** Transport lag (batches behind) from which events are sampled. @default 200 */
  sampleLagBatches?: number;
  /** Age of a batch's newest event (ms) from which events are sampled. @default 5000 */
  sampleLagMs?: number;
  /** While sampling, one event in this many is counted, with this weight. @default 4 */
  sampleEvery?: number;
  /** Transport lag (batches behind) from which whole batches are skipped until caught up. @default 2000 */
  shedLagBatches?: number;
  /** Age of a batch's newest event (ms) from which the batch is skipped. @default 30000 */
  shedLagMs?: number;
  /** Wall clock, epoch ms (events carry epoch timestamps). Injected in tests. @default Date.now */
  now?: () => number;
  /**
   * This host's measured offset to the store's clock (a `ClockSkewMonitor` of `@sluice/core`):
   * every age the aggregator reads or stamps is then on the store's clock (`now() + offsetMs`):
   * decisions' `issuedAtMs`, event lag (events stamped by gateways given theirs), a successor's
   * snapshot age. Without it a skewed host stamps blocks that gateways take for stale (or
   * lapsed blocks they keep) and sheds fresh events as late.
   * @default none: the wall clock, as if every host's clock agreed
   */
  clockSkew?: ClockOffset;
  /** Degradations, rule changes and store failures. */
  logger?: Logger;
}

/** {@link AggregatorOptions} validated, with defaults filled in. */
export interface CompiledAggregatorOptions {
  readonly transport: EventTransport;
  readonly rules: GovernanceRules | RuleStore;
  /** The store given, or undefined for a MemoryOwnershipStore of the aggregator's own. */
  readonly ownership: OwnershipStore | undefined;
  readonly announceMs: number;
  readonly group: string;
  readonly id: string;
  readonly tickMs: number;
  readonly refreshMs: number;
  readonly ttlMs: number;
  readonly ownershipTtlMs: number;
  readonly snapshotMs: number;
  readonly maxValues: number;
  readonly sampleLagBatches: number;
  readonly sampleLagMs: number;
  readonly sampleEvery: number;
  readonly shedLagBatches: number;
  readonly shedLagMs: number;
  readonly now: () => number;
  readonly logger: Logger | undefined;
}

function int(o: AggregatorOptions, field: keyof AggregatorOptions, fallback: number, min: number, max: number): number {
  return intOption(o[field], field, fallback, min, max);
}

/** True when `rules` is a rule store rather than a governance section. */
export function isRuleStore(rules: GovernanceRules | RuleStore): rules is RuleStore {
  return typeof (rules as RuleStore).watch === 'function' && typeof (rules as RuleStore).current === 'function';
}

/**
 * The ownership store of the options: refused when missing on a transport other processes may
 * read (the default, a store in this process's memory, would let every aggregator own every
 * partition); `'single-instance'` is the explicit choice of a store of this aggregator's own.
 */
function compileOwnership(o: AggregatorOptions): OwnershipStore | undefined {
  const ownership = o.ownership;
  if (ownership === 'single-instance') return undefined;
  if (ownership === undefined) {
    if (o.transport.inProcess === true) return undefined;
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'ownership',
      `is required with the ${o.transport.name} transport, which other processes may read: give every aggregator ` +
        "of the stream the same shared store (a RedisOwnershipStore), or 'single-instance' when this is the " +
        "stream's only aggregator",
    );
  }
  const store = ownership as Partial<OwnershipStore>;
  if (
    typeof ownership !== 'object' ||
    ownership === null ||
    typeof store.acquire !== 'function' ||
    typeof store.renew !== 'function'
  ) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'ownership', "must be an OwnershipStore or 'single-instance'");
  }
  return ownership;
}

/** Validates options (core `SLUICE_ERR_INVALID_OPTIONS` naming the field) and fills defaults. */
export function compileAggregatorOptions(o: AggregatorOptions): CompiledAggregatorOptions {
  if (typeof o !== 'object' || o === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object');
  if (typeof o.transport?.consume !== 'function')
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'transport', 'must be an EventTransport');
  if (typeof o.rules !== 'object' || o.rules === null) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'rules', 'must be a governance section or a rule store');
  }
  const ownership = compileOwnership(o);
  const group = o.group ?? 'sluice-aggregators';
  // The group names a consumer group on the broker: refused here, at start, by the transports' own
  // rule, rather than by the transport on the first read (the aggregator would then own nothing).
  if (!isStreamName(group)) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'group',
      `must be ${STREAM_NAME_RULE} (it names the consumer group on every transport), got ${JSON.stringify(group)}`,
    );
  }
  const id = o.id ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  if (typeof id !== 'string' || id.length < 1 || id.length > MAX_OWNER_LENGTH) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'id', `must be 1..${MAX_OWNER_LENGTH} characters`);
  }
  const refreshMs = int(o, 'refreshMs', 1000, 50, 600_000);
  const ttlMs = int(o, 'ttlMs', DEFAULT_DECISION_TTL_MS, 100, MAX_DECISION_TTL_MS);
  if (ttlMs <= refreshMs)
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'ttlMs', `must be more than refreshMs (${refreshMs}), got ${ttlMs}`);
  return Object.freeze({
    transport: o.transport,
    rules: o.rules,
    ownership,
    announceMs: o.announceMs === 0 ? 0 : int(o, 'announceMs', 1000, 100, 600_000),
    group,
    id,
    tickMs: int(o, 'tickMs', 100, 10, 60_000),
    refreshMs,
    ttlMs,
    ownershipTtlMs: int(o, 'ownershipTtlMs', 3000, 300, 600_000),
    snapshotMs: int(o, 'snapshotMs', 1000, 0, 3_600_000),
    maxValues: int(o, 'maxValues', 10_000, 1, 10_000_000),
    sampleLagBatches: int(o, 'sampleLagBatches', 200, 1, 1e9),
    sampleLagMs: int(o, 'sampleLagMs', 5000, 1, 1e9),
    sampleEvery: int(o, 'sampleEvery', 4, 2, 1000),
    shedLagBatches: int(o, 'shedLagBatches', 2000, 1, 1e9),
    shedLagMs: int(o, 'shedLagMs', 30_000, 1, 1e9),
    now: storeClock(o.now ?? Date.now, clockOffsetOption(o.clockSkew, 'clockSkew')),
    logger: o.logger,
  });
}
