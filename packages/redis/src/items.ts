import type { BookingBounds, BookResult, CompiledLimit, ConsumeResult, ReserveResult } from '@sluice/core';

/**
 * What every item names: the key it decides and the policy it decides under. Items are built
 * from validated requests (see validate.ts); the encoder does not check them again.
 */
export interface ItemBase {
  /** Redis name of the key's state (see keys.ts). */
  readonly stateKey: string;
  /** The policy's compiled limits; a result's statuses come in their order. */
  readonly limits: readonly CompiledLimit[];
  /** The limits as the script reads them (see validate.ts policyArg). */
  readonly policy: string;
}

/**
 * Take `cost` permits from every limit, all or nothing (`ConsumeRequest`). The encoder sends
 * the common case (one rate limit, no permit, no share) in the script's short form.
 */
export interface ConsumeItem extends ItemBase {
  readonly op: 'consume';
  /** Permits to take, an integer in 0..MAX_COST. */
  readonly cost: number;
  /** The concurrency permit to take when the policy has a concurrency limit; '' for none. */
  readonly permitId: string;
  /**
   * Share of each limit kept for core traffic (`ConsumeRequest.coreShare`, 0..MAX_CORE_SHARE): the cost must fit
   * with that share of the limit's capacity still left. 0 for none.
   */
  readonly coreShare: number;
}

/** Take between `min` and `max` permits at once, for a client lease (`ReserveRequest`). */
export interface ReserveItem extends ItemBase {
  readonly op: 'reserve';
  /** The fewest permits worth taking, an integer in 0..max (fewer left: none are taken). */
  readonly min: number;
  /** The most permits to take, an integer in 1..MAX_COST. */
  readonly max: number;
  /**
   * How long after the decision the permits may be used, in ms (0..maxHoldMs, see
   * `ReserveRequest.holdMs`): sliding windows and logs count them as taken then. 0: taken now.
   */
  readonly holdMs: number;
}

/** Charge `delta` more permits on every rate limit, or refund them when negative (`AdjustRequest`). */
export interface AdjustItem extends ItemBase {
  readonly op: 'adjust';
  /** Permits to charge, an integer in -MAX_COST..MAX_COST; negative refunds. */
  readonly delta: number;
  /**
   * The stamp of the charge a refund is for (a reservation's now + hold, epoch ms, see
   * `AdjustRequest.at`); 0 for the newest charges made by now.
   */
  readonly at: number;
}

/** Extend a live concurrency permit (`PermitRequest`). */
export interface RenewItem extends ItemBase {
  readonly op: 'renew';
  /** The permit to extend. */
  readonly permitId: string;
  /** Its new lifetime from now, in ms (1..maxPermitTtlMs). */
  readonly ttlMs: number;
}

/** Free a live concurrency permit (`PermitRequest`). */
export interface ReleaseItem extends ItemBase {
  readonly op: 'release';
  /** The permit to free. */
  readonly permitId: string;
}

/**
 * Admit now, book the earliest slot, or claim a booking held (`BookRequest`, core's booking.ts).
 * The policy has no concurrency limit.
 */
export interface BookItem extends ItemBase {
  readonly op: 'book';
  /** Permits to admit or book, an integer in 0..MAX_COST. */
  readonly cost: number;
  /** The booking's name on the key (see `checkBookingId`). */
  readonly id: string;
  /** True: admit, claim or book; false: only claim a booking already held. */
  readonly create: boolean;
  /** The resource's booking bounds (`maxShare` is already in {@link BookItem.maxBooked}). */
  readonly bounds: BookingBounds;
  /** The most permits the key's bookings may hold, core's `bookedCap`. */
  readonly maxBooked: number;
  /** The call's booking token (see `checkBookingToken`); '' for none. */
  readonly token: string;
}

/** Give back a booking not yet claimed (`CancelRequest`). The policy has no concurrency limit. */
export interface CancelItem extends ItemBase {
  readonly op: 'cancel';
  /** The booking's name on the key. */
  readonly id: string;
  /** The call's booking token; '' for none. */
  readonly token: string;
}

/**
 * One operation in a batch, already validated, with named fields. Only protocol.ts
 * (`encodeBatch`, `decodeReply`) knows how the script lays them out: the op codes and the
 * positional values of `lua/batch.lua`'s header.
 */
export type BatchItem = ConsumeItem | ReserveItem | AdjustItem | RenewItem | ReleaseItem | BookItem | CancelItem;

/** What each kind of item resolves to. */
export interface ItemValues {
  readonly consume: ConsumeResult;
  readonly reserve: ReserveResult;
  readonly adjust: undefined;
  readonly renew: boolean;
  readonly release: boolean;
  readonly book: BookResult;
  readonly cancel: boolean;
}

/** The value an item resolves to (a renew, release or cancel: whether it found what it named). */
export type ItemValue<I extends BatchItem> = ItemValues[I['op']];
