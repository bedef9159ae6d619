import type { BookingVerdict } from '@sluice/core';

/**
 * Hooks the activity gate calls as permits are waited for, denied, held and released;
 * `@sluice/temporal/metrics` implements them with prom-client. Hooks must be cheap and must not
 * throw. Label values are activity types and resources from the configuration, never caller data.
 */
export interface SluiceTemporalObserver {
  /** A blocking wait for a permit ended (granted, out of budget, cancelled or failed). */
  waited?(event: PermitEvent & { waitedMs: number; outcome: 'granted' | 'timeout' | 'cancelled' | 'error' }): void;
  /** The limiter denied a permit (reason as in the decision). */
  denied?(event: PermitEvent & { reason: string }): void;
  /** A denial became a retryable failure: Temporal retries the activity after `delayMs`. */
  retryScheduled?(event: PermitEvent & { delayMs: number }): void;
  /**
   * A non-blocking attempt asked for its booking (see `booking`): `admitted` (room now),
   * `claimed` (its booked slot), `booked` (a slot to come back for), `denied` (none could be
   * booked: retried as without bookings) or `missing`.
   */
  booked?(event: PermitEvent & { outcome: BookingVerdict }): void;
  /** A concurrency permit was taken (+1) or given back (-1). */
  permitHeld?(event: PermitEvent & { delta: 1 | -1 }): void;
  /**
   * The limiter could not decide normally: it threw (`error`), or the store was away and the
   * resource's store-failure policy decided (`fallback`).
   */
  fault?(event: PermitEvent & { kind: 'error' | 'fallback' }): void;
}

/** Which activity type asked for which resource. */
export interface PermitEvent {
  readonly activityType: string;
  readonly resource: string;
}
