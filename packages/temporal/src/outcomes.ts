import { CancelledFailure } from '@temporalio/common';
import type { RateLimiter } from '@sluice/core';
import type { CompiledPermit } from './options.js';

/** What an activity attempt's end says of its downstreams. */
export type ActivityOutcome = 'success' | 'failure' | 'ignore';

/**
 * The default judgement of an attempt that threw: a cancellation says nothing of the downstream
 * (`ignore`); a non-retryable failure is the activity refusing its input, an answer of a
 * downstream that works (`success`); anything else, a retryable failure or a timeout, counts
 * against the downstream (`failure`).
 */
export function defaultOutcomeOf(error: unknown): ActivityOutcome {
  if (error instanceof CancelledFailure) return 'ignore';
  if (typeof error === 'object' && error !== null && (error as { nonRetryable?: unknown }).nonRetryable === true)
    return 'success';
  return 'failure';
}

/**
 * Reports an attempt's outcome to the limiter for each resource it took permits from (the key
 * each permit was for, when it can be told). Never throws: a key function that fails is left
 * out of the report, and the limiter's reporting never waits.
 */
export function reportAttempt(
  limiter: RateLimiter,
  permits: readonly CompiledPermit[],
  args: readonly unknown[],
  outcome: ActivityOutcome,
  durationMs: number,
): void {
  if (outcome === 'ignore' || limiter.reportOutcome === undefined) return;
  for (const permit of permits) {
    let key: string | undefined;
    try {
      key = permit.key?.(args);
    } catch {
      key = undefined;
    }
    try {
      limiter.reportOutcome({
        resource: permit.resource,
        ...(key === undefined || key === '' ? {} : { key }),
        ok: outcome === 'success',
        durationMs: Math.max(0, durationMs),
      });
    } catch {
      // A resource removed by a rule change meanwhile: nothing to report to.
    }
  }
}
