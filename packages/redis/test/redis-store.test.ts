/** How the store batches, routes and stores, against standalone Redis and Redis Cluster. */
import { DEFAULT_BOOKING, MemoryStore, compileLimits, type ConsumeResult } from '@sluice/core';
import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis } from 'ioredis';
import { batchScriptSource, keyNames, RedisStore } from '../src/index.js';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import { TEST_COMMAND_TIMEOUT_MS, cleanUp, clearOfWindowEnd, keysUnder, sleep } from './helpers.js';

const bucket = compileLimits({ algorithm: 'token-bucket', limit: 1000, windowMs: 60_000 });

const WARM_UP = 'warm-up';

/** One call first (on key WARM_UP), so that the servers have the function before a test counts calls. */
async function warmUp(store: RedisStore): Promise<void> {
  await store.consume({ key: WARM_UP, limits: bucket, cost: 0, permitId: '' });
}

describe('standalone', () => {
  const prefix = randomPrefix('store');
  const client = new Redis(redisUrl());
  afterAll(() => cleanUp(client, prefix));

  it('decides the calls made in one tick in one script call, in arrival order, at one time', async () => {
    // Batching is the subject, not timeouts: a loaded machine may take longer than the default 50 ms.
    const store = new RedisStore({ client, prefix, maxBatchSize: 512, commandTimeoutMs: 2000 });
    await warmUp(store);
    const fcall = vi.spyOn(client, 'fcall');
    try {
      // Fewer than 16 calls go whole, on any number of keys.
      const results = await Promise.all(
        Array.from({ length: 15 }, (_, i) =>
          store.consume({ key: i % 3 === 0 ? 'tick' : `tick-${i}`, limits: bucket, cost: 1, permitId: '' }),
        ),
      );
      expect(fcall).toHaveBeenCalledTimes(1);
      expect(results.filter((_, i) => i % 3 === 0).map((r) => r.statuses[0]!.remaining)).toEqual([999, 998, 997, 996, 995]);
      expect(new Set(results.map((r) => r.now)).size).toBe(1);
    } finally {
      fcall.mockRestore();
      await store.close();
    }
  });

  it('sends a one-limit consume alone to the lean entry, and decides it as a batch would', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: 2000 });
    await warmUp(store);
    const { functionName, more } = batchScriptSource();
    const fcall = vi.spyOn(client, 'fcall');
    const gcra = compileLimits({ algorithm: 'gcra', limit: 3, windowMs: 60_000 });
    const sliding = compileLimits({ algorithm: 'sliding-window', limit: 3, windowMs: 60_000 });
    try {
      const alone = [];
      for (let i = 0; i < 4; i++) alone.push(await store.consume({ key: 'lean', limits: gcra, cost: 1 }));
      expect(fcall.mock.calls.map((c) => c[0])).toEqual(Array(4).fill(more.consume_one!.functionName));
      expect(alone.map((r) => [r.allowed, r.statuses[0]!.remaining])).toEqual([
        [true, 2],
        [true, 1],
        [true, 0],
        [false, 0],
      ]);
      expect(alone[3]!.statuses[0]!.retryAfterMs).toBeGreaterThan(0);
      // Two at once, or a policy the lean entry does not take, go to the batch entry, which reads
      // the same key as the lean entry left it.
      fcall.mockClear();
      const both = await Promise.all([
        store.consume({ key: 'lean', limits: gcra, cost: 0 }),
        store.consume({ key: 'lean-2', limits: gcra, cost: 1 }),
      ]);
      expect(both.map((r) => r.statuses[0]!.remaining)).toEqual([0, 2]);
      await store.consume({ key: 'lean-3', limits: sliding, cost: 1 });
      expect(fcall.mock.calls.map((c) => c[0])).toEqual([functionName, functionName]);
    } finally {
      fcall.mockRestore();
      await store.close();
    }
  });

  it('sends a tick of many calls as two script calls, or four on a hot key, so that Node and Redis work at once', async () => {
    const store = new RedisStore({ client, prefix, maxBatchSize: 512, commandTimeoutMs: 2000 });
    await warmUp(store);
    const fcall = vi.spyOn(client, 'fcall');
    try {
      const many = await Promise.all(
        Array.from({ length: 40 }, (_, i) => store.consume({ key: `many-${i}`, limits: bucket, cost: 1, permitId: '' })),
      );
      expect(fcall).toHaveBeenCalledTimes(2);
      expect(many.every((r) => r.allowed && r.statuses[0]!.remaining === 999)).toBe(true);
      // A few keys in turn are many keys to Redis: each call reads and writes each of them.
      fcall.mockClear();
      await Promise.all(
        Array.from({ length: 40 }, (_, i) => store.consume({ key: `few-${i % 4}`, limits: bucket, cost: 1, permitId: '' })),
      );
      expect(fcall).toHaveBeenCalledTimes(2);
      // One key: four calls, decided in arrival order across them.
      fcall.mockClear();
      const hot = await Promise.all(
        Array.from({ length: 300 }, () => store.consume({ key: 'hot', limits: bucket, cost: 1, permitId: '' })),
      );
      expect(fcall).toHaveBeenCalledTimes(4);
      expect(hot.map((r) => r.statuses[0]!.remaining)).toEqual(Array.from({ length: 300 }, (_, i) => 999 - i));
    } finally {
      fcall.mockRestore();
      await store.close();
    }
  });

  it('splits a burst larger than maxBatchSize into calls that keep the order', async () => {
    const store = new RedisStore({ client, prefix, maxBatchSize: 50, commandTimeoutMs: 2000 });
    await warmUp(store);
    const fcall = vi.spyOn(client, 'fcall');
    // 250 calls, at most 50 per script call: five calls (more than the four a hot key is split in).
    const calls = Array.from({ length: 250 }, (_, i) =>
      i % 5 === 4
        ? store.adjust({ key: 'split', limits: bucket, delta: 1 }).then(() => undefined)
        : store.consume({ key: 'split', limits: bucket, cost: 1, permitId: '' }),
    );
    const results = (await Promise.all(calls)).filter((r): r is ConsumeResult => r !== undefined);
    expect(fcall).toHaveBeenCalledTimes(5);
    // Every fifth call charged one more permit; remaining counts down across the five calls.
    expect(results.map((r) => r.statuses[0]!.remaining)).toEqual(
      Array.from({ length: 200 }, (_, i) => 999 - i - Math.floor(i / 4)),
    );
    fcall.mockRestore();
    await store.close();
  });

  it('connects a lazy client it was given', async () => {
    const lazy = new Redis(redisUrl(), { lazyConnect: true });
    const store = new RedisStore({ client: lazy, prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    expect((await store.consume({ key: 'lazy', limits: bucket, cost: 1, permitId: '' })).allowed).toBe(true);
    await store.close();
    expect(lazy.status).toBe('ready');
    lazy.disconnect();
  });

  it('reports figures beyond 2^53 exactly', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    // A billion permits used under a generous limit, then judged by one permit a year (usage
    // carries over a policy change): the retry-after is about 3e19 ms.
    const windowMs = 366 * 24 * 3600 * 1000;
    const generous = compileLimits({ algorithm: 'token-bucket', limit: 1e9, windowMs });
    const yearly = compileLimits({ algorithm: 'token-bucket', limit: 1, windowMs });
    const [, r] = await Promise.all([
      store.consume({ key: 'debt', limits: generous, cost: 1e9, permitId: '' }),
      store.consume({ key: 'debt', limits: yearly, cost: 1, permitId: '' }),
    ]);
    const clock = { now: () => r.now, setTimer: () => ({}), clearTimer: () => {} };
    const memory = new MemoryStore({ clock, sweepIntervalMs: 0 });
    await memory.consume({ key: 'debt', limits: generous, cost: 1e9, permitId: '' });
    const expected = await memory.consume({ key: 'debt', limits: yearly, cost: 1, permitId: '' });
    expect(r.statuses[0]!.retryAfterMs).toBeGreaterThan(2 ** 53);
    expect(r).toEqual(expected);
    await memory.close();
    await store.close();
  });

  it('reports the Redis clock', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    const [sec, usec] = await client.time();
    const r = await store.consume({ key: 'clock', limits: bucket, cost: 0, permitId: '' });
    const redisMs = Number(sec) * 1000 + Number(usec) / 1000;
    expect(r.now).toBeGreaterThanOrEqual(redisMs);
    expect(r.now - redisMs).toBeLessThan(5000);
    await store.close();
  });

  it('lets idle keys expire shortly after their state stops mattering', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    const short = compileLimits([
      { algorithm: 'fixed-window', limit: 5, windowMs: 200 },
      { algorithm: 'concurrency', limit: 2, permitTtlMs: 100 },
    ]);
    const r = await store.consume({ key: 'idle', limits: short, cost: 1, permitId: 'l' });
    const names = keyNames(prefix, 'idle');
    for (const name of [names.state, names.permits, names.costs]) {
      // When Redis removes the key, on its own clock (TIME and PTTL read at one instant).
      const [sec, usec, ttl] = (await client.eval(
        "local t = redis.call('TIME') return { t[1], t[2], redis.call('PTTL', KEYS[1]) }",
        1,
        name,
      )) as [string, string, number];
      const removedAt = Number(sec) * 1000 + Math.floor(Number(usec) / 1000) + ttl;
      // The entry ends within 200 ms of the call; Redis removes it 2 s later (see lua/lib/entry.lua).
      expect(ttl, name).toBeGreaterThan(0);
      expect(removedAt, name).toBeGreaterThan(r.now + 2000);
      expect(removedAt, name).toBeLessThanOrEqual(r.now + 200 + 2000 + 2);
    }
    await sleep(2300);
    expect(await client.exists(names.state, names.permits, names.costs)).toBe(0);
    await store.close();
  });

  it('reads every policy right, however many there are (the function keeps the ones it read)', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: 5000 });
    // More policies than the function keeps, so it also starts over in the middle of a call.
    const year = 365 * 24 * 3600 * 1000;
    const policies = Array.from({ length: 1500 }, (_, i) =>
      compileLimits({ algorithm: 'token-bucket', limit: 100 + i, windowMs: year }),
    );
    const round = () =>
      Promise.all(policies.map((limits, i) => store.consume({ key: `policies-${i % 50}`, limits, cost: 1, permitId: '' })));
    await round();
    const second = await round();
    // Each key is shared by 30 policies, in order: the m-th call of the second round finds the
    // 30 permits of the first round and m more taken.
    expect(second.map((r) => r.statuses[0]!.remaining)).toEqual(policies.map((_, i) => 100 + i - 30 - Math.floor(i / 50) - 1));
    await store.close();
  });

  it('reserves what is left when less than asked for', async () => {
    const store = new RedisStore({ client, prefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
    const small = compileLimits({ algorithm: 'fixed-window', limit: 10, windowMs: 60_000 });
    // The three calls in one window (see clearOfWindowEnd).
    await clearOfWindowEnd(60_000, 5_000);
    expect((await store.reserve({ key: 'reserve', limits: small, min: 1, max: 7 })).granted).toBe(7);
    const rest = await store.reserve({ key: 'reserve', limits: small, min: 1, max: 7 });
    expect(rest).toMatchObject({ allowed: true, granted: 3 });
    expect(await store.reserve({ key: 'reserve', limits: small, min: 1, max: 7 })).toMatchObject({ allowed: false, granted: 0 });
    await store.close();
  });
});

