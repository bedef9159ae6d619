import type { ConcurrencyState } from './algorithms/index.js';
import { concurrency } from './algorithms/index.js';
import { systemClock, type Clock, type TimerHandle } from './clock.js';
import { ErrorCodes, SluiceError, invalid } from './errors.js';
import { bookKey, bookingTokenRefused, cancelBooking, openBookings } from './booking.js';
import { adjustKey, evaluateKey, reserveKey } from './evaluate.js';
import { unjudgedStatuses, type LimitStatus } from './decision.js';
import { KeyTable } from './key-table.js';
import type { LimiterObserver } from './observer.js';
import { intOption } from './options.js';
import type { CompiledLimit } from './policy.js';
import type { KeyView } from './key-table.js';
import type {
  AdjustRequest,
  BookRequest,
  BookResult,
  CancelRequest,
  ConsumeRequest,
  ConsumeResult,
  PermitRequest,
  LimitStore,
  ReserveRequest,
  ReserveResult,
  OutcomeStore,
  OutcomesRequest,
  OutcomesResult,
} from './store.js';
import { MemoryOutcomes } from './memory-outcomes.js';
import type { OutcomeTotals } from './outcomes.js';
import { requestPermitId } from './store.js';

/**
 * The expiry a write gives a key: what the operation needs, and no less than a key holding
 * bookings had (their charges and spans must outlive the operation's own figures).
 */
function keepUntil(view: KeyView | undefined, needed: number): number {
  return view?.ledger === undefined ? needed : Math.max(needed, view.expiresAt);
}

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Time source; tests pass a ManualClock.
   * @default systemClock (monotonic)
   */
  clock?: Clock;
  /**
   * Most keys held at once, so a flood of distinct keys cannot exhaust memory; each booking held
   * counts as one key too, and a key holding bookings as two more (a full table makes new
   * bookings plain denials). A full table makes
   * room by removing a key whose state is at rest (it decides as no state would); when every key
   * held still counts, a new key is denied (see {@link MemoryStore}) and no live state is dropped.
   * @default 1_000_000
   */
  maxKeys?: number;
  /**
   * How often idle (expired) keys are swept, in ms; 0 disables the sweep (expired keys are
   * still dropped when touched or evicted).
   * @default 5000
   */
  sweepIntervalMs?: number;
  /**
   * Most keys examined per sweep, so a sweep never blocks the event loop for long.
   * @default 20_000
   */
  sweepBatch?: number;
  /** Told of new keys meeting a full table (metrics). */
  observer?: Pick<LimiterObserver, 'keyTableFull'>;
}

interface CompiledMemoryStoreOptions {
  readonly clock: Clock;
  readonly maxKeys: number;
  readonly sweepIntervalMs: number;
  readonly sweepBatch: number;
  readonly observer: Pick<LimiterObserver, 'keyTableFull'> | undefined;
}

/** Validates and defaults {@link MemoryStoreOptions}. */
export function compileMemoryStoreOptions(options: MemoryStoreOptions = {}): CompiledMemoryStoreOptions {
  return Object.freeze({
    clock: options.clock ?? systemClock,
    maxKeys: intOption(options.maxKeys, 'maxKeys', 1_000_000, 1, 1_000_000_000),
    sweepIntervalMs: intOption(options.sweepIntervalMs, 'sweepIntervalMs', 5000, 0, 86_400_000),
    sweepBatch: intOption(options.sweepBatch, 'sweepBatch', 20_000, 1, 10_000_000),
    observer: options.observer,
  });
}

/** Counters describing the store's housekeeping, for metrics and tests. */
export interface MemoryStoreStats {
  readonly keys: number;
  /** Keys at rest removed to make room for a new key. */
  readonly evicted: number;
  /** Keys at rest removed by the sweep. */
  readonly expired: number;
  /** New keys denied because every key held still counted. */
  readonly refused: number;
  /** Bookings held (each weighs as one key in `maxKeys`, and a key holding any two more). */
  readonly bookings: number;
  /** Bookings not made because keys and bookings filled `maxKeys` (plain denials instead). */
  readonly refusedBookings: number;
}

/**
 * The embedded store: all state in this process, decided synchronously on a monotonic clock.
 * Exact for one process; use the Redis store to share limits between processes. Keys live in a
 * bounded {@link KeyTable}: keys at rest are swept, and past `maxKeys` a key at rest makes room.
 *
 * When the table is full of state that still counts, a call on a new key is denied: every limit
 * answers not allowed, 0 remaining, and a retry-after until the table's earliest keys come to
 * rest (the decision's reason is `rate_limited`, or `concurrency_limited` when a concurrency
 * limit comes first). Nothing is charged, so the default never lets a key exceed its limits;
 * held keys are decided as before. `reserve` grants nothing, and `adjust` on a new key is dropped
 * (the key's calls are denied until it has a slot, and it then starts from no state).
 */
