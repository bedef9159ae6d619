import { randomBytes } from 'node:crypto';
import { normalizeState, rateAlgorithm, type RateState } from '../algorithms/index.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { evaluateKey, type LimitState } from './evaluate.js';
import type { BookingVerdict, LimitStatus } from '../shared/decision.js';
import { capacityOf, hasConcurrency, type CompiledLimit } from '../shared/policy.js';

/**
 * Bookings: deferred admission. A caller denied now may book the earliest slot at which its
 * permits will be free, after every slot already promised; claiming the booking in its span
 * admits without competing, and a booking never claimed expires and gives its permits back where
 * the algorithm's bound allows. Pure functions of (states, ledger, request, now), run by the
 * in-memory store and mirrored by the Redis script (`lua/lib/booking.lua`).
 *
 * A booking of `cost` permits holds a span `[start, end)` on the store's clock: it may be claimed
 * from `start` and until `end`. Each limit charges it so that its bound on any window holds on
 * the times the permits are used, wherever in the span that is (see each algorithm's `book`):
 * bookings never add to what a key admits in any window.
 */

/** One booking on a key. */
export interface Booking {
  /** The caller's name for it, unique on the key (see {@link checkBookingId}). */
  readonly id: string;
  /**
   * The secret its maker holds (see {@link checkBookingToken}): ids are names, often guessable,
   * so a call naming a held booking must also show its token to see, claim or cancel it.
   */
  readonly token: string;
  readonly cost: number;
  /** When it may be claimed from (store clock, ms). */
  readonly start: number;
  /** When it expires: claims must come before this. */
  readonly end: number;
}

/** The bookings of one key, stored beside its limit states. */
export interface BookingLedger {
  /** The policy they were charged under ({@link policyText}); under another policy they are dropped. */
  readonly policy: string;
  /** In the order they were made. */
  readonly bookings: readonly Booking[];
  /**
   * The newest booking's id while nothing else has been charged on the key since ('' when not
   * known): a token bucket or GCRA can only give that one back.
   */
  readonly newest: string;
  /** The states the newest booking left (token bucket and GCRA limits; undefined for others). */
  readonly marks: readonly (RateState | undefined)[];
}

/** Bounds of one key's bookings (per resource, see `ResourceOptions.booking`). */
export interface BookingBounds {
  /** Latest start a booking may have, in ms from now; later slots are a plain denial. */
  readonly maxAheadMs: number;
  /** Longest span a booking may be claimed in (algorithms may allow less). */
  readonly claimWindowMs: number;
  /** Most bookings a key holds at once; more are a plain denial. */
  readonly maxBookings: number;
  /**
   * Largest share of what the key can admit over `maxAheadMs` that its bookings may hold at
   * once (see {@link bookedCap}); more is a plain denial, so no caller can book a key's whole
   * horizon and plain calls always keep the rest.
   */
  readonly maxShare: number;
}

/** Every {@link BookingVerdict}, for decoders. */
export const BOOK_OUTCOMES: readonly BookingVerdict[] = ['admitted', 'booked', 'claimed', 'denied', 'missing'];

/** Longest booking id, in characters. */
export const MAX_BOOKING_ID_LENGTH = 128;
const BOOKING_ID = /^[\x21-\x7e]+$/;
/** Shortest booking token a caller may choose, in characters (generated ones have 22). */
export const MIN_BOOKING_TOKEN_LENGTH = 16;

/**
 * A booking token: 16 to 128 printable ASCII characters (no spaces). A caller that names its own
 * must make it unguessable (e.g. derived from a secret); `Limiter.book` makes one otherwise.
 */
export function checkBookingToken(token: unknown, field = 'token'): string {
  if (
    typeof token !== 'string' ||
    token.length < MIN_BOOKING_TOKEN_LENGTH ||
    token.length > MAX_BOOKING_ID_LENGTH ||
    !BOOKING_ID.test(token)
  ) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      field,
      `must be ${MIN_BOOKING_TOKEN_LENGTH} to ${MAX_BOOKING_ID_LENGTH} printable ASCII characters without spaces`,
    );
  }
  return token;
}

