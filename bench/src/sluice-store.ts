import { once } from 'node:events';
import type { LimitStore } from '@sluice/core';
import { RedisStore } from '@sluice/redis';

/** Prefix of the Redis keys Sluice writes during a benchmark (resources add a run id). */
const PREFIX = 'sluice-bench:';
const CONNECT_TIMEOUT_MS = 5000;

/** The Sluice store under test: a RedisStore that owns its connection, connected before use. */
export async function createSluiceStore(redisUrl: string): Promise<LimitStore> {
  const store = new RedisStore({ url: redisUrl, prefix: PREFIX });
  if (store.client.status !== 'ready') {
    try {
      await once(store.client, 'ready', { signal: AbortSignal.timeout(CONNECT_TIMEOUT_MS) });
    } catch (err) {
      await store.close();
      throw new Error(`the Redis store did not connect to ${redisUrl} within ${CONNECT_TIMEOUT_MS} ms`, { cause: err });
    }
  }
  return store;
}
