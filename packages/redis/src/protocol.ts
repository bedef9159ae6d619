import {
  BOOK_OUTCOMES,
  hasConcurrency,
  type BookResult,
  type CompiledLimit,
  type ConsumeResult,
  type LimitStatus,
  type ReserveRequest,
  type ReserveResult,
} from '@sluice/core';
import { Ops, PROTOCOL_VERSION, ScriptCodes } from './codes.js';
import type { StoreFailure } from './errors.js';
import type { BatchItem, ConsumeItem, ItemValues } from './items.js';
import { namesOf } from './keys.js';
import { packArray, type PackValue } from './msgpack.js';
import type { ScriptCall } from './scripts.js';
import { isOneLimit } from './validate.js';

export type { ReserveRequest, ReserveResult };

/**
 * What one item came to: a consume, reserve or booking result, a renew/release/cancel flag,
 * nothing (adjust), or a failure.
 */
export type ItemResult =
  { readonly ok: true; readonly value: ItemValues[keyof ItemValues] } | { readonly ok: false; readonly failure: StoreFailure };

/**
 * Encodes items as one call of `lua/batch.lua` (layout in its header). Policies and keys named
 * by several items are sent once; permit keys only for keys whose policy has a concurrency
 * limit. Items keep their order, which the script applies them in.
 */
export function encodeBatch(items: readonly BatchItem[]): ScriptCall {
  const only = items.length === 1 ? items[0]! : undefined;
  // One one-limit consume (a caller alone, one call in flight) goes to the lean entry
  // consume_one: its policy and cost as plain strings, which Redis reads in less time than the
  // batch protocol's counts and items (see the script's header).
  if (only?.op === 'consume' && isShort(only)) {
    return { keys: [only.stateKey], args: [only.policy, String(only.cost)], entry: 'consume_one' };
  }
  const policies = new Map<string, number>();
  const groups = new Map<string, number>();
  const keys: string[] = [];
  const permitGroups: number[] = [];
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
        // Bookings refuse a policy with a concurrency limit: no permit keys.
        continue;
      }
      case 'cancel':
        values.push(Ops.cancel, p, g, 0, item.id, 0, item.token);
        continue;
    }
    if (factsOf(item.limits).permits && !permitGroups.includes(g)) permitGroups.push(g);
  }
  // The script wants the groups with permit keys in increasing order, their keys in that order.
  permitGroups.sort((a, b) => a - b);
  for (const g of permitGroups) {
    const names = namesOf(keys[g - 1]!);
    keys.push(names.permits, names.costs);
  }
  const args: (string | Buffer)[] = [PROTOCOL_VERSION, String(policies.size)];
  for (const policy of policies.keys()) args.push(policy);
  args.push(String(permitGroups.length));
  for (const g of permitGroups) args.push(String(g));
  args.push(packArray(values));
  return { keys, args };
}

/**
 * Whether a consume goes in short (op 6, lib/fast.lua: four values, answered in three or four
 * instead of six and five): one token bucket, GCRA or fixed window (never a concurrency limit,
 * so no permit keys), no permit, nothing held back. The decoder asks again to read the result.
 */
function isShort(item: ConsumeItem): boolean {
  // The length first: a policy of several limits is answered without a lookup.
  return item.permitId === '' && item.coreShare === 0 && item.limits.length === 1 && factsOf(item.limits).oneLimit;
}

/** What the codec needs to know of a policy (its limit list), found once per list. */
interface PolicyFacts {
  /** It has a concurrency limit: its items need their key's permit keys. */
  readonly permits: boolean;
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
    facts = { permits: hasConcurrency(limits), oneLimit: isOneLimit(limits) };
    policyFacts.set(limits, facts);
  }
  lastLimits = limits;
  lastFacts = facts;
  return facts;
}

function fail(items: readonly BatchItem[], failure: StoreFailure): ItemResult[] {
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
export function decodeReply(reply: unknown, items: readonly BatchItem[]): ItemResult[] {
  if (!Array.isArray(reply) || typeof reply[0] !== 'number') {
    return fail(items, { kind: 'reply', detail: `expected an array starting with a code, got ${typeof reply}` });
  }
  const code = reply[0];
  if (code !== ScriptCodes.OK) return fail(items, { kind: 'script', code, detail: String(reply[1]) });
  // The same arithmetic as the script's, on the same TIME figures: the same double.
  const now = Number(reply[1]) * 1000 + Number(reply[2]) / 1000;
  if (!Number.isFinite(now)) return fail(items, { kind: 'reply', detail: `bad time ${String(reply[1])} ${String(reply[2])}` });
  let at = 3;
  const outcomes = items.map((item): ItemResult => {
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
              failure: { kind: 'reply', detail: `bad ${item.op === 'cancel' ? 'cancel' : 'permit'} result ${String(first)}` },
            };
    }
  });
  if (at !== reply.length) return fail(items, { kind: 'reply', detail: `expected ${at} values, got ${reply.length}` });
  return outcomes;
}
