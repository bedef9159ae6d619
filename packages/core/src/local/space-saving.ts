/**
 * Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the heaviest keys of a stream in a fixed
 * number of counters. A key already counted adds to its counter; a new key takes a free counter,
 * or replaces the smallest one and inherits its count as its `error`. Every key whose true count
 * exceeds `total / capacity` is guaranteed to hold a counter, and each counter's `count` is an
 * over-estimate by at most its `error` (`count - error` is a lower bound).
 *
 * Trade-offs: memory is `capacity` entries whatever the number of distinct keys. The counters are
 * a binary min-heap indexed by key, so a hit costs a map lookup and a sift over at most
 * `log2(capacity)` levels (6 at 64 counters), and so does a miss that replaces the smallest. Pure:
 * no clock, no I/O.
 */
export class SpaceSaving {
  readonly #capacity: number;
  /** The entry of each key held; entries know their heap position, so moving one touches no map. */
  readonly #byKey = new Map<string, Entry>();
  readonly #heap: Entry[] = [];
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
    return this.#heap.length;
  }

  /** Counts `weight` (at least 0) more for `key`. */
  add(key: string, weight: number): void {
    this.#total += weight;
    const found = this.#byKey.get(key);
    if (found !== undefined) {
      found.count += weight;
      this.#siftDown(found);
      return;
    }
    const heap = this.#heap;
    if (heap.length < this.#capacity) {
      const entry: Entry = { key, count: weight, error: 0, pos: heap.length };
      heap.push(entry);
      this.#byKey.set(key, entry);
      this.#siftUp(entry);
      return;
    }
    // Full: the smallest counter (the heap's root) goes to the new key, with its count as error.
    const root = heap[0]!;
    this.#byKey.delete(root.key);
    root.key = key;
    root.error = root.count;
    root.count += weight;
    this.#byKey.set(key, root);
    this.#siftDown(root);
  }

  /** The counter of `key`, if it holds one. */
  get(key: string): Readonly<Counter> | undefined {
    const e = this.#byKey.get(key);
    return e === undefined ? undefined : { count: e.count, error: e.error };
  }

  /** Every counter held, in no particular order. */
  *entries(): IterableIterator<[string, Readonly<Counter>]> {
    for (const e of this.#heap) yield [e.key, { count: e.count, error: e.error }];
  }

  clear(): void {
    this.#byKey.clear();
    this.#heap.length = 0;
    this.#total = 0;
  }

  #siftUp(e: Entry): void {
    const heap = this.#heap;
    let i = e.pos;
    while (i > 0) {
      const parent = heap[(i - 1) >> 1]!;
      if (parent.count <= e.count) break;
      heap[i] = parent;
      parent.pos = i;
      i = (i - 1) >> 1;
    }
    heap[i] = e;
    e.pos = i;
  }

  #siftDown(e: Entry): void {
    const heap = this.#heap;
    const n = heap.length;
    let i = e.pos;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const c = right < n && heap[right]!.count < heap[left]!.count ? right : left;
      const child = heap[c]!;
      if (e.count <= child.count) break;
      heap[i] = child;
      child.pos = i;
      i = c;
    }
    heap[i] = e;
    e.pos = i;
  }
}

/** A counter in the heap. */
interface Entry {
  key: string;
  count: number;
  error: number;
  pos: number;
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
