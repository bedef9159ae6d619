import type { CircuitState } from './circuit-breaker.js';
import { NO_OUTCOMES, type OutcomeTotals } from './outcomes.js';

/**
 * A fleet-wide circuit breaker's judgement, as a pure function of (record, outcomes, now,
 * policy). The store keeps one record per resource and applies {@link stepFleetBreaker} to it
 * atomically (the MemoryStore in process, the Redis store in `lua/outcomes.lua`, which mirrors
 * this file line by line), so every process sharing the store sees one state.
 */

/** What the store needs of a resource's breaker settings (core's `CircuitBreakerOptions`, compiled). */
export interface FleetBreakerPolicy {
  readonly windowMs: number;
  readonly buckets: number;
  readonly minimumCalls: number;
  readonly failureRateThreshold: number;
  readonly slowCallRateThreshold: number;
  readonly openDurationMs: number;
  readonly halfOpenProbes: number;
}

/** One bucket of a breaker's sliding window. */
export interface BreakerBucket {
  index: number;
  calls: number;
  failures: number;
  slow: number;
}

/** A fleet breaker's state in the store. */
export interface FleetBreakerRecord {
  state: CircuitState;
  /** When it last opened (store clock, ms). */
  openedAt: number;
  /** Probe permits handed out in this half-open period. */
  probesTaken: number;
  /** Probe outcomes reported successful in this half-open period. */
  probesOk: number;
  /** When the last probe permit was handed out (or the state last changed). */
  lastProbeAt: number;
  /** The sliding window, `policy.buckets` long (a ring indexed by bucket number). */
  buckets: BreakerBucket[];
}

/** What a process learns from the store about a fleet breaker. */
export interface FleetBreakerStatus {
  readonly state: CircuitState;
  /**
   * Open: ms until probes are let through. Half-open without a probe permit for this caller:
   * ms until unanswered probes are written off and new ones handed out. 0 otherwise.
   */
  readonly retryAfterMs: number;
  /** True when this call was handed one of the half-open period's probe permits. */
  readonly probe: boolean;
}

/** A new record: closed, with an empty window. */
export function newFleetBreakerRecord(policy: FleetBreakerPolicy): FleetBreakerRecord {
  return {
    state: 'closed',
    openedAt: 0,
    probesTaken: 0,
    probesOk: 0,
    lastProbeAt: 0,
    buckets: Array.from({ length: policy.buckets }, () => ({ index: -1, calls: 0, failures: 0, slow: 0 })),
  };
}

function transition(r: FleetBreakerRecord, to: CircuitState, now: number): void {
  if (r.state === to) return;
  r.state = to;
  if (to === 'open') r.openedAt = now;
  r.lastProbeAt = now;
  r.probesTaken = 0;
  r.probesOk = 0;
  if (to === 'closed') for (const b of r.buckets) b.index = -1;
}

/**
 * Applies reported outcomes and (with `takeProbe`) a request for a probe permit to `record`
 * at `now`, as the in-process `CircuitBreaker` would: closed, outcomes fill the sliding window
 * and open the breaker past a threshold; open, outcomes are ignored (calls that began before it
 * opened) until `openDurationMs` has passed, then it is half-open; half-open, every reported
 * outcome is judged as a probe's (one failed or slow call re-opens, `halfOpenProbes` successes
 * close), and at most `halfOpenProbes` permits are handed out per half-open period, new ones
 * only once the last handed out is `openDurationMs` old (probes whose outcome never came).
 */
export function stepFleetBreaker(
  record: FleetBreakerRecord,
  policy: FleetBreakerPolicy,
  now: number,
  outcomes: OutcomeTotals = NO_OUTCOMES,
  takeProbe = false,
): FleetBreakerStatus {
  const r = record;
  if (r.state === 'open' && now >= r.openedAt + policy.openDurationMs) transition(r, 'half_open', now);
  if (outcomes.calls > 0) {
    if (r.state === 'half_open') {
      if (outcomes.failures > 0 || outcomes.slow > 0) transition(r, 'open', now);
      else {
        r.probesOk += outcomes.calls;
        if (r.probesOk >= policy.halfOpenProbes) transition(r, 'closed', now);
      }
    } else if (r.state === 'closed') {
      const bucketMs = policy.windowMs / policy.buckets;
      const index = Math.floor(now / bucketMs);
      const b = r.buckets[index % policy.buckets]!;
      if (b.index !== index) {
        b.index = index;
        b.calls = b.failures = b.slow = 0;
      }
      b.calls += outcomes.calls;
      b.failures += outcomes.failures;
      b.slow += outcomes.slow;
      let calls = 0;
      let failures = 0;
      let slow = 0;
      for (const x of r.buckets) {
        if (x.index > index - policy.buckets) {
          calls += x.calls;
          failures += x.failures;
          slow += x.slow;
        }
      }
      if (
        calls >= policy.minimumCalls &&
        (failures / calls >= policy.failureRateThreshold || slow / calls >= policy.slowCallRateThreshold)
      ) {
        transition(r, 'open', now);
      }
    }
  }
  let probe = false;
  if (takeProbe && r.state === 'half_open') {
    if (now - r.lastProbeAt >= policy.openDurationMs) r.probesTaken = r.probesOk;
    if (r.probesTaken < policy.halfOpenProbes) {
      r.probesTaken++;
      r.lastProbeAt = now;
      probe = true;
    }
  }
  const retryAfterMs =
    r.state === 'open'
      ? Math.max(0, Math.ceil(r.openedAt + policy.openDurationMs - now))
      : r.state === 'half_open' && !probe
        ? Math.max(0, Math.ceil(r.lastProbeAt + policy.openDurationMs - now))
        : 0;
  return { state: r.state, retryAfterMs, probe };
}

/** Length of one bucket of the stores' outcome tallies, in ms. */
export const OUTCOME_BUCKET_MS = 1000;
/** Buckets a tally keeps: windows up to this many buckets long can be read. */
export const OUTCOME_BUCKETS = 600;
/** Longest cohort name a tally is kept under. */
export const MAX_COHORT_LENGTH = 64;
/** Most cohorts one report may name. */
export const MAX_REPORT_COHORTS = 16;

/** One tally bucket. */
export interface TallyBucket extends OutcomeTotals {
  readonly index: number;
}

/** Adds `b` to `a`. */
export function addTotals(a: OutcomeTotals, b: OutcomeTotals): OutcomeTotals {
  return {
    calls: a.calls + b.calls,
    failures: a.failures + b.failures,
    slow: a.slow + b.slow,
    totalDurationMs: a.totalDurationMs + b.totalDurationMs,
  };
}

/**
 * The buckets a window of `windowMs` ending at `now` covers: [first, last] bucket numbers. With
 * `complete`, the window ends with the last bucket that has ended (the one in progress left out).
 */
export function tallyRange(now: number, windowMs: number, complete = false): [number, number] {
  const last = Math.floor(now / OUTCOME_BUCKET_MS) - (complete ? 1 : 0);
  const span = Math.min(OUTCOME_BUCKETS, Math.max(1, Math.ceil(windowMs / OUTCOME_BUCKET_MS)));
  return [last - span + 1, last];
}
