import type { BookingLedger } from './booking.js';
import type { LimitState } from './evaluate.js';
import { ExpiryWheel } from './expiry-wheel.js';
import type { CompiledLimit } from './policy.js';

/** A key's state as the store works with it: per-limit states aligned with `limits`. */
export interface KeyView {
  readonly expiresAt: number;
  readonly states: (LimitState | undefined)[];
  /** The key's bookings, if it holds any (see booking.ts). */
  readonly ledger?: BookingLedger;
}

/**
 * A key with several limits or a concurrency limit: an object holding its limits (to notice a
 * policy change) and the per-limit states.
 */
interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  states: (LimitState | undefined)[];
  ledger?: BookingLedger;
}

/**
 * The common case, one rate limit, packed into one array of doubles:
 * `[expiresAt, policyId, ...rateState]`. A million such keys must fit in well under 200 MB,
 * and an array of doubles costs half of an object holding a state array.
 */
type Packed = number[];

type Slot = Entry | Packed;

/** What a key's booking ledger weighs in `maxKeys`, in keys, beside one per booking. */
const LEDGER_WEIGHT = 2;

/**
 * Where the in-memory store keeps keys: a Map of slots, bounded in size. Accesses do not reorder
 * the Map (a hot key costs the same however many keys there are). Only state at rest leaves the
 * table: a state past its expiry, which the algorithms define as the time from which it decides
 * exactly as no state would. An {@link ExpiryWheel} finds such keys in O(1) amortised, for the
 * periodic sweep and for a new key arriving at a full table.
 *
 * A full table whose keys all still count has no room: a new key is refused (see
 * {@link KeyTable.makeRoom}) rather than any live state dropped, since dropping it would hand a
 * key's spent permits (or held concurrency leases) out again. Refusing is safe: a refused key is
 * charged nothing and, when it gets a slot, starts from no state, as it would have anyway.
 */
export class KeyTable {
  readonly #slots = new Map<string, Slot>();
  /** Every key of `#slots`, filed by when its state comes to rest. */
  readonly #wheel = new ExpiryWheel();
  /**
   * Policies are numbered so a packed slot can say which one wrote it. A number lives while a
   * packed slot carries it (counted in `refs`), so there are never more than keys, however many
   * policies clients make (each Envoy limit override is one), and a live key never loses its
   * policy.
   */
  #policyIds = new WeakMap<readonly CompiledLimit[], number>();
  readonly #policies = new Map<number, { readonly limits: readonly CompiledLimit[]; refs: number }>();
  #nextPolicy = 1;
  /** Keys at rest removed to make room for a new key. */
  evicted = 0;
  /** Keys at rest removed by the sweep. */
  expired = 0;
  /** New keys refused: the table was full and every key held still counted. */
  refused = 0;
  /** Bookings held in the keys' ledgers (see {@link bookingWeight}). */
  bookings = 0;
  /** Keys holding bookings: each ledger weighs as LEDGER_WEIGHT keys more. */
  ledgers = 0;
  /** Bookings refused because keys and bookings filled the table (see {@link roomForBooking}). */
  refusedBookings = 0;

  constructor(private readonly maxKeys: number) {}

  get size(): number {
    return this.#slots.size;
  }

  /**
   * The key's states aligned to `limits`, or undefined when absent or at rest. A key at rest stays
   * in the table (its slot is reused by the next write) until the wheel takes it.
   */
  read(key: string, limits: readonly CompiledLimit[], now: number): KeyView | undefined {
    const slot = this.#slots.get(key);
    if (slot === undefined) return undefined;
    const expiresAt = expiryOf(slot);
    if (expiresAt <= now) return undefined;
    const written = Array.isArray(slot) ? this.#policies.get(slot[1]!)!.limits : slot.limits;
    const states: (LimitState | undefined)[] = Array.isArray(slot) ? [slot.slice(2)] : slot.states;
    const ledger = Array.isArray(slot) ? undefined : slot.ledger;
    if (written === limits) return ledger === undefined ? { expiresAt, states } : { expiresAt, states, ledger };
    // The key's policy changed: align states by limit id so each limit finds its own state
    // (the algorithms convert what they find).
    const aligned = limits.map((l) => {
      const i = written.findIndex((o) => o.id === l.id);
      if (i < 0) return undefined;
      const wasConcurrency = written[i]!.algorithm === 'concurrency';
      return wasConcurrency === (l.algorithm === 'concurrency') ? states[i] : undefined;
    });
    // Keep the alignment, as the Redis script does: a limit that was removed and comes back
    // later starts afresh instead of finding its old state.
    this.#set(key, slot, this.#slot(expiresAt, limits, aligned, ledger));
    return ledger === undefined ? { expiresAt, states: aligned } : { expiresAt, states: aligned, ledger };
  }

