import {
  BOOK_OUTCOMES,
  type BookResult,
  type BookingBounds,
  type CompiledLimit,
  type ConsumeResult,
  type LimitStatus,
  type ReserveRequest,
  type ReserveResult,
} from '@sluice/core';
import { Ops, PROTOCOL_VERSION, ScriptCodes } from './codes.js';
import type { StoreFailure } from './errors.js';
import { namesOf } from './keys.js';
import { packArray, type PackValue } from './msgpack.js';
import type { ScriptCall } from './scripts.js';
import { isOneLimit } from './validate.js';

export type { ReserveRequest, ReserveResult };

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
   * Share of each limit held back (`ConsumeRequest.coreShare`, 0..MAX_RESERVE): the cost must fit
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
  /** Its new lifetime from now, in ms (1..maxLeaseTtlMs). */
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
 * One operation in a batch, already validated, with named fields. Only {@link encodeBatch} and
 * {@link decodeReply} know how the script lays them out (the op codes, the positional values).
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

/**
 * What one item came to: a consume, reserve or booking result, a renew/release/cancel flag,
 * nothing (adjust), or a failure.
 */
export type ItemOutcome =
  { readonly ok: true; readonly value: ItemValues[keyof ItemValues] } | { readonly ok: false; readonly failure: StoreFailure };

/**
 * Encodes items as one call of `lua/batch.lua` (layout in its header). Policies and keys named
 * by several items are sent once; lease keys only for keys whose policy has a concurrency
 * limit. Items keep their order, which the script applies them in.
 */
export function encodeBatch(items: readonly BatchItem[]): ScriptCall {
  const policies = new Map<string, number>();
  const groups = new Map<string, number>();
  const keys: string[] = [];
  const leaseGroups: number[] = [];
  const values: PackValue[] = [];
  for (const item of items) {
    let p = policies.get(item.policy);
    if (p === undefined) {
      p = policies.size + 1;
      policies.set(item.policy, p);
    }
    let g = groups.get(item.stateKey);
    if (g === undefined) {
      g = groups.size + 1;
      groups.set(item.stateKey, g);
      keys.push(item.stateKey);
    }
    // Each op's values, in the order the script's header lists them.
    switch (item.op) {
      case 'consume':
        if (isShort(item)) {
          values.push(Ops.consumeOne, p, g, item.cost);
          continue;
        }
        values.push(Ops.consume, p, g, item.cost, item.permitId, item.coreShare);
        break;
      case 'reserve':
        values.push(Ops.reserve, p, g, item.max, item.min, item.holdMs);
        break;
      case 'adjust':
        values.push(Ops.adjust, p, g, item.delta, '', item.at);
        break;
      case 'renew':
        values.push(Ops.renew, p, g, item.ttlMs, item.permitId, 0);
        break;
      case 'release':
        values.push(Ops.release, p, g, 0, item.permitId, 0);
        break;
      case 'book': {
        const b = item.bounds;
        values.push(Ops.book, p, g, item.cost, item.id, item.create ? 1 : 0);
        values.push(b.maxAheadMs, b.claimWindowMs, b.maxBookings, item.maxBooked, item.token);
        // Bookings refuse a policy with a concurrency limit: no lease keys.
        continue;
      }
      case 'cancel':
        values.push(Ops.cancel, p, g, 0, item.id, 0, item.token);
        continue;
    }
    if (factsOf(item.limits).leases && !leaseGroups.includes(g)) leaseGroups.push(g);
  }
  // The script wants the groups with leases in increasing order, their keys in that order.
  leaseGroups.sort((a, b) => a - b);
  for (const g of leaseGroups) {
    const names = namesOf(keys[g - 1]!);
    keys.push(names.leases, names.costs);
  }
  const args: (string | Buffer)[] = [PROTOCOL_VERSION, String(policies.size)];
  for (const policy of policies.keys()) args.push(policy);
  args.push(String(leaseGroups.length));
  for (const g of leaseGroups) args.push(String(g));
  args.push(packArray(values));
  return { keys, args };
}

/**
 * Whether a consume goes in short (op 6, lib/fast.lua: four values, answered in three or four
 * instead of six and five): one token bucket, GCRA or fixed window (never a concurrency limit,
 * so no lease keys), no permit, nothing held back. The decoder asks again to read the result.
 */
