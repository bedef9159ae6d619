import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { RedisPeerRegistry } from '../src/peer-registry.js';

describe('RedisPeerRegistry', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(redisUrl());
  });
  afterAll(() => {
    redis.disconnect();
  });

  it('counts live clients and forgets those that stop heartbeating', async () => {
    const key = `${randomPrefix('peers')}registry`;
    // A TTL far above the heartbeat: a loaded machine can delay a heartbeat by a second or more,
    // and a live client must not be forgotten for that. Waits poll instead of sleeping a guess.
    const ttlMs = 3000;
    const peers = [0, 1, 2].map(() => new RedisPeerRegistry({ client: redis, key, heartbeatMs: 50, ttlMs }));
    for (const p of peers) await p.start();
    await vi.waitFor(() => expect(peers.map((p) => p.count)).toEqual([3, 3, 3]), { timeout: 10_000, interval: 20 });
    // A client that died: one heartbeat on Redis' clock, then nothing. It counts until its TTL ends.
    const [sec, usec] = await redis.time();
    await redis.zadd(key, Number(sec) * 1000 + Math.floor(Number(usec) / 1000), 'ghost');
    await vi.waitFor(() => expect(peers[0]!.count).toBe(4), { timeout: ttlMs, interval: 20 });
    await peers[2]!.close();
    await peers[1]!.close();
    await vi.waitFor(() => expect(peers[0]!.count).toBe(1), { timeout: ttlMs * 4, interval: 50 });
    await peers[0]!.close();
    expect(await redis.zcard(key)).toBe(0);
  });

  it('keeps the last count while Redis is unreachable', async () => {
    const dead = new Redis(1, '127.0.0.1', {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      retryStrategy: () => null,
    });
    const registry = new RedisPeerRegistry({ client: dead, heartbeatMs: 50 });
    await expect(registry.start()).rejects.toMatchObject({ code: 'SLUICE_ERR_STORE_UNAVAILABLE' });
    expect(registry.count).toBe(1);
    await registry.close();
    dead.disconnect();
  });
});
