import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventOutcome, MemoryTransport, encodeEvents, hashValue, type GatewayEvent } from '@sluice/stream';
import { MemoryOwnershipStore } from '../ownership/store.js';
import { Aggregator } from './aggregator.js';
import type { AggregatorOptions } from './options.js';
import { MAX_PEERS, Peers } from './peers.js';

const T0 = 1_700_000_000_000;
const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

function transport(partitions: number): MemoryTransport {
  const t = new MemoryTransport({ partitions });
  open.push(t);
  return t;
}

function aggregator(o: Partial<AggregatorOptions> & Pick<AggregatorOptions, 'transport'>): Aggregator {
  const a = new Aggregator({ rules: {}, tickMs: 60_000, snapshotMs: 0, announceMs: 600_000, now: () => T0, ...o });
  open.push(a);
  return a;
}

/** Lets every broadcast of this turn reach its subscribers (the memory transport delivers on setImmediate). */
const delivered = () => new Promise((resolve) => setImmediate(resolve));

function logger() {
  const lines: { obj: object; msg: string }[] = [];
  return { lines, info: () => undefined, warn: (obj: object, msg: string) => void lines.push({ obj, msg }) };
}

describe('aggregators that see each other', () => {
  it('find a second owner of their partitions (two memory stores): the one whose id sorts last stops owning', async () => {
    const t = transport(4);
    const logA = logger();
    const logB = logger();
    // Each with a memory store of its own: both own every partition.
    const a = aggregator({ transport: t, id: 'agg-a', ownership: new MemoryOwnershipStore({ now: () => T0 }), logger: logA });
    const b = aggregator({ transport: t, id: 'agg-b', ownership: new MemoryOwnershipStore({ now: () => T0 }), logger: logB });
    await a.start();
    await b.start();
    expect(a.partitions).toEqual([0, 1, 2, 3]);
    expect(b.partitions).toEqual([0, 1, 2, 3]);
    // One announcement each is a hand-over that may be in flight; the second one settles it.
    for (let i = 0; i < 2; i++) {
      await a.announce();
      await b.announce();
      await delivered();
    }
    expect(a.stats().ownershipConflicts).toBeGreaterThanOrEqual(1);
    expect(b.stats().ownershipConflicts).toBeGreaterThanOrEqual(1);
    await vi.waitFor(() => expect(b.partitions).toEqual([]));
    expect(b.stats()).toMatchObject({
      yielded: true,
      lastOwnershipConflict: { peer: 'agg-a', peerOwnership: 'memory', yielded: true },
    });
    expect(a.stats()).toMatchObject({ yielded: false, lastOwnershipConflict: { peer: 'agg-b', yielded: false } });
    expect(a.partitions).toEqual([0, 1, 2, 3]);
    expect(logB.lines.some((l) => /agg-a \(memory ownership store\) owns partitions .*0,1,2,3.*stops owning/.test(l.msg))).toBe(
      true,
    );
    expect(logA.lines.some((l) => /Aggregator agg-b stops owning partitions/.test(l.msg))).toBe(true);
    // The yielded aggregator reads nothing more: every batch is counted once, by agg-a.
    const e: GatewayEvent = {
      resource: 1,
      path: hashValue('/a'),
      user: 0,
      ip: 0,
      tenant: 0,
      timestampMs: T0,
      status: 200,
      outcome: EventOutcome.PASSED,
    };
    for (let p = 0; p < 4; p++) await t.publish(p, encodeEvents([e]));
    await vi.waitFor(() => expect(a.stats().batches).toBe(4));
    expect(b.stats().batches).toBe(0);
  });

  it('share partitions through one store without a conflict', async () => {
    const t = transport(4);
    const store = new MemoryOwnershipStore({ now: () => T0 });
    const a = aggregator({ transport: t, id: 'agg-a', ownership: store });
    const b = aggregator({ transport: t, id: 'agg-b', ownership: store });
    await a.start();
    await b.start();
    await a.rebalance();
    await b.rebalance();
    for (let i = 0; i < 3; i++) {
      await a.announce();
      await b.announce();
      await delivered();
    }
    expect(a.partitions.length + b.partitions.length).toBe(4);
    expect(a.stats().ownershipConflicts + b.stats().ownershipConflicts).toBe(0);
    expect(a.stats().ownership).toBe('memory');
  });

  it('report an aggregator of the group that splits the stream into another number of partitions', async () => {
    const log = logger();
    const four = transport(4);
    const a = aggregator({ transport: four, id: 'agg-a', logger: log });
    // Another aggregator of the group, announcing 8 partitions on the same decision channel.
    const b = aggregator({
      transport: {
        ...four,
        partitions: 8,
        name: 'memory',
        inProcess: true,
        consume: four.consume.bind(four),
        broadcast: four.broadcast.bind(four),
        subscribeDecisions: four.subscribeDecisions.bind(four),
      } as never,
      id: 'agg-b',
      ownership: 'single-instance',
    });
    await a.start();
    await b.announce();
    await delivered();
    expect(a.stats()).toMatchObject({
      layoutMismatchedAnnouncements: 1,
      lastLayoutMismatch: { source: 'announcement', partitions: 8, layoutVersion: 1, aggregator: 'agg-b' },
    });
    expect(log.lines.map((l) => l.msg)).toContainEqual(
      expect.stringMatching(/aggregator agg-b splits the stream into 8 partitions \(layout 1\), this aggregator into 4/),
    );
  });
});

describe('Peers', () => {
  it('takes an overlap for a second owner only once it outlasts an announcement interval', () => {
    const peers = new Peers();
    const own = { partitions: 4, layoutVersion: 1 };
    const a = {
      id: 'b',
      group: 'g',
      partitions: 4,
      layoutVersion: 1,
      ownership: 'redis' as const,
      issuedAtMs: 0,
      announceMs: 1000,
      owned: [1, 2],
    };
    // Partition 1 ours since 100, partition 2 since 1500 (a hand-over after b's first announcement).
    const since = (p: number) => (p === 1 ? 100 : p === 2 ? 1500 : undefined);
    expect(peers.heard(a, own, since, 1000).doublyOwned).toEqual([]);
    expect(peers.heard(a, own, since, 2000).doublyOwned).toEqual([1]);
    // b gave partition 1 up: no overlap any more.
    expect(peers.heard({ ...a, owned: [3] }, own, since, 3000).doublyOwned).toEqual([]);
    expect(peers.heard({ ...a, partitions: 8 }, own, since, 4000).layoutDiffers).toBe(true);
  });

  it('remembers at most MAX_PEERS peers and forgets the silent ones', () => {
    const peers = new Peers();
    const own = { partitions: 1, layoutVersion: 1 };
    const a = (id: string) => ({
      id,
      group: 'g',
      partitions: 1,
      layoutVersion: 1,
      ownership: 'redis' as const,
      issuedAtMs: 0,
      announceMs: 1000,
      owned: [],
    });
    for (let i = 0; i < MAX_PEERS + 10; i++) peers.heard(a(`p${i}`), own, () => undefined, i);
    expect(peers.size).toBe(MAX_PEERS);
    peers.forget(MAX_PEERS + 5);
    expect(peers.size).toBe(5);
  });
});
