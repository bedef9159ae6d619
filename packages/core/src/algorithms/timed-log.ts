import { EPS_PERMITS, ceilMs } from './types.js';

/**
 * Timestamped charges, the state shared by the sliding log and the sliding window: a flat
 * `[ts, cost, ts, cost, ...]` array in time order, stored after a header of `head` numbers. An
 * entry counts while `ts + windowMs > now`, so the window is `(now - windowMs, now]`. The
 * functions that change entries change the array they are given (a fresh one, as `liveEntries`
 * returns) and return it: a decision copies its state once.
 */

/** The entries of `state` (after its `head` numbers) still inside the window. */
export function liveEntries(state: readonly number[] | undefined, head: number, now: number, windowMs: number): number[] {
  if (state === undefined) return [];
  let i = head;
  while (i < state.length && state[i]! + windowMs <= now) i += 2;
  return state.slice(i);
}

/** Permits held by the entries. */
export function sumEntries(entries: readonly number[]): number {
  let s = 0;
  for (let i = 1; i < entries.length; i += 2) s += entries[i]!;
  return s;
}

/**
 * Adds a charge stamped `at`, in time order (a lease's charge is stamped ahead of the others); a
 * charge at the same instant as an entry joins it.
 */
export function appendEntry(entries: number[], at: number, cost: number): number[] {
  const i = endOfStampsUpTo(entries, at);
  if (i > 0 && entries[i - 2] === at) entries[i - 1] = entries[i - 1]! + cost;
  else entries.splice(i, 0, at, cost);
  return entries;
}

/**
 * Removes `amount` permits, newest charges first: they are the ones the caller just made.
 * Charges stamped after `now` are leases' (see `appendEntry`) and are never refunded here: their
 * permits may still be in use.
 */
export function refundNewest(entries: number[], amount: number, now: number): number[] {
  let i = endOfStampsUpTo(entries, now);
  let left = amount;
  for (; left > 0 && i > 0; i -= 2) left -= takeFrom(entries, i - 2, left);
  return entries;
}

/** The index just past the last entry stamped at or before `t` (entries are in time order). */
function endOfStampsUpTo(entries: readonly number[], t: number): number {
  let i = entries.length;
  while (i > 0 && entries[i - 2]! > t) i -= 2;
  return i;
}

/** Takes up to `amount` permits from the entry at `i` (removed when emptied); returns how many. */
function takeFrom(out: number[], i: number, amount: number): number {
  const c = out[i + 1]!;
  if (c > amount) {
    out[i + 1] = c - amount;
    return amount;
  }
  out.splice(i, 2);
  return c;
}

/**
 * Removes up to `amount` permits of the charge stamped `at`: from the oldest entry stamped at or
 * after it, which holds that charge (entries only ever merge forward into the next one), and
 * from no other, so permits that may have been served are never refunded.
 */
export function refundAt(entries: number[], amount: number, at: number): number[] {
  let i = 0;
  while (i < entries.length && entries[i]! < at) i += 2;
  if (i < entries.length) takeFrom(entries, i, amount);
  return entries;
}

/** A refund: of the charge stamped `at` when given (> 0), else of the newest charges made by `now`. */
export function refund(entries: number[], amount: number, now: number, at: number): number[] {
  return at > 0 ? refundAt(entries, amount, at) : refundNewest(entries, amount, now);
}

/**
 * The earliest time at or after `from` at which `cost` more permits fit `limit` in the window of
 * every entry still counted then (future-stamped ones included): `from`, or the exact moment
 * enough of the oldest entries have left (an entry leaves at `ts + windowMs`). Not rounded, so a
 * later booking, judged with the earlier ones counted, never starts before them.
 */
export function startOfEntries(
  state: readonly number[] | undefined,
  head: number,
  cost: number,
  from: number,
  limit: number,
  windowMs: number,
): number {
  const entries = liveEntries(state, head, from, windowMs);
  const count = sumEntries(entries);
  if (count + cost <= limit + EPS_PERMITS) return from;
  let left = count + cost - limit;
  for (let i = 0; i < entries.length; i += 2) {
    left -= entries[i + 1]!;
    if (left <= EPS_PERMITS) return Math.max(from, entries[i]! + windowMs);
  }
  return Infinity;
}

/** Time until `excess` permits have left the window (0 when nothing needs to leave). */
export function retryAfterEntries(
  entries: readonly number[],
  excess: number,
  eps: number,
  now: number,
  windowMs: number,
): number {
  let left = excess;
  for (let i = 0; i < entries.length; i += 2) {
    left -= entries[i + 1]!;
    if (left <= eps) return ceilMs(entries[i]! + windowMs - now);
  }
  return 0;
}

/** Time until every entry has left the window. */
export function resetAfterEntries(entries: readonly number[], now: number, windowMs: number): number {
  return entries.length === 0 ? 0 : ceilMs(entries[entries.length - 2]! + windowMs - now);
}
