import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { RedisOwnershipStore } from '@sluice/governance';
import { randomPrefix, redisClusterNodes, redisUrl } from '../env.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const targets: [string, () => Redis | Cluster][] = [
  ['standalone Redis', () => new Redis(redisUrl())],
  ['Redis Cluster', () => new Cluster(redisClusterNodes())],
];

describe.each(targets)('RedisOwnershipStore on %s', (_name, connect) => {
  const client = connect();
  const prefix = `${randomPrefix('owner')}:`;
  const store = new RedisOwnershipStore({ client, prefix });
  afterAll(async () => {
    await store.close();
    const nodes = client instanceof Cluster ? client.nodes('master') : [client];
    for (const node of nodes) {
      const keys = await node.keys(`${prefix}*`);
      if (keys.length > 0) for (const k of keys) await client.del(k);
    }
    client.disconnect();
  });

  it('gives a partition to one owner at a time, renews and releases by owner only', async () => {
    expect(await store.acquire(1, 'a', 5000)).toBe(true);
    expect(await store.acquire(1, 'b', 5000)).toBe(false);
    expect(await store.acquire(1, 'a', 5000)).toBe(true);
    expect(await store.renew(1, 'b', 5000)).toBe(false);
    expect(await store.renew(1, 'a', 5000)).toBe(true);
    await store.release(1, 'b');
    expect(await store.acquire(1, 'b', 5000)).toBe(false);
    await store.release(1, 'a');
    expect(await store.acquire(1, 'b', 5000)).toBe(true);
  });

  it('lets ownership lapse when it is not renewed', async () => {
    expect(await store.acquire(2, 'a', 300)).toBe(true);
    // At least twice the TTL passes (a loaded machine only makes it more).
    await sleep(600);
    expect(await store.renew(2, 'a', 300)).toBe(false);
    expect(await store.acquire(2, 'b', 5000)).toBe(true);
  });

  it("stores snapshots only for the partition's owner", async () => {
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    expect(await store.acquire(3, 'a', 5000)).toBe(true);
    expect(await store.saveSnapshot(3, 'b', new Uint8Array([9]), 5000)).toBe(false);
    expect(await store.loadSnapshot(3)).toBeUndefined();
    expect(await store.saveSnapshot(3, 'a', bytes, 5000)).toBe(true);
    expect([...(await store.loadSnapshot(3))!]).toEqual([...bytes]);
  });

  it('counts live members and forgets those that stop beating', async () => {
    // m1's TTL leaves room for a stalled second call (a loaded machine); the sleep outlasts it.
    expect(await store.heartbeat('m1', 2000)).toBe(1);
    expect(await store.heartbeat('m2', 10_000)).toBe(2);
    await sleep(2300);
    expect(await store.heartbeat('m2', 5000)).toBe(1);
    await store.leave('m2');
    expect(await store.heartbeat('m3', 5000)).toBe(1);
  });
});

describe('RedisOwnershipStore failures', () => {
  it('rejects with SLUICE_ERR_STREAM_OWNERSHIP_UNAVAILABLE when Redis is unreachable', async () => {
    const store = new RedisOwnershipStore({ url: 'redis://127.0.0.1:1', commandTimeoutMs: 200 });
    await expect(store.acquire(0, 'a', 1000)).rejects.toMatchObject({ code: 'SLUICE_ERR_STREAM_OWNERSHIP_UNAVAILABLE' });
    await store.close();
  });
});
