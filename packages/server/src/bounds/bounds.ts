import { POLICY_BOUNDS } from '@sluice/core';
import { ServerError, ServerErrorCodes } from '../errors.js';

/**
 * What one request may carry, whichever transport brought it: the server's settings
 * (`--max-batch`, `--max-key-length`, `--max-wait-ms`, `--max-descriptors`) and the fixed bounds
 * below. Each transport's decoder enforces them with the server's stable error codes.
 */

/** Bounds of a JSON API item and batch. */
export interface ItemBounds {
  readonly maxKeyLength: number;
  readonly maxWaitMs: number;
  readonly maxBatch: number;
}

/** Bounds of a decoded `ShouldRateLimit` request. */
export interface RlsBounds {
  /** Most descriptors per request, and most entries per descriptor. */
  readonly maxDescriptors: number;
  /** Longest key or value of an entry, and longest domain. */
  readonly maxKeyLength: number;
}

/** Bounds of an outcome report. */
export interface OutcomesBounds {
  readonly maxBatch: number;
  readonly maxKeyLength: number;
  /** Most calls one report may stand for, summed over its items' counts. */
  readonly maxCalls: number;
}

/** What a booking id may hold: printable ASCII without spaces (as the core's `checkBookingId`). */
export const BOOKING_ID_PATTERN = /^[\x21-\x7e]+$/;

/** Most like calls one outcome item may stand for (a report as a whole: `--max-outcome-calls`). */
export const MAX_OUTCOME_COUNT = 10_000;
/**
 * Longest call an outcome may report, in ms: the longest slow-call threshold a breaker takes
 * (an hour), so every slow call can still be told, and no one call weighs a day in a mean latency.
 */
export const MAX_OUTCOME_DURATION_MS = 3_600_000;

/**
 * The largest `requests_per_unit` of an Envoy limit override: the most a fixed window counts.
 * Larger ones (up to uint32's 4294967295) are capped to it, not refused: a limit that large
 * admits as much.
 */
export const MAX_OVERRIDE_REQUESTS_PER_UNIT = POLICY_BOUNDS.maxLimit;

/**
 * Refuses a report whose items stand for more than `max` calls in all (each item `count` calls,
 * 1 by default; refused items count nothing). Refused whole rather than clamped: a clamped
 * report would be tallied as calls nobody observed, and the reporter hears why.
 */
export function checkOutcomeCalls(items: readonly ({ readonly count?: number } | undefined)[], max: number): void {
  let calls = 0;
  for (const item of items) if (item !== undefined) calls += item.count ?? 1;
  if (calls > max) {
    throw new ServerError(
      ServerErrorCodes.BATCH_TOO_LARGE,
      `one outcome report may stand for at most ${max} calls (the sum of its counts), got ${calls}`,
    );
  }
}
