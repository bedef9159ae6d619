/**
 * Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the heaviest keys of a stream in a fixed
 * number of counters. A key already counted adds to its counter; a new key takes a free counter,
 * or replaces the smallest one and inherits its count as its `error`. Every key whose true count
 * exceeds `total / capacity` is guaranteed to hold a counter, and each counter's `count` is an
 * over-estimate by at most its `error` (`count - error` is a lower bound).
 *
 * Trade-offs: memory is `capacity` entries whatever the number of distinct keys; a hit costs one
 * map update, a miss on a full summary a scan of the counters for the smallest (64 comparisons at
 * the default). Pure: no clock, no I/O.
 */
export class SpaceSaving {
  readonly #capacity: number;
  readonly #counters = new Map<string, Counter>();
  #total = 0;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  /** Weight counted since the summary was created or cleared, over every key. */
  get total(): number {
    return this.#total;
  }

  /** Keys holding a counter. */
  get size(): number {
    return this.#counters.size;
  }

  /** Counts `weight` more for `key`. */
  add(key: string, weight: number): void {
    this.#total += weight;
    const c = this.#counters.get(key);
    if (c !== undefined) {
      c.count += weight;
      return;
    }
    if (this.#counters.size < this.#capacity) {
      this.#counters.set(key, { count: weight, error: 0 });
      return;
    }
    let minKey = '';
    let min: Counter | undefined;
    for (const [k, v] of this.#counters) {
      if (min === undefined || v.count < min.count) {
        min = v;
        minKey = k;
      }
    }
    this.#counters.delete(minKey);
    this.#counters.set(key, { count: min!.count + weight, error: min!.count });
  }

  /** The counter of `key`, if it holds one. */
  get(key: string): Readonly<Counter> | undefined {
    return this.#counters.get(key);
  }

  /** Every counter held, in no particular order. */
  entries(): IterableIterator<[string, Readonly<Counter>]> {
    return this.#counters.entries();
  }

  clear(): void {
    this.#counters.clear();
    this.#total = 0;
  }
}

/** One key's counter: its estimated count, over-estimated by at most `error`. */
export interface Counter {
  count: number;
  error: number;
}

/** A key's estimated weight over the sliding window (see {@link WindowedSpaceSaving}). */
export interface WindowEstimate {
  /** Upper bound of the key's weight over the window. */
  readonly count: number;
  /** Lower bound of the key's weight over the window (`count` minus what it may have inherited). */
  readonly guaranteed: number;
}

/**
 * Space-Saving over a sliding window: two summaries, the current window's and the previous one's,
 * rotated every `windowMs` by the time passed in. A key's weight over the last `windowMs` is
 * estimated as its current count plus the part of its previous count the window still covers
 * (the sliding-window-counter estimate), so a key that stops being called cools within two
 * windows, and keys nobody calls any more leave the summaries.
 */
export class WindowedSpaceSaving {
  readonly #windowMs: number;
  #current: SpaceSaving;
  #previous: SpaceSaving;
  #start: number | undefined;

  constructor(capacity: number, windowMs: number) {
    this.#windowMs = windowMs;
    this.#current = new SpaceSaving(capacity);
    this.#previous = new SpaceSaving(capacity);
  }

  get windowMs(): number {
    return this.#windowMs;
  }

  /** Counts `weight` for `key` at `now` (ms, from the caller's clock). */
  add(key: string, weight: number, now: number): void {
    this.#rotate(now);
    this.#current.add(key, weight);
  }

  /** `key`'s weight over the window ending at `now`. */
  estimate(key: string, now: number): WindowEstimate {
    this.#rotate(now);
    const f = this.#previousShare(now);
    const c = this.#current.get(key);
    const p = this.#previous.get(key);
    const count = (c?.count ?? 0) + f * (p?.count ?? 0);
    const guaranteed = (c === undefined ? 0 : c.count - c.error) + f * (p === undefined ? 0 : p.count - p.error);
    return { count, guaranteed };
  }

  /** Weight of every key over the window ending at `now`. */
  total(now: number): number {
    this.#rotate(now);
    return this.#current.total + this.#previousShare(now) * this.#previous.total;
  }

  /** The `n` keys of highest estimated weight at `now`, heaviest first (ties by key). */
  top(n: number, now: number): (WindowEstimate & { key: string })[] {
    this.#rotate(now);
    const keys = new Set<string>();
    for (const [k] of this.#current.entries()) keys.add(k);
    for (const [k] of this.#previous.entries()) keys.add(k);
    return [...keys]
      .map((key) => ({ key, ...this.estimate(key, now) }))
      .filter((e) => e.count > 0)
      .sort((a, b) => b.count - a.count || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
      .slice(0, n);
  }

  /** How much of the previous window the sliding window ending at `now` still covers (0..1). */
  #previousShare(now: number): number {
    if (this.#start === undefined) return 0;
    return Math.max(0, Math.min(1, 1 - (now - this.#start) / this.#windowMs));
  }

  #rotate(now: number): void {
    if (this.#start === undefined) {
      this.#start = now;
      return;
    }
    const elapsed = now - this.#start;
    if (elapsed < this.#windowMs) return;
    const steps = Math.floor(elapsed / this.#windowMs);
    const old = this.#previous;
    this.#previous = this.#current;
    this.#current = old;
    this.#current.clear();
    if (steps > 1) this.#previous.clear();
    this.#start += steps * this.#windowMs;
  }
}