/** A booking id: 1 to 128 printable ASCII characters (no spaces). */
export function checkBookingId(id: unknown, field = 'booking'): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_BOOKING_ID_LENGTH || !BOOKING_ID.test(id)) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      field,
      `must be 1 to ${MAX_BOOKING_ID_LENGTH} printable ASCII characters without spaces`,
    );
  }
  return id;
}

/** A fresh booking token: 128 random bits, 22 base64url characters. */
export function newBookingToken(): string {
  return randomBytes(16).toString('base64url');
}

/** The refusal of a call that named a booking held under another token (nothing changed). */
export function bookingTokenRefused(): SluiceError {
  return new SluiceError(ErrorCodes.BOOKING_TOKEN, 'the booking is held under another token');
}

/** Bounds on the booking settings. */
export const BOOKING_BOUNDS = Object.freeze({
  maxAheadMs: 3_600_000,
  claimWindowMs: 60_000,
  maxBookings: 10_000,
  maxShare: 1,
});

/** The defaults of {@link BookingBounds}. */
export const DEFAULT_BOOKING: BookingBounds = Object.freeze({
  maxAheadMs: 60_000,
  claimWindowMs: 1000,
  maxBookings: 1000,
  maxShare: 0.5,
});

/** Largest permit count {@link bookedCap} answers (the most one call may cost). */
const MAX_CAP = 1_000_000_000;

/**
 * The most permits a key's bookings may hold at once: `maxShare` of what its strictest limit
 * can admit from now to `maxAheadMs` ahead, from a fresh state (its capacity, a bucket's burst
 * or a window's limit, plus its rate over the horizon), rounded down. The Redis store sends it
 * to its script, so both stores bound bookings alike.
 */
export function bookedCap(limits: readonly CompiledLimit[], bounds: BookingBounds): number {
  let cap = MAX_CAP;
  for (const l of limits) {
    const capacity = capacityOf(l) + (l.limit * bounds.maxAheadMs) / l.windowMs;
    cap = Math.min(cap, Math.floor(bounds.maxShare * capacity + 1e-9));
  }
  return cap;
}

/** How many times the slot search may move forward before it gives up (several fixed windows). */
const MAX_SLOT_STEPS = 16;

/**
 * The encoding of a key's limits that the Redis script receives, one string (per limit code,
 * limit, windowMs, burst, slices, permitTtlMs, id, all joined by commas). Bookings remember it, so
 * a policy change drops them: their charges were converted with the rest of the state.
 */
export function policyText(limits: readonly CompiledLimit[]): string {
  let text = texts.get(limits);
  if (text === undefined) {
    text = limits.map((l) => [l.code, l.limit, l.windowMs, l.burst, l.slices, l.permitTtlMs, l.id].join(',')).join(',');
    if (Object.isFrozen(limits)) texts.set(limits, text);
  }
  return text;
}
const texts = new WeakMap<readonly CompiledLimit[], string>();

/** A key's states and bookings while an operation works on them (changed in place). */
export interface BookingState {
  states: (LimitState | undefined)[];
  ledger: BookingLedger | undefined;
  /** Latest time the key's state must be kept until (ms, store clock). */
  keepUntil: number;
  /** True when something changed and must be written. */
  changed: boolean;
}

/** What {@link bookKey} decided. */
export interface BookKeyResult {
  readonly outcome: BookingVerdict;
  /** Per limit: the call's cost judged now (as a consume would), or what is left after a claim. */
  readonly statuses: LimitStatus[];
  /** The booking held, for `booked` and `claimed`. */
  readonly booking?: Booking;
  /**
   * The id names a booking held under another token: nothing was judged or changed (the call
   * is refused, `SLUICE_ERR_BOOKING_TOKEN`; `outcome` and `statuses` then mean nothing).
   */
  readonly forbidden?: true;
}

