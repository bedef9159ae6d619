import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { ErrorCodes, type Decision } from '@sluice/core';

/** `type` of the retryable failure an activity fails with when it gets no permit. */
export const RATE_LIMITED_FAILURE = 'SluiceRateLimited';
/** `type` of the retryable failure raised when the limiter faults under the `closed` policy. */
export const LIMITER_FAULT_FAILURE = 'SluiceLimiterFault';
/** `type` of the non-retryable failure for a call the limiter rejects as malformed (bad cost, key, tenant). */
export const INVALID_REQUEST_FAILURE = 'SluiceInvalidRequest';

/** Limiter errors about the request itself: retrying the same call cannot succeed. */
export const INPUT_ERROR_CODES: ReadonlySet<string> = new Set([
  ErrorCodes.INVALID_COST,
  ErrorCodes.COST_EXCEEDS_LIMIT,
  ErrorCodes.INVALID_KEY,
  ErrorCodes.INVALID_OPTIONS,
  ErrorCodes.UNKNOWN_TIER,
]);

/** The details attached to a `SluiceRateLimited` failure (its `details[0]`). */
export interface RateLimitedDetails {
  readonly resource: string;
  readonly reason: string;
  readonly retryAfterMs: number;
  readonly nextRetryDelayMs: number;
  readonly limit: number;
  readonly remaining: number;
}

/**
 * The failure for a denied permit: retryable, benign (an expected outcome, logged at debug and
 * kept out of the SDK's failure metrics), retried by Temporal after `delayMs`.
 */
export function rateLimitedFailure(resource: string, decision: Decision, delayMs: number): ApplicationFailure {
  const details: RateLimitedDetails = {
    resource,
    reason: decision.reason,
    retryAfterMs: decision.retryAfterMs,
    nextRetryDelayMs: delayMs,
    limit: decision.limit,
    remaining: decision.remaining,
  };
  return ApplicationFailure.create({
    type: RATE_LIMITED_FAILURE,
    message: `no permit for ${resource} (${decision.reason}); retry in ${delayMs} ms`,
    nonRetryable: false,
    nextRetryDelay: delayMs,
    category: ApplicationFailureCategory.BENIGN,
    details: [details],
  });
}

/** The failure for a limiter that threw (policy `closed`): retryable after `delayMs`. */
export function limiterFaultFailure(resource: string, err: unknown, delayMs: number): ApplicationFailure {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return ApplicationFailure.create({
    type: LIMITER_FAULT_FAILURE,
    message: `the limiter failed for ${resource}: ${message}`,
    nonRetryable: false,
    nextRetryDelay: delayMs,
    details: [{ resource, code: typeof code === 'string' ? code : undefined }],
    cause: err instanceof Error ? err : undefined,
  });
}

/**
 * The failure for a permit request that is malformed (refused by the limiter, or by the workflow
 * helper's activity before it asks): non-retryable, as retrying the same call cannot succeed.
 * The activity gate and the workflow helper's activity both fail with it.
 *
 * @param resource the resource the request names: the message and the details (with the
 *   error's code) name it; `undefined` leaves the message as the reason's alone, without details
 * @param reason the limiter's error (the failure's cause), or what is wrong, in words
 */
export function invalidRequestFailure(
  resource: string | undefined,
  reason: (Error & { code?: string }) | string,
): ApplicationFailure {
  const message = typeof reason === 'string' ? reason : reason.message;
  return ApplicationFailure.create({
    type: INVALID_REQUEST_FAILURE,
    message: resource === undefined ? message : `invalid permit request for ${resource}: ${message}`,
    nonRetryable: true,
    ...(resource === undefined ? {} : { details: [{ resource, code: typeof reason === 'string' ? undefined : reason.code }] }),
    ...(typeof reason === 'string' ? {} : { cause: reason }),
  });
}
