/**
 * The MemoryStore's bookkeeping written out with the core's pure functions, so that a test can
 * see the states and bookings it keeps (the MemoryStore hides them) and compare them with what
 * Redis stores. Its decisions are checked against the real MemoryStore's, so it cannot drift
 * unnoticed.
 */
import {
  adjustKey,
  bookKey,
  bookingTokenRefused,
  cancelBooking,
  concurrency,
  evaluateKey,
  openBookings,
  reserveKey,
  type BookKeyRequest,
  type BookResult,
  type BookingLedger,
  type CompiledLimit,
  type ConcurrencyState,
  type ConsumeResult,
  type LimitState,
  type ReserveResult,
} from '@sluice/core';

interface Entry {
  expiresAt: number;
  limits: readonly CompiledLimit[];
  states: (LimitState | undefined)[];
  ledger?: BookingLedger;
}

/** The expiry of an operation's write: no less than a key holding bookings had (MemoryStore's keepUntil). */
function keep(entry: Entry | undefined, needed: number): number {
  return entry?.ledger === undefined ? needed : Math.max(needed, entry.expiresAt);
}

export class ReferenceStore {
  readonly entries = new Map<string, Entry>();

  consume(
    key: string,
    limits: readonly CompiledLimit[],
    cost: number,
    permitId: string,
    coreShare: number,
    now: number,
  ): ConsumeResult {
    const entry = this.#open(key, limits, now);
    const o = evaluateKey(entry?.states ?? [], limits, cost, now, permitId, coreShare);
    if (o.allowed) this.#write(key, limits, o.next, keep(entry, now + o.ttlMs), entry?.ledger);
    return { allowed: o.allowed, statuses: o.statuses, now };
  }

  reserve(key: string, limits: readonly CompiledLimit[], min: number, max: number, now: number, holdMs = 0): ReserveResult {
    const entry = this.#open(key, limits, now);
    const o = reserveKey(entry?.states ?? [], limits, min, max, now, holdMs);
    if (o.granted > 0) this.#write(key, limits, o.next, keep(entry, now + o.ttlMs), entry?.ledger);
    return { allowed: o.granted > 0, granted: o.granted, statuses: o.statuses, now };
  }

  adjust(key: string, limits: readonly CompiledLimit[], delta: number, now: number, at = 0): void {
    const entry = this.#open(key, limits, now);
    const { next, ttlMs } = adjustKey(entry?.states ?? [], limits, delta, now, at);
    this.#write(key, limits, next, keep(entry, now + ttlMs), entry?.ledger);
  }

  book(key: string, limits: readonly CompiledLimit[], request: BookKeyRequest, now: number): BookResult {
    const entry = this.#read(key, limits, now);
    const s = openBookings(entry?.states ?? [], entry?.ledger, limits, now, entry?.expiresAt ?? 0);
    const r = bookKey(s, limits, request, now);
    if (s.changed) this.#write(key, limits, s.states, s.keepUntil, s.ledger);
    if (r.forbidden === true) throw bookingTokenRefused();
    const allowed = r.outcome === 'admitted' || r.outcome === 'claimed';
    const booking = r.booking === undefined ? {} : { booking: { start: r.booking.start, end: r.booking.end } };
    return { allowed, outcome: r.outcome, statuses: r.statuses, now, ...booking };
  }

  cancel(key: string, limits: readonly CompiledLimit[], id: string, token: string, now: number): boolean {
    const entry = this.#read(key, limits, now);
    if (entry?.ledger === undefined) return false;
    const s = openBookings(entry.states, entry.ledger, limits, now, entry.expiresAt);
    const found = cancelBooking(s, limits, id, token, now);
    if (s.changed) this.#write(key, limits, s.states, s.keepUntil, s.ledger);
    if (found === 'forbidden') throw bookingTokenRefused();
    return found;
  }

  permit(
    op: 'renew' | 'release',
    key: string,
    limits: readonly CompiledLimit[],
    permitId: string,
    ttlMs: number | undefined,
    now: number,
  ): boolean {
    const index = limits.findIndex((l) => l.algorithm === 'concurrency');
    const limit = limits[index]!;
    const entry = this.#open(key, limits, now);
    if (entry === undefined) return false;
    const held = entry.states[index] as ConcurrencyState | undefined;
    const r =
      op === 'renew'
        ? concurrency.renew(held, permitId, now, limit, ttlMs ?? limit.permitTtlMs)
        : concurrency.release(held, permitId, now);
    const states = entry.states.slice();
    states[index] = r.next;
    this.#write(key, limits, states, Math.max(entry.expiresAt, now + r.ttlMs), entry.ledger);
    return r.found;
  }

  /** The live entry of a key, aligned with its limits (what the next call would see). */
  #read(key: string, limits: readonly CompiledLimit[], now: number): Entry | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    if (entry.limits !== limits) {
      entry.states = limits.map((l) => {
        const i = entry.limits.findIndex((o) => o.id === l.id);
        if (i < 0) return undefined;
        return (entry.limits[i]!.algorithm === 'concurrency') === (l.algorithm === 'concurrency') ? entry.states[i] : undefined;
      });
      entry.limits = limits;
    }
    return entry;
  }

  /** #read, then the key's bookings opened as every operation opens them (MemoryStore #settle). */
  #open(key: string, limits: readonly CompiledLimit[], now: number): Entry | undefined {
    const entry = this.#read(key, limits, now);
    if (entry?.ledger === undefined) return entry;
    const s = openBookings(entry.states, entry.ledger, limits, now, entry.expiresAt);
    if (s.changed) this.#write(key, limits, s.states, s.keepUntil, s.ledger);
    return this.entries.get(key);
  }

  #write(
    key: string,
    limits: readonly CompiledLimit[],
    states: (LimitState | undefined)[],
    expiry: number,
    ledger: BookingLedger | undefined,
  ): void {
    this.entries.set(key, { expiresAt: Math.ceil(expiry), limits, states, ...(ledger === undefined ? {} : { ledger }) });
  }
}
