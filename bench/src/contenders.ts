import { Limiter, type LimitPolicy, type LimitStore } from '@sluice/core';
import { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { RecordingStore } from './recording-store.js';
import { createSluiceStore } from './sluice-store.js';

/** One rate limiter under test, reduced to the question the benchmark asks. */
export interface Decider {
  /** Resolves true if the call is admitted, false if limited; rejects on a fault. */
  decide(key: string): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * Sluice: a `Limiter` over the Redis store, one resource with `policy` (default resource
 * options: local pre-filter on), decided with `try`. `resource` should be unique to the run so
 * runs never see each other's state. `onAdmitted` receives the Redis time of each admission.
 *
 * A decision answered by the limiter's local fallback (the store failed) is not a global
 * decision, so it counts as a fault here, not as an admission or a denial.
 */
export async function sluiceDecider(
  redisUrl: string,
  resource: string,
  policy: LimitPolicy,
  onAdmitted?: (decidedAt: number) => void,
): Promise<Decider> {
  const redis = await createSluiceStore(redisUrl);
  const store: LimitStore = onAdmitted === undefined ? redis : new RecordingStore(redis, onAdmitted);
  const limiter = new Limiter({ resources: { [resource]: policy }, store });
  return {
    decide: async (key) => {
      const d = await limiter.try(resource, { key });
      if (d.source === 'fallback') throw new Error('the Redis store failed: the decision came from the local fallback');
      return d.allowed;
    },
    close: async () => {
      await limiter.close();
      await store.close();
    },
  };
}

/**
 * rate-limiter-flexible's `RateLimiterRedis` on a default ioredis client, as its README sets it
 * up: `consume` resolves when allowed and rejects with a `RateLimiterRes` when limited.
 */
export async function rlfDecider(redisUrl: string, keyPrefix: string, points: number, durationSec: number): Promise<Decider> {
  const client = new Redis(redisUrl, { lazyConnect: true });
  await client.connect();
  const limiter = new RateLimiterRedis({ storeClient: client, keyPrefix, points, duration: durationSec });
  return {
    decide: async (key) => {
      try {
        await limiter.consume(key);
        return true;
      } catch (err) {
        if (err instanceof RateLimiterRes) return false;
        throw err;
      }
    },
    close: async () => {
      await client.quit();
    },
  };
}
