import type { Algorithm, CompiledLimit } from '../shared/limits.js';

/**
 * State of one rate limit on one key: a small array of numbers whose first element is the
 * algorithm's code. Stores keep it opaque; the same layout is used by the Redis scripts.
 */
export type RateState = readonly number[];

/** Result of evaluating one limit for one request. Pure data, no I/O. */
export interface LimitVerdict {
  allowed: boolean;
  /** Whole permits left after this request (when allowed) or now (when denied). */
  remaining: number;
  /** Milliseconds until this request could be admitted; 0 when allowed. */
  retryAfterMs: number;
  /** Milliseconds until the limit is fully replenished. */
  resetAfterMs: number;
  /** The state to store if the request is admitted (all limits of the key allowed it). */
  next: RateState;
  /** How long `next` must be kept; after that it is equivalent to no state. */
  ttlMs: number;
}

/** Result of an adjustment: the state to store (undefined: none needed) and its lifetime. */
export interface AdjustResult {
  next: RateState | undefined;
  ttlMs: number;
}

/**
 * What the rest of Sluice asks of an algorithm without running it: the facts that decide which
 * checks, calls and fast paths a limit of it takes. Read them here instead of comparing names.
 */
export interface AlgorithmTraits {
  /** The algorithm's name in policies. */
  readonly name: Algorithm;
  /** Its code, the first number of its state (shared with the Redis scripts). */
  readonly code: number;
  /**
   * Counts permits over time. False for concurrency, whose permits are held until released: such
   * limits cannot be leased, reserved, booked, split or given a boost pool.
   */
  readonly rate: boolean;
  /**
   * Stamps each charge: a reservation's hold and a refund's stamp apply to it (see
   * `ReserveRequest.holdMs`, `AdjustRequest.at`).
   */
  readonly windowed: boolean;
  /** Its state is three numbers, which the Redis script's one-limit fast path takes. */
  readonly fastPath: boolean;
  /** The largest `limit` a policy of it may set (the exact log keeps one entry per permit). */
  readonly largestLimit: number;
  /** The most a limit of it holds at once: a bucket's burst, a window's limit, concurrent permits. */
  capacity(limit: CompiledLimit): number;
}

/**
 * A rate algorithm as pure functions of (state, request, now, policy). `now` is milliseconds on
 * the store's clock. Every function tolerates `now` going backwards (it never refunds time).
 */
export interface RateAlgorithm extends AlgorithmTraits {
  /**
   * Decides a request of `cost` permits. `holdMs` (a lease's lifetime) says the permits may be
   * used until `now + holdMs`: the window algorithms count them as taken then, so their bound
   * holds on the times permits are used; the others ignore it.
   */
  evaluate(state: RateState | undefined, cost: number, now: number, limit: CompiledLimit, holdMs?: number): LimitVerdict;
  /**
   * {@link evaluate} of an admitted call that charges `cost` now, on a state held in `held` from
   * index `at` to its end, written over in place (`held` is the caller's own array: the in-memory
   * store's packed slot). Decides exactly as `evaluate` and leaves in `held` what `evaluate` gives
   * as `next`; undefined, with `held` untouched, when `evaluate` must decide (a denial, a state of
   * another algorithm or layout). Optional: the store falls back to `evaluate`.
   */
  admitInPlace?(
    held: number[],
    at: number,
    cost: number,
    now: number,
    limit: CompiledLimit,
  ): Omit<LimitVerdict, 'next'> | undefined;
  /**
   * Charges `delta` more permits (or refunds `-delta`) without a decision. `at` > 0 names the
   * charge a refund is for (a reservation's stamp, see `evaluate`); the window algorithms refund
   * that charge only, the others ignore it.
   */
  adjust(state: RateState | undefined, delta: number, now: number, limit: CompiledLimit, at?: number): AdjustResult;
  /** Permits in use at `now` according to a state of this algorithm. */
  usage(state: RateState, now: number, limit: CompiledLimit): number;
  /** A state of this algorithm that has `used` permits in use at `now`. */
  fromUsage(used: number, now: number, limit: CompiledLimit): RateState;
  /** True when `state` was built with parameters compatible with `limit`. */
  compatible(state: RateState, limit: CompiledLimit): boolean;

  // Bookings (deferred admission, see booking.ts): permits promised for a slot ahead, used once
  // somewhere in `[start, end)` on the store's clock. Each algorithm books so that its bound on
  // any window holds on the times booked permits are used, as if they were admitted then.

  /**
   * The earliest time at or after `from` from which `cost` permits fit the limit for a use
   * anywhere in a short span after it, given every charge and booking in `state`; Infinity when
   * they never can.
   */
  startOf(state: RateState | undefined, cost: number, from: number, now: number, limit: CompiledLimit): number;
  /**
   * The longest span (ms) a booking of `cost` starting at `start` may be used in without adding
   * to the limit's bound: a token bucket's or GCRA's spare burst or one emission interval,
   * whichever is longer (docs/algorithms.md, bookings), a fixed window's remaining time; Infinity
   * for the sliding algorithms (they count the permits to the span's end).
   */
  claimSpan(state: RateState | undefined, cost: number, start: number, now: number, limit: CompiledLimit): number;
  /** Charges a booking of `cost` used somewhere in `[start, end)` (start from {@link startOf}). */
  book(state: RateState | undefined, cost: number, start: number, end: number, now: number, limit: CompiledLimit): AdjustResult;
  /**
   * Gives back a booking that was never claimed, where the bound allows: the window algorithms
   * always (its permits were never used), a token bucket or GCRA only when `newest` (nothing was
   * charged after it, so no later admission was judged on it).
   */
  unbook(
    state: RateState | undefined,
    cost: number,
    start: number,
    end: number,
    now: number,
    limit: CompiledLimit,
    newest: boolean,
  ): AdjustResult;
  /** A booking claimed at `now`: the sliding algorithms move its charge from `end` to `now`. */
  claim(state: RateState | undefined, cost: number, end: number, now: number, limit: CompiledLimit): AdjustResult;
}

/** Tolerance for floating-point comparisons of permits. */
export const EPS_PERMITS = 1e-6;
/** Tolerance for floating-point comparisons of times (store clocks are epoch ms, ulp ~0.25 us). */
export const EPS_MS = 1e-3;

/** Whole permits in `x`, tolerating float noise just below an integer. */
export function wholePermits(x: number): number {
  return Math.max(0, Math.floor(x + EPS_PERMITS));
}

/**
 * Usage after an adjustment of `delta` permits. A refund never takes usage below 0, so it never
 * lifts a key above its capacity; a charge never takes it past `ceiling`, the most debt the limit
 * allows, and never lowers usage already beyond it (a policy change may leave more).
 */
export function adjustedUsage(used: number, delta: number, ceiling: number): number {
  if (delta <= 0) return Math.max(0, used + delta);
  return Math.max(used, Math.min(used + delta, ceiling));
}

/** Milliseconds rounded up, never negative. */
export function ceilMs(x: number): number {
  return Math.max(0, Math.ceil(x - EPS_MS));
}

/** What {@link RateAlgorithm.admitInPlace} gives for an admitted call: its state is kept as long as it resets. */
export function admittedInPlace(remaining: number, resetAfterMs: number): Omit<LimitVerdict, 'next'> {
  return { allowed: true, remaining, retryAfterMs: 0, resetAfterMs, ttlMs: resetAfterMs };
}