function isShort(item: ConsumeItem): boolean {
  // The length first: a policy of several limits is answered without a lookup.
  return item.permitId === '' && item.coreShare === 0 && item.limits.length === 1 && factsOf(item.limits).oneLimit;
}

/** What the codec needs to know of a policy (its limit list), found once per list. */
interface PolicyFacts {
  /** It has a concurrency limit: its items need their key's lease keys. */
  readonly leases: boolean;
  /** It is one token bucket, GCRA or fixed window (see validate.ts isOneLimit). */
  readonly oneLimit: boolean;
}

/** Compiled limit lists are frozen and shared by every call of a resource: one entry each. */
const policyFacts = new WeakMap<readonly CompiledLimit[], PolicyFacts>();

// The last list asked about: a batch's items mostly share one (a resource's), and comparing it
// costs less than a lookup. Holds one list alive at most.
let lastLimits: readonly CompiledLimit[] | undefined;
let lastFacts: PolicyFacts | undefined;

function factsOf(limits: readonly CompiledLimit[]): PolicyFacts {
  if (limits === lastLimits) return lastFacts!;
  let facts = policyFacts.get(limits);
  if (facts === undefined) {
    facts = { leases: limits.some((l) => l.algorithm === 'concurrency'), oneLimit: isOneLimit(limits) };
    policyFacts.set(limits, facts);
  }
  lastLimits = limits;
  lastFacts = facts;
  return facts;
}

function fail(items: readonly BatchItem[], failure: StoreFailure): ItemOutcome[] {
  return items.map(() => ({ ok: false, failure }));
}

/** A reply figure: an integer, or an exact string past 2^53. */
function figure(value: unknown): number {
  return typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : Number.NaN;
}

/**
 * Reads a consume result, `A, (a, m, t, s) per limit`, or with `granted` a reserve result,
 * `G, A, ...`, from `reply` at `at` (see the script's header).
 */
export function decodeConsume(
  reply: readonly unknown[],
  at: number,
  limits: readonly CompiledLimit[],
  now: number,
  granted = false,
): ConsumeResult | ReserveResult | undefined {
  const head = at + (granted ? 1 : 0);
  if (reply.length < head + 1 + 4 * limits.length) return undefined;
  const statuses: LimitStatus[] = [];
  for (let i = 0; i < limits.length; i++) {
    const l = limits[i]!;
    const s = head + 1 + 4 * i;
    const remaining = figure(reply[s + 1]);
    const retryAfterMs = figure(reply[s + 2]);
    const resetAfterMs = figure(reply[s + 3]);
    if (Number.isNaN(remaining) || Number.isNaN(retryAfterMs) || Number.isNaN(resetAfterMs)) return undefined;
    statuses.push({
      id: l.id,
      algorithm: l.algorithm,
      allowed: reply[s] === 1,
      limit: l.limit,
      remaining,
      retryAfterMs,
      resetAfterMs,
    });
  }
  const allowed = reply[head] === 1;
  if (!granted) return { allowed, statuses, now };
  const permits = figure(reply[at]);
  return Number.isInteger(permits) ? { allowed, granted: permits, statuses, now } : undefined;
}

/**
 * Reads a one-limit consume's short result from `reply` at `at` (see the script's header):
 * `1, m, s` or `0, m, t, s`.
 */
function decodeConsumeOne(reply: readonly unknown[], at: number, limit: CompiledLimit, now: number): ConsumeResult | undefined {
  const allowed = reply[at] === 1;
  const remaining = figure(reply[at + 1]);
  const retryAfterMs = allowed ? 0 : figure(reply[at + 2]);
  const resetAfterMs = figure(reply[at + (allowed ? 2 : 3)]);
  if (Number.isNaN(remaining) || Number.isNaN(retryAfterMs) || Number.isNaN(resetAfterMs)) return undefined;
  const status: LimitStatus = {
    id: limit.id,
    algorithm: limit.algorithm,
    allowed,
    limit: limit.limit,
    remaining,
    retryAfterMs,
    resetAfterMs,
  };
  return { allowed, statuses: [status], now };
}

