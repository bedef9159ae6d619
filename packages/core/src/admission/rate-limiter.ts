import type { Decision } from '../shared/decision.js';
import type { OutcomeReport } from '../breakers/outcomes.js';

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
  release(resource: string, options: PermitOptions): Promise<boolean>;
  /** Extends a concurrency permit; true if it was still held. */
  renew(resource: string, options: PermitOptions): Promise<boolean>;
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
  /**
   * Reports how a call to the resource's downstream went, for its circuit breaker and outcome
   * tallies (optional: limiters without it keep no outcomes). Never waits, never throws for a
   * failed report.
   */
  reportOutcome?(report: OutcomeReport): unknown;
  /** True if the limiter knows the resource (has limits for it). */
  has(resource: string): boolean;
  /** Frees everything the limiter started. Idempotent. */
  close(): Promise<void>;
}

/** Options of `try`. */
export interface TryOptions {
  /** Sub-key within the resource (a tenant, user, ...). @default '' (the whole resource) */
  key?: string;
  /** Permits to take. @default 1 */
  cost?: number;
  /**
   * The tenant the call is made for: it also draws on that tenant's quota (the resource's
   * `tenants`, or its `'*'` default), inside the resource's own limits.
   */
  tenant?: string;
  /**
   * The call's tier. On a resource with `priority.coreShare`: `core` traffic may use the whole
   * limit; `normal` traffic cannot touch the share kept for core, so it is shed first. On a
   * resource with `priority.tiers`: one of its tier names (another is `SLUICE_ERR_UNKNOWN_TIER`).
   * @default the resource's default tier (`normal` without declared tiers)
   */
  priority?: Priority;
}

/**
 * A tier name: `core` or `normal` (`core` may use the core share, `normal` is shed first), or a
 * tier the resource declares in `priority.tiers`.
 */
export type Priority = 'core' | 'normal' | (string & NonNullable<unknown>);

/** Options of `acquire`. */
export interface AcquireOptions extends TryOptions {
  /** Longest wait in ms; 0 never waits. @default the limiter's maxWaitMs */
  maxWaitMs?: number;
  /** Cancels the wait; the call then rejects with `SLUICE_ERR_ABORTED`. */
  signal?: AbortSignal;
  /**
   * Who waits (a remote address, a tenant): one key's waiters of different clients are served in
   * turn, a full queue makes room for a client holding fewer places by turning away the newest
   * waiter of the client holding the most (`queue_full`), and each client may queue at most
   * `maxWaitersPerClient` callers. So one client cannot fill the queues of everyone else.
   * @default '' (nobody named: arrival order, no per-client bound)
   */
  client?: string;
}

/** Options of `book` and `claim`. */
export interface BookOptions extends TryOptions {
  /**
   * The caller's name for its booking, unique on the key (1 to 128 printable ASCII characters):
   * the same id books once, and later calls with it claim that booking. E.g. a Temporal
   * activity's workflow, run and activity ids, so every attempt names the same booking.
   */
  id: string;
  /**
   * The booking's secret (16 to 128 printable ASCII characters): a booking made keeps it, and
   * every later call naming the booking must show it, else it is refused
   * (`SLUICE_ERR_BOOKING_TOKEN`) and nothing changes. Ids are names, often guessable; the token
   * is what makes a booking its maker's. Give your own (unguessable, e.g. derived from a secret)
   * to share it between processes.
   * @default a fresh random one, answered in `booking.token` when booked
   */
  token?: string;
}

/** Identifies a booking for `cancel`. */
export interface CancelOptions {
  key?: string;
  id: string;
  /** The booking's token (see {@link BookOptions.token}). */
  token?: string;
}

/** Identifies a concurrency permit for `release` and `renew`. */
export interface PermitOptions {
  key?: string;
  /** The permit's id: a decision's `permitId`. */
  permitId: string;
  /** New lifetime for `renew`. @default the limit's permitTtlMs */
  ttlMs?: number;
}

/** What `adjust` charges or refunds. */
export interface AdjustOptions {
  key?: string;
  /** Permits to charge; negative refunds. */
  delta: number;
  /** The tenant the permits were taken for: its quota is adjusted too. */
  tenant?: string;
  /**
   * For returning a reservation's unused permits: the `at` that `Limiter.reserve` answered.
   * Sliding windows and logs then refund that reservation's charge only (see
   * `AdjustRequest.at`). Omitted: the newest charges made by now.
   */
  at?: number;
}