describe('cluster', () => {
  const prefix = randomPrefix('store');
  const admin = new Cluster(redisClusterNodes());
  afterAll(() => cleanUp(admin, prefix));

  it('sends one call per slot and decides keys on every master', async () => {
    const store = new RedisStore({ clusterNodes: redisClusterNodes(), prefix, commandTimeoutMs: 1000, peerRegistry: false });
    await warmUp(store);
    const fcall = vi.spyOn(store.client, 'fcall');
    const keys = Array.from({ length: 60 }, (_, i) => `spread-${i}`);
    const results = await Promise.all(
      keys.flatMap((key) => [1, 2, 3].map(() => store.consume({ key, limits: bucket, cost: 1, permitId: '' }))),
    );
    expect(results.map((r) => r.statuses[0]!.remaining)).toEqual(keys.flatMap(() => [999, 998, 997]));
    const slots = new Set(keys.map((k) => calculateSlot(keyNames(prefix, k).state)));
    expect(fcall.mock.calls.length).toBe(slots.size);
    const stored = (await keysUnder(admin, prefix)).filter((name) => name !== keyNames(prefix, WARM_UP).state);
    expect(stored.length).toBe(keys.length);
    const masters = await Promise.all(admin.nodes('master').map((n) => n.dbsize()));
    expect(masters.filter((size) => size > 0).length).toBe(admin.nodes('master').length);
    fcall.mockRestore();
    await store.close();
  });

  it('books, claims and cancels on keys of every slot, one call per slot', async () => {
    const store = new RedisStore({ clusterNodes: redisClusterNodes(), prefix, commandTimeoutMs: 1000, peerRegistry: false });
    const minute = compileLimits({ algorithm: 'fixed-window', limit: 2, windowMs: 60_000 });
    // Both ticks in one window (see clearOfWindowEnd): across its end the second would admit.
    await clearOfWindowEnd(60_000, 5_000);
    const keys = Array.from({ length: 30 }, (_, i) => `booked-${i}`);
    const token = 'this-callers-token-01';
    // Per key, in one tick: the window filled, a claim and a cancel that find nothing.
    const results = await Promise.all(
      keys.map((key) =>
        Promise.all([
          store.consume({ key, limits: minute, cost: 2, permitId: '' }),
          store.book({ key, limits: minute, cost: 1, id: 'a', token, create: false, bounds: DEFAULT_BOOKING }),
          store.cancel({ key, limits: minute, id: 'a', token }),
        ]),
      ),
    );
    for (const [consumed, claimed, cancelled] of results) {
      expect(consumed.allowed).toBe(true);
      expect([claimed.outcome, cancelled]).toEqual(['missing', false]);
    }
    // Each key books the next window, holds it on a second call, gives it back.
    const ahead = { ...DEFAULT_BOOKING, claimWindowMs: 60_000 };
    const again = await Promise.all(
      keys.map((key) =>
        Promise.all([
          store.book({ key, limits: minute, cost: 1, id: 'b', token, create: true, bounds: ahead }),
          store.book({ key, limits: minute, cost: 1, id: 'b', token, create: false, bounds: ahead }),
          store.cancel({ key, limits: minute, id: 'b', token }),
        ]),
      ),
    );
    for (const [booked, held, cancelled] of again) {
      const windowEnd = (Math.floor(booked.now / 60_000) + 1) * 60_000;
      expect(booked).toMatchObject({ outcome: 'booked', booking: { start: windowEnd, end: windowEnd + 60_000 } });
      expect(held).toMatchObject({ outcome: 'booked', booking: booked.booking });
      expect(cancelled).toBe(true);
    }
    await store.close();
  });

  it('keeps a key and its held permits in one slot whatever the key contains', async () => {
    const store = new RedisStore({ clusterNodes: redisClusterNodes(), prefix, commandTimeoutMs: 1000 });
    const both = compileLimits([
      { algorithm: 'concurrency', limit: 1, permitTtlMs: 60_000 },
      { algorithm: 'gcra', limit: 10, windowMs: 60_000 },
    ]);
    for (const key of ['', '}', '{', '{}', '}{', '%', '%7D', 'a}b{c', 'üñï']) {
      expect((await store.consume({ key, limits: both, cost: 1, permitId: 'a' })).allowed, key).toBe(true);
      expect((await store.consume({ key, limits: both, cost: 1, permitId: 'b' })).allowed, key).toBe(false);
      expect(await store.release({ key, limits: both, permitId: 'a' }), key).toBe(true);
    }
    await store.close();
  });
});
