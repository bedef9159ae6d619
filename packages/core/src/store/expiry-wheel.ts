/**
 * Keys by the time their state comes to rest, in coarse buckets, so a bounded table finds a key
 * at rest in O(1) amortised and knows at once when it holds none.
 *
 * A key goes into the bucket due at its expiry rounded up to a width of about 1/16 of its
 * remaining lifetime (a power of two, at least 1 ms): few buckets however many keys, and a key is
 * found at most that much after it came to rest. Buckets are taken in due order (a min-heap of due
 * times; there are few). The wheel does not follow rewrites: a key whose state was extended is
 * still in its old bucket, and whoever takes it from the wheel puts it back with its new expiry.
 * Each key is therefore in exactly one bucket, moved at most once per lifetime it was given.
 */
export class ExpiryWheel {
  readonly #buckets = new Map<number, string[]>();
  /** Due times of the buckets, a binary min-heap. */
  readonly #dues: number[] = [];
  /** The due bucket being taken, and how far. */
  #current: string[] = [];
  #index = 0;
  /** Keys filed and not yet taken. */
  #size = 0;

  /** Keys filed and not yet taken (a key rewritten since it was filed is still counted once). */
  get size(): number {
    return this.#size;
  }

  /** Files `key`, whose state comes to rest at `expiresAt`, as seen at `now`. */
  add(key: string, expiresAt: number, now: number): void {
    const due = dueTime(expiresAt, now);
    let bucket = this.#buckets.get(due);
    if (bucket === undefined) {
      bucket = [];
      this.#buckets.set(due, bucket);
      heapPush(this.#dues, due);
    }
    bucket.push(key);
    this.#size++;
  }

  /**
   * Takes the next key of a bucket due at `now` off the wheel, or undefined when none is due. Its
   * state came to rest unless it was rewritten since it was filed: the caller then files it again.
   */
  takeDue(now: number): string | undefined {
    for (;;) {
      if (this.#index < this.#current.length) {
        this.#size--;
        return this.#current[this.#index++];
      }
      if (this.#dues.length === 0 || this.#dues[0]! > now) {
        this.#current = [];
        this.#index = 0;
        return undefined;
      }
      const due = heapPop(this.#dues);
      this.#current = this.#buckets.get(due)!;
      this.#buckets.delete(due);
      this.#index = 0;
    }
  }

  /** When the earliest bucket not yet taken comes due (undefined: none). */
  nextDue(): number | undefined {
    return this.#dues[0];
  }

  /**
   * The earliest time by which some key filed here surely is at rest: the due time of the first
   * bucket holding a key whose expiry (`expiryOf`, undefined: gone) is within it. Keys met on the
   * way whose state was extended past their bucket are filed again, and keys gone are dropped, so
   * the answer is never earlier than the earliest expiry of the keys held, and the work is paid
   * once per rewrite, as in {@link takeDue}. Undefined when no key is filed.
   */
  earliest(expiryOf: (key: string) => number | undefined, now: number): number | undefined {
    // What is left of a bucket being taken is due already.
    while (this.#index < this.#current.length) {
      const key = this.#current[this.#index]!;
      const expiresAt = expiryOf(key);
      if (expiresAt !== undefined && expiresAt <= now) return now;
      this.#index++;
      this.#size--;
      if (expiresAt !== undefined) this.add(key, expiresAt, now);
    }
    for (;;) {
      const due = this.#dues[0];
      if (due === undefined) return undefined;
      const bucket = this.#buckets.get(due)!;
      let i = 0;
      for (; i < bucket.length; i++) {
        const expiresAt = expiryOf(bucket[i]!);
        if (expiresAt !== undefined && expiresAt <= due) break;
        // Filed again in a later bucket (its due time is at or after its expiry, past this one).
        if (expiresAt !== undefined) this.add(bucket[i]!, expiresAt, now);
      }
      this.#size -= i;
      if (i < bucket.length) {
        bucket.splice(0, i);
        return due;
      }
      this.#buckets.delete(due);
      heapPop(this.#dues);
    }
  }

  clear(): void {
    this.#size = 0;
    this.#buckets.clear();
    this.#dues.length = 0;
    this.#current = [];
    this.#index = 0;
  }
}

/** The due time of the bucket of a state coming to rest at `expiresAt`. */
export function dueTime(expiresAt: number, now: number): number {
  const width = 2 ** Math.max(0, Math.floor(Math.log2(Math.max(1, (expiresAt - now) / 16))));
  return Math.ceil(expiresAt / width) * width;
}

function heapPush(heap: number[], value: number): void {
  let i = heap.push(value) - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent]! <= value) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = value;
}

function heapPop(heap: number[]): number {
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length === 0) return top;
  let i = 0;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child = right < heap.length && heap[right]! < heap[left]! ? right : left;
    if (heap[child]! >= last) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
  return top;
}