/** The outcome codes (indexes in BOOK_OUTCOMES) whose statuses are followed by the booking's span. */
const BOOKED = 1;
const CLAIMED = 2;

/**
 * Reads a booking result, `O, (a, m, t, s) per limit` and for booked or claimed the booking's
 * start and end as exact decimal strings, from `reply` at `at` (see the script's header).
 */
function decodeBook(
  reply: readonly unknown[],
  at: number,
  limits: readonly CompiledLimit[],
  now: number,
): BookResult | undefined {
  const code = reply[at];
  const outcome = typeof code === 'number' ? BOOK_OUTCOMES[code] : undefined;
  const consumed = decodeConsume(reply, at, limits, now);
  if (outcome === undefined || consumed === undefined) return undefined;
  const result = { allowed: outcome === 'admitted' || outcome === 'claimed', outcome, statuses: consumed.statuses, now };
  if (code !== BOOKED && code !== CLAIMED) return result;
  const s = at + 1 + 4 * limits.length;
  const [start, end] = [reply[s], reply[s + 1]];
  // Strings of 17 significant digits: Number() gives back the very double the script held.
  if (typeof start !== 'string' || typeof end !== 'string') return undefined;
  const booking = { start: Number(start), end: Number(end) };
  return Number.isFinite(booking.start) && Number.isFinite(booking.end) ? { ...result, booking } : undefined;
}

/** Decodes a script reply into one outcome per item, in order. */
export function decodeReply(reply: unknown, items: readonly BatchItem[]): ItemOutcome[] {
  if (!Array.isArray(reply) || typeof reply[0] !== 'number') {
    return fail(items, { kind: 'reply', detail: `expected an array starting with a code, got ${typeof reply}` });
  }
  const code = reply[0];
  if (code !== ScriptCodes.OK) return fail(items, { kind: 'script', code, detail: String(reply[1]) });
  // The same arithmetic as the script's, on the same TIME figures: the same double.
  const now = Number(reply[1]) * 1000 + Number(reply[2]) / 1000;
  if (!Number.isFinite(now)) return fail(items, { kind: 'reply', detail: `bad time ${String(reply[1])} ${String(reply[2])}` });
  let at = 3;
  const outcomes = items.map((item): ItemOutcome => {
    const first: unknown = reply[at];
    if (typeof first === 'number' && first < 0) {
      at += 1;
      return { ok: false, failure: { kind: 'script', code: first, detail: item.stateKey } };
    }
    const start = at;
    // Each op's result and its width (the values it takes), as the script's header lists them.
    switch (item.op) {
      case 'consume': {
        let value: ConsumeResult | undefined;
        if (isShort(item)) {
          at += first === 1 ? 3 : 4;
          value = first === 0 || first === 1 ? decodeConsumeOne(reply, start, item.limits[0]!, now) : undefined;
        } else {
          at += 1 + 4 * item.limits.length;
          value = decodeConsume(reply, start, item.limits, now);
        }
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad result at ${start}` } };
      }
      case 'reserve': {
        at += 2 + 4 * item.limits.length;
        const value = decodeConsume(reply, start, item.limits, now, true);
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad result at ${start}` } };
      }
      case 'book': {
        at += 1 + 4 * item.limits.length + (first === BOOKED || first === CLAIMED ? 2 : 0);
        const value = decodeBook(reply, start, item.limits, now);
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad book result at ${start}` } };
      }
      case 'adjust':
        at += 1;
        return first === 0
          ? { ok: true, value: undefined }
          : { ok: false, failure: { kind: 'reply', detail: `bad adjust result ${String(first)}` } };
      case 'renew':
      case 'release':
      case 'cancel':
        at += 1;
        // 1 or 0.
        return first === 0 || first === 1
          ? { ok: true, value: first === 1 }
          : {
              ok: false,
              failure: { kind: 'reply', detail: `bad ${item.op === 'cancel' ? 'cancel' : 'lease'} result ${String(first)}` },
            };
    }
  });
  if (at !== reply.length) return fail(items, { kind: 'reply', detail: `expected ${at} values, got ${reply.length}` });
  return outcomes;
}
