import { once } from 'node:events';
import type { LimitStore } from '@sluice/core';
import { RedisStore, type RedisStoreOptions } from '@sluice/redis';

/** Prefix of the Redis keys Sluice writes during a benchmark (resources add a run id). */
export const PREFIX = 'sluice-bench:';
const CONNECT_TIMEOUT_MS = 5000;

/** Where the store connects: a Redis URL, or the seed nodes of a Redis Cluster. */
export type StoreTarget = string | { readonly clusterNodes: readonly string[] };

/**
 * The Sluice store under test: a RedisStore that owns its connection, connected before use.
 * `options` adds store options such as `commandTimeoutMs`.
 */
export async function createSluiceStore(
  target: StoreTarget,
  options: Pick<RedisStoreOptions, 'commandTimeoutMs' | 'peerRegistry'> = {},
): Promise<RedisStore & LimitStore> {
  const where = typeof target === 'string' ? { url: target } : { clusterNodes: target.clusterNodes };
  const store = new RedisStore({ ...where, prefix: PREFIX, ...options });
  if (store.client.status !== 'ready') {
    try {
      await once(store.client, 'ready', { signal: AbortSignal.timeout(CONNECT_TIMEOUT_MS) });
    } catch (err) {
      await store.close();
      const name = typeof target === 'string' ? target : target.clusterNodes.join(',');
      throw new Error(`the Redis store did not connect to ${name} within ${CONNECT_TIMEOUT_MS} ms`, { cause: err });
    }
  }
  return store;
}
