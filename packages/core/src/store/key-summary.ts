import { algorithmOf, normalizeState, tokenBucket, type RateState } from '../algorithms/index.js';
import { liveEntries, sumEntries } from '../algorithms/timed-log.js';
import type { LimitState } from './evaluate.js';
import type { CompiledLimit } from '../shared/policy.js';

/**
 * Conservative summaries of rate states that left the key table while they still counted.
 *
 * Every rate state is bounded above by a pair `(x, y)`, in the terms of the limit that wrote it:
 *
 * | algorithm      | x                           | y                        | bound                     |
 * | -------------- | --------------------------- | ------------------------ | ------------------------- |
 * | token bucket   | when the bucket is full     | 0                        | exact                     |
 * | GCRA           | the theoretical arrival     | 0                        | exact                     |
 * | fixed window   | the last window's end       | the largest window count | exact for one window      |
 * | sliding window | the newest group's stamp    | the permits counted      | every permit moved to `x` |
 * | sliding log    | the newest entry's stamp    | the permits counted      | every permit moved to `x` |
 *
 * and rebuilt as the state of `(x, y)`: a bucket used until `x`, a window holding `y` until `x`,
 * `y` permits stamped at `x`. Each rebuilt state decides at least as strictly as the state it
 * bounds, at every later time (permits are only ever moved later and counts only ever raised), so
 * a key decided on it can never be admitted more than its own state would admit. The pairs of two
 * states join by their larger `x` and larger `y`, which bounds both.
 *
 * A summary keeps such pairs in a fixed number of buckets per limit: a key's pair is joined into
 * two buckets chosen by a seeded hash of the key, and an absent key reads the smaller of its two
 * (each bounds every key filed there, so the smaller does too). A key shares its bounds only with
 * the keys whose both buckets collide with its own, and a bucket that comes to rest is empty again.
 */
export class GroupSummary {
  /** By limit id: one summary per set of limit parameters seen for that id. */
  readonly #byLimit = new Map<string, LimitSummary[]>();
  /** When every bucket has come to rest: the summary then bounds nothing. */
  restAt = 0;

  constructor(
    private readonly buckets: number,
    private readonly seed: number,
    /** Counts limit summaries across every group of a table, to bound their memory. */
    private readonly budget: { used: number; readonly max: number },
  ) {}

  /** How many limit summaries this holds (each `16 * buckets` bytes). */
  get size(): number {
    let n = 0;
    for (const list of this.#byLimit.values()) n += list.length;
    return n;
  }

  /** True when states of `limits` can be joined in (none is a concurrency limit; room in the budget). */
  accepts(limits: readonly CompiledLimit[]): boolean {
    let wanted = 0;
    for (const limit of limits) {
      if (!algorithmOf(limit).rate) return false;
      if (this.#find(limit) === undefined) wanted++;
    }
    return this.budget.used + wanted <= this.budget.max;
  }

  /** Joins a key's states (aligned with `limits`, see {@link accepts}) into the summary. */
  absorb(key: string, limits: readonly CompiledLimit[], states: readonly (LimitState | undefined)[], now: number): void {
    const [a, b] = this.#slots(key);
    limits.forEach((limit, i) => {
      const state = states[i] as RateState | undefined;
      const pair = state === undefined ? undefined : bound(state, now, limit);
      if (pair === undefined) return;
      const summary = this.#find(limit) ?? this.#add(limit);
      const rest = restOf(pair[0], limit);
      join(summary.pairs, a, pair, now, limit);
      join(summary.pairs, b, pair, now, limit);
      summary.restAt = Math.max(summary.restAt, rest);
      this.restAt = Math.max(this.restAt, rest);
    });
  }

  /**
   * The states an absent key is decided on, aligned with `limits`, or undefined when the summary
   * bounds none of them.
   */
  statesOf(key: string, limits: readonly CompiledLimit[], now: number): (LimitState | undefined)[] | undefined {
    if (this.restAt <= now) return undefined;
    const [a, b] = this.#slots(key);
    let any = false;
    const states = limits.map((limit) => {
      if (!algorithmOf(limit).rate) return undefined;
      let x = 0;
      let y = 0;
      let found = false;
      for (const summary of this.#byLimit.get(limit.id) ?? []) {
        if (summary.restAt <= now) continue;
        const pair = smaller(summary.pairs, a, b, now, summary.limit);
        if (pair === undefined) continue;
        // Written with other parameters: converted as a held key's state would be.
        const state = normalizeState(rebuild(pair, now, summary.limit), now, limit);
        const mine = state === undefined ? undefined : bound(state, now, limit);
        if (mine === undefined) continue;
        x = found ? Math.max(x, mine[0]) : mine[0];
        y = found ? Math.max(y, mine[1]) : mine[1];
        found = true;
      }
      if (!found) return undefined;
      any = true;
      return rebuild([x, y], now, limit);
    });
    return any ? states : undefined;
  }

  /** Frees the limit summaries that have come to rest; true when none is left. */
  prune(now: number): boolean {
    for (const [id, list] of this.#byLimit) {
      const live = list.filter((s) => s.restAt > now);
      this.budget.used -= list.length - live.length;
      if (live.length === 0) this.#byLimit.delete(id);
      else this.#byLimit.set(id, live);
    }
    return this.#byLimit.size === 0;
  }

  /** Gives the summary's budget back (the summary is dropped). */
  release(): void {
    this.budget.used -= this.size;
    this.#byLimit.clear();
  }

  #find(limit: CompiledLimit): LimitSummary | undefined {
    return this.#byLimit.get(limit.id)?.find((s) => sameParameters(s.limit, limit));
  }

  #add(limit: CompiledLimit): LimitSummary {
    const summary: LimitSummary = { limit, pairs: new Float64Array(2 * this.buckets), restAt: 0 };
    const list = this.#byLimit.get(limit.id);
    if (list === undefined) this.#byLimit.set(limit.id, [summary]);
    else list.push(summary);
    this.budget.used++;
    return summary;
  }

