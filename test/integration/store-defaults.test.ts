/**
 * The store-failure defaults against a real Redis: a limiter given nothing but a RedisStore must
 * never multiply the global limit. One stall of Redis under load is answered call by call
 * without switching the process to its fallback; a dead Redis switches it (connection loss at
 * once, a frozen one after consecutive timeouts); the fallback's share is the limit divided by
 * the live processes the store counts; and an unreachable Redis is logged with no logger given.
 */
import { Limiter, type Decision } from '@sluice/core';
import { RedisStore } from '@sluice/redis';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix } from '../env.js';
import { clearOfWindowEnd } from '../wait-for.js';
import { RedisServer, freePort } from '@sluice/redis/testing';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

interface Sample {
  at: number;
  decision?: Decision;
  error?: unknown;
}

/** `workers` loops calling `try` back to back, until stopped. */
function drive(limiter: Limiter, resource: string, workers: number) {
  const samples: Sample[] = [];
  let running = true;
  const loops = Array.from({ length: workers }, async (_, i) => {
    while (running) {
      const at = performance.now();
      try {
        samples.push({ at, decision: await limiter.try(resource, { key: `k${i % 4}` }) });
      } catch (error) {
        samples.push({ at, error });
      }
      await new Promise((r) => setImmediate(r));
    }
  });
  return {
    samples,
    fromStore: (after = 0) =>
      samples.filter((s) => s.at > after && s.decision !== undefined && s.decision.source === undefined).length,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

/** A limiter with default failover options (its switches recorded, its log lines kept). */
function defaultLimiter(store: RedisStore, limit = 100_000) {
  const switches: boolean[] = [];
  const logs: string[] = [];
  // Why each switch happened (the error logged with it), for a failure message that says so.
  const reasons: string[] = [];
  const limiter = new Limiter({
    store,
    failover: {
      logger: {
        info: (_o, m) => logs.push(m),
        warn: (o, m) => {
          logs.push(m);
          const err = (o as { error?: { code?: string; message?: string } }).error;
          reasons.push(`${m}: ${err?.code ?? ''} ${err?.message ?? ''}`);
        },
      },
    },
    observer: { storeSwitched: (e) => switches.push(e.healthy) },
    resources: { api: { algorithm: 'fixed-window', limit, windowMs: 60_000 } },
  });
  return { limiter, switches, logs, reasons };
}

describe('store-failure defaults', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('answers a 200 ms stall of Redis under concurrent load without switching to the fallback', async () => {
    const store = new RedisStore({ url: redis.url, prefix: randomPrefix('dflt') });
    const { limiter, switches, reasons } = defaultLimiter(store);
    const admin = new Redis(redis.url);
    const load = drive(limiter, 'api', 32);
    try {
      await until(() => load.fromStore() > 500, 10_000, 'global decisions');
      await admin.call('DEBUG', 'SLEEP', '0.2');
      const wokeAt = performance.now();
      await until(() => load.fromStore(wokeAt) > 500, 10_000, 'global decisions after the stall');
    } finally {
      await load.stop();
      await limiter.close();
      await store.close();
      admin.disconnect();
    }
    expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
    expect(switches, reasons.join('\n')).toEqual([]);
  });

  it('switches at once when Redis dies, and after consecutive timeouts when it freezes', async () => {
    const store = new RedisStore({ url: redis.url, prefix: randomPrefix('dflt') });
    const { limiter, switches, logs } = defaultLimiter(store);
    const load = drive(limiter, 'api', 8);
    try {
      await until(() => load.fromStore() > 100 && store.peers!.known, 10_000, 'global decisions');
      redis.signal('SIGSTOP');
      try {
        await until(() => switches.length === 1, 10_000, 'the switch of a frozen Redis');
      } finally {
        redis.signal('SIGCONT');
      }
      await until(() => switches.length === 2, 10_000, 'the return of the thawed Redis');
      await redis.kill();
      await until(() => switches.length === 3, 10_000, 'the switch of a dead Redis');
      await redis.restart();
      await until(() => switches.length === 4, 10_000, 'the return of the restarted Redis');
    } finally {
      await load.stop();
      await limiter.close();
      await store.close();
      await redis.restart();
    }
    expect(load.samples.filter((s) => s.error !== undefined)).toEqual([]);
    expect(switches).toEqual([false, true, false, true]);
    // One line each way per outage, naming the store and the policy.
    expect(logs.filter((m) => m.includes(' unreachable ('))).toHaveLength(2);
    expect(logs.filter((m) => m.includes(' answers again after '))).toHaveLength(2);
    expect(logs.every((m) => m.startsWith(`store redis at 127.0.0.1:${redis.port} `))).toBe(true);
  });

  it('sizes each process fallback to limit / live processes with default options', async () => {
    const prefix = randomPrefix('dflt');
    const fleet = Array.from({ length: 4 }, () => {
      const store = new RedisStore({ url: redis.url, prefix });
      return { store, ...defaultLimiter(store, 100) };
    });
    try {
      await until(() => fleet.every((f) => f.store.peers!.known && f.store.peers!.count === 4), 15_000, '4 peers counted');
      await redis.kill();
      await until(() => fleet.every((f) => f.switches.length === 1), 10_000, 'every limiter switched');
      // The 800 calls in one window of a minute: the fallbacks are embedded stores in this process,
      // whose windows run from multiples of a minute of its monotonic clock, and this process may
      // be older than a minute by now (the tests before took seconds each).
      await clearOfWindowEnd(60_000, 5_000, () => performance.now());
      const admitted = await Promise.all(
        fleet.map(async (f) => {
          let n = 0;
          for (let i = 0; i < 200; i++) if ((await f.limiter.try('api')).allowed) n++;
          return n;
        }),
      );
      // 100 shared by 4 live processes: 25 each, 100 in all, never 100 each.
      expect(admitted).toEqual([25, 25, 25, 25]);
    } finally {
      for (const f of fleet) {
        await f.limiter.close();
        await f.store.close();
      }
      await redis.restart();
    }
  });

  it('logs an unreachable Redis at start with no logger configured, counts it, and denies', async () => {
    const lines: string[] = [];
    const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    const store = new RedisStore({ url: `redis://127.0.0.1:${await freePort()}`, prefix: randomPrefix('dflt') });
    const switches: boolean[] = [];
    const limiter = new Limiter({
      store,
      observer: { storeSwitched: (e) => switches.push(e.healthy) },
      resources: { api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } },
    });
    try {
      // No call made: the failed connection alone is reported.
      await until(() => lines.some((l) => l.includes('"event":"store_unreachable"')), 10_000, 'the log line');
      expect(switches).toEqual([false]);
      // No peer count was ever read: no share is known to be safe, so the fallback denies.
      const d = await limiter.try('api');
      expect(d).toMatchObject({ allowed: false, source: 'fallback' });
    } finally {
      await limiter.close();
      await store.close();
      write.mockRestore();
    }
    const entry = JSON.parse(lines.find((l) => l.includes('"event":"store_unreachable"'))!) as Record<string, unknown>;
    expect(entry).toMatchObject({
      level: 'warn',
      store: 'redis',
      error: { code: 'SLUICE_ERR_STORE_UNAVAILABLE', cause: expect.stringMatching(/^ECONNREFUSED 127\.0\.0\.1:\d+$/) },
    });
    expect(entry.msg).toMatch(
      /^store redis at 127\.0\.0\.1:\d+ unreachable \(ECONNREFUSED 127\.0\.0\.1:\d+\): deciding by the 'local' policy \(live process count unknown: 'local' denies until it is read; set failover\.maxPeers for a share meanwhile\) until it answers$/,
    );
  });
});
