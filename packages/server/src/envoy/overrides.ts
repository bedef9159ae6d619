import { systemClock, type Clock, type Limiter, type ResourceConfig } from '@sluice/core';

/** Options of {@link OverrideTable}. */
export interface OverrideTableOptions {
  readonly limiter: Limiter;
  /** Most overrides whose limits are kept at once. */
  readonly maxOverrides: number;
  /** New overrides admitted per minute: a bucket of this many, refilled evenly over a minute. */
  readonly perMinute: number;
  /** An override unused for this long makes room for a new one. */
  readonly idleMs: number;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Called each time an override is not admitted. */
  readonly onRefused?: () => void;
}

/** One override's use: when it was last touched, and how many requests hold it now. */
interface Entry {
  lastUsed: number;
  holds: number;
}

/**
 * The limits of Envoy limit overrides (`RateLimitDescriptor.limit`), registered with the limiter
 * on first use. Callers choose the overrides, so the table is bounded three ways: at most
 * `maxOverrides` at once, at most `perMinute` new ones a minute (each registration also costs
 * the limiter's local caches), and an override idle for `idleMs` is dropped when a new one needs
 * room. Overrides in use are never dropped: a flood can take the free room and the rate of new
 * ones, not the overrides traffic keeps using. Dropping one forgets only its limits: its keys'
 * counts stay in the store under the override's name (one per domain, unit and
 * `requests_per_unit`), so an override that comes back carries on from its count and is not
 * handed its limit a second time within a window.
 */
export class OverrideTable {
  readonly #limiter: Limiter;
  readonly #max: number;
  readonly #perMinute: number;
  readonly #idleMs: number;
  readonly #clock: Clock;
  readonly #onRefused: (() => void) | undefined;
  /** Override resource -> its use, least recently touched first. */
  readonly #entries = new Map<string, Entry>();
  #tokens: number;
  #refilledAt: number;

  constructor(options: OverrideTableOptions) {
    this.#limiter = options.limiter;
    this.#max = options.maxOverrides;
    this.#perMinute = options.perMinute;
    this.#idleMs = options.idleMs;
    this.#clock = options.clock ?? systemClock;
    this.#onRefused = options.onRefused;
    this.#tokens = options.perMinute;
    this.#refilledAt = this.#clock.now();
  }

  /** Overrides whose limits are kept now. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Holds the limits of override `resource` in the limiter for one request, registering them
   * when new. Returns the release to call once the request is answered, or undefined when a
   * new override cannot be admitted (the table is full of overrides in use, or too many new
   * ones came within the last minute).
   */
  hold(resource: string, config: ResourceConfig): (() => void) | undefined {
    const now = this.#clock.now();
    let entry = this.#entries.get(resource);
    if (entry === undefined) {
      this.#dropIdle(now);
      if (this.#entries.size >= this.#max || !this.#takeToken(now)) {
        this.#onRefused?.();
        return undefined;
      }
      this.#limiter.setLimits(resource, config);
      entry = { lastUsed: now, holds: 0 };
    }
    entry.holds++;
    this.#touch(resource, entry, now);
    const held = entry;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      held.holds--;
      this.#touch(resource, held, this.#clock.now());
    };
  }

  /** Moves an entry to the recent end, so the map stays ordered by last use. */
  #touch(resource: string, entry: Entry, now: number): void {
    entry.lastUsed = now;
    this.#entries.delete(resource);
    this.#entries.set(resource, entry);
  }

  /** Drops overrides unused for `idleMs`, least recent first; held ones are skipped. */
  #dropIdle(now: number): void {
    for (const [resource, entry] of this.#entries) {
      if (entry.holds > 0) continue;
      // Ordered by last use: the first one not idle has only more recent ones behind it.
      if (now - entry.lastUsed < this.#idleMs) return;
      this.#entries.delete(resource);
      this.#limiter.removeLimits(resource);
    }
  }

  /** Takes one admission from the bucket of new overrides, refilled evenly over a minute. */
  #takeToken(now: number): boolean {
    const elapsed = Math.max(0, now - this.#refilledAt);
    this.#tokens = Math.min(this.#perMinute, this.#tokens + (elapsed * this.#perMinute) / 60_000);
    this.#refilledAt = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}
