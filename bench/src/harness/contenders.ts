import { Limiter, type LimitPolicy, type LimitStore, type LimiterObserver, type ResourceConfig } from '@sluice/core';
import { Cluster, Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { RecordingStore } from './recording-store.js';
import { createSluiceStore, type StoreTarget } from './sluice-store.js';

/** One rate limiter under test, reduced to the question the benchmark asks. */
export interface Decider {
  /** Resolves true if the call is admitted, false if limited; rejects on a fault. */
  decide(key: string): Promise<boolean>;
  close(): Promise<void>;
}

/** How the Sluice resource under test is set up beyond its limit. */
export interface SluiceSetup {
  /** Receives the Redis time of each admission decided by the store (`consume` only). */
  readonly onAdmitted?: (decidedAt: number) => void;
  /** Lease permits (`lease: true`), served by `trySync` when the lease has them. */
  readonly lease?: boolean;
  /** Spread each key over this many sub-keys (`split`). */
  readonly split?: number;
  /** The store's `commandTimeoutMs`. @default the store's default */
  readonly commandTimeoutMs?: number;
  /** The limiter's observer (e.g. the Prometheus observer, to measure what it costs). @default none */
  readonly observer?: LimiterObserver;
}

/**
 * Sluice: a `Limiter` over the Redis store, one resource with `policy` (default resource
 * options: local pre-filter on), decided with `try` (with a lease: `trySync` first, `try` when it
 * cannot answer without I/O). `resource` should be unique to the run so runs never see each
 * other's state.
 *
 * A decision answered by the limiter's local fallback (the store failed) is not a global
 * decision, so it counts as a fault here, not as an admission or a denial.
 */
export async function sluiceDecider(
  target: StoreTarget,
  resource: string,
  policy: LimitPolicy,
  setup: SluiceSetup = {},
): Promise<Decider> {
  const redis = await createSluiceStore(
    target,
    setup.commandTimeoutMs === undefined ? {} : { commandTimeoutMs: setup.commandTimeoutMs },
  );
  const store: LimitStore = setup.onAdmitted === undefined ? redis : new RecordingStore(redis, setup.onAdmitted);
  const config: ResourceConfig =
    setup.lease === true || setup.split !== undefined
      ? {
          limits: policy,
          ...(setup.lease === true ? { lease: true } : {}),
          ...(setup.split === undefined ? {} : { split: setup.split }),
        }
      : policy;
  let cause: unknown;
  const limiter = new Limiter({
    resources: { [resource]: config },
    store,
    failover: { onSwitch: (e) => (cause = e.healthy ? cause : e.error) },
    ...(setup.observer === undefined ? {} : { observer: setup.observer }),
  });
  const check = (allowed: boolean, source: string | undefined): boolean => {
    if (source === 'fallback') throw fallbackError(cause);
    return allowed;
  };
  const decide =
    setup.lease === true
      ? async (key: string) => {
          const d = limiter.trySync(resource, { key }) ?? (await limiter.try(resource, { key }));
          return check(d.allowed, d.source);
        }
      : async (key: string) => {
          const d = await limiter.try(resource, { key });
          return check(d.allowed, d.source);
        };
  return {
    decide,
    close: async () => {
      await limiter.close();
      await store.close();
    },
  };
}

/** The fault reported for a decision the local fallback made because the store failed with `cause`. */
export function fallbackError(cause: unknown): Error {
  const why = cause instanceof Error ? cause.message : 'the store failed';
  return new Error(`fallback decision (${why})`, { cause });
}

/**
 * rate-limiter-flexible's `RateLimiterRedis` on a default ioredis client (a `Cluster` client for
 * a cluster), as its README sets it up: `consume` resolves when allowed and rejects with a
 * `RateLimiterRes` when limited.
 */
export async function rlfDecider(target: StoreTarget, keyPrefix: string, points: number, durationSec: number): Promise<Decider> {
  const client =
    typeof target === 'string'
      ? new Redis(target, { lazyConnect: true })
      : new Cluster(
          target.clusterNodes.map((n) => {
            const [host, port] = n.split(':');
            return { host: host!, port: Number(port) };
          }),
          { lazyConnect: true },
        );
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
