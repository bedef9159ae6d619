import type { Decision } from './decision.js';
import type { AcquireOptions, AdjustOptions, BookOptions, CancelOptions, LeaseOptions, TryOptions } from './limiter.js';

/**
 * What every Sluice limiter offers, whichever way it decides: {@link Limiter} over the embedded
 * store or Redis, or the remote client over `sluice serve`. Integrations (Temporal, gateways)
 * take this interface so any of them can be plugged in.
 */
export interface RateLimiter {
  /** Decides at once: never waits. Being limited is `allowed: false`, not an exception. */
  try(resource: string, options?: TryOptions): Promise<Decision>;
  /**
   * Decides from local state only (a lease or the pre-filter), or `undefined` when the call
   * needs a round trip; never blocks.
   */
  trySync(resource: string, options?: TryOptions): Decision | undefined;
  /** Waits (bounded, cancellable) until permitted or the wait bound is reached. */
  acquire(resource: string, options?: AcquireOptions): Promise<Decision>;
  /** Frees a concurrency permit; true if it was held. */
  release(resource: string, options: LeaseOptions): Promise<boolean>;
  /** Extends a concurrency permit; true if it was still held. */
  renew(resource: string, options: LeaseOptions): Promise<boolean>;
  /**
   * Charges `delta` more permits (negative: a refund) after the fact; with `tenant`, the tenant's
   * quota is charged or refunded too, as the call that took the permits was.
   */
  adjust(resource: string, options: AdjustOptions): Promise<void>;
  /**
   * Deferred admission (optional: limiters without it cannot book): admits now, or books the
   * earliest slot and answers when to claim it; the same `id` later claims it.
   */
  book?(resource: string, options: BookOptions): Promise<Decision>;
  /** Claims a booking made by `book`, never making one. */
  claim?(resource: string, options: BookOptions): Promise<Decision>;
  /** Cancels a booking not yet claimed; true if it was held. */
  cancel?(resource: string, options: CancelOptions): Promise<boolean>;
  /** True if the limiter knows the resource (has limits for it). */
  has(resource: string): boolean;
  /** Frees everything the limiter started. Idempotent. */
  close(): Promise<void>;
}
