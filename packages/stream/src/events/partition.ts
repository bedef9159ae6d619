/**
 * Which partition an event goes to. Events of one resource land on one partition so one
 * aggregator sees all of them; a resource too hot for one partition can be spread over
 * `spread` consecutive partitions by a time salt that changes every `saltMs` (each aggregator
 * then sees a share of the traffic, and the share rotates over time).
 */
import { StreamError, StreamErrorCodes } from '../errors.js';

/** Most partitions a stream may have (matches the transports' bound). */
export const MAX_PARTITIONS = 1024;

/**
 * `(resourceHash mod partitions + saltSlot) mod partitions`. `saltSlot` defaults to 0 (no
 * salt); compute it with {@link saltSlotOf}. Throws `SLUICE_ERR_STREAM_INVALID_RECORD` for a
 * partition count outside 1..1024 or a negative / non-integer slot.
 */
export function partitionOf(resourceHash: number, partitions: number, saltSlot = 0): number {
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > MAX_PARTITIONS) {
    throw new StreamError(
      StreamErrorCodes.INVALID_RECORD,
      `partitions: must be an integer in 1..${MAX_PARTITIONS} (got ${partitions})`,
    );
  }
  if (!Number.isInteger(saltSlot) || saltSlot < 0) {
    throw new StreamError(StreamErrorCodes.INVALID_RECORD, `saltSlot: must be a non-negative integer (got ${saltSlot})`);
  }
  return (((resourceHash >>> 0) % partitions) + (saltSlot % partitions)) % partitions;
}

/**
 * The time salt: `floor(nowMs / saltMs) mod spread`. A `spread` of 1 (or less) means no salt.
 */
export function saltSlotOf(nowMs: number, saltMs: number, spread: number): number {
  if (!(spread > 1) || !(saltMs > 0)) return 0;
  const s = Math.floor(spread);
  return ((Math.floor(nowMs / saltMs) % s) + s) % s;
}
