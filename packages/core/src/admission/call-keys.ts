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
 * Caller keys by resource, in two generations: a key is looked up in the young one, then in the
 * old (and moved back into the young). When the young generation holds `max` keys it becomes the
 * old one and the oldest is dropped, so at most `2 * max` keys are held, the keys in use survive a
 * turn, and a flood of distinct keys costs one lookup more per call than no cache.
 */
export class CallKeys {
  #young = new Map<string, Map<string, CallKey>>();
  #old = new Map<string, Map<string, CallKey>>();
  #size = 0;
  /** The young keys of the resource looked up last. */
  #lastResource: string | undefined;
  #lastKeys: Map<string, CallKey> | undefined;

  constructor(
    private readonly maxKeyLength: number,
    private readonly max = 8192,
  ) {}

  /** The key option of a call on `resource` (a resource known to exist), validated by `callKey`. */
  of(resource: string, key: unknown): CallKey {
    if (typeof key === 'string') {
      // Calls mostly come on one resource at a time: its keys are found without a lookup.
      const keys = resource === this.#lastResource ? this.#lastKeys : this.#young.get(resource);
      const young = keys?.get(key);
      if (young !== undefined) return young;
      const old = this.#old.get(resource)?.get(key);
      if (old !== undefined) {
        this.#add(resource, key, old);
        return old;
      }
    }
    const sub = callKey(key, this.maxKeyLength);
    const parts: StorageKeyParts = Object.freeze({ resource, key: sub });
    const entry: CallKey = Object.freeze({ sub, key: resourceKey(resource, sub), parts });
    // Only a key that passed validation is kept (a string: `undefined` is the resource's own key).
    if (typeof key === 'string') this.#add(resource, key, entry);
    return entry;
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