/** The request {@link bookKey} decides. */
export interface BookKeyRequest {
  readonly cost: number;
  readonly id: string;
  /** The caller's token: a booking it makes keeps it, and a held one must have it. */
  readonly token: string;
  /** False: only claim an existing booking (never book, never consume). */
  readonly create: boolean;
  readonly bounds: BookingBounds;
  /**
   * Asked just before a new booking is made: false when the store has no room to keep one more
   * (the embedded store's key table), and the call is then a plain denial.
   * @default always room
   */
  readonly room?: () => boolean;
}

/**
 * Opens a key's state for a booking-aware operation: a ledger from another policy is dropped,
 * and expired bookings are given back (every operation on a key with bookings does this first,
 * so no other refund can ever take a booking's charge for its own).
 */
export function openBookings(
  states: readonly (LimitState | undefined)[],
  ledger: BookingLedger | undefined,
  limits: readonly CompiledLimit[],
  now: number,
  keepUntil: number,
): BookingState {
  const s: BookingState = { states: states.slice(), ledger, keepUntil, changed: false };
  if (ledger === undefined) return s;
  if (ledger.policy !== policyText(limits)) {
    s.ledger = undefined;
    s.changed = true;
    return s;
  }
  let expired = false;
  for (const b of ledger.bookings) if (b.end <= now) expired = true;
  if (!expired) return s;
  for (const b of ledger.bookings) if (b.end <= now) giveBack(s, limits, b, now);
  return s;
}

const FORBIDDEN: BookKeyResult = Object.freeze({ outcome: 'denied', statuses: [], forbidden: true });

/**
 * Books, claims or admits (see {@link BookingVerdict}); `s` comes from {@link openBookings}. A held
 * id with another token is `forbidden`: the call cannot see, claim or take over that booking.
 */
export function bookKey(s: BookingState, limits: readonly CompiledLimit[], request: BookKeyRequest, now: number): BookKeyResult {
  const { cost, id } = request;
  if (hasConcurrency(limits)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'keys with a concurrency limit cannot be booked');
  }
  const held = s.ledger?.bookings.find((b) => b.id === id);
  if (held !== undefined && !tokenMatches(held, request.token)) return FORBIDDEN;
  if (held !== undefined) {
    if (now < held.start)
      return { outcome: 'booked', statuses: evaluateKey(s.states, limits, cost, now, '').statuses, booking: held };
    claim(s, limits, held, now);
    const left = evaluateKey(s.states, limits, 0, now, '').statuses;
    return { outcome: 'claimed', statuses: left.map((st) => ({ ...st, allowed: true, retryAfterMs: 0 })), booking: held };
  }
  const judged = evaluateKey(s.states, limits, cost, now, '');
  if (!request.create) return { outcome: 'missing', statuses: judged.statuses };
  if (judged.allowed) {
    s.states = judged.next;
    s.keepUntil = Math.max(s.keepUntil, now + judged.ttlMs);
    s.changed = true;
    if (s.ledger !== undefined) s.ledger = { ...s.ledger, newest: '' };
    return { outcome: 'admitted', statuses: judged.statuses };
  }
  const slot = findSlot(s, limits, cost, now, request.bounds);
  if (slot === undefined || request.room?.() === false) return { outcome: 'denied', statuses: judged.statuses };
  const booking: Booking = { id, token: request.token, cost, start: slot.start, end: slot.end };
  let keep = slot.end;
  limits.forEach((limit, i) => {
    const o = rateAlgorithm(limit.code)!.book(rateState(s.states[i], now, limit), cost, slot.start, slot.end, now, limit);
    s.states[i] = o.next;
    keep = Math.max(keep, now + o.ttlMs);
  });
  const marks = limits.map((l, i) => (l.code === 1 || l.code === 2 ? (s.states[i] as RateState | undefined) : undefined));
  const bookings = [...(s.ledger?.bookings ?? []), booking];
  s.ledger = { policy: policyText(limits), bookings, newest: id, marks };
  s.keepUntil = Math.max(s.keepUntil, keep);
  s.changed = true;
  return { outcome: 'booked', statuses: judged.statuses, booking };
}

