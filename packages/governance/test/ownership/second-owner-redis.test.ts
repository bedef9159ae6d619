/**
 * Two aggregators on one Redis Streams stream (Redis from SLUICE_REDIS_URL): without a shared
 * ownership store each would own every partition, and the stream would split each partition's
 * batches between them. Refused at construction without an ownership choice; with a memory store
 * each ('single-instance'), they find each other from their announcements and one stops owning;
 * with one RedisOwnershipStore they share the partitions and count every batch once.
 */
import { Registry } from 'prom-client';
import { Redis } from 'ioredis';
import { isSluiceError } from '@sluice/core';
import { Aggregator, RedisOwnershipStore, type AggregatorOptions } from '@sluice/governance';
import { registerAggregatorMetrics } from '@sluice/governance/metrics';
import { EventOutcome, encodeEvents, type EventTransport } from '@sluice/stream';
import { RedisStreamsTransport } from '@sluice/stream/redis';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../../../test/wait-for.js';
import { randomPrefix, redisUrl } from '../env.js';

const url = redisUrl();
const PARTITIONS = 4;
const open: { close(): Promise<void> }[] = [];
const prefixes: string[] = [];

afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
  const admin = new Redis(url);
  for (const prefix of prefixes.splice(0)) {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
  }
  admin.disconnect();
});

function stream(prefix: string): EventTransport {
  const t = new RedisStreamsTransport({ partitions: PARTITIONS, url, prefix, blockMs: 200 });
  open.push(t);
  return t;
}

function logger() {
  const lines: string[] = [];
  return { lines, info: () => undefined, warn: (_obj: object, msg: string) => void lines.push(msg) };
}

function aggregator(options: AggregatorOptions): Aggregator {
  const a = new Aggregator({ snapshotMs: 0, announceMs: 200, ...options });
  open.push(a);
  return a;
}

/** One batch of one event on `partition`. */
function batch(): Uint8Array {
  return encodeEvents(
    [{ resource: 7, path: 0, user: 0, ip: 0, tenant: 0, timestampMs: Date.now(), status: 200, outcome: EventOutcome.PASSED }],
    { partitions: PARTITIONS, version: 1 },
  );
}

describe('two aggregators on one Redis Streams stream', () => {
  it('are refused without an ownership choice', () => {
    const prefix = randomPrefix('owner');
    prefixes.push(prefix);
    let refused: unknown;
    try {
      aggregator({ transport: stream(prefix), rules: {} });
    } catch (e) {
      refused = e;
    }
    expect(isSluiceError(refused, 'SLUICE_ERR_INVALID_OPTIONS') && refused.field).toBe('ownership');
    expect((refused as Error).message).toContain('required with the redis transport');
  });

  it("with a memory store each ('single-instance'), find each other and one stops owning", async () => {
    const prefix = randomPrefix('owner');
    prefixes.push(prefix);
    const logs = [logger(), logger()];
    const registries = [new Registry(), new Registry()];
    const [a, b] = ['agg-a', 'agg-b'].map((id, i) => {
      const agg = aggregator({ transport: stream(prefix), rules: {}, ownership: 'single-instance', id, logger: logs[i] });
      registerAggregatorMetrics(agg, { registry: registries[i]! });
      return agg;
    }) as [Aggregator, Aggregator];
    await a.start();
    await b.start();
    // Both own every partition: nothing in their stores tells them otherwise.
    expect(a.partitions).toEqual([0, 1, 2, 3]);
    expect(b.partitions).toEqual([0, 1, 2, 3]);
    await waitFor(() => b.stats().yielded && b.partitions.length === 0, 'agg-b to stop owning', 30_000);
    expect(a.stats().yielded).toBe(false);
    expect(a.partitions).toEqual([0, 1, 2, 3]);
    for (const [agg, peer] of [
      [a, 'agg-b'],
      [b, 'agg-a'],
    ] as const) {
      expect(agg.stats().ownershipConflicts).toBeGreaterThan(0);
      expect(agg.stats().lastOwnershipConflict).toMatchObject({ peer, peerOwnership: 'memory' });
    }
    expect(logs[1]!.lines).toContainEqual(
      expect.stringMatching(/aggregator agg-a \(memory ownership store\) owns partitions .*stops owning/),
    );
    expect(await registries[1]!.metrics()).toContain('sluice_aggregator_yielded 1');
    expect(await registries[0]!.metrics()).toMatch(/^sluice_aggregator_ownership_conflicts_total [1-9]\d*$/m);

    // From now on every batch is counted by agg-a alone.
    const publisher = stream(prefix);
    const before = a.stats().batches;
    for (let i = 0; i < 40; i++) await publisher.publish(i % PARTITIONS, batch());
    await waitFor(() => a.stats().batches - before >= 40, 'agg-a to count all 40 batches', 30_000);
    expect(b.stats().batches).toBe(0);
  });

  it('with one RedisOwnershipStore, share the partitions and count every batch once', async () => {
    const prefix = randomPrefix('owner');
    prefixes.push(prefix);
    const stores = [0, 1].map(() => {
      const s = new RedisOwnershipStore({ url, prefix: `${prefix}:own:` });
      open.push(s);
      return s;
    });
    // A long ownership TTL: no ownership lapses on a loaded machine, so no batch is read twice.
    const [a, b] = ['agg-a', 'agg-b'].map((id, i) =>
      aggregator({ transport: stream(prefix), rules: {}, ownership: stores[i], id, ownershipTtlMs: 30_000 }),
    ) as [Aggregator, Aggregator];
    await a.start();
    await b.start();
    // Ownership rounds run on their own every third of the TTL; these run them at once.
    const split = () => a.partitions.length === 2 && b.partitions.length === 2;
    for (let round = 0; round < 100 && !split(); round++) {
      await a.rebalance();
      await b.rebalance();
    }
    expect(split()).toBe(true);
    expect([...a.partitions, ...b.partitions].sort()).toEqual([0, 1, 2, 3]);
    const publisher = stream(prefix);
    for (let i = 0; i < 40; i++) await publisher.publish(i % PARTITIONS, batch());
    const counted = () => a.stats().batches + b.stats().batches;
    await waitFor(() => counted() >= 40, 'all 40 batches counted', 30_000);
    // Several announcement rounds later: still no second owner, nothing counted twice.
    const sent = a.stats().announcementsSent;
    await waitFor(() => a.stats().announcementsSent >= sent + 3, 'three more announcements', 30_000);
    expect(counted()).toBe(40);
    for (const agg of [a, b]) expect(agg.stats()).toMatchObject({ ownershipConflicts: 0, yielded: false, ownership: 'redis' });
  });
});
