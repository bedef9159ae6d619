import { ceilMs } from './types.js';

/**
 * Timestamped charges, the state shared by the sliding log and the sliding window: a flat
 * `[ts, cost, ts, cost, ...]` array in time order, stored after a header of `head` numbers. An
 * entry counts while `ts + windowMs > now`, so the window is `(now - windowMs, now]`.
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
 * Appends a charge, keeping time order even if the clock stepped back; a charge at the same
 * instant as the newest entry joins it.
 */
export function appendEntry(entries: readonly number[], now: number, cost: number): number[] {
  const n = entries.length;
  if (n === 0) return [now, cost];
  const lastTs = entries[n - 2]!;
  if (now <= lastTs) {
    const out = entries.slice();
    out[n - 1] = out[n - 1]! + cost;
    return out;
  }
  return [...entries, now, cost];
}

/** Removes `amount` permits, newest charges first: they are the ones the caller just made. */
export function refundNewest(entries: readonly number[], amount: number): number[] {
  const out = entries.slice();
  let left = amount;
  while (left > 0 && out.length > 0) {
    const c = out[out.length - 1]!;
    if (c <= left) {
      out.length -= 2;
      left -= c;
    } else {
      out[out.length - 1] = c - left;
      left = 0;
    }
  }
  return out;
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