/**
 * Cancels a booking not yet claimed: its permits go back where the bound allows. True if it was
 * held, false if not, 'forbidden' (nothing changed) if it is held under another token.
 */
export function cancelBooking(
  s: BookingState,
  limits: readonly CompiledLimit[],
  id: string,
  token: string,
  now: number,
): boolean | 'forbidden' {
  const held = s.ledger?.bookings.find((b) => b.id === id);
  if (held === undefined) return false;
  if (!tokenMatches(held, token)) return 'forbidden';
  giveBack(s, limits, held, now);
  return true;
}

/**
 * The slot a booking of `cost` gets: the earliest start every limit allows (moved forward until
 * they agree), and the span the strictest limit allows from there. Undefined when there is none
 * within the bounds.
 */
function findSlot(
  s: BookingState,
  limits: readonly CompiledLimit[],
  cost: number,
  now: number,
  bounds: BookingBounds,
): { start: number; end: number } | undefined {
  if ((s.ledger?.bookings.length ?? 0) >= bounds.maxBookings) return undefined;
  let held = cost;
  for (const b of s.ledger?.bookings ?? []) held += b.cost;
  if (held > bookedCap(limits, bounds)) return undefined;
  let start = now;
  let agreed = false;
  for (let step = 0; step < MAX_SLOT_STEPS && !agreed; step++) {
    let next = start;
    limits.forEach((limit, i) => {
      next = Math.max(next, rateAlgorithm(limit.code)!.startOf(rateState(s.states[i], now, limit), cost, start, now, limit));
    });
    agreed = next === start;
    start = next;
  }
  if (!agreed || !(start - now <= bounds.maxAheadMs)) return undefined;
  let span = bounds.claimWindowMs;
  limits.forEach((limit, i) => {
    span = Math.min(span, rateAlgorithm(limit.code)!.claimSpan(rateState(s.states[i], now, limit), cost, start, now, limit));
  });
  // A span under a millisecond could not be claimed in practice: no booking then.
  if (!(span >= 1)) return undefined;
  return { start, end: start + span };
}

function claim(s: BookingState, limits: readonly CompiledLimit[], b: Booking, now: number): void {
  limits.forEach((limit, i) => {
    s.states[i] = rateAlgorithm(limit.code)!.claim(rateState(s.states[i], now, limit), b.cost, b.end, now, limit).next;
  });
  remove(s, b);
}

/** Gives an unclaimed booking's permits back (see `RateAlgorithm.unbook`) and removes it. */
function giveBack(s: BookingState, limits: readonly CompiledLimit[], b: Booking, now: number): void {
  const ledger = s.ledger!;
  const newest =
    ledger.newest === b.id && limits.every((l, i) => !(l.code === 1 || l.code === 2) || sameState(s.states[i], ledger.marks[i]));
  limits.forEach((limit, i) => {
    const o = rateAlgorithm(limit.code)!.unbook(rateState(s.states[i], now, limit), b.cost, b.start, b.end, now, limit, newest);
    s.states[i] = o.next;
  });
  remove(s, b);
}

function remove(s: BookingState, b: Booking): void {
  const ledger = s.ledger!;
  const bookings = ledger.bookings.filter((x) => x !== b);
  s.ledger = bookings.length === 0 ? undefined : { ...ledger, bookings, newest: ledger.newest === b.id ? '' : ledger.newest };
  s.changed = true;
}

/** A booking answers its own token only; one kept without a token answers none. */
function tokenMatches(b: Booking, token: string): boolean {
  return b.token !== '' && b.token === token;
}

function rateState(state: LimitState | undefined, now: number, limit: CompiledLimit): RateState | undefined {
  return normalizeState(state as RateState | undefined, now, limit);
}

function sameState(a: LimitState | undefined, b: RateState | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  const x = a as RateState;
  if (x.length !== b.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== b[i]) return false;
  return true;
}