  /** The key's two buckets (pair offsets), from two halves of one seeded hash. */
  #slots(key: string): [number, number] {
    const h = hash(key, this.seed);
    const mask = this.buckets - 1;
    const a = h & mask;
    let b = (h >>> 16) & mask;
    if (b === a) b = (a + 1) & mask;
    return [2 * a, 2 * b];
  }
}

interface LimitSummary {
  /** The limit whose terms the pairs are in. */
  readonly limit: CompiledLimit;
  /** `[x0, y0, x1, y1, ...]`, one pair per bucket; `(0, 0)` is empty. */
  readonly pairs: Float64Array;
  restAt: number;
}

/** The pair bounding `state` (of `limit`'s algorithm) at `now`; undefined when it is at rest. */
export function bound(state: RateState, now: number, limit: CompiledLimit): [number, number] | undefined {
  const normal = normalizeState(state, now, limit);
  if (normal === undefined) return undefined;
  switch (limit.code) {
    case 1: {
      const used = tokenBucket.usage(normal, now, limit);
      return used > 0 ? [now + used / (limit.limit / limit.windowMs), 0] : undefined;
    }
    case 2:
      return normal[1]! > now ? [normal[1]!, 0] : undefined;
    case 4: {
      let x = 0;
      let y = 0;
      for (let i = 1; i + 1 < normal.length; i += 2) {
        if (normal[i]! <= now || normal[i + 1]! <= 0) continue;
        x = Math.max(x, normal[i]!);
        y = Math.max(y, normal[i + 1]!);
      }
      return y > 0 ? [x, y] : undefined;
    }
    default: {
      const entries = liveEntries(normal, limit.code === 3 ? 2 : 1, now, limit.windowMs);
      const y = sumEntries(entries);
      return y > 0 ? [entries[entries.length - 2]!, y] : undefined;
    }
  }
}

/** The state of `limit`'s algorithm that a pair stands for, at `now`. */
export function rebuild(pair: readonly [number, number], now: number, limit: CompiledLimit): RateState {
  const [x, y] = pair;
  switch (limit.code) {
    case 1:
      return [1, Math.max(0, (x - now) * (limit.limit / limit.windowMs)), now];
    case 2:
      return [2, x, limit.windowMs / limit.limit];
    case 3:
      return [3, 0, x, y];
    case 4:
      return [4, x, y];
    default:
      return [5, x, y];
  }
}

/** When a pair's state comes to rest. */
function restOf(x: number, limit: CompiledLimit): number {
  return limit.code === 3 || limit.code === 5 ? x + limit.windowMs : x;
}

/** A bucket holds a pair (a pair of rate state is never `(0, 0)`) that has not come to rest. */
function isLive(pairs: Float64Array, at: number, now: number, limit: CompiledLimit): boolean {
  return (pairs[at] !== 0 || pairs[at + 1] !== 0) && restOf(pairs[at]!, limit) > now;
}

function join(pairs: Float64Array, at: number, pair: readonly [number, number], now: number, limit: CompiledLimit): void {
  if (!isLive(pairs, at, now, limit)) {
    pairs[at] = pair[0];
    pairs[at + 1] = pair[1];
    return;
  }
  pairs[at] = Math.max(pairs[at]!, pair[0]);
  pairs[at + 1] = Math.max(pairs[at + 1]!, pair[1]);
}

/** The smaller of two buckets' pairs, part by part (both bound the key); undefined if either is empty. */
function smaller(pairs: Float64Array, a: number, b: number, now: number, limit: CompiledLimit): [number, number] | undefined {
  if (!isLive(pairs, a, now, limit) || !isLive(pairs, b, now, limit)) return undefined;
  return [Math.min(pairs[a]!, pairs[b]!), Math.min(pairs[a + 1]!, pairs[b + 1]!)];
}

function sameParameters(a: CompiledLimit, b: CompiledLimit): boolean {
  return a.code === b.code && a.limit === b.limit && a.windowMs === b.windowMs && a.burst === b.burst && a.slices === b.slices;
}

/** 32-bit FNV-1a of the key's UTF-16 units, seeded, with a final avalanche. */
function hash(key: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  return h >>> 0;
}
