import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import { MemoryDemandStore, type DemandStore } from '../src/control/adaptive/demand-store.js';
import { RedisDemandStore } from '../src/control/adaptive/redis-demand-store.js';

const counts = (decided: number, rejected: number, peakShare: number) => ({
  decided,
  rejected,
  peakShare,
  waits: 1,
  waitedMs: 2.5,
});

const clients: (Redis | Cluster)[] = [];
afterAll(() => {
  for (const c of clients) c.disconnect();
});

const stores: [string, () => DemandStore][] = [
  ['memory', () => new MemoryDemandStore()],
  [
    'Redis',
    () => {
      const c = new Redis(redisUrl());
      clients.push(c);
      return new RedisDemandStore(c, randomPrefix('adapt'));
    },
  ],
  [
    'Redis Cluster',
    () => {
      const c = new Cluster(redisClusterNodes());
      clients.push(c);
      return new RedisDemandStore(c, randomPrefix('adapt'));
    },
  ],
];

describe.each(stores)('the demand store on %s', (_name, make) => {
  it("sums every server's counts of an interval and keeps the highest peak", async () => {
    const store = make();
    await store.add('api:x', 500, 1000, counts(10, 2, 0.4), 60_000);
    await store.add('api:x', 500, 1000, counts(5, 1, 0.25), 60_000);
    await store.add('api:x', 500, 2000, counts(1, 0, 0), 60_000);
    // Another interval length is another series.
    await store.add('api:x', 1000, 1000, counts(99, 99, 1), 60_000);
    expect(await store.read('api:x', 500, 500, 2500)).toEqual([
      { start: 1000, decided: 15, rejected: 3, peakShare: 0.4, waits: 2, waitedMs: 5 },
      { start: 2000, decided: 1, rejected: 0, peakShare: 0, waits: 1, waitedMs: 2.5 },
    ]);
    expect(await store.read('api:y', 500, 0, 5000)).toEqual([]);
  });

  it('lets one owner decide at a time, until it resigns or its leadership ends', async () => {
    const store = make();
    // Leaderships far longer than any round trip on a loaded machine: only resign and expiry free them.
    expect(await store.lead('api:x', 'a', 60_000)).toBe(true);
    expect(await store.lead('api:x', 'b', 60_000)).toBe(false);
    expect(await store.lead('api:x', 'a', 60_000)).toBe(true);
    await store.resign('api:x', 'b');
    expect(await store.lead('api:x', 'b', 60_000)).toBe(false);
    await store.resign('api:x', 'a');
    expect(await store.lead('api:x', 'b', 300)).toBe(true);
    // b stops renewing: its leadership ends and a takes over (the bound only stops a hang).
    await vi.waitFor(async () => expect(await store.lead('api:x', 'a', 60_000)).toBe(true), { timeout: 10_000, interval: 50 });
    expect(await store.lead('api:x', 'b', 60_000)).toBe(false);
  });

  it('remembers the last move', async () => {
    const store = make();
    expect(await store.lastMove('api:x')).toBeUndefined();
    await store.recordMove('api:x', 123_456, 60_000);
    expect(await store.lastMove('api:x')).toBe(123_456);
  });
});

describe('the adaptive script', () => {
  it('refuses malformed counts', async () => {
    const c = new Redis(redisUrl());
    clients.push(c);
    const store = new RedisDemandStore(c, randomPrefix('adapt'));
    await expect(store.add('api:x', 500, 0, { ...counts(1, 0, 0), peakShare: 2 }, 1000)).rejects.toThrow(/refused its arguments/);
    await expect(store.add('api:x', 500, 0, { ...counts(1, 0, 0), decided: 1.5 }, 1000)).rejects.toThrow(/refused its arguments/);
  });
});
