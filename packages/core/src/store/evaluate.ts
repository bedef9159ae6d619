import {
  algorithmOf,
  concurrency,
  normalizeState,
  rateAlgorithm,
  type ConcurrencyState,
  type RateState,
} from '../algorithms/index.js';
import type { LimitStatus } from '../shared/decision.js';
import { capacityOf, type CompiledLimit } from '../shared/policy.js';

/** Stored state of one limit: a rate state or the held permits of a concurrency limit. */
export type LimitState = RateState | ConcurrencyState;

/** Result of deciding one request against all limits of a key. */
export interface KeyVerdict {
  allowed: boolean;
  statuses: LimitStatus[];
  /** States to store, aligned with the limits (only meaningful when `allowed`). */
  next: (LimitState | undefined)[];
  /** How long the key's state must be kept. */
  ttlMs: number;
}

/**
 * Decides a request of `cost` against every limit of a key, all-or-nothing: each limit is
 * evaluated on the current state, and only if all allow is any of them charged. `states` are
 * aligned with `limits`. Pure: the same function runs in the in-memory store, and the Redis
 * scripts mirror it step by step.
 *
 * `coreShare` (0..1) is the share of each limit kept for core traffic: a caller outside it
 * is admitted only if `cost` plus that share still fits, and is charged `cost` alone. `holdMs`
 * is how long after `now` the permits may be used (a lease's lifetime, see `RateAlgorithm`).
 */
export function evaluateKey(
  states: readonly (LimitState | undefined)[],
  limits: readonly CompiledLimit[],
  cost: number,
  now: number,
  permitId: string,
  coreShare = 0,
  holdMs = 0,
): KeyVerdict {
  const statuses = new Array<LimitStatus>(limits.length);
  // Sized up front: the array is kept as the key's state, and a pushed-to array over-allocates.
  const next = new Array<LimitState | undefined>(limits.length);
  let allowed = true;
  let ttlMs = 0;
  // A plain loop: every decision passes here, and a closure per call showed in profiles.
  for (let i = 0; i < limits.length; i++) {
    const limit = limits[i]!;
    const corePermits = coreShare > 0 ? Math.floor(coreShare * capacityOf(limit)) : 0;
    let o = decideLimit(states[i], limit, cost + corePermits, now, permitId, holdMs);
    // The check passed with the core share: charge the cost alone.
    if (corePermits > 0 && o.allowed) o = decideLimit(states[i], limit, cost, now, permitId, holdMs);
    allowed &&= o.allowed;
    ttlMs = Math.max(ttlMs, o.ttlMs);
    next[i] = o.next;
    statuses[i] = limitStatus(limit, o, corePermits);
  }
  if (!allowed) {
    // Nothing was charged, so limits that would have allowed still have the cost in hand.
    for (let i = 0; i < statuses.length; i++) {
      const s = statuses[i]!;
      if (s.allowed) statuses[i] = { ...s, remaining: s.remaining + cost };
    }
  }
  return { allowed, statuses, next, ttlMs };
}

function decideLimit(
  stored: LimitState | undefined,
  limit: CompiledLimit,
  cost: number,
  now: number,
  permitId: string,
  holdMs: number,
) {
  return !algorithmOf(limit).rate
    ? concurrency.acquire(stored as ConcurrencyState | undefined, permitId, cost, now, limit)
    : rateAlgorithm(limit.code)!.evaluate(normalizeState(stored as RateState | undefined, now, limit), cost, now, limit, holdMs);
}

/**
 * Takes as many permits as the key can give now, between `min` and `max`, in one step: a
 * zero-cost look at every limit gives the permits left, and `min(max, least left)` is charged
 * all-or-nothing. Grants 0 (and charges nothing) when fewer than `min` are left. Used by client
 * leases: a process takes a batch of permits from the global budget and serves them locally,
 * for at most `holdMs`.
 */
export function reserveKey(
  states: readonly (LimitState | undefined)[],
  limits: readonly CompiledLimit[],
  min: number,
  max: number,
  now: number,
  holdMs = 0,
): KeyVerdict & { granted: number } {
  const peek = evaluateKey(states, limits, 0, now, '');
  let left = max;
  for (const s of peek.statuses) left = Math.min(left, s.remaining);
  const granted = left >= min && left > 0 ? left : 0;
  const outcome = evaluateKey(states, limits, granted === 0 ? min : granted, now, '', 0, holdMs);
  return { ...outcome, allowed: granted > 0 && outcome.allowed, granted: granted > 0 && outcome.allowed ? granted : 0 };
}

/**
 * Applies an adjustment of `delta` permits (negative: refund) to every rate limit of a key,
 * unconditionally. Concurrency limits are not affected (a held permit's size is fixed). `at` > 0 names
 * the charge a refund is for (see `AdjustRequest.at`).
 */
export function adjustKey(
  states: readonly (LimitState | undefined)[],
  limits: readonly CompiledLimit[],
  delta: number,
  now: number,
  at = 0,
): { next: (LimitState | undefined)[]; ttlMs: number } {
  let ttlMs = 0;
  const next = limits.map((limit, i) => {
    const stored = states[i];
    if (!algorithmOf(limit).rate) {
      const held = stored as ConcurrencyState | undefined;
      if (held !== undefined) ttlMs = Math.max(ttlMs, ...held.map((l) => Math.ceil(l.expiresAt - now)));
      return held;
    }
    const o = rateAlgorithm(limit.code)!.adjust(
      normalizeState(stored as RateState | undefined, now, limit),
      delta,
      now,
      limit,
      at,
    );
    ttlMs = Math.max(ttlMs, o.ttlMs);
    return o.next;
  });
  return { next, ttlMs };
}

/** A limit's status of a verdict on one key; `corePermits` held back are not offered as remaining. */
export function limitStatus(
  limit: CompiledLimit,
  o: { readonly allowed: boolean; readonly remaining: number; readonly retryAfterMs: number; readonly resetAfterMs: number },
  corePermits = 0,
): LimitStatus {
  return {
    id: limit.id,
    algorithm: limit.algorithm,
    allowed: o.allowed,
    limit: limit.limit,
    remaining: Math.max(0, o.remaining - corePermits),
    retryAfterMs: o.retryAfterMs,
    resetAfterMs: o.resetAfterMs,
  };
}
