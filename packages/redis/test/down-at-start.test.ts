/**
 * A process that starts while its Redis is down: the `local` policy has no live process count
 * to divide by. Without `failover.maxPeers` it denies (no share is known to be safe); with it,
 * each process takes `limit / maxPeers`, and the switch line says so. Against a real Redis that
 * is down (a port nothing listens on), then started.
 */
import { Limiter } from '@sluice/core';
import { RedisServer, freePort } from '@sluice/redis/testing';
import { describe, expect, it } from 'vitest';
import { RedisStore } from '../src/index.js';
import { randomPrefix } from '../../../test/env.js';
import { clearOfWindowEnd } from './helpers.js';

const RESOURCES = {
  api: { limits: { algorithm: 'fixed-window' as const, limit: 40, windowMs: 600_000 }, onStoreFailure: 'local' as const },
};

async function admitted(limiter: Limiter, key: string, n: number): Promise<number> {
  let count = 0;
  for (let i = 0; i < n; i++) if ((await limiter.try('api', { key })).allowed) count++;
  return count;
}

describe('a process started while Redis is down', () => {
  it("denies under 'local' without maxPeers, and takes limit / maxPeers with it, until Redis answers", async () => {
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const prefix = randomPrefix('down-at-start');
    const lines: string[] = [];
    const logger = { info: (_: object, msg: string) => lines.push(msg), warn: (_: object, msg: string) => lines.push(msg) };
    const bare = new Limiter({
      resources: RESOURCES,
      store: new RedisStore({ url, prefix }),
      closeStore: true,
      failover: { logger },
    });
    const sized = new Limiter({
      resources: RESOURCES,
      store: new RedisStore({ url, prefix }),
      closeStore: true,
      failover: { logger, maxPeers: 4 },
    });
    let redis: RedisServer | undefined;
    try {
      expect(await admitted(bare, 'k', 20)).toBe(0);
      expect((await bare.try('api', { key: 'k' })).reason).toBe('store_unavailable');
      expect(await admitted(sized, 'k', 20)).toBe(10);
      expect(lines.some((l) => l.includes("'local' gives each process 1/4 of every limit, failover.maxPeers"))).toBe(true);
      expect(lines.some((l) => l.includes('set failover.maxPeers for a share meanwhile'))).toBe(true);
      // Redis comes: the limit is global again (the fallback's 10 were local, not in Redis).
      // From the first global call to the last, one window of ten minutes (see clearOfWindowEnd).
      await clearOfWindowEnd(600_000, 20_000);
      redis = await RedisServer.start({ port });
      let global = 0;
      const deadline = Date.now() + 30_000;
      while (global === 0 && Date.now() < deadline) {
        const d = await sized.try('api', { key: 'after' });
        if (d.source !== 'fallback') global = 1;
        else await new Promise((r) => setTimeout(r, 50));
      }
      expect(global).toBe(1);
      expect(await admitted(sized, 'after', 50)).toBe(39);
    } finally {
      await bare.close();
      await sized.close();
      await redis?.stop();
    }
  });
});
