/**
 * A new process's first calls: no latency is known yet, and the first call also connects and
 * loads the program. They are given the longest timeout (as TCP's first retransmission timeout
 * is long), not the floor, so a Redis that answers in 120 ms (a loaded or distant one) decides
 * them instead of the store-failure policy; the timeout then follows the replies. Against a real
 * Redis behind a proxy that delays its replies.
 */
import { Limiter } from '@sluice/core';
import { afterAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../src/index.js';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { CutProxy } from '../../../test/cut-proxy.js';

const REPLY_DELAY_MS = 120;

describe('a cold start on a slow Redis', () => {
  const proxies: CutProxy[] = [];
  afterAll(async () => {
    for (const p of proxies) await p.down();
  });

  it('decides the first batch by Redis, not by the store-failure policy', async () => {
    const url = new URL(redisUrl());
    const proxy = await CutProxy.start(url.hostname, Number(url.port), { replyDelayMs: REPLY_DELAY_MS });
    proxies.push(proxy);
    const limiter = new Limiter({
      resources: { api: { limits: { algorithm: 'fixed-window', limit: 1000, windowMs: 600_000 }, onStoreFailure: 'closed' } },
      store: new RedisStore({ url: `redis://127.0.0.1:${proxy.port}`, prefix: randomPrefix('cold-start') }),
      closeStore: true,
    });
    try {
      // One batch of 100 calls, the first this process makes.
      const first = await Promise.all(Array.from({ length: 100 }, (_, i) => limiter.try('api', { key: `k${i % 10}` })));
      expect(first.filter((d) => (d.source ?? 'store') !== 'store')).toEqual([]);
      expect(first.every((d) => d.allowed)).toBe(true);
      // And later calls too: the timeout now follows the replies (3 x their high percentile).
      const later = await Promise.all(Array.from({ length: 50 }, () => limiter.try('api', { key: 'later' })));
      expect(later.filter((d) => (d.source ?? 'store') !== 'store')).toEqual([]);
    } finally {
      await limiter.close();
    }
  });
});
