/**
 * Result codes of the batch script, as defined in `lua/lib/codes.lua` (a unit test checks that
 * both agree). Positive codes fail a whole call before anything is applied; negative codes
 * replace one item's result.
 */
export const ScriptCodes = Object.freeze({
  OK: 0,
  /** The script speaks another protocol version than the client (a rolling deploy). */
  ERR_PROTOCOL_VERSION: 1,
  /** An argument is missing, malformed or out of bounds. */
  ERR_BAD_ARGUMENT: 2,
  /** The key holds something the script did not write. */
  ERR_CORRUPT_STATE: -3,
  /** A booking or cancel of a policy with a concurrency limit (the client refuses it first). */
  ERR_NOT_BOOKABLE: -4,
  /** A booking or cancel named a booking held under another token; nothing of it changed. */
  ERR_BOOKING_TOKEN: -5,
});

/** Version of the KEYS/ARGV layout spoken with `lua/batch.lua`. */
export const PROTOCOL_VERSION = '5';

/**
 * The item operations' codes in the batch protocol, written by protocol.ts's encoder only
 * (callers build typed `BatchItem`s). `consumeOne` is a consume of a policy of one token bucket,
 * GCRA or fixed window with no permit and no share held back: sent in four values, answered in
 * three or four. `book` (eleven values) and `cancel` (seven) are bookings (deferred admission,
 * see core's booking.ts).
 */
export const Ops = Object.freeze({ consume: 1, adjust: 2, renew: 3, release: 4, reserve: 5, consumeOne: 6, book: 7, cancel: 8 });
