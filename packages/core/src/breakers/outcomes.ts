/**
 * What the control plane knows of a downstream's health: the outcomes of calls made under a
 * resource's permits (reported by `limiter.call()`, the Temporal gate and the service's outcome
 * API), tallied over a recent window. Producers and consumers meet at these types: the fleet-wide
 * breakers count outcomes, rollouts and adaptive limits read them.
 */

/** One reported call (or `count` like calls) to a downstream. */
export interface OutcomeReport {
  /** The resource whose permit the call ran under. */
  readonly resource: string;
  /** The key the permit was for, when known (rollouts place a key in a cohort by it). */
  readonly key?: string;
  /** True when the downstream call succeeded. */
  readonly ok: boolean;
  /** How long the call took, in ms. */
  readonly durationMs: number;
  /** How many like calls this report stands for. @default 1 */
  readonly count?: number;
}

/** Outcomes of one resource (and cohort) over a window. */
export interface OutcomeTotals {
  readonly calls: number;
  readonly failures: number;
  /** Calls slower than the resource's slow-call threshold. */
  readonly slow: number;
  /** Sum of the calls' durations, in ms (mean latency = totalDurationMs / calls). */
  readonly totalDurationMs: number;
}

/** No outcomes. */
export const NO_OUTCOMES: OutcomeTotals = Object.freeze({ calls: 0, failures: 0, slow: 0, totalDurationMs: 0 });

/**
 * Where outcome tallies are read. `cohort` names a group of keys (a rollout's `baseline` or
 * `candidate`); without it, every outcome of the resource counts.
 */
export interface OutcomeSource {
  /** Tallies of `resource` over (about) the last `windowMs`. */
  outcomeTotals(resource: string, windowMs: number, cohort?: string, read?: TallyRead): Promise<OutcomeTotals>;
}

/** How a window of tallies is read. */
export interface TallyRead {
  /**
   * Only buckets that have ended: the window is the `ceil(windowMs / 1 s)` whole buckets before
   * the one in progress (at least one). By default the window ends with the bucket in progress,
   * so its latest part is partial.
   */
  readonly complete?: boolean;
}
