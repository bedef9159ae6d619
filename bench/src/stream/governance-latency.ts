/**
 * Governance latency: how long from the first request of a burst until every gateway of a fleet
 * blocks the burst's path, and how long from the burst's end until every gateway lifts it.
 * Gateways (probe + decision cache, each with its own connections), two aggregators and the
 * stream run in this process; the path goes probe -> batch -> stream -> aggregator window ->
 * rule tick -> broadcast -> every gateway's cache, over Redis Streams (and NATS JetStream and
 * RocketMQ's lite topics when their servers are given) and, as the peer, the in-process
 * transport (the pipeline without a network).
 */
import { Gateway } from '@sluice/gateway';
import { Aggregator, MemoryOwnershipStore, RedisOwnershipStore, type OwnershipStore } from '@sluice/governance';
import { EventOutcome, MemoryTransport, hashValue, type EventTransport } from '@sluice/stream';
import { NatsTransport } from '@sluice/stream/nats';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { RocketMqTransport } from '@sluice/stream/rocketmq';
import { setTimeout as sleep } from 'node:timers/promises';
import { percentile } from '../service/service-measure.js';
import { fmt, fmtRatio, type Table } from '../report/table.js';

/** Settings of the governance-latency part. */
export interface GovernanceLatencySettings {
  /** Redis for the Redis Streams transport and the partition ownership; undefined runs the in-process peer only. */
  readonly redisUrl: string | undefined;
  readonly runId: string;
  readonly gateways: number;
  readonly partitions: number;
  /** Bursts measured per transport. */
  readonly bursts: number;
  /** The rule's limit per second; each burst sends `3 x limit` events over ~100 ms. */
  readonly limit: number;
  /** Aggregator evaluation period, ms. */
  readonly tickMs: number;
  /** NATS server URL (SLUICE_NATS_URL); the NATS row is skipped without it (and without Redis). */
  readonly natsUrl?: string;
  /** RocketMQ proxy endpoints (SLUICE_ROCKETMQ_ENDPOINTS); the RocketMQ (lite) row is skipped without it (and without Redis). */
  readonly rocketMqEndpoints?: string;
}

type Kind = 'memory' | 'redis' | 'nats' | 'rocketmq';
const NAMES: Record<Kind, string> = {
  memory: 'in-process',
  redis: 'Redis Streams',
  nats: 'NATS JetStream',
  rocketmq: 'RocketMQ (lite)',
};

/** Measured figures of one transport. */
export interface GovernanceLatencyResult {
  readonly transport: string;
  /** Per burst: first event -> blocked on every gateway, ms. */
  readonly blockMs: readonly number[];
  /** Per burst: last event -> lifted on every gateway, ms. */
  readonly liftMs: readonly number[];
  /** Bursts that were not blocked everywhere within 10 s. */
  readonly missed: number;
}

interface Fleet {
  readonly name: string;
  readonly gateways: Gateway[];
  readonly aggregators: Aggregator[];
  close(): Promise<void>;
}

function brokerTransport(s: GovernanceLatencySettings, kind: Exclude<Kind, 'memory'>): EventTransport {
  const prefix = `bench-gov-${s.runId}`;
  switch (kind) {
    case 'redis':
      return new RedisStreamsTransport({ partitions: s.partitions, url: s.redisUrl!, prefix });
    case 'nats':
      return new NatsTransport({ partitions: s.partitions, servers: s.natsUrl!, prefix, storage: 'memory' });
    case 'rocketmq':
      // The aggregators' default group, which scripts/rocketmq-server.sh creates at start.
      return new RocketMqTransport({ partitions: s.partitions, endpoints: s.rocketMqEndpoints!, prefix, awaitMs: 1_000 });
  }
}

async function startFleet(s: GovernanceLatencySettings, kind: Kind): Promise<Fleet> {
  const opened: EventTransport[] = [];
  const ownershipStores: OwnershipStore[] = [];
  const shared = kind === 'memory' ? new MemoryTransport({ partitions: s.partitions, queueCapacity: 100_000 }) : undefined;
  const transport = (): EventTransport => {
    if (shared) return shared;
    const t = brokerTransport(s, kind as Exclude<Kind, 'memory'>);
    opened.push(t);
    return t;
  };
  const memoryOwnership = new MemoryOwnershipStore();
  const rules = {
    burst: {
      id: 'burst',
      type: 'threshold' as const,
      dimension: 'path' as const,
      match: {},
      limit: s.limit,
      windowMs: 1000,
      slices: 10,
      blockMs: 100,
    },
  };
  const aggregators = ['a', 'b'].map((id) => {
    let ownership: OwnershipStore = memoryOwnership;
    if (kind !== 'memory') {
      ownership = new RedisOwnershipStore({ url: s.redisUrl!, prefix: `bench-gov-${s.runId}:agg:` });
      ownershipStores.push(ownership);
    }
    return new Aggregator({ transport: transport(), rules, ownership, id: `bench-${id}`, tickMs: s.tickMs, snapshotMs: 0 });
  });
  for (const a of aggregators) await a.start();
  for (const a of aggregators) await a.rebalance();
  const gateways = Array.from(
    { length: s.gateways },
    () => new Gateway({ transport: transport(), probe: { flushIntervalMs: 5 } }),
  );
  for (const g of gateways) await g.start();
  return {
    name: NAMES[kind],
    gateways,
    aggregators,
    close: async () => {
      for (const g of gateways) await g.close();
      for (const a of aggregators) await a.close();
      for (const o of ownershipStores) await o.close();
      for (const t of opened) await t.close();
      await shared?.close();
    },
  };
}

