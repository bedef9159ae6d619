import { ALGORITHM_CODES, POLICY_BOUNDS, type CompiledLimit } from '../shared/limits.js';
import { EPS_PERMITS, ceilMs, wholePermits } from './types.js';

/** One held concurrency permit: `cost` permits until `expiresAt` unless renewed. */
export interface HeldPermit {
  readonly id: string;
  readonly cost: number;
  readonly expiresAt: number;
}

/** Permits held on one key, in no particular order. */
export type ConcurrencyState = readonly HeldPermit[];

/** Result of a concurrency decision. */
export interface ConcurrencyVerdict {
  allowed: boolean;
  remaining: number;
  /**
   * When denied: time until enough held permits *expire* to admit the request. Permits released early
   * free permits sooner, so waiters should also be woken by releases.
   */
  retryAfterMs: number;
  resetAfterMs: number;
  next: ConcurrencyState;
  ttlMs: number;
}

/**
 * Concurrency permits: at most `limit` permits held at once. A permit is held with a TTL;
 * renewing extends it, releasing frees it, and an abandoned permit (its holder died) frees
 * itself when it expires. Pure functions of (held permits, request, now, policy).
 */
export const concurrency = {
  name: 'concurrency' as const,
  code: ALGORITHM_CODES.concurrency,
  rate: false,
  windowed: false,
  fastPath: false,
  largestLimit: POLICY_BOUNDS.maxLimit,
  capacity: (limit: CompiledLimit): number => limit.limit,
  /** Takes `cost` permits under `permitId` for `limit.permitTtlMs` (or `ttlMs`). */
  acquire(
    state: ConcurrencyState | undefined,
    permitId: string,
    cost: number,
    now: number,
    limit: CompiledLimit,
    ttlMs = limit.permitTtlMs,
  ): ConcurrencyVerdict {
    const held = livePermits(state, now).filter((l) => l.id !== permitId);
    const used = usedBy(held);
    if (used + cost <= limit.limit + EPS_PERMITS) {
      const next = cost > 0 ? [...held, { id: permitId, cost, expiresAt: now + ttlMs }] : held;
      return {
        allowed: true,
        remaining: wholePermits(limit.limit - used - cost),
        retryAfterMs: 0,
        resetAfterMs: resetAfter(next, now),
        next,
        ttlMs: resetAfter(next, now),
      };
    }
    const byExpiry = held.slice().sort((a, b) => a.expiresAt - b.expiresAt);
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
      resetAfterMs: resetAfter(held, now),
      next: held,
      ttlMs: resetAfter(held, now),
    };
  },

  /** Extends a live permit to `now + ttlMs`; `found` is false when it expired or never existed. */
  renew(
    state: ConcurrencyState | undefined,
    permitId: string,
    now: number,
    limit: CompiledLimit,
    ttlMs = limit.permitTtlMs,
  ): { found: boolean; next: ConcurrencyState; ttlMs: number } {
    const held = livePermits(state, now);
    let found = false;
    const next = held.map((l) => {
      if (l.id !== permitId) return l;
      found = true;
      return { id: l.id, cost: l.cost, expiresAt: Math.max(l.expiresAt, now + ttlMs) };
    });
    return { found, next, ttlMs: resetAfter(next, now) };
  },

  /** Frees a permit; `found` is false when it had already expired or been released. */
  release(
    state: ConcurrencyState | undefined,
    permitId: string,
    now: number,
  ): { found: boolean; next: ConcurrencyState; ttlMs: number } {
    const held = livePermits(state, now);
    const next = held.filter((l) => l.id !== permitId);
    return { found: next.length !== held.length, next, ttlMs: resetAfter(next, now) };
  },

  /** Permits held at `now`. */
  usage(state: ConcurrencyState | undefined, now: number): number {
    return usedBy(livePermits(state, now));
  },
};

function livePermits(state: ConcurrencyState | undefined, now: number): HeldPermit[] {
  return state === undefined ? [] : state.filter((l) => l.expiresAt > now);
}

function usedBy(held: readonly HeldPermit[]): number {
  let s = 0;
  for (const l of held) s += l.cost;
  return s;
}

function resetAfter(held: readonly HeldPermit[], now: number): number {
  let max = now;
  for (const l of held) max = Math.max(max, l.expiresAt);
  return ceilMs(max - now);
}
