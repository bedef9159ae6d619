import { invalid, ErrorCodes } from '../shared/errors.js';
import {
  MAX_COHORT_LENGTH,
  MAX_REPORT_COHORTS,
  OUTCOME_BUCKET_MS,
  OUTCOME_BUCKETS,
  addTotals,
  newFleetBreakerRecord,
  stepFleetBreaker,
  tallyRange,
  type FleetBreakerRecord,
} from '../breakers/fleet-breaker-state.js';
import { NO_OUTCOMES, type OutcomeTotals, type TallyRead } from '../breakers/outcomes.js';
import type { OutcomesRequest, OutcomesResult } from './store.js';

/** Most (resource, cohort) tallies and breaker records held; the oldest go first past it. */
const MAX_ENTRIES = 100_000;

/** Checks a report's totals: non-negative safe integers (durations: finite, >= 0). */
export function checkTotals(t: OutcomeTotals, field: string): void {
  const counts = [t?.calls, t?.failures, t?.slow];
  if (
    typeof t !== 'object' ||
    t === null ||
    counts.some((c) => typeof c !== 'number' || !Number.isSafeInteger(c) || c < 0) ||
    t.failures > t.calls ||
    t.slow > t.calls ||
    typeof t.totalDurationMs !== 'number' ||
    !Number.isFinite(t.totalDurationMs) ||
    t.totalDurationMs < 0
  ) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, 'must be counts (calls >= failures, slow >= 0) and a duration >= 0');
  }
}

/** Checks a cohort name: 1 to 64 characters. */
export function checkCohort(cohort: unknown, field = 'cohort'): string {
  if (typeof cohort !== 'string' || cohort.length === 0 || cohort.length > MAX_COHORT_LENGTH) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be a string of 1 to ${MAX_COHORT_LENGTH} characters`);
  }
  return cohort;
}

/** Checks an outcomes request before anything is applied (every store checks the same). */
export function checkOutcomesRequest(request: OutcomesRequest): void {
  if (typeof request.resource !== 'string' || request.resource === '') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'must be a non-empty string');
  }
  checkTotals(request.totals, 'totals');
  const cohorts = request.cohorts ?? [];
  if (cohorts.length > MAX_REPORT_COHORTS) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'cohorts', `at most ${MAX_REPORT_COHORTS} cohorts per report`);
  }
  cohorts.forEach((c, i) => {
    checkCohort(c.cohort, `cohorts[${i}].cohort`);
    checkTotals(c.totals, `cohorts[${i}].totals`);
  });
}

/** Checks a tally window: 1 ms to the tallies' retention. */
export function checkWindow(windowMs: unknown): number {
  const max = OUTCOME_BUCKETS * OUTCOME_BUCKET_MS;
  if (typeof windowMs !== 'number' || !Number.isInteger(windowMs) || windowMs < 1 || windowMs > max) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'windowMs', `must be an integer between 1 and ${max}`);
  }
  return windowMs;
}

/**
 * Outcome tallies and fleet breaker records of a MemoryStore (one process's "fleet"), on the
 * store's clock. Bounded: at most 100,000 entries, each at most 600 buckets.
 */
export class MemoryOutcomes {
  readonly #breakers = new Map<string, FleetBreakerRecord>();
  readonly #tallies = new Map<string, Map<number, OutcomeTotals>>();

  /** Applies a report at `now` (see `OutcomesRequest`). */
  apply(request: OutcomesRequest, now: number): OutcomesResult {
    checkOutcomesRequest(request);
    const index = Math.floor(now / OUTCOME_BUCKET_MS);
    if (request.totals.calls > 0) this.#tally(tallyName(request.resource), index, request.totals);
    for (const c of request.cohorts ?? []) {
      if (c.totals.calls > 0) this.#tally(tallyName(request.resource, c.cohort), index, c.totals);
    }
    const policy = request.breaker;
    if (policy === undefined) return { breaker: undefined };
    let record = this.#breakers.get(request.resource);
    if (record === undefined || record.buckets.length !== policy.buckets) {
      record = newFleetBreakerRecord(policy);
      bounded(this.#breakers).set(request.resource, record);
    }
    return { breaker: stepFleetBreaker(record, policy, now, request.totals, request.takeProbe === true) };
  }

  /** The tallies of `resource` (or one cohort) over the window ending at `now`. */
  totals(resource: string, windowMs: number, now: number, cohort?: string, read?: TallyRead): OutcomeTotals {
    checkWindow(windowMs);
    const tally = this.#tallies.get(tallyName(resource, cohort === undefined ? undefined : checkCohort(cohort)));
    if (tally === undefined) return NO_OUTCOMES;
    const [first, last] = tallyRange(now, windowMs, read?.complete === true);
    let sum = NO_OUTCOMES;
    for (const [i, t] of tally) if (i >= first && i <= last) sum = addTotals(sum, t);
    return sum;
  }

  #tally(name: string, index: number, totals: OutcomeTotals): void {
    let tally = this.#tallies.get(name);
    if (tally === undefined) {
      tally = new Map();
      bounded(this.#tallies).set(name, tally);
    }
    tally.set(index, addTotals(tally.get(index) ?? NO_OUTCOMES, totals));
    for (const i of tally.keys()) if (i <= index - OUTCOME_BUCKETS) tally.delete(i);
  }
}

/** The map, with its oldest entry removed when it is full. */
function bounded<V>(map: Map<string, V>): Map<string, V> {
  if (map.size >= MAX_ENTRIES) map.delete(map.keys().next().value!);
  return map;
}

function tallyName(resource: string, cohort?: string): string {
  // A resource name has no NUL (see RESOURCE_PATTERN), so the pair reads back one way only.
  return cohort === undefined ? resource : `${resource}\u0000${cohort}`;
}
