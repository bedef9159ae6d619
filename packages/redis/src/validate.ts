import {
  ALGORITHM_CODES,
  ALGORITHM_TRAITS,
  BOOKING_BOUNDS,
  ErrorCodes,
  POLICY_BOUNDS,
  SluiceError,
  checkDelta,
  checkHold,
  checkStamp,
  checkKey,
  checkBookingId,
  checkBookingToken,
  compileLimits,
  hasConcurrency,
  intOption,
  policyText,
  type BookingBounds,
  type CompiledLimit,
  MAX_COST,
  MAX_CORE_SHARE,
} from '@sluice/core';
import { invalid } from './errors.js';

/** Longest permit id, in UTF-8 bytes (the script's bound). */
export const MAX_PERMIT_ID_BYTES = 256;

const FIELDS = ['id', 'algorithm', 'code', 'limit', 'windowMs', 'burst', 'slices', 'permitTtlMs'] as const;

/** Limit lists already checked, with their encoding for the script. Compiled lists are frozen. */
const checked = new WeakMap<readonly CompiledLimit[], string>();

/**
 * Checks that `limits` is a list of compiled limits (as `compileLimits` makes them) and returns
 * its encoding for the batch script, one argument: the core's `policyText` (per limit code,
 * limit, windowMs, burst, slices, permitTtlMs, id, all joined by commas), which a key's bookings
 * also remember to notice a policy change, so both sides must spell it alike. Frozen lists are
 * checked once.
 */
export function policyArg(limits: readonly CompiledLimit[]): string {
  const cached = checked.get(limits);
  if (cached !== undefined) return cached;
  if (!Array.isArray(limits)) throw invalid(ErrorCodes.INVALID_POLICY, 'limits', 'must be an array of compiled limits');
  const list = limits as readonly unknown[];
  if (list.some((l) => typeof l !== 'object' || l === null)) {
    throw invalid(ErrorCodes.INVALID_POLICY, 'limits', 'must be an array of compiled limits');
  }
  const given = list as readonly CompiledLimit[];
  // Compiling the plain fields again checks every bound with the core's own messages.
  const compiled = compileLimits(
    given.map((l) => ({
      algorithm: l.algorithm,
      limit: l.limit,
      windowMs: l.windowMs,
      burst: l.burst,
      slices: l.slices,
      permitTtlMs: l.permitTtlMs,
      id: l.id,
    })),
  );
  compiled.forEach((c, i) => {
    for (const f of FIELDS) {
      if (c[f] !== given[i]![f])
        throw invalid(ErrorCodes.INVALID_POLICY, `limits[${i}].${f}`, 'is not what compileLimits would make');
    }
    if (c.code !== ALGORITHM_CODES[c.algorithm])
      throw invalid(ErrorCodes.INVALID_POLICY, `limits[${i}].code`, 'does not match the algorithm');
  });
  // Of the fresh compiled list (equal field by field, checked above): the core caches a frozen
  // list's text, which a caller's list with mutable limits could outdate.
  const arg = policyText(compiled);
  if (Object.isFrozen(limits) && given.every((l) => Object.isFrozen(l))) checked.set(limits, arg);
  return arg;
}

/**
 * True for a policy of one limit whose algorithm takes the script's one-limit consume (its state
 * is three numbers: `AlgorithmTraits.fastPath`), checked by {@link policyArg}.
 */
export function isOneLimit(limits: readonly CompiledLimit[]): boolean {
  return limits.length === 1 && ALGORITHM_TRAITS[limits[0]!.algorithm].fastPath;
}

/**
 * The longest storage key the store takes: the longest a limiter builds (a resource name of up
 * to 128 characters, a caller key of up to the largest `maxKeyLength`, 65,536, and the marks
 * between them), so a key the limiter accepted is never refused here.
 */
export const MAX_STORAGE_KEY_LENGTH = 65_536 + 256;

/** A storage key: a well-formed string of at most MAX_STORAGE_KEY_LENGTH characters. */
export function storeKey(key: unknown): string {
  return checkKey(key, MAX_STORAGE_KEY_LENGTH);
}

/** A cost: an integer in 0..MAX_COST. Costs above what a limit holds are simply denied. */
export function storeCost(cost: unknown): number {
  if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 0 || cost > MAX_COST) {
    throw invalid(ErrorCodes.INVALID_COST, 'cost', `must be an integer between 0 and ${MAX_COST}, got ${String(cost)}`);
  }
  return cost;
}

/** A consume's core share: a number in 0..MAX_CORE_SHARE (core's bound), 0 when omitted. */
export function storeCoreShare(coreShare: unknown): number {
  if (coreShare === undefined) return 0;
  if (typeof coreShare !== 'number' || !(coreShare >= 0 && coreShare <= MAX_CORE_SHARE)) {
    const got = typeof coreShare === 'number' ? String(coreShare) : JSON.stringify(coreShare);
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'coreShare', `must be a number between 0 and ${MAX_CORE_SHARE}, got ${got}`);
  }
  return coreShare;
}

