import type { ConcurrencyState } from '../algorithms/index.js';
import { algorithmOf, concurrency, normalizeState, rateAlgorithm, type RateState } from '../algorithms/index.js';
import { systemClock, type Clock, type TimerHandle } from '../shared/clock.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { bookKey, bookingTokenRefused, cancelBooking, openBookings } from './booking.js';
import { adjustKey, evaluateKey, limitStatus, reserveKey } from './evaluate.js';
import { unjudgedStatuses, type LimitStatus } from '../shared/decision.js';
import { KeyTable } from './key-table.js';
import type { LimiterObserver } from '../shared/observer.js';
import { intOption } from '../shared/options.js';
import { hasConcurrency, type CompiledLimit } from '../shared/policy.js';
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
import type { OutcomeTotals, TallyRead } from '../breakers/outcomes.js';

/**
 * The expiry a write gives a key: what the operation needs, and no less than a key holding
 * bookings had (their charges and spans must outlive the operation's own figures).
 */
/** True when the key holds no slot: it is new, or only its group's summary bounds it. */
function isNew(view: KeyView | undefined): boolean {
  return view === undefined || view.summarized === true;
}

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
   * Most keys held at once, so a flood of distinct keys cannot exhaust memory. A full table makes
   * room from a key at rest (it decides as no state would); when every key held still counts it is
   * shared between resources: a larger resource's key leaves for its resource's conservative
   * summary, or the new key is decided on its own resource's summary (see {@link KeyTable}); only
   * new keys needing a slot of their own (held permits, bookings) are denied. No live state is dropped.
   * Each booking held counts as one key too, and a key holding bookings as two more (a full
   * table makes new bookings plain denials).
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
  /** Live keys that gave their slot to a smaller group's new key (their states joined their group's summary). */
  readonly demoted: number;
  /** New keys decided and charged on their group's summary (the table was full, their group the largest). */
  readonly summarized: number;
  /** New keys denied: they needed a slot of their own (held permits, bookings) and the table had none to give. */
  readonly refused: number;
  /** Limit summaries held (each 16 bytes per bucket). */
  readonly summaries: number;
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
 * When the table is full of state that still counts, a new key of rate limits only finds a place
 * (see {@link KeyTable}): a larger resource's key leaves for its summary, or the key is decided
 * and charged on its own resource's summary, which bounds every key without a slot from above. A
 * new key that needs a slot of its own (a concurrency limit, bookings) is denied while none can
 * be made: every limit answers not allowed, 0 remaining, and a retry-after no shorter than the
 * wait for the earliest held key to come to rest (the reason is `rate_limited`, or
 * `concurrency_limited` when a concurrency limit comes first). Nothing is charged, so no key ever
 * exceeds its limits; `reserve` grants nothing, and `adjust` on such a key is dropped.
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
      keys: t.size - t.bookingWeight,
      evicted: t.evicted,
      expired: t.expired,
      demoted: t.demoted,
      summarized: t.summarized,
      refused: t.refused,
      summaries: t.summaries.limits,
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
    if (request.limits.length === 1 && !(request.coreShare! > 0)) {
      const decided = this.#consumeOne(request, now);
      if (decided !== undefined) return decided;
    }
    const entry = this.#table.read(request.key, request.limits, now);
    if (isNew(entry) && !this.#makeRoom(request.key, request.limits, now)) {
      return { allowed: false, statuses: this.#refusal(request.limits, now), now };
    }
    const view = entry?.ledger === undefined ? entry : this.#settle(request.key, request.limits, entry, now);
    const outcome = evaluateKey(
      view?.states ?? [],
      request.limits,
      request.cost,
      now,
      request.permitId ?? '',
      request.coreShare ?? 0,
    );
    if (outcome.allowed) this.#table.write(request.key, request.limits, outcome.next, keepUntil(view, now + outcome.ttlMs), now);
    return { allowed: outcome.allowed, statuses: outcome.statuses, now };
  }

  /**
   * {@link consumeSync} on a key of one rate limit that holds a slot of it (most calls), as
   * `evaluateKey` decides it, without the general path's views and arrays; undefined when that path
   * must decide (a new key may need room).
   */
  #consumeOne(request: ConsumeRequest, now: number): ConsumeResult | undefined {
    const limit = request.limits[0]!;
    const algorithm = rateAlgorithm(limit.code);
    if (algorithm === undefined) return undefined;
    // Admitted on the key's slot where it lies (the algorithms that can), else by evaluate.
    const admitted =
      algorithm.admitInPlace === undefined
        ? undefined
        : this.#table.admitInPlace(request.key, request.limits, algorithm, request.cost, now);
    if (admitted !== undefined) return { allowed: true, statuses: [limitStatus(limit, admitted)], now };
    const state = this.#table.stateOf(request.key, request.limits, now) as RateState | null | undefined;
    if (state === undefined) return undefined;
    const o = algorithm.evaluate(state === null ? undefined : normalizeState(state, now, limit), request.cost, now, limit, 0);
    if (o.allowed) this.#table.write(request.key, request.limits, [o.next], now + o.ttlMs, now);
    return { allowed: o.allowed, statuses: [limitStatus(limit, o)], now };
  }

  async reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.#checkOpen();
    const now = this.#options.clock.now();
    const entry = this.#table.read(request.key, request.limits, now);
    if (isNew(entry) && !this.#makeRoom(request.key, request.limits, now)) {
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
    if (isNew(entry) && !this.#makeRoom(request.key, request.limits, now)) return;
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
    // A booking needs a slot of its own: its ledger cannot be summarized.
    if (isNew(entry) && !this.#makeRoom(request.key, request.limits, now, true)) {
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
    if (hasConcurrency(request.limits)) {
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
  async outcomeTotals(resource: string, windowMs: number, cohort?: string, read?: TallyRead): Promise<OutcomeTotals> {
    this.#checkOpen();
    return this.#outcomes.totals(resource, windowMs, this.#options.clock.now(), cohort, read);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.#options.clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    this.#table.clear();
  }

  #permit(request: PermitRequest, op: 'renew' | 'release'): boolean {
    this.#checkOpen();
    const index = request.limits.findIndex((l) => !algorithmOf(l).rate);
    if (index < 0) throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'the key has no concurrency limit to hold permits');
    const limit = request.limits[index]!;
    const now = this.#options.clock.now();
    const read = this.#table.read(request.key, request.limits, now);
    if (read === undefined) return false;
    const entry = read.ledger === undefined ? read : this.#settle(request.key, request.limits, read, now);
    const states = entry.states.slice();
    const held = states[index] as ConcurrencyState | undefined;
    const permitId = request.permitId;
    const result =
      op === 'renew'
        ? concurrency.renew(held, permitId, now, limit, request.ttlMs ?? limit.permitTtlMs)
        : concurrency.release(held, permitId, now);
    states[index] = result.next;
    this.#table.write(request.key, request.limits, states, Math.max(entry.expiresAt, now + result.ttlMs), now);
    return result.found;
  }

  /**
   * True when `key` has or got a slot, or may be decided on its group's summary; tells the
   * observer how a full table placed it.
   */
  #makeRoom(key: string, limits: readonly CompiledLimit[], now: number, pinned = false): boolean {
    const t = this.#table;
    const [evicted, demoted, refused] = [t.evicted, t.demoted, t.refused];
    const ok = t.makeRoom(key, now, limits, pinned);
    const observer = this.#options.observer;
    if (observer?.keyTableFull !== undefined) {
      const outcome =
        t.refused !== refused ? 'refused' : t.demoted !== demoted ? 'demoted' : t.evicted !== evicted ? 'evicted' : undefined;
      if (outcome !== undefined) observer.keyTableFull({ outcome });
      else if (ok && !t.holds(key) && t.size >= this.#options.maxKeys) observer.keyTableFull({ outcome: 'summarized' });
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
