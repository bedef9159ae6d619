/**
 * Sluice's Redis and Redis Cluster store: limit state shared by every process, decided
 * atomically inside Redis on Redis' clock, many decisions per round trip.
 *
 * @example
 * import { Limiter } from '@sluice/core';
 * import { RedisStore } from '@sluice/redis';
 *
 * const store = new RedisStore({ url: 'redis://127.0.0.1:6379' });
 * // or: new RedisStore({ clusterNodes: ['10.0.0.1:7000', '10.0.0.2:7000'] })
 * // or: new RedisStore({ client: myIoredisClient }) // not closed by the store
 * const limiter = new Limiter({
 *   store,
 *   resources: { 'payments-api': { algorithm: 'gcra', limit: 1000, windowMs: 60_000 } },
 * });
 * const d = await limiter.try('payments-api', { key: 'tenant-a' });
 * await limiter.close();
 * await store.close();
 */
export { RedisPeerRegistry, type RedisPeerRegistryOptions } from './peer-registry.js';
export { RedisStore } from './redis-store.js';
export { memoryPolicyProblem, readMemoryPolicy, type MemoryPolicy } from './memory-policy.js';
export {
  REDIS_STORE_BOUNDS,
  compileRedisStoreOptions,
  type ClusterSeed,
  type CompiledRedisStoreOptions,
  type RedisStoreOptions,
} from './options.js';
export { hashTag, keyNames, type KeyNames } from './keys.js';
export { batchScriptSource, type LuaScript } from './scripts.js';
export { parseRedisTime, redisTimeSource, type RedisTimeTarget } from './time.js';
export { outcomeKeys, outcomesScriptSource } from './outcomes.js';
