/**
 * The storage keys of the caller keys a limiter saw last, so a key seen again is neither validated
 * nor encoded again: most traffic comes from keys that call often.
 */
import { callKey } from '../shared/policy.js';
import { resourceKey, type StorageKeyParts } from '../store/storage-key.js';

/** A caller's key on a resource, validated, with where its state is kept. */
export interface CallKey {
  /** The caller's key ('' for the resource as a whole). */
  readonly sub: string;
  /** The storage key (see storage-key.ts). */
  readonly key: string;
  readonly parts: StorageKeyParts;
}

/**
 * While the cache is sparse (see {@link CallKeys}), one key in this many of those it does not
 * hold is kept.
 */
export const SPARSE_EVERY = 32;

/**
 * Caller keys by resource, in two generations: a key is looked up in the young one, then in the
 * old (and moved back into the young). When the young generation holds `max` keys it becomes the
 * old one and the oldest is dropped, so at most `2 * max` keys are held, the keys in use survive a
 * turn, and a flood of distinct keys costs one lookup more per call than no cache.
 *
 * A cache that mostly misses costs more than it saves: each key it keeps outlives a few
 * young-generation collections and is copied by each, then promoted to the old generation, where
 * it dies. (On 100,000 keys in turn through Redis at 16 calls in flight, the keys it kept
 * doubled what the young collections promoted, and those collections set the p99:
 * docs/benchmarks.md, "Many keys and one call at a time".) So the cache judges itself every
 * `max` lookups: when fewer than half found their key, it turns sparse and keeps only one key in
 * {@link SPARSE_EVERY} of those it lacks, until a later judgement finds half again. Keys that
 * come back often are still kept, after a few calls more.
 */
export class CallKeys {
  #young = new Map<string, Map<string, CallKey>>();
  #old = new Map<string, Map<string, CallKey>>();
  #size = 0;
  /** The young keys of the resource looked up last. */
  #lastResource: string | undefined;
  #lastKeys: Map<string, CallKey> | undefined;
  /** Lookups and hits since the last judgement. */
  #lookups = 0;
  #hits = 0;
  /** Fewer than half the lookups of the last judgement hit: keep one missed key in SPARSE_EVERY. */
  #sparse = false;
  /** Missed keys not kept since the last one kept, while sparse. */
  #skipped = 0;

  constructor(
    private readonly maxKeyLength: number,
    private readonly max = 8192,
  ) {}

  /** The key option of a call on `resource` (a resource known to exist), validated by `callKey`. */
  of(resource: string, key: unknown): CallKey {
    if (typeof key === 'string') {
      if (this.#lookups === this.max) this.#judge();
      this.#lookups++;
      // Calls mostly come on one resource at a time: its keys are found without a lookup.
      const keys = resource === this.#lastResource ? this.#lastKeys : this.#young.get(resource);
      const young = keys?.get(key);
      if (young !== undefined) {
        this.#hits++;
        return young;
      }
      const old = this.#old.get(resource)?.get(key);
      if (old !== undefined) {
        this.#hits++;
        this.#add(resource, key, old);
        return old;
      }
    }
    const sub = callKey(key, this.maxKeyLength);
    const parts: StorageKeyParts = Object.freeze({ resource, key: sub });
    const entry: CallKey = Object.freeze({ sub, key: resourceKey(resource, sub), parts });
    // Only a key that passed validation is kept (a string: `undefined` is the resource's own key).
    if (typeof key === 'string' && this.#keeps()) this.#add(resource, key, entry);
    return entry;
  }

  /** Whether the cache is sparse: the last judgement found fewer than half the lookups hit. */
  get sparse(): boolean {
    return this.#sparse;
  }

  #judge(): void {
    this.#sparse = this.#hits * 2 < this.#lookups;
    this.#lookups = 0;
    this.#hits = 0;
  }

  /** Whether a key just missed is kept: always, or one in SPARSE_EVERY while sparse. */
  #keeps(): boolean {
    if (!this.#sparse) return true;
    if (++this.#skipped < SPARSE_EVERY) return false;
    this.#skipped = 0;
    return true;
  }

  /** Caller keys held (both generations). */
  get size(): number {
    let n = 0;
    for (const g of [this.#young, this.#old]) for (const keys of g.values()) n += keys.size;
    return n;
  }

  #add(resource: string, key: string, entry: CallKey): void {
    if (this.#size >= this.max) {
      this.#old = this.#young;
      this.#young = new Map();
      this.#size = 0;
    }
    let keys = this.#young.get(resource);
    if (keys === undefined) this.#young.set(resource, (keys = new Map<string, CallKey>()));
    [this.#lastResource, this.#lastKeys] = [resource, keys];
    keys.set(key, entry);
    this.#size++;
  }
}
