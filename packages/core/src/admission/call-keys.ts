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
 * A caller key's parts and its entry are built by `new`, not as object literals: V8 allocates the
 * objects of a literal in the old generation once many of its earlier ones lived long
 * (allocation-site pretenuring). The keys a cache keeps made it do so for every key it then
 * missed too: those died in the old generation, holding their young strings through the young
 * collections (docs/benchmarks.md, "Many keys and one call at a time"). Built by a constructor,
 * they stayed young and died there.
 */
class Parts implements StorageKeyParts {
  constructor(
    readonly resource: string,
    readonly key: string,
  ) {
    Object.freeze(this);
  }
}

class Entry implements CallKey {
  constructor(
    readonly sub: string,
    readonly key: string,
    readonly parts: StorageKeyParts,
  ) {
    Object.freeze(this);
  }
}

/** The entry of the caller key `sub` (validated) on `resource`. */
function newEntry(resource: string, sub: string): CallKey {
  return new Entry(sub, resourceKey(resource, sub), new Parts(resource, sub));
}

/**
 * While the cache is sparse (see {@link CallKeys}), one key in this many of those it does not
 * hold is kept.
 */
export const SPARSE_EVERY = 256;

/**
 * Caller keys by resource, in two generations: a key is looked up in the young one, then in the
 * old (and moved back into the young, unless the cache is sparse: below). When the young
 * generation holds `max` keys it becomes the old one and the oldest is dropped, so at most
 * `2 * max` keys are held, the keys in use survive a turn, and a flood of distinct keys costs one
 * lookup more per call than no cache.
 *
 * A cache that mostly misses costs more than it saves: each key it keeps, and each table its
 * maps grow into, outlives a few young-generation collections and is copied by each, then
 * promoted to the old generation, where it dies. (On 100,000 keys in turn through Redis at 16
 * calls in flight, the cache made the young collections promote four to five times as much, and
 * those collections set the p99: docs/benchmarks.md, "Many keys and one call at a time".) So the cache
 * judges itself every `max` lookups or so on the share of lookups that found their key (a moving
 * share, each judgement weighing a quarter, so one lucky stretch of a key cycle does not turn it
 * round). Below a half it is sparse: it keeps one key in {@link SPARSE_EVERY} of those it lacks
 * and leaves a key found in the old generation where it is. Keys that come back often are still
 * kept, after a few calls more, and turn it whole again.
 */
export class CallKeys {
  #young = new Map<string, Map<string, CallKey>>();
  #old = new Map<string, Map<string, CallKey>>();
  #size = 0;
  /** The young keys of the resource looked up last. */
  #lastResource: string | undefined;
  #lastKeys: Map<string, CallKey> | undefined;
  /** Lookups that found their key, and lookups that did not, since the last judgement. */
  #hits = 0;
  #missed = 0;
  /** The moving share of lookups that hit (undefined before the first judgement). */
  #hitShare: number | undefined;
  /** The share is below a half: keep one missed key in SPARSE_EVERY, move no old key. */
  #sparse = false;
  /** Missed keys not kept since the last one kept, while sparse. */
  #skipped = 0;

  constructor(
    private readonly maxKeyLength: number,
    private readonly max = 8192,
  ) {}

  /** The key option of a call on `resource` (a resource known to exist), validated by `callKey`. */
  of(resource: string, key: unknown): CallKey {
    if (typeof key !== 'string') return newEntry(resource, callKey(key, this.maxKeyLength));
    // Calls mostly come on one resource at a time: its keys are found without a lookup.
    const keys = resource === this.#lastResource ? this.#lastKeys : this.#young.get(resource);
    const young = keys?.get(key);
    if (young !== undefined) {
      this.#hits++;
      return young;
    }
    return this.#notYoung(resource, key);
  }

  /**
   * A key the young generation lacks: found in the old one, or built (and kept or not). The
   * cache judges itself here, once `max` lookups have passed since it last did: a cache whose
   * young generation answers every lookup has nothing to judge.
   */
  #notYoung(resource: string, key: string): CallKey {
    if (this.#hits + this.#missed >= this.max) this.#judge();
    const old = this.#old.get(resource)?.get(key);
    if (old !== undefined) {
      this.#hits++;
      if (!this.#sparse) this.#add(resource, key, old);
      return old;
    }
    this.#missed++;
    const entry = newEntry(resource, callKey(key, this.maxKeyLength));
    // Only a key that passed validation is kept.
    if (this.#keeps()) this.#add(resource, key, entry);
    return entry;
  }

  /** Whether the cache is sparse: the moving share of lookups that hit is below a half. */
  get sparse(): boolean {
    return this.#sparse;
  }

  #judge(): void {
    const share = this.#hits / (this.#hits + this.#missed);
    this.#hitShare = this.#hitShare === undefined ? share : this.#hitShare + (share - this.#hitShare) / 4;
    this.#sparse = this.#hitShare < 0.5;
    this.#hits = 0;
    this.#missed = 0;
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