/** Waits (polling every ms) until `done` holds; the time it held, or undefined after `limitMs`. */
async function whenAll(done: () => boolean, limitMs: number): Promise<number | undefined> {
  const end = performance.now() + limitMs;
  while (performance.now() < end) {
    if (done()) return performance.now();
    await sleep(1);
  }
  return undefined;
}

async function measure(s: GovernanceLatencySettings, fleet: Fleet): Promise<GovernanceLatencyResult> {
  const blockMs: number[] = [];
  const liftMs: number[] = [];
  let missed = 0;
  const resource = hashValue('/bench');
  for (let b = 0; b < s.bursts; b++) {
    // A fresh path per burst, so a burst never sees the previous one's block.
    const path = hashValue(`/bench/${s.runId}/${b}`);
    const blockedEverywhere = () => fleet.gateways.every((g) => g.cache.lookup('path', path) !== undefined);
    const liftedEverywhere = () => fleet.gateways.every((g) => g.cache.lookup('path', path) === undefined);
    const events = s.limit * 3;
    const start = performance.now();
    let sent = 0;
    // ~100 ms of traffic in 10 steps, over every gateway; stops early once blocked (as gateways would).
    for (let step = 0; step < 10 && !blockedEverywhere(); step++) {
      for (let i = 0; i < events / 10; i++) {
        const g = fleet.gateways[sent++ % fleet.gateways.length]!;
        if (g.cache.lookup('path', path) === undefined) g.probe!.emit(resource, path, 0, 0, 0, 200, EventOutcome.PASSED);
      }
      await sleep(10);
    }
    const lastEvent = performance.now();
    const blocked = await whenAll(blockedEverywhere, 10_000);
    if (blocked === undefined) {
      missed++;
      continue;
    }
    blockMs.push(blocked - start);
    const lifted = await whenAll(liftedEverywhere, 10_000);
    if (lifted !== undefined) liftMs.push(lifted - lastEvent);
  }
  return { transport: fleet.name, blockMs, liftMs, missed };
}

/** Runs the part: the in-process transport, then each broker transport whose server is given (all need Redis for ownership). */
export async function runGovernanceLatency(
  settings: GovernanceLatencySettings,
  progress: (line: string) => void,
): Promise<GovernanceLatencyResult[]> {
  const results: GovernanceLatencyResult[] = [];
  const kinds: Kind[] = ['memory'];
  if (settings.redisUrl !== undefined) {
    kinds.push('redis');
    if (settings.natsUrl) kinds.push('nats');
    if (settings.rocketMqEndpoints) kinds.push('rocketmq');
  }
  for (const kind of kinds) {
    progress(`  governance latency over ${NAMES[kind]}...`);
    const fleet = await startFleet(settings, kind);
    try {
      results.push(await measure(settings, fleet));
    } finally {
      await fleet.close();
    }
  }
  return results;
}

/** Nearest-rank percentile of unsorted samples. */
function percentileOf(values: readonly number[], p: number): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    p,
  );
}

/** The part's table: block and lift latency per transport, and the ratio to the in-process peer. */
export function governanceLatencyTable(results: readonly GovernanceLatencyResult[], settings: GovernanceLatencySettings): Table {
  const peer = results.find((r) => r.transport === 'in-process');
  return {
    title: 'Governance latency: burst start -> blocked on every gateway, burst end -> lifted',
    header: [
      'transport',
      'bursts',
      'block p50 ms',
      'block p99 ms',
      'lift p50 ms',
      'lift p99 ms',
      'block p50 vs in-process',
      'missed',
    ],
    rows: results.map((r) => [
      r.transport,
      String(r.blockMs.length),
      fmt(percentileOf(r.blockMs, 50)),
      fmt(percentileOf(r.blockMs, 99)),
      fmt(percentileOf(r.liftMs, 50)),
      fmt(percentileOf(r.liftMs, 99)),
      peer === undefined ? 'n/a' : fmtRatio(percentileOf(r.blockMs, 50) / percentileOf(peer.blockMs, 50)),
      String(r.missed),
    ]),
    notes: [
      `${settings.gateways} gateways, 2 aggregators, ${settings.partitions} partitions, rule: over ${settings.limit} requests/s on a path;`,
      `each burst sends up to ${settings.limit * 3} events over ~100 ms; aggregators evaluate every ${settings.tickMs} ms.`,
      'Block latency includes the wait for the window to pass the limit; lift latency is bounded below by the',
      "1 s window draining and the rule's 100 ms block.",
    ],
  };
}
