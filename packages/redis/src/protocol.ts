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
import { Ops, PROTOCOL_VERSION, ScriptCodes, type Op } from './codes.js';
import type { StoreFailure } from './errors.js';
import { namesOf } from './keys.js';
import { packArray, type PackValue } from './msgpack.js';
import type { ScriptCall } from './scripts.js';

export type { ReserveRequest, ReserveResult };

/** One operation in a batch, already validated. */
export interface BatchItem {
  readonly op: Op;
  /** Redis name of the key's state (see keys.ts). */
  readonly stateKey: string;
  readonly limits: readonly CompiledLimit[];
  /** The limits as the script reads them (see validate.ts policyArg). */
  readonly policy: string;
  /**
   * cost (consume, book), delta (adjust), lifetime (renew), 0 (release, cancel) or max permits
   * (reserve).
   */
  readonly amount: number;
  /** The lease id (consume, renew, release), min permits (reserve), booking id (book, cancel) or '' (adjust). */
  readonly extra: string | number;
  /**
   * Share of each limit held back (consume, 0..MAX_RESERVE); the hold in ms (reserve,
   * 0..maxHoldMs, see `ReserveRequest.holdMs`); the stamp of the charge a refund is for (adjust,
   * see `AdjustRequest.at`, 0 for none); create as 1 or 0 (book); 0 for the other ops.
   */
  readonly reserve: number;
  /** The resource's booking bounds (book only). */
  readonly bounds?: BookingBounds;
  /** The most permits the key's bookings may hold, core's `bookedCap` (book only). */
  readonly maxBooked?: number;
  /** The call's booking token, '' for none (book and cancel). */
  readonly token?: string;
}

/**
 * What one item came to: a consume, reserve or booking result, a renew/release/cancel flag,
 * nothing (adjust), or a failure.
 */
export type ItemOutcome =
  | { readonly ok: true; readonly value: ConsumeResult | ReserveResult | BookResult | boolean | undefined }
  | { readonly ok: false; readonly failure: StoreFailure };

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
    if (item.op === Ops.consumeOne) {
      values.push(item.op, p, g, item.amount);
      continue;
    }
    if (item.op === Ops.book) {
      const b = item.bounds!;
      values.push(item.op, p, g, item.amount, item.extra, item.reserve, b.maxAheadMs, b.claimWindowMs, b.maxBookings);
      values.push(item.maxBooked ?? 0, item.token ?? '');
      continue;
    }
    if (item.op === Ops.cancel) {
      values.push(item.op, p, g, item.amount, item.extra, item.reserve, item.token ?? '');
      continue;
    }
    if (hasConcurrency(item.limits) && !leaseGroups.includes(g)) leaseGroups.push(g);
    values.push(item.op, p, g, item.amount, item.extra, item.reserve);
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

const withConcurrency = new WeakMap<readonly CompiledLimit[], boolean>();

function hasConcurrency(limits: readonly CompiledLimit[]): boolean {
  let has = withConcurrency.get(limits);
  if (has === undefined) {
    has = limits.some((l) => l.algorithm === 'concurrency');
    withConcurrency.set(limits, has);
  }
  return has;
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

/** How many reply values an item's result takes (when it is not an error code). */
function width(item: BatchItem, first: unknown): number {
  switch (item.op) {
    case Ops.consumeOne:
      return first === 1 ? 3 : 4;
    case Ops.consume:
      return 1 + 4 * item.limits.length;
    case Ops.reserve:
      return 2 + 4 * item.limits.length;
    case Ops.book:
      return 1 + 4 * item.limits.length + (first === BOOKED || first === CLAIMED ? 2 : 0);
    default:
      return 1;
  }
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
    at += width(item, first);
    switch (item.op) {
      case Ops.consumeOne: {
        const value = first === 0 || first === 1 ? decodeConsumeOne(reply, start, item.limits[0]!, now) : undefined;
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad result at ${start}` } };
      }
      case Ops.consume:
      case Ops.reserve: {
        const value = decodeConsume(reply, start, item.limits, now, item.op === Ops.reserve);
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad result at ${start}` } };
      }
      case Ops.book: {
        const value = decodeBook(reply, start, item.limits, now);
        return value ? { ok: true, value } : { ok: false, failure: { kind: 'reply', detail: `bad book result at ${start}` } };
      }
      case Ops.adjust:
        return first === 0
          ? { ok: true, value: undefined }
          : { ok: false, failure: { kind: 'reply', detail: `bad adjust result ${String(first)}` } };
      default:
        // renew, release and cancel: 1 or 0.
        return first === 0 || first === 1
          ? { ok: true, value: first === 1 }
          : {
              ok: false,
              failure: { kind: 'reply', detail: `bad ${item.op === Ops.cancel ? 'cancel' : 'lease'} result ${String(first)}` },
            };
    }
  });
  if (at !== reply.length) return fail(items, { kind: 'reply', detail: `expected ${at} values, got ${reply.length}` });
  return outcomes;
}
