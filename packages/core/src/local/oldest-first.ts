/**
 * The oldest entry of a Map (insertion order), found in O(1) amortised. `map.keys().next()`
 * starts at the Map's first slot and walks over every entry deleted since the Map last rehashed,
 * so a bounded Map that drops its oldest entry on each insert (or moves entries to the back by
 * deleting and setting them) pays up to its capacity per insert. This keeps one iterator alive
 * instead: iterators see entries added after them and skip deleted ones, so each slot is passed
 * once.
 *
 * @example
 * const seen = new Map<string, number>();
 * const oldest = new OldestFirst(seen);
 * if (seen.size >= max) oldest.shift();
 */
export class OldestFirst<K, V> {
  readonly #map: Map<K, V>;
  #cursor: Iterator<[K, V]> | undefined;
  /** An entry `peek` returned, not yet taken. */
  #head: [K, V] | undefined;

  constructor(map: Map<K, V>) {
    this.#map = map;
  }

  /**
   * The oldest entry, left in place; undefined when the Map is empty. Only for Maps whose values
   * change by deleting and setting the entry again (moving it to the back): an entry whose value
   * differs from the one peeked is taken to have moved.
   */
  peek(): readonly [K, V] | undefined {
    const h = this.#head;
    if (h !== undefined && this.#map.get(h[0]) === h[1] && this.#map.has(h[0])) return h;
    this.#head = this.#advance();
    return this.#head;
  }

  /** Removes the oldest entry and returns its key; undefined when the Map is empty. */
  shift(): K | undefined {
    const h = this.peek();
    this.#head = undefined;
    if (h === undefined) return undefined;
    this.#map.delete(h[0]);
    return h[0];
  }

  #advance(): [K, V] | undefined {
    // An iterator that reached the end stays done, even for entries added later: start again.
    for (let pass = 0; pass < 2; pass++) {
      this.#cursor ??= this.#map.entries();
      const next = this.#cursor.next();
      if (!next.done) return next.value;
      this.#cursor = undefined;
    }
    return undefined;
  }
}
