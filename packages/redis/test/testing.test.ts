/** The throwaway servers of `@sluice/redis/testing`, which the bench and the failure drills share. */
import { Cluster, Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisServer, freePort, redisServerVersion, startRedisCluster, stopAllRedisServers } from '@sluice/redis/testing';

/** A client that fails at once while the server is away, instead of queueing or retrying. */
function probe(port: number): Redis {
  const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  return client;
}

async function answers(port: number): Promise<boolean> {
  const client = probe(port);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

describe('RedisServer', () => {
  afterEach(async () => {
    await stopAllRedisServers();
  });

  it('starts on a free port, forgets its data on a crash and comes back on the same port', async () => {
    const redis = await RedisServer.start();
    expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);
    expect(redis.version).toBe(redisServerVersion());
    expect(redis.version).toMatch(/^\d+\.\d+\.\d+$/);
    const pid = redis.pid;
    expect(pid).toBeGreaterThan(0);
    const client = new Redis(redis.url);
    await client.set('k', 'v');
    client.disconnect();

    await redis.kill();
    expect(redis.pid).toBeUndefined();
    expect(await answers(redis.port)).toBe(false);

    await redis.restart();
    expect(redis.pid).not.toBe(pid);
    const again = new Redis(redis.url);
    expect(await again.get('k')).toBeNull();
    // DEBUG is allowed from loopback, for the stalls of the failure drills.
    expect(await again.call('DEBUG', 'SLEEP', '0')).toBe('OK');
    again.disconnect();
    await redis.stop();
    expect(await answers(redis.port)).toBe(false);
  });

  it('freezes on SIGSTOP and answers what it was sent once thawed', async () => {
    const redis = await RedisServer.start({ port: await freePort() });
    const client = new Redis(redis.url);
    await client.ping();
    redis.signal('SIGSTOP');
    let answered = false;
    const ping = client.ping().then((reply) => {
      answered = true;
      return reply;
    });
    // A round trip to another server while this one is frozen: the ping is still unanswered.
    const other = await RedisServer.start();
    expect(await answers(other.port)).toBe(true);
    expect(answered).toBe(false);
    redis.signal('SIGCONT');
    expect(await ping).toBe('PONG');
    client.disconnect();
  });

  it('kills a frozen server, and stopAllRedisServers stops what is left', async () => {
    const a = await RedisServer.start();
    const b = await RedisServer.start();
    a.signal('SIGSTOP');
    await a.kill();
    expect(await answers(a.port)).toBe(false);
    await stopAllRedisServers();
    expect(await answers(b.port)).toBe(false);
  });

  it('says which port it could not start on', async () => {
    const taken = await RedisServer.start();
    await expect(RedisServer.start({ port: taken.port, startTimeoutMs: 2000 })).rejects.toThrow(
      // The port answers, but from the server already there: the second one exits.
      /did not start on 127\.0\.0\.1:\d+/,
    );
  });
});

describe('startRedisCluster', () => {
  it('serves every slot over its masters, one range each, and stops them all', async () => {
    const cluster = await startRedisCluster(3);
    try {
      expect(cluster.nodes).toHaveLength(3);
      expect(cluster.servers.map((s) => `127.0.0.1:${s.port}`)).toEqual(cluster.nodes);
      expect(cluster.slots[0]![0]).toBe(0);
      expect(cluster.slots[2]![1]).toBe(16_383);
      for (let i = 1; i < 3; i++) expect(cluster.slots[i]![0]).toBe(cluster.slots[i - 1]![1] + 1);
      const client = new Cluster(cluster.nodes.map((n) => ({ host: n.split(':')[0]!, port: Number(n.split(':')[1]) })));
      const keys = Array.from({ length: 30 }, (_, i) => `key-${i}`);
      for (const k of keys) await client.set(k, k);
      expect(await Promise.all(keys.map((k) => client.get(k)))).toEqual(keys);
      const counts = await Promise.all(client.nodes('master').map((n) => n.dbsize()));
      expect(counts.every((c) => c > 0)).toBe(true);
      client.disconnect();
    } finally {
      await cluster.stop();
    }
    for (const s of cluster.servers) expect(await answers(s.port)).toBe(false);
  });

  it('rejects a count of masters that is not a whole number from 1', async () => {
    await expect(startRedisCluster(0)).rejects.toThrow(/masters must be a whole number >= 1/);
  });
});
