import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { redisAddress } from './kit.js';

describe('redisAddress', () => {
  it('names the host and port a client connects to, never its credentials', () => {
    const client = new Redis('redis://user:s3cret@10.0.0.5:6380/2', { lazyConnect: true });
    expect(redisAddress(client)).toBe('10.0.0.5:6380');
    expect(redisAddress(new Redis({ path: '/run/redis.sock', lazyConnect: true }))).toBe('/run/redis.sock');
    client.disconnect();
  });

  it("names a cluster's seed nodes, a few of them", () => {
    const seeds = [1, 2, 3, 4, 5].map((i) => ({ host: `10.0.0.${i}`, port: 7000 }));
    const cluster = new Cluster(seeds, { lazyConnect: true });
    expect(redisAddress(cluster, seeds)).toBe('10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000 and 2 more');
    expect(redisAddress(cluster, seeds.slice(0, 1))).toBe('10.0.0.1:7000');
    expect(redisAddress(cluster)).toBe('Redis Cluster');
    cluster.disconnect();
  });
});
