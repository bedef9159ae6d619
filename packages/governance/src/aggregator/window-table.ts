import { emptyWindow, isIdle, sliceOf, type SlidingWindow, type WindowShape } from './window.js';

interface Entry {
  readonly window: SlidingWindow;
  /** The slice in which the entry last moved to the end of the table's order. */
  touched: number;
}

/**
 * The windows of one rule, one per value of its dimension (a path, a user, an IP, ...), with a
 * bound on how many values are tracked: a flood of distinct users or IPs evicts the values idle
 * the longest instead of growing memory. The table's order is least recently counted first
 * (each value moves to the end at most once per slice, to keep counting cheap), so eviction
 * takes the head; evictions are counted.
 */
export class WindowTable {
  readonly shape: WindowShape;
  readonly maxValues: number;
  #entries = new Map<number, Entry>();
  #evictions = 0;

  constructor(shape: WindowShape, maxValues: number) {
    this.shape = shape;
    this.maxValues = maxValues;
  }

  /** Values tracked. */
  get size(): number {
    return this.#entries.size;
  }

  /** Values evicted to make room since the table was made. */
  get evictions(): number {
    return this.#evictions;
  }

  /** The window of `value`, made (evicting the least recently counted value if full) if absent. */
  windowFor(value: number, now: number): SlidingWindow {
    const slice = sliceOf(this.shape, now);
    const entry = this.#entries.get(value);
    if (entry !== undefined) {
      if (entry.touched !== slice) {
        this.#entries.delete(value);
        this.#entries.set(value, entry);
        entry.touched = slice;
      }
      return entry.window;
    }
    if (this.#entries.size >= this.maxValues) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) {
        this.#entries.delete(oldest.value);
        this.#evictions++;
      }
    }
    const fresh: Entry = { window: emptyWindow(this.shape), touched: slice };
    this.#entries.set(value, fresh);
    return fresh.window;
  }

  /** The window of `value` if tracked. */
  get(value: number): SlidingWindow | undefined {
    return this.#entries.get(value)?.window;
  }

  /** Puts a restored window in (a snapshot); ignored when full. */
  restore(value: number, window: SlidingWindow, now: number): void {
    if (this.#entries.size >= this.maxValues && !this.#entries.has(value)) return;
    this.#entries.set(value, { window, touched: sliceOf(this.shape, now) });
  }

  /** Every tracked value and its window. */
  entries(): IterableIterator<[number, SlidingWindow]> {
    const it = this.#entries.entries();
    return (function* () {
      for (const [value, entry] of it) yield [value, entry.window] as [number, SlidingWindow];
    })();
  }

  /** Drops values whose window is empty at `now`; returns how many. */
  prune(now: number): number {
    let dropped = 0;
    for (const [value, entry] of this.#entries) {
      if (isIdle(entry.window, this.shape, now)) {
        this.#entries.delete(value);
        dropped++;
      }
    }
    return dropped;
  }
}
