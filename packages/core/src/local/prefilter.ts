import type { Decision } from '../shared/decision.js';
import { OldestFirst } from './oldest-first.js';

interface Blocked {
  until: number;
  cost: number;
  decision: Decision;
}

/**
 * The local tier in front of the store: a key that the store just denied is denied locally
 * until its retry-after has passed, without a round trip. Only rate-limit denials are cached
 * (their retry-after is exact when given); a refund elsewhere or a rule change can free the key
 * sooner, which the pre-filter then misses for at most that retry-after. The table is bounded:
 * past `maxKeys`, the oldest entry goes (found in O(1) amortised, see {@link OldestFirst}).
 */
/**
 * The pre-filter's entry of a storage key: tiers see different limits when shares are kept, so
 * each core share (the share of every limit a tier may not use, see tiers.ts) has a namespace of
 * its own: `true` or a number above 0. A storage key starts with its resource name
 * (`RESOURCE_PATTERN`: printable ASCII), so none starts with NUL, and a resource name is
 * followed by `|` or nothing, so the core share between two NULs is read unambiguously.
 */
export function filterKey(key: string, coreShare: boolean | number): string {
  if (coreShare === false || coreShare === 0) return key;
  return coreShare === true ? `\u0000${key}` : `\u0000${coreShare}\u0000${key}`;
}

export class Prefilter {
  readonly #blocked = new Map<string, Blocked>();
  readonly #oldest = new OldestFirst(this.#blocked);

  constructor(private readonly maxKeys: number) {}

  /** A local denial for `key` at `now` if the key is known to be over its limit for `cost`. */
  check(key: string, cost: number, now: number): Decision | undefined {
    const b = this.#blocked.get(key);
    if (b === undefined) return undefined;
    if (now >= b.until) {
      this.#blocked.delete(key);
      return undefined;
    }
    // A smaller call may fit sooner than the one that was denied: let the store judge it.
    if (cost < b.cost) return undefined;
    return { ...b.decision, retryAfterMs: Math.ceil(b.until - now) };
  }

  /** Learns from a store decision. */
  learn(key: string, cost: number, now: number, decision: Decision): void {
    if (decision.allowed) {
      this.#blocked.delete(key);
      return;
    }
    if (decision.reason !== 'rate_limited' || decision.retryAfterMs <= 0) return;
    if (!this.#blocked.has(key) && this.#blocked.size >= this.maxKeys) this.#oldest.shift();
    // Stored already marked as local: answering then only overwrites retryAfterMs (a spread
    // that adds a property is many times slower, and this is the hot path of denials).
    this.#blocked.set(key, { until: now + decision.retryAfterMs, cost, decision: { ...decision, source: 'prefilter' } });
  }

  /**
   * Forgets what was learnt of `key` (every entry: see `filterKey`; `coreShares` are those of the
   * resource's tiers), e.g. after a refund made here.
   */
  forget(key: string, coreShares: readonly number[] = []): void {
    this.#blocked.delete(key);
    this.#blocked.delete(filterKey(key, true));
    for (const h of coreShares) if (h > 0) this.#blocked.delete(filterKey(key, h));
  }

  /** Forgets everything, e.g. after a rule change. */
  clear(): void {
    this.#blocked.clear();
  }

  get size(): number {
    return this.#blocked.size;
  }
}
