import type { BookingBounds } from './booking.js';
import type { BookingVerdict, LimitStatus } from '../shared/decision.js';
import type { CompiledLimit } from '../shared/policy.js';
import type { StorageKeyParts } from './storage-key.js';
import type { FleetBreakerPolicy, FleetBreakerStatus } from '../breakers/fleet-breaker-state.js';
import type { OutcomeSource, OutcomeTotals } from '../breakers/outcomes.js';

/** How many clients share the store right now (for fair shares); e.g. a heartbeat registry. */
export interface PeerCount {
  /** Live clients, at least 1. Read on every fallback decision, so it must be cheap. */
  readonly count: number;
  /**
   * False until the count has been read once (a registry that has not reached the store yet):
   * the `local` policy then denies, since no fair share is known. @default true
   */
  readonly known?: boolean;
}

/** A request to decide `cost` permits against every limit of `key`, all-or-nothing. */
export interface ConsumeRequest {
  /** The storage key (the limiter encodes resource and caller key, see storage-key.ts). */
  readonly key: string;
  /** What the storage key was made of, when the limiter knows it (it always does). */
  readonly parts?: StorageKeyParts;
  readonly limits: readonly CompiledLimit[];
  readonly cost: number;
  /** Id of the concurrency permit to take if the key has a concurrency limit; otherwise '' or omitted. */
  readonly permitId?: string;
  /**
   * Share (0..1) of every limit kept for core traffic (the resource's `priority.coreShare`): the
   * call passes only if its cost plus that share fits. Omitted or 0 for core traffic.
   */
  readonly coreShare?: number;
}

/** What a store decided, with the store-clock time it decided at (milliseconds). */
export interface ConsumeResult {
  readonly allowed: boolean;
  /** Aligned with the request's limits. */
  readonly statuses: readonly LimitStatus[];
  /** The store's clock when deciding: Redis `TIME` or the in-memory monotonic clock. */
  readonly now: number;
}

/** Take between `min` and `max` permits of `key` at once (client leases). */
export interface ReserveRequest {
  readonly key: string;
  /** What the storage key was made of (see {@link ConsumeRequest.parts}). */
  readonly parts?: StorageKeyParts;
  readonly limits: readonly CompiledLimit[];
  readonly min: number;
  readonly max: number;
  /**
   * How long after the store's decision the permits may be used (the lease's lifetime, at most
   * 60,000 ms): sliding windows and logs count them as taken then, so their bound holds on the
   * times the permits are served. 0 or omitted: taken now.
   */
  readonly holdMs?: number;
}

/** What a reservation got: `granted` permits (0 when fewer than `min` were left). */
export interface ReserveResult extends ConsumeResult {
  readonly granted: number;
  /**
   * The stamp the permits were charged at, to return unused ones with (`AdjustRequest.at`); 0 when
   * unknown. Omitted: `now + holdMs` (the store decided at `now`).
   */
  readonly at?: number;
}

/** Charge `delta` more permits (negative: refund) on every rate limit of `key`. */
export interface AdjustRequest {
  readonly key: string;
  /** What the storage key was made of (see {@link ConsumeRequest.parts}). */
  readonly parts?: StorageKeyParts;
  readonly limits: readonly CompiledLimit[];
  readonly delta: number;
  /**
   * For a refund of a reservation's unused permits: the time its charge was stamped at (the
   * reservation's `now` plus its `holdMs`). Sliding windows and logs then refund that charge
   * itself, never permits that may have been served. Omitted: the newest charges made by now.
   */
  readonly at?: number;
}

/** Renew or release a concurrency permit on `key`, named by `permitId`. */
export interface PermitRequest {
  readonly key: string;
  readonly limits: readonly CompiledLimit[];
  readonly permitId: string;
  /** New lifetime for a renewal. @default the concurrency limit's permitTtlMs */
  readonly ttlMs?: number;
}

/**
 * Admit now, or book the earliest slot (deferred admission, see booking.ts). With the id of a
 * booking the key already holds, claims it once due (never booking twice under one id).
 */
export interface BookRequest {
  readonly key: string;
  /** Rate limits only: a key with a concurrency limit cannot be booked. */
  readonly limits: readonly CompiledLimit[];
  readonly cost: number;
  /** The caller's name for the booking, unique on the key (see `checkBookingId`). */
  readonly id: string;
  /**
   * The booking's secret (see `checkBookingToken`): a booking made keeps it, and a call naming a
   * booking held under another one is refused (`SLUICE_ERR_BOOKING_TOKEN`), changing nothing.
   */
  readonly token: string;
  /** False: only claim a booking already held (`missing` if there is none); never consume or book. */
  readonly create: boolean;
  readonly bounds: BookingBounds;
}

/** What a booking call came to; `allowed` for `admitted` and `claimed`. */
export interface BookResult extends ConsumeResult {
  readonly outcome: BookingVerdict;
  /** The booking's span on the store's clock, for `booked` and `claimed`. */
  readonly booking?: { readonly start: number; readonly end: number };
}

