import type { Cohort } from '../breakers/cohort.js';
import type { Algorithm, CompiledLimit } from './limits.js';
import { ALGORITHM_TRAITS } from '../algorithms/index.js';

/**
 * Why a decision came out the way it did. Later layers add their own (pre-filter, fallbacks,
 * circuit breaker); the set only grows.
 */
export type DecisionReason =
  | 'allowed'
  /** A rate limit has no permits left. */
  | 'rate_limited'
  /** A concurrency limit has no free permits. */
  | 'concurrency_limited'
  /** `acquire` gave up because its wait bound would be exceeded. */
  | 'wait_timeout'
  /** `acquire` found too many waiters already queued on the key. */
  | 'queue_full'
  /** The resource's circuit breaker is open: the downstream is failing. */
  | 'circuit_open'
  /** The store is unavailable and the resource's store-failure policy is `closed`. */
  | 'store_unavailable';

/**
 * Who made a decision: the store (a global decision), the local pre-filter (a key known to be
 * over its limit), or a local stand-in when the store is unavailable.
 */
export type DecisionSource = 'store' | 'prefilter' | 'lease' | 'fallback' | 'breaker';

/**
 * What a booking call came to (deferred admission, see `Limiter.book`):
 * - `admitted`: the key had room now; charged as `try` would, nothing booked;
 * - `booked`: a booking is held (just made, or made before and not yet due): claim it from its start;
 * - `claimed`: the booking was due and is now used: admitted;
 * - `denied`: nothing booked (no slot within `maxAheadMs`, `maxBookings` or `maxShare` held, no
 *   room in the store, or a span too short);
 * - `missing`: a claim found no such booking (never made, claimed, cancelled or expired).
 */
export type BookingVerdict = 'admitted' | 'booked' | 'claimed' | 'denied' | 'missing';

/** The booking a decision of `Limiter.book` or `claim` speaks of. */
export interface BookingInfo {
  readonly outcome: BookingVerdict;
  /** The booking's id, as the caller named it. */
  readonly id: string;
  /** For `booked`: milliseconds until it may be claimed (the decision's `retryAfterMs` too). */
  readonly startsInMs: number;
  /** For `booked` and `claimed`: milliseconds until it expires (a claim must come before). */
  readonly expiresInMs: number;
  /**
   * For `booked`: the booking's token, the secret every later call naming it (claim, cancel or
   * book again) must show. The one the caller gave, or one made for it.
   */
  readonly token?: string;
}

/** The state of one limit of a key after a decision. */
export interface LimitStatus {
  readonly id: string;
  readonly algorithm: Algorithm;
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly retryAfterMs: number;
  readonly resetAfterMs: number;
}

/**
 * A rate-limit decision. Being limited is a decision with `allowed: false`, never an exception.
 * The headline figures (`limit`, `remaining`, `resetAfterMs`) come from the limit that decided:
 * the denying limit with the longest retry-after, or, when allowed, the one with the fewest
 * permits left.
 */
export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Milliseconds until a retry could succeed (0 when allowed). */
  readonly retryAfterMs: number;
  /** Milliseconds until the deciding limit is fully replenished. */
  readonly resetAfterMs: number;
  readonly reason: DecisionReason;
  /** Id of the limit the headline figures come from. */
  readonly limitId: string;
  /** Every limit of the key, in policy order. */
  readonly statuses: readonly LimitStatus[];
  /** The concurrency permit taken, when the key has a concurrency limit and was allowed. */
  readonly permitId?: string;
  /** Milliseconds spent waiting in `acquire`. */
  readonly waitedMs?: number;
  /** Who decided. @default 'store' when absent */
  readonly source?: DecisionSource;
  /**
   * Set when the resource is in shadow mode and the call would have been denied: it was
   * admitted anyway, and this says why and for how long it would have waited.
   */
  readonly shadow?: { readonly reason: DecisionReason; readonly retryAfterMs: number };
  /** For `Limiter.book` and `claim`: the booking this call made, holds or used. */
  readonly booking?: BookingInfo;
  /**
   * Set when the resource's limits denied the call and its boost pool admitted it (the call's
   * tier may draw on the pool): the figures are the pool's.
   */
  readonly boosted?: true;
  /**
   * From the service, during a rollout that splits the resource: whose limits decided the key,
   * the version in force's (`baseline`, its number in the `Sluice-Rules-Version` header) or the
   * rollout's candidate's (`candidate`). Absent when nothing splits the resource.
   */
  readonly cohort?: Cohort;
}

/**
 * Statuses of a call no limit judged (a claim with nothing to claim, a key refused for want of
 * room): every limit denies, nothing charged, retry after `retryAfterMs`.
 */
export function unjudgedStatuses(limits: readonly CompiledLimit[], retryAfterMs = 0): LimitStatus[] {
  return limits.map((l) => ({
    id: l.id,
    algorithm: l.algorithm,
    allowed: false,
    limit: l.limit,
    remaining: 0,
    retryAfterMs,
    resetAfterMs: retryAfterMs,
  }));
}

/** Folds per-limit statuses into one decision (all-or-nothing). */
export function combineStatuses(statuses: readonly LimitStatus[], permitId?: string): Decision {
  let decider: LimitStatus | undefined;
  let allowed = true;
  for (const s of statuses) if (!s.allowed) allowed = false;
  for (const s of statuses) {
    if (allowed) {
      if (!decider || s.remaining < decider.remaining) decider = s;
    } else if (!s.allowed && (!decider || s.retryAfterMs > decider.retryAfterMs)) {
      decider = s;
    }
  }
  if (!decider) throw new Error('combineStatuses needs at least one status');
  const base = {
    allowed,
    limit: decider.limit,
    remaining: decider.remaining,
    retryAfterMs: allowed ? 0 : decider.retryAfterMs,
    resetAfterMs: decider.resetAfterMs,
    reason: allowed ? 'allowed' : !ALGORITHM_TRAITS[decider.algorithm].rate ? 'concurrency_limited' : 'rate_limited',
    limitId: decider.id,
    statuses,
  } as const;
  return allowed && permitId !== undefined ? { ...base, permitId } : base;
}

/** A copy of `decision` with another reason and verdict, e.g. when a wait gives up. */
export function withReason(decision: Decision, reason: DecisionReason, allowed = decision.allowed): Decision {
  return { ...decision, allowed, reason };
}
