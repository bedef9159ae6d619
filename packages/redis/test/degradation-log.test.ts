/**
 * What a `Limiter` on a Redis store logs (its `logger` option) while its Redis is away for a
 * few seconds under load: one line when it goes, naming the store's address and the policy that
 * answers meanwhile, one when it is back, nothing per call and no stack. Needs `redis-server` on
 * PATH (a Redis of the test's own, killed and restarted).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Limiter, type Logger } from '@sluice/core';
import { RedisServer } from '@sluice/redis/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../src/index.js';

describe('a Limiter on a Redis store while Redis is away', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('logs the outage as one line when it starts and one when it ends', async () => {
    const lines: { level: string; fields: Record<string, unknown>; msg: string }[] = [];
    const logger: Logger = {
      info: (fields, msg) => lines.push({ level: 'info', fields: fields as Record<string, unknown>, msg }),
      warn: (fields, msg) => lines.push({ level: 'warn', fields: fields as Record<string, unknown>, msg }),
    };
    // A generous timeout: on a busy machine a slow reply must not look like an outage.
    const store = new RedisStore({ url: redis.url, commandTimeoutMs: 2000 });
    const limiter = new Limiter({
      resources: { api: { algorithm: 'token-bucket', limit: 1_000_000, windowMs: 1000 } },
      store,
      onStoreFailure: 'open',
      logger,
    });
    await limiter.try('api');
    const sources: string[] = [];
    let running = true;
    const loop = (async () => {
      while (running) {
        sources.push((await limiter.try('api', { key: `k${sources.length % 20}` })).source ?? 'store');
        await sleep(2);
      }
    })();
    await redis.kill();
    await sleep(2000);
    await redis.restart();
    // Until global decisions are back (the test's timeout bounds a hang).
    while (sources.at(-1) !== 'store') await sleep(20);
    running = false;
    await loop;
    await limiter.close();
    await store.close();

    const fallbacks = sources.filter((s) => s === 'fallback').length;
    expect(fallbacks).toBeGreaterThan(0);
    expect(lines.map((l) => l.level)).toEqual(['warn', 'info']);
    // The reason is how the kill reached the client: the connection closed, reset, a broken pipe.
    expect(lines[0]!.msg).toMatch(
      new RegExp(
        `^store redis at 127\\.0\\.0\\.1:${redis.port} unreachable \\(.+\\): ` +
          "deciding by the 'open' policy until it answers$",
      ),
    );
    expect(lines[0]!.fields).toMatchObject({
      event: 'store_unreachable',
      store: 'redis',
      address: `127.0.0.1:${redis.port}`,
      error: { code: 'SLUICE_ERR_STORE_UNAVAILABLE' },
    });
    // Counted from the switch: a call that failed just before it was answered by the policy too.
    const counted = lines[1]!.fields.fallbackDecisions as number;
    expect(lines[1]!.fields.event).toBe('store_unreachable_ended');
    expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThanOrEqual(fallbacks);
    expect(lines[1]!.msg).toContain(`global decisions resumed (${counted} decisions made by the fallback meanwhile)`);
    expect(JSON.stringify(lines)).not.toMatch(/stack|\\n {4}at /);
  });
});
