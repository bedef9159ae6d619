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
  readonly leaseTtlMs: number;
}
