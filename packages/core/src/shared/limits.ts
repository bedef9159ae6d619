/**
 * The names, codes and compiled form of limits: a leaf every other module may import (decisions,
 * errors and policies alike) without an import cycle.
 */

/** The limiting algorithms. See docs/algorithms.md for their trade-offs. */
export const ALGORITHMS = ['token-bucket', 'gcra', 'sliding-window', 'sliding-log', 'fixed-window', 'concurrency'] as const;

/** One of {@link ALGORITHMS}. */
export type Algorithm = (typeof ALGORITHMS)[number];

/** Numeric algorithm codes, shared with the Redis scripts (state is tagged with them). */
export const ALGORITHM_CODES: Readonly<Record<Algorithm, number>> = Object.freeze({
  'token-bucket': 1,
  gcra: 2,
  'sliding-window': 3,
  'fixed-window': 4,
  'sliding-log': 5,
  concurrency: 6,
});

/** A validated, defaulted and frozen {@link LimitPolicy}. */
export interface CompiledLimit {
  readonly id: string;
  readonly algorithm: Algorithm;
  readonly code: number;
  readonly limit: number;
  readonly windowMs: number;
  readonly burst: number;
  readonly slices: number;
  readonly permitTtlMs: number;
}

/** Upper bounds on policy fields; anything larger is a configuration mistake. */
export const POLICY_BOUNDS = Object.freeze({
  maxLimit: 1_000_000_000,
  maxWindowMs: 366 * 24 * 3600 * 1000,
  maxSlices: 100,
  /** The exact log keeps one entry per admitted call, so its limit is kept small. */
  maxLogLimit: 10_000,
  minPermitTtlMs: 10,
  maxPermitTtlMs: 24 * 3600 * 1000,
  maxLimitsPerKey: 8,
  maxIdLength: 64,
  /** The longest a reservation's permits may be held before use (a lease's lifetime). */
  maxHoldMs: 60_000,
  /** The largest stamp a refund may name (epoch ms in the year 33658: any real clock is below it). */
  maxStampMs: 1e15,
});