/** An adjustment: an integer in -MAX_COST..MAX_COST. */
export function storeDelta(delta: unknown): number {
  return checkDelta(delta);
}

/** A concurrency permit's id: a string of at most MAX_PERMIT_ID_BYTES UTF-8 bytes ('' for none). */
export function storePermitId(permitId: unknown): string {
  if (typeof permitId !== 'string' || Buffer.byteLength(permitId) > MAX_PERMIT_ID_BYTES) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'permitId', `must be a string of at most ${MAX_PERMIT_ID_BYTES} bytes`);
  }
  return permitId;
}

/** A permit's lifetime for a renewal: an integer in 1..maxPermitTtlMs. */
export function storePermitTtl(ttlMs: unknown): number {
  if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > POLICY_BOUNDS.maxPermitTtlMs) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'ttlMs',
      `must be an integer between 1 and ${POLICY_BOUNDS.maxPermitTtlMs}, got ${String(ttlMs)}`,
    );
  }
  return ttlMs;
}

/** Reservation bounds: integers with 0 <= min <= max, 1 <= max <= MAX_COST. */
/** A reservation's hold: see `checkHold` in @sluice/core. */
export function storeHold(holdMs: unknown): number {
  return checkHold(holdMs);
}

/** A refund's stamp: see `checkStamp` in @sluice/core. */
export function storeStamp(at: unknown): number {
  return checkStamp(at);
}

export function storeReserveBounds(min: unknown, max: unknown): [number, number] {
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > MAX_COST) {
    throw invalid(ErrorCodes.INVALID_COST, 'max', `must be an integer between 1 and ${MAX_COST}, got ${String(max)}`);
  }
  if (typeof min !== 'number' || !Number.isInteger(min) || min < 0 || min > max) {
    throw invalid(ErrorCodes.INVALID_COST, 'min', `must be an integer between 0 and max (${max}), got ${String(min)}`);
  }
  return [min, max];
}

/** A booking id: see `checkBookingId` in @sluice/core (printable ASCII, so bytes = characters). */
export function storeBookingId(id: unknown): string {
  return checkBookingId(id, 'id');
}

/** Whether a booking call may admit or book (true), or only claim (false). */
export function storeCreate(create: unknown): boolean {
  if (typeof create !== 'boolean') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'create', `must be a boolean, got ${JSON.stringify(create)}`);
  }
  return create;
}

/** A resource's booking bounds: integers within the core's BOOKING_BOUNDS, as its resources check them. */
export function storeBookingBounds(bounds: unknown): BookingBounds {
  if (typeof bounds !== 'object' || bounds === null) throw invalid(ErrorCodes.INVALID_OPTIONS, 'bounds', 'must be an object');
  const given = bounds as Record<string, unknown>;
  for (const field of ['maxAheadMs', 'claimWindowMs', 'maxBookings'] as const) {
    intOption(given[field], `bounds.${field}`, undefined, 1, BOOKING_BOUNDS[field]);
  }
  const share = given.maxShare;
  if (typeof share !== 'number' || !(share > 0 && share <= BOOKING_BOUNDS.maxShare)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'bounds.maxShare', 'must be a number above 0 and at most 1');
  }
  // Frozen ones (a compiled resource's) cannot change before the batch is encoded; others are copied.
  if (Object.isFrozen(bounds)) return bounds as BookingBounds;
  const { maxAheadMs, claimWindowMs, maxBookings, maxShare } = bounds as BookingBounds;
  return { maxAheadMs, claimWindowMs, maxBookings, maxShare };
}

/** A booking token as the script takes it: `checkBookingToken`'s, or '' for a call without one. */
export function storeBookingToken(token: unknown): string {
  return token === '' ? '' : checkBookingToken(token, 'token');
}

/** Bookings take rate limits only, as the core's bookKey says. */
export function notBookable(limits: readonly CompiledLimit[]): void {
  if (hasConcurrency(limits)) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'keys with a concurrency limit cannot be booked');
  }
}

/** Reservations take rate permits only: a held concurrency permit cannot be shared out. */
export function noConcurrencyLimit(limits: readonly CompiledLimit[]): void {
  if (hasConcurrency(limits)) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'keys with a concurrency limit cannot be reserved');
  }
}

/** The key's concurrency limit, which renew and release need. */
export function concurrencyLimit(limits: readonly CompiledLimit[]): CompiledLimit {
  const limit = limits.find((l) => !ALGORITHM_TRAITS[l.algorithm].rate);
  if (limit === undefined) throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'the key has no concurrency limit to hold permits');
  return limit;
}
