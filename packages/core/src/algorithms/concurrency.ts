import { ALGORITHM_CODES, POLICY_BOUNDS, type CompiledLimit } from '../shared/limits.js';
import { EPS_PERMITS, ceilMs, wholePermits } from './types.js';

/** One held concurrency permit: `cost` permits until `expiresAt` unless renewed. */
export interface Lease {
  readonly id: string;
  readonly cost: number;
  readonly expiresAt: number;
}

/** Leases held on one key, in no particular order. */
export type ConcurrencyState = readonly Lease[];

/** Result of a concurrency decision. */
export interface ConcurrencyOutcome {
  allowed: boolean;
  remaining: number;
  /**
   * When denied: time until enough leases *expire* to admit the request. Leases released early
   * free permits sooner, so waiters should also be woken by releases.
   */
  retryAfterMs: number;
  resetAfterMs: number;
  next: ConcurrencyState;
  ttlMs: number;
}

/**
 * Concurrency permits: at most `limit` permits held at once. A permit is a lease with a TTL;
 * renewing extends it, releasing frees it, and an abandoned lease (its holder died) frees
 * itself when it expires. Pure functions of (leases, request, now, policy).
 */
export const concurrency = {
  name: 'concurrency' as const,
  code: ALGORITHM_CODES.concurrency,
  rate: false,
  windowed: false,
  fastPath: false,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit: CompiledLimit): number => limit.limit,
  /** Takes `cost` permits under `permitId` for `limit.leaseTtlMs` (or `ttlMs`). */
  acquire(
    state: ConcurrencyState | undefined,
    permitId: string,
    cost: number,
    now: number,
    limit: CompiledLimit,
    ttlMs = limit.leaseTtlMs,
  ): ConcurrencyOutcome {
    const leases = liveLeases(state, now).filter((l) => l.id !== permitId);
    const used = usedBy(leases);
    if (used + cost <= limit.limit + EPS_PERMITS) {
      const next = cost > 0 ? [...leases, { id: permitId, cost, expiresAt: now + ttlMs }] : leases;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - used - cost),
        retryAfterMs: 0,
        resetAfterMs: resetAfter(next, now),
        next,
        ttlMs: resetAfter(next, now),
      };
    }
    const byExpiry = leases.slice().sort((a, b) => a.expiresAt - b.expiresAt);
    let excess = used + cost - limit.limit;
    let retryAfterMs = 0;
    for (const l of byExpiry) {
      excess -= l.cost;
      if (excess <= EPS_PERMITS) {
        retryAfterMs = ceilMs(l.expiresAt - now);
        break;
      }
    }
    return {
      allowed: false,
      remaining: wholePermits(limit.limit - used),
      retryAfterMs,
      resetAfterMs: resetAfter(leases, now),
      next: leases,
      ttlMs: resetAfter(leases, now),
    };
  },

  /** Extends a live lease to `now + ttlMs`; `found` is false when it expired or never existed. */
  renew(
    state: ConcurrencyState | undefined,
    permitId: string,
    now: number,
    limit: CompiledLimit,
    ttlMs = limit.leaseTtlMs,
  ): { found: boolean; next: ConcurrencyState; ttlMs: number } {
    const leases = liveLeases(state, now);
    let found = false;
    const next = leases.map((l) => {
      if (l.id !== permitId) return l;
      found = true;
      return { id: l.id, cost: l.cost, expiresAt: Math.max(l.expiresAt, now + ttlMs) };
    });
    return { found, next, ttlMs: resetAfter(next, now) };
  },

  /** Frees a lease; `found` is false when it had already expired or been released. */
  release(
    state: ConcurrencyState | undefined,
    permitId: string,
    now: number,
  ): { found: boolean; next: ConcurrencyState; ttlMs: number } {
    const leases = liveLeases(state, now);
    const next = leases.filter((l) => l.id !== permitId);
    return { found: next.length !== leases.length, next, ttlMs: resetAfter(next, now) };
  },

  /** Permits held at `now`. */
  usage(state: ConcurrencyState | undefined, now: number): number {
    return usedBy(liveLeases(state, now));
  },
};

function liveLeases(state: ConcurrencyState | undefined, now: number): Lease[] {
  return state === undefined ? [] : state.filter((l) => l.expiresAt > now);
}

function usedBy(leases: readonly Lease[]): number {
  let s = 0;
  for (const l of leases) s += l.cost;
  return s;
}

function resetAfter(leases: readonly Lease[], now: number): number {
  let max = now;
  for (const l of leases) max = Math.max(max, l.expiresAt);
  return ceilMs(max - now);
}
