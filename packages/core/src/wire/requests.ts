/**
 * The request items of the service's JSON API (`POST /v1/...`), as clients send them and the
 * service takes them. A body is one item, or a {@link Batch} of them. The service validates them
 * (bounds, tier names, booking ids: its settings); their fields and shapes are these.
 */

/** What every decision item names: the resource, and the limiter's `TryOptions`. */
export interface DecisionItem {
  readonly resource: string;
  readonly key?: string;
  readonly cost?: number;
  readonly tenant?: string;
  /** A tier name (`core`, `normal` or one the resource declares). */
  readonly priority?: 'core' | 'normal' | (string & NonNullable<unknown>);
}

/** `POST /v1/check`: the limiter's `try`; with `book`, its `book` under that id. */
export interface CheckItem extends DecisionItem {
  /** A booking id: a denied check books the earliest slot, and the same id later claims it. */
  readonly book?: string;
  /** With `book`: the booking's token (see {@link BookItem.token}). */
  readonly token?: string;
}

/** `POST /v1/book` and `/v1/claim`: the limiter's `book` or `claim` under `id`. */
export interface BookItem extends DecisionItem {
  readonly id: string;
  /**
   * The booking's secret: kept by a booking made (one is made and answered in `booking.token`
   * when absent), and needed by every later call naming it (`SLUICE_ERR_BOOKING_TOKEN` otherwise).
   */
  readonly token?: string;
}

/** `POST /v1/cancel`: cancels a booking not yet claimed. */
export interface CancelItem {
  readonly resource: string;
  readonly key?: string;
  readonly id: string;
  /** The booking's token (see {@link BookItem.token}). */
  readonly token?: string;
}

/** `POST /v1/acquire`: waits up to `maxWaitMs` (bounded by the service). */
export interface AcquireItem extends DecisionItem {
  readonly maxWaitMs?: number;
}

/** `POST /v1/release`: frees a concurrency permit. */
export interface ReleaseItem {
  readonly resource: string;
  readonly key?: string;
  readonly permitId: string;
}

/** `POST /v1/renew`: extends a concurrency permit. */
export interface RenewItem extends ReleaseItem {
  readonly ttlMs?: number;
}

/** `POST /v1/adjust`: charges `delta` more permits (negative: a refund). */
export interface AdjustItem {
  readonly resource: string;
  readonly key?: string;
  readonly delta: number;
  /** The tenant the permits were taken for: its quota is adjusted too. */
  readonly tenant?: string;
  /** The `at` of the reservation whose unused permits this returns (see `Limiter.adjust`). */
  readonly at?: number;
}

/** `POST /v1/reserve`: takes between `min` and `max` permits at once (a remote client's lease). */
export interface ReserveItem {
  readonly resource: string;
  readonly key?: string;
  readonly min: number;
  readonly max: number;
  /** How long the client's lease serves the permits (see `Limiter.reserve`). */
  readonly holdMs?: number;
}

/** `POST /v1/outcomes`: how `count` like calls to a resource's downstream went (the core's `OutcomeReport`). */
export interface OutcomeItem {
  readonly resource: string;
  readonly key?: string;
  readonly ok: boolean;
  readonly durationMs: number;
  /** @default 1 */
  readonly count?: number;
}

/** A batch body: its items are answered one by one, in order (see `BatchAnswer`). */
export interface Batch<T> {
  readonly items: readonly T[];
}

/** Query flags of the decision endpoints (`/v1/check`, `/v1/acquire`, `/v1/book`, `/v1/claim`). */
export interface DecisionQuery {
  /** `1`: a single denied call is answered 429 rather than 200. */
  readonly http429?: '0' | '1' | 'true' | 'false';
  /** `1`: decisions carry their per-limit `statuses`. */
  readonly statuses?: '0' | '1' | 'true' | 'false';
}