export class MemoryStore implements LimitStore, OutcomeStore {
  readonly name = 'memory';
  readonly #options: CompiledMemoryStoreOptions;
  readonly #table: KeyTable;
  readonly #outcomes = new MemoryOutcomes();
  #sweepTimer: TimerHandle | undefined;
  #closed = false;

  constructor(options: MemoryStoreOptions = {}) {
    this.#options = compileMemoryStoreOptions(options);
    this.#table = new KeyTable(this.#options.maxKeys);
    this.#scheduleSweep();
  }

  /** Housekeeping counters. */
  get stats(): MemoryStoreStats {
    const t = this.#table;
    return {
      keys: t.size,
      evicted: t.evicted,
      expired: t.expired,
      refused: t.refused,
      bookings: t.bookings,
      refusedBookings: t.refusedBookings,
    };
  }

  async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    return this.consumeSync(request);
  }

  /** Synchronous form of {@link consume}, for callers that need no promise. */
  consumeSync(request: ConsumeRequest): ConsumeResult {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#table.read(request.key, request.limits, now);
    if (entry === undefined && !this.#makeRoom(request.key, now)) {
      return { allowed: false, statuses: this.#refusal(request.limits, now), now };
    }
    const view = entry?.ledger === undefined ? entry : this.#settle(request.key, request.limits, entry, now);
    const outcome = evaluateKey(
      view?.states ?? [],
      request.limits,
      request.cost,
      now,
      requestPermitId(request),
      request.coreShare ?? request.reserve ?? 0,
    );
    if (outcome.allowed) this.#table.write(request.key, request.limits, outcome.next, keepUntil(view, now + outcome.ttlMs), now);
    return { allowed: outcome.allowed, statuses: outcome.statuses, now };
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#table.read(request.key, request.limits, now);
    if (entry === undefined && !this.#makeRoom(request.key, now)) {
      return { allowed: false, granted: 0, statuses: this.#refusal(request.limits, now), now };
    }
    const view = entry?.ledger === undefined ? entry : this.#settle(request.key, request.limits, entry, now);
    const outcome = reserveKey(view?.states ?? [], request.limits, request.min, request.max, now, request.holdMs ?? 0);
    if (outcome.granted > 0) {
      this.#table.write(request.key, request.limits, outcome.next, keepUntil(view, now + outcome.ttlMs), now);
    }
    return { allowed: outcome.granted > 0, granted: outcome.granted, statuses: outcome.statuses, now };
  }

  async adjust(request: AdjustRequest): Promise<void> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#table.read(request.key, request.limits, now);
    if (entry === undefined && !this.#makeRoom(request.key, now)) return;
    const view = entry?.ledger === undefined ? entry : this.#settle(request.key, request.limits, entry, now);
    const { next, ttlMs } = adjustKey(view?.states ?? [], request.limits, request.delta, now, request.at ?? 0);
    this.#table.write(request.key, request.limits, next, keepUntil(view, now + ttlMs), now);
  }

  /**
   * Admits now if the key has room, else books the earliest slot (see booking.ts); with the id
   * of a booking already held, claims it once due.
   */
  async book(request: BookRequest): Promise<BookResult> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#table.read(request.key, request.limits, now);
    if (entry === undefined && !this.#makeRoom(request.key, now)) {
      return { allowed: false, outcome: 'denied', statuses: this.#refusal(request.limits, now), now };
    }
    const s = openBookings(entry?.states ?? [], entry?.ledger, request.limits, now, entry?.expiresAt ?? 0);
    const r = bookKey(s, request.limits, { ...request, room: () => this.#table.roomForBooking(now) }, now);
    if (s.changed) this.#table.write(request.key, request.limits, s.states, s.keepUntil, now, s.ledger ?? null);
    if (r.forbidden === true) throw bookingTokenRefused();
    const allowed = r.outcome === 'admitted' || r.outcome === 'claimed';
    const booking = r.booking === undefined ? {} : { booking: { start: r.booking.start, end: r.booking.end } };
    return { allowed, outcome: r.outcome, statuses: r.statuses, now, ...booking };
  }

  /** Cancels a booking not yet claimed; true if it was held. */
  async cancel(request: CancelRequest): Promise<boolean> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    if (request.limits.some((l) => l.algorithm === 'concurrency')) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'keys with a concurrency limit cannot be booked');
    }
    const entry = this.#table.read(request.key, request.limits, now);
    if (entry?.ledger === undefined) return false;
    const s = openBookings(entry.states, entry.ledger, request.limits, now, entry.expiresAt);
    const found = cancelBooking(s, request.limits, request.id, request.token, now);
    if (s.changed) this.#table.write(request.key, request.limits, s.states, s.keepUntil, now, s.ledger ?? null);
    if (found === 'forbidden') throw bookingTokenRefused();
    return found;
  }

  /** Gives back a key's expired bookings before another operation reads its states. */
  #settle(key: string, limits: readonly CompiledLimit[], entry: KeyView, now: number): KeyView {
    const s = openBookings(entry.states, entry.ledger, limits, now, entry.expiresAt);
    if (!s.changed) return entry;
    this.#table.write(key, limits, s.states, s.keepUntil, now, s.ledger ?? null);
    return { expiresAt: Math.ceil(s.keepUntil), states: s.states, ...(s.ledger === undefined ? {} : { ledger: s.ledger }) };
  }

  async renew(request: PermitRequest): Promise<boolean> {
    return this.#permit(request, 'renew');
  }

  async release(request: PermitRequest): Promise<boolean> {
    return this.#permit(request, 'release');
  }

  async ping(): Promise<void> {
    this.#checkOpen();
  }

  /** Adds a report to the tallies and judges the fleet breaker it names (see `OutcomesRequest`). */
  async outcomes(request: OutcomesRequest): Promise<OutcomesResult> {
    this.#checkOpen();
    return this.#outcomes.apply(request, this.#options.clock.now());
  }

  /** Tallies of `resource` (or of one cohort of its keys) over about the last `windowMs`. */
  async outcomeTotals(resource: string, windowMs: number, cohort?: string): Promise<OutcomeTotals> {
    this.#checkOpen();
    return this.#outcomes.totals(resource, windowMs, this.#options.clock.now(), cohort);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.#options.clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    this.#table.clear();
  }

  #permit(request: PermitRequest, op: 'renew' | 'release'): boolean {
    this.#checkOpen();
    const index = request.limits.findIndex((l) => l.algorithm === 'concurrency');
    if (index < 0) throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'the key has no concurrency limit to hold leases');
    const limit = request.limits[index]!;
    const now = this.#options.clock.now();
    const read = this.#table.read(request.key, request.limits, now);
    if (read === undefined) return false;
    const entry = read.ledger === undefined ? read : this.#settle(request.key, request.limits, read, now);
    const states = entry.states.slice();
    const leases = states[index] as ConcurrencyState | undefined;
    const permitId = requestPermitId(request);
    const result =
      op === 'renew'
        ? concurrency.renew(leases, permitId, now, limit, request.ttlMs ?? limit.leaseTtlMs)
        : concurrency.release(leases, permitId, now);
    states[index] = result.next;
    this.#table.write(request.key, request.limits, states, Math.max(entry.expiresAt, now + result.ttlMs), now);
    return result.found;
  }

  /** True when `key` has or got a slot; tells the observer when a full table made room or refused. */
  #makeRoom(key: string, now: number): boolean {
    const evicted = this.#table.evicted;
    const ok = this.#table.makeRoom(key, now);
    const observer = this.#options.observer;
    if (observer?.keyTableFull !== undefined && (!ok || this.#table.evicted !== evicted)) {
      observer.keyTableFull({ outcome: ok ? 'evicted' : 'refused' });
    }
    return ok;
  }

  /** The statuses of a call refused for want of room: every limit denies until room is expected. */
  #refusal(limits: readonly CompiledLimit[], now: number): LimitStatus[] {
    return unjudgedStatuses(limits, this.#table.roomAfterMs(now));
  }

  /** Removes keys at rest, a bounded batch at a time, in the order they came to rest. */
  sweep(): number {
    return this.#table.sweep(this.#options.clock.now(), this.#options.sweepBatch);
  }

  #scheduleSweep(): void {
    if (this.#options.sweepIntervalMs === 0 || this.#closed) return;
    this.#sweepTimer = this.#options.clock.setTimer(
      () => {
        this.sweep();
        this.#scheduleSweep();
      },
      this.#options.sweepIntervalMs,
      true,
    );
  }

  #checkOpen(): void {
    if (this.#closed) throw new SluiceError(ErrorCodes.CLOSED, 'the memory store is closed');
  }
}
