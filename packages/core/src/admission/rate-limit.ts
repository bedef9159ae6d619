/**
 * The one-line start: one limit on keys, no resource map. It is a {@link Limiter} with a single
 * resource, and hands that limiter out (`.limiter`) for everything the full model adds (several
 * limits, tenants, priorities, failover policies, leases).
 */
import type { Decision } from '../shared/decision.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { Limiter, type LimiterOptions } from './limiter.js';
import type { Algorithm } from '../shared/limits.js';
import type { LimitPolicy } from '../shared/policy.js';
import type { AcquireOptions } from './rate-limiter.js';
import type { LimitStore } from '../store/store.js';

/** The resource name a {@link rateLimit} limiter keeps its limit under. */
export const RATE_LIMIT_RESOURCE = 'default';

/** Options of {@link rateLimit}: one limit, and where its state lives. */
export interface RateLimitOptions extends Omit<LimitPolicy, 'algorithm' | 'id'> {
  /**
   * The default admits at most `limit` in any window of `windowMs`, whatever the arrival
   * pattern: what "5 per second" usually means. `gcra` / `token-bucket` instead allow a burst
   * after idle time (with the default `burst = limit`, up to `2 x limit` in one window).
   * @default 'sliding-window'
   */
  algorithm?: Algorithm;
  /**
   * Where state lives. As with a {@link Limiter}: a store it made (the default) is closed by
   * `close()`; a store you pass stays yours to close, unless `closeStore` is true.
   * @default a new in-process MemoryStore
   */
  store?: LimitStore;
  /** `close()` closes the `store` you passed too. @default false */
  closeStore?: boolean;
  /** Limiter options beyond the limit and the store (clock, onStoreFailure, maxWaitMs, ...). */
  limiter?: Omit<LimiterOptions, 'resources' | 'store' | 'closeStore'>;
}

/** A limit on keys: {@link rateLimit}'s answer. */
export interface KeyLimiter {
  /** Takes `cost` permits (default 1) of `key` now, or is denied with a retry-after. */
  try(key: string, cost?: number): Promise<Decision>;
  /** Like `try`, waiting (bounded by `maxWaitMs`, cancellable by `signal`) for room. */
  acquire(key: string, options?: Omit<AcquireOptions, 'key'>): Promise<Decision>;
  /** The limiter underneath, whose one resource is {@link RATE_LIMIT_RESOURCE}. */
  readonly limiter: Limiter;
  /** Closes the limiter, and its store when it made it (or `closeStore` says so). */
  close(): Promise<void>;
}

/**
 * One limit on keys in one line.
 *
 * @example
 * const perUser = rateLimit({ limit: 5, windowMs: 1000 }); // at most 5 per user in any second
 * const d = await perUser.try('user-42');
 * if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`);
 * await perUser.close();
 */
export function rateLimit(options: RateLimitOptions): KeyLimiter {
  if (typeof options !== 'object' || options === null) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object with at least { limit }');
  }
  const { store, closeStore, limiter: rest, algorithm = 'sliding-window', ...policy } = options;
  let limiter: Limiter;
  try {
    limiter = new Limiter({
      ...rest,
      resources: { [RATE_LIMIT_RESOURCE]: { ...policy, algorithm } },
      ...(store === undefined ? {} : { store }),
      ...(closeStore === undefined ? {} : { closeStore }),
    });
  } catch (err) {
    throw asOwnOptions(err);
  }
  return {
    limiter,
    try: (key, cost) => limiter.try(RATE_LIMIT_RESOURCE, cost === undefined ? { key } : { key, cost }),
    acquire: (key, more) => limiter.acquire(RATE_LIMIT_RESOURCE, { ...more, key }),
    close: () => limiter.close(),
  };
}

/**
 * An error of the limit, named by the option the caller gave (`limit`), not by where the limiter
 * keeps it (`resources.default[0].limit`).
 */
function asOwnOptions(err: unknown): unknown {
  if (!(err instanceof SluiceError) || err.field === undefined) return err;
  const inner = /^resources\.default(?:\[0\]|\.limits\[0\])?\.?/;
  if (!inner.test(err.field)) return err;
  const field = err.field.replace(inner, '') || 'options';
  return new SluiceError(err.code, err.message.replace(err.field, field), { field, cause: err });
}
