/**
 * Failure drills against real Redis: crash, freeze, `DEBUG SLEEP`, and Redis Cluster failovers,
 * all under load. What must hold: no crash or unhandled rejection, decisions go on by the
 * resource's store-failure policy, global decisions resume once Redis is back, admissions
 * during the outage stay within the fallback's bound, and nothing is left running after close.
 */
import { Limiter, type Decision, type StoreFailurePolicy } from '@sluice/core';
import { RedisStore } from '@sluice/redis';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomPrefix, redisClusterNodes } from '../env.js';
import { RedisServer } from '@sluice/redis/testing';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Sample {
  at: number;
  decision?: Decision;
  error?: unknown;
}

/** Calls `try` in a loop (one call in flight per worker) until stopped, recording everything. */
function drive(limiter: Limiter, resource: string, workers = 4) {
  const samples: Sample[] = [];
  let running = true;
  const loops = Array.from({ length: workers }, async () => {
    while (running) {
      const at = performance.now();
      try {
        samples.push({ at, decision: await limiter.try(resource) });
      } catch (error) {
        samples.push({ at, error });
      }
      await sleep(1);
    }
  });
  return {
    samples,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

/** Waits until `cond` holds, polling; fails after `ms`. */
async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

const sourceOf = (s: Sample) => s.decision?.source ?? (s.decision ? 'store' : 'error');

let unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
beforeAll(() => {
  process.on('unhandledRejection', onUnhandled);
});
afterAll(() => {
  process.off('unhandledRejection', onUnhandled);
});
beforeEach(() => {
  unhandled = [];
});
afterEach(() => {
  expect(unhandled).toEqual([]);
});

describe('standalone Redis outages', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(async () => {
    await redis.stop();
  });

  function limiterFor(policy: StoreFailurePolicy, peers = 2) {
    const store = new RedisStore({ url: redis.url, prefix: randomPrefix('chaos'), commandTimeoutMs: 50 });
    const limiter = new Limiter({
      store,
      onStoreFailure: policy,
      failover: { peers },
      resources: { 'db:orders': { algorithm: 'fixed-window', limit: 100, windowMs: 1000 } },
    });
    return { store, limiter };
  }

  it.each(['local', 'open', 'closed'] as const)(
    'SIGKILL and restart: decisions follow the %s policy, then go global again',
    async (policy) => {
      const { store, limiter } = limiterFor(policy);
      const load = drive(limiter, 'db:orders');
      await until(() => load.samples.filter((s) => sourceOf(s) === 'store').length > 20, 5000, 'global decisions');
      await redis.kill();
      const killedAt = performance.now();
      await until(() => load.samples.some((s) => s.at > killedAt && sourceOf(s) === 'fallback'), 5000, 'fallback decisions');
      await sleep(1200);
      await redis.restart();
      const restartedAt = performance.now();
      await until(
        () => load.samples.some((s) => s.at > restartedAt && sourceOf(s) === 'store'),
        10_000,
        'global decisions after restart',
      );
      await load.stop();
      await limiter.close();
      await store.close();

      expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
      const outage = load.samples.filter((s) => s.at > killedAt && s.at < restartedAt);
      const fallback = outage.filter((s) => sourceOf(s) === 'fallback');
      expect(fallback.length).toBeGreaterThan(0);
      const admitted = fallback.filter((s) => s.decision!.allowed).length;
      const seconds = Math.ceil((restartedAt - killedAt) / 1000) + 1;
      if (policy === 'local') {
        // A fair share: 100/s shared by 2 clients is 50 per fixed window for this one.
        expect(admitted).toBeGreaterThan(0);
        expect(admitted).toBeLessThanOrEqual(50 * seconds);
      } else if (policy === 'open') {
        expect(admitted).toBe(fallback.length);
      } else {
        expect(admitted).toBe(0);
        expect(fallback.every((s) => s.decision!.reason === 'store_unavailable')).toBe(true);
      }
    },
  );

  it('SIGSTOP and SIGCONT: a frozen Redis times out into the fallback, then recovers', async () => {
    const { store, limiter } = limiterFor('local');
    const load = drive(limiter, 'db:orders');
    await until(() => load.samples.some((s) => sourceOf(s) === 'store'), 5000, 'global decisions');
    redis.signal('SIGSTOP');
    const frozenAt = performance.now();
    try {
      await until(() => load.samples.some((s) => s.at > frozenAt && sourceOf(s) === 'fallback'), 5000, 'fallback decisions');
      await sleep(500);
    } finally {
      redis.signal('SIGCONT');
    }
    const thawedAt = performance.now();
    await until(
      () => load.samples.some((s) => s.at > thawedAt && sourceOf(s) === 'store'),
      10_000,
      'global decisions after SIGCONT',
    );
    await load.stop();
    await limiter.close();
    await store.close();
    expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
  });

  it('DEBUG SLEEP: a stalled Redis times out into the fallback, then recovers', async () => {
    const { store, limiter } = limiterFor('local');
    const admin = new Redis(redis.url);
    const load = drive(limiter, 'db:orders');
    await until(() => load.samples.some((s) => sourceOf(s) === 'store'), 5000, 'global decisions');
    const sleptAt = performance.now();
    const sleeping = admin.call('DEBUG', 'SLEEP', '1');
    await until(() => load.samples.some((s) => s.at > sleptAt && sourceOf(s) === 'fallback'), 5000, 'fallback decisions');
    await sleeping;
    const wokeAt = performance.now();
    await until(
      () => load.samples.some((s) => s.at > wokeAt && sourceOf(s) === 'store'),
      10_000,
      'global decisions after DEBUG SLEEP',
    );
    await load.stop();
    await limiter.close();
    await store.close();
    admin.disconnect();
    expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
  });

  it('leaves no handles behind after close', async () => {
    const before = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap').length;
    const { store, limiter } = limiterFor('local');
    await limiter.try('db:orders');
    await limiter.close();
    await store.close();
    await sleep(50);
    const after = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap').length;
    expect(after).toBeLessThanOrEqual(before);
  });
});

describe('Redis Cluster failover', () => {
  it('keeps deciding through a manual failover and a master stalled past the node timeout', async () => {
    const nodes = redisClusterNodes();
    const store = new RedisStore({
      clusterNodes: nodes,
      prefix: randomPrefix('chaos'),
      commandTimeoutMs: 100,
      slotsRefreshIntervalMs: 500,
    });
    const limiter = new Limiter({
      store,
      failover: { peers: 1 },
      resources: { 'api:pay': { algorithm: 'gcra', limit: 500, windowMs: 1000 } },
    });
    const load = drive(limiter, 'api:pay');
    await until(() => load.samples.filter((s) => sourceOf(s) === 'store').length > 20, 10_000, 'global decisions');

    // The master serving this resource's key, and one of its replicas.
    const probe = new Redis(nodes[0]!.port, nodes[0]!.host);
    const slot = Number(await probe.call('CLUSTER', 'KEYSLOT', `${store.options.prefix}{api:pay}`));
    const shards = (await probe.call('CLUSTER', 'SLOTS')) as [number, number, [string, number], ...[string, number][]][];
    const shard = shards.find(([lo, hi]) => slot >= lo && slot <= hi)!;
    const replica = new Redis(shard[3]![1], shard[3]![0]);
    await replica.call('CLUSTER', 'FAILOVER');
    const failedOverAt = performance.now();
    await until(
      () => load.samples.some((s) => s.at > failedOverAt + 500 && sourceOf(s) === 'store'),
      15_000,
      'global decisions after failover',
    );

    // Stall the new master past the node timeout (2 s): its replica is promoted meanwhile.
    const stalledAt = performance.now();
    const stall = replica.call('DEBUG', 'SLEEP', '4');
    await until(
      () => load.samples.some((s) => s.at > stalledAt && sourceOf(s) === 'fallback'),
      10_000,
      'fallback during the stall',
    );
    await stall;
    const resumedAt = performance.now();
    await until(
      () => load.samples.some((s) => s.at > resumedAt && sourceOf(s) === 'store'),
      20_000,
      'global decisions after promotion',
    );

    await load.stop();
    await limiter.close();
    await store.close();
    probe.disconnect();
    replica.disconnect();
    expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
  });
});