/** Cancel a booking not yet claimed. */
export interface CancelRequest {
  readonly key: string;
  readonly limits: readonly CompiledLimit[];
  readonly id: string;
  /** The booking's token (see `BookRequest.token`): another one is refused, changing nothing. */
  readonly token: string;
}

/**
 * Where limit state lives. Every store implements the same semantics (the algorithms in
 * `algorithms/`), verified by one conformance suite. Stores own their background work and free
 * it in `close()`.
 */
export interface LimitStore {
  /** Short name for logs and metrics, e.g. `memory` or `redis`. */
  readonly name: string;
  /**
   * Where the store is, for log lines: `10.0.0.5:6379`, a cluster's seed nodes. Never carries
   * credentials. Absent for an in-process store.
   */
  readonly address?: string;
  consume(request: ConsumeRequest): Promise<ConsumeResult>;
  /**
   * {@link consume} answered at once, by a store that decides in this process without I/O (the
   * `MemoryStore`): the limiter then decides without a promise of its own. Same semantics, same
   * errors (thrown instead of rejected).
   */
  consumeSync?(request: ConsumeRequest): ConsumeResult;
  adjust(request: AdjustRequest): Promise<void>;
  /**
   * Takes up to `max` permits (at least `min`) in one round trip, for client-side leases. Keys
   * with a concurrency limit cannot be reserved.
   */
  reserve(request: ReserveRequest): Promise<ReserveResult>;
  /** True if the permit was live and is now extended. */
  renew(request: PermitRequest): Promise<boolean>;
  /** True if the permit was live and is now freed. */
  release(request: PermitRequest): Promise<boolean>;
  /**
   * Deferred admission (see {@link BookRequest}). Stores without it cannot book: the limiter
   * then decides such calls as plain ones.
   */
  book?(request: BookRequest): Promise<BookResult>;
  /** Cancels a booking not yet claimed; true if it was held. */
  cancel?(request: CancelRequest): Promise<boolean>;
  /** Resolves when the store answers; used to notice its return after a failure. */
  ping(): Promise<void>;
  close(): Promise<void>;
  /**
   * The live clients sharing this store, if the store keeps count (the Redis store does): the
   * limiter's fallback is sized by it unless `failover.peers` is given.
   */
  readonly peers?: PeerCount;
  /**
   * Reports connection loss (`up: false`, with the error) and return (`up: true`) as soon as
   * the store sees them, so a limiter switches without waiting for a call to time out.
   * Returns the function that stops the reports.
   */
  watchConnection?(listener: (up: boolean, error?: unknown) => void): () => void;
}

/** Outcomes of one cohort of a resource's keys (see {@link OutcomesRequest.cohorts}). */
export interface CohortTotals {
  /** The cohort's name, at most 64 characters. */
  readonly cohort: string;
  readonly totals: OutcomeTotals;
}

/**
 * Outcomes of calls to a resource's downstream since the last report, added to the store's
 * tallies (of the resource, and of each cohort named) and, with `breaker`, judged by the
 * resource's fleet-wide circuit breaker, all in one atomic step.
 */
export interface OutcomesRequest {
  readonly resource: string;
  /** Every outcome of the report (cohorts' included). */
  readonly totals: OutcomeTotals;
  /** The same outcomes by cohort (at most 16 cohorts), for rollouts. */
  readonly cohorts?: readonly CohortTotals[];
  /** The resource's fleet breaker: judge `totals` by it and answer its state. */
  readonly breaker?: FleetBreakerPolicy;
  /** With `breaker`: ask for one of the half-open period's probe permits. */
  readonly takeProbe?: boolean;
}

/** What a report of outcomes came to. */
export interface OutcomesResult {
  /** The fleet breaker's state after the report (when the request named one). */
  readonly breaker: FleetBreakerStatus | undefined;
}

/**
 * A store that keeps outcome tallies and fleet-wide breaker state (the memory and Redis stores
 * do). Tallies are kept in buckets of 1 s for 10 min (see `OUTCOME_BUCKETS`).
 */
export interface OutcomeStore extends OutcomeSource {
  outcomes(request: OutcomesRequest): Promise<OutcomesResult>;
}

/** True when `store` keeps outcome tallies and fleet breakers. */
export function isOutcomeStore(store: object): store is OutcomeStore {
  const s = store as Partial<OutcomeStore>;
  return typeof s.outcomes === 'function' && typeof s.outcomeTotals === 'function';
}

/**
 * The calls a limiter makes to its store, as `LimiterObserver.storeCalled` names them: the
 * methods of {@link LimitStore} and {@link OutcomeStore} (a fixed set, for metric labels).
 */
export type StoreOperation =
  'consume' | 'reserve' | 'adjust' | 'renew' | 'release' | 'book' | 'cancel' | 'ping' | 'outcomes' | 'outcomeTotals';

/** One call to the store, timed from the call to its settled promise (see {@link StoreOperation}). */
export interface StoreCall {
  readonly operation: StoreOperation;
  readonly durationMs: number;
  /** What the call threw or rejected with; absent when it answered. */
  readonly error?: unknown;
}