  /**
   * True when `key` has a slot or one could be made for it: the table has room, or a key at rest
   * was removed to make some. False (and counted in `refused`) when the table is full of state
   * that still counts: the caller must then decide as if denied, and write nothing.
   */
  makeRoom(key: string, now: number): boolean {
    if (this.#slots.size + this.bookingWeight < this.maxKeys || this.#slots.has(key)) return true;
    if (this.#removeOneAtRest(now)) {
      this.evicted++;
      return true;
    }
    this.refused++;
    return false;
  }

  /**
   * True when one more booking fits the bound (keys and bookings together at most `maxKeys`),
   * after removing a key at rest if need be; false (counted in `refusedBookings`) otherwise.
   */
  roomForBooking(now: number): boolean {
    // Room for the worst case: the key's first booking, its ledger with it.
    if (this.#slots.size + this.bookingWeight + LEDGER_WEIGHT + 1 <= this.maxKeys) return true;
    if (this.#removeOneAtRest(now)) {
      this.evicted++;
      return true;
    }
    this.refusedBookings++;
    return false;
  }

  /** Milliseconds until the table surely has room again: when its earliest bucket of keys comes to rest. */
  roomAfterMs(now: number): number {
    const due = this.#wheel.nextDue();
    return due === undefined ? 1 : Math.max(1, Math.ceil(due - now));
  }

  /**
   * Stores a key's states; a new key needs room first (see {@link makeRoom}), else nothing is
   * written. `ledger`: the key's bookings (null: none); omitted, those it holds are kept.
   */
  write(
    key: string,
    limits: readonly CompiledLimit[],
    states: (LimitState | undefined)[],
    expiry: number,
    now: number,
    ledger?: BookingLedger | null,
  ): boolean {
    const expiresAt = Math.ceil(expiry);
    const old = this.#slots.get(key);
    const isNew = old === undefined;
    if (isNew && !this.makeRoom(key, now)) return false;
    const kept =
      ledger === undefined ? (old === undefined || Array.isArray(old) ? undefined : old.ledger) : (ledger ?? undefined);
    this.#set(key, old, this.#slot(expiresAt, limits, states, kept));
    if (isNew) this.#wheel.add(key, expiresAt, now);
    return true;
  }

  #slot(
    expiresAt: number,
    limits: readonly CompiledLimit[],
    states: (LimitState | undefined)[],
    ledger: BookingLedger | undefined,
  ): Slot {
    if (ledger !== undefined) return { expiresAt, limits, states, ledger };
    const only =
      limits.length === 1 && limits[0]!.algorithm !== 'concurrency' ? (states[0] as readonly number[] | undefined) : undefined;
    return only !== undefined ? this.#pack(expiresAt, limits, only) : { expiresAt, limits, states };
  }

  /** Puts `next` in `key`'s slot, in place of `old` (undefined: none). */
  #set(key: string, old: Slot | undefined, next: Slot): void {
    this.#slots.set(key, next);
    this.#count(next, 1);
    if (old !== undefined) this.#count(old, -1);
    if (old !== undefined) this.#release(old);
  }

  /** A slot left the table: its policy number is freed when no packed slot carries it any more. */
  #release(slot: Slot): void {
    if (!Array.isArray(slot)) return;
    const id = slot[1]!;
    const policy = this.#policies.get(id)!;
    if (--policy.refs > 0) return;
    this.#policies.delete(id);
    this.#policyIds.delete(policy.limits);
  }

  /** How many policy numbers are in use (at most one per key). */
  get policies(): number {
    return this.#policies.size;
  }

  clear(): void {
    this.#slots.clear();
    this.#wheel.clear();
    this.#policies.clear();
    this.#policyIds = new WeakMap();
    this.bookings = 0;
    this.ledgers = 0;
  }

  /**
   * What bookings weigh in `maxKeys`, in keys: one per booking, and LEDGER_WEIGHT per key holding
   * any (a key's first booking turns its packed slot into an object with a ledger: about 530
   * bytes, against about 170 for a packed key and 150 to 200 for each booking after it).
   */
  get bookingWeight(): number {
    return this.bookings + LEDGER_WEIGHT * this.ledgers;
  }

  #count(slot: Slot, sign: 1 | -1): void {
    const n = Array.isArray(slot) ? 0 : (slot.ledger?.bookings.length ?? 0);
    if (n === 0) return;
    this.bookings += sign * n;
    this.ledgers += sign;
  }

  /** Removes keys at rest, examining at most `batch` keys whose bucket is due. */
  sweep(now: number, batch: number): number {
    let removed = 0;
    for (let i = 0; i < batch; i++) {
      const key = this.#wheel.takeDue(now);
      if (key === undefined) break;
      if (this.#removeIfAtRest(key, now)) removed++;
    }
    this.expired += removed;
    return removed;
  }

  /** Removes one key at rest, if the wheel has a due one: true when it did. */
  #removeOneAtRest(now: number): boolean {
    for (let key = this.#wheel.takeDue(now); key !== undefined; key = this.#wheel.takeDue(now)) {
      if (this.#removeIfAtRest(key, now)) return true;
    }
    return false;
  }

  /** Removes `key`, just taken off the wheel, if its state is at rest; files it again otherwise. */
  #removeIfAtRest(key: string, now: number): boolean {
    const slot = this.#slots.get(key);
    if (slot === undefined) return false;
    const expiresAt = expiryOf(slot);
    if (expiresAt <= now) {
      this.#slots.delete(key);
      this.#count(slot, -1);
      this.#release(slot);
      return true;
    }
    this.#wheel.add(key, expiresAt, now);
    return false;
  }

  /** Builds a packed slot with an exactly sized backing store (spreads and pushes over-allocate). */
  #pack(expiresAt: number, limits: readonly CompiledLimit[], state: readonly number[]): Packed {
    const packed = new Array<number>(state.length + 2);
    packed[0] = expiresAt;
    packed[1] = this.#policyId(limits);
    for (let i = 0; i < state.length; i++) packed[i + 2] = state[i]!;
    return packed;
  }

  /** The policy's number, counted once more (the caller packs it into a slot). */
  #policyId(limits: readonly CompiledLimit[]): number {
    const known = this.#policyIds.get(limits);
    if (known !== undefined) {
      this.#policies.get(known)!.refs++;
      return known;
    }
    const id = this.#nextPolicy++;
    this.#policyIds.set(limits, id);
    this.#policies.set(id, { limits, refs: 1 });
    return id;
  }
}

function expiryOf(slot: Slot): number {
  return Array.isArray(slot) ? slot[0]! : slot.expiresAt;
}
