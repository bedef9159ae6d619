/**
 * The gateway's local view of governance decisions: which dimension values are blocked right
 * now. Aggregators broadcast blocks with a TTL and refresh them while the condition holds; a
 * block that is not refreshed lapses by itself, so a lost lift or a dead aggregator can never
 * leave a value blocked for ever. Lookups are synchronous map reads on the request path.
 */
import { clockOffsetOption, storeClock, systemClock, type Clock, type ClockOffset, type TimerHandle } from '@sluice/core';
import {
  ANNOUNCEMENT_KIND,
  batchKind,
  decodeAnnouncement,
  decodeDecisions,
  type AggregatorAnnouncement,
  type Dimension,
  type EventTransport,
  type GovernanceDecision,
  type Subscription,
} from '@sluice/stream';
import type { GatewayObserver } from './observer.js';
import { fnOption, intOption } from './options.js';

/** Options of {@link DecisionCache}. */
export interface DecisionCacheOptions {
  /** Most blocks held at once; past it the least recently refreshed block is evicted. @default 100000 */
  maxEntries?: number;
  /**
   * Longest a block is held without a refresh, whatever TTL its decision carries: the bound on
   * how long a false block can outlive the aggregator that issued it. @default 60000
   */
  maxTtlMs?: number;
  /**
   * A block whose `issuedAtMs` is older than its TTL plus this tolerance (by the wall clock) had
   * lapsed before it arrived and is ignored; the tolerance absorbs clock skew between hosts.
   * @default 2000
   */
  maxClockSkewMs?: number;
  /** How often expired blocks are swept out (they are also dropped when looked up). @default 1000 */
  sweepIntervalMs?: number;
  /** Monotonic clock for expiry. @default systemClock */
  clock?: Clock;
  /**
   * Called with each aggregator announcement the decision channel carries (the gateway checks
   * the aggregators' partition layout against its probe's). Must not throw.
   */
  onAnnouncement?: (announcement: AggregatorAnnouncement) => void;
  /** Wall clock (epoch ms) for the staleness check. @default Date.now */
  wallClock?: () => number;
  /**
   * This host's measured offset to the store's clock (a `ClockSkewMonitor` of `@sluice/core`):
   * the staleness check then reads the store's clock (`wallClock() + offsetMs`), on which
   * aggregators given their own offset stamp `issuedAtMs`, so a skewed host neither drops fresh
   * blocks nor keeps lapsed ones. `maxClockSkewMs` then only has to cover what is left (the
   * measurements' uncertainty, an aggregator measuring none).
   * @default none: the wall clock, as if every host's clock agreed
   */
  clockSkew?: ClockOffset;
  /** Metrics hooks. */
  observer?: GatewayObserver;
}

/** An active block, as seen by a lookup. */
export interface ActiveBlock {
  readonly dimension: Dimension;
  /** The blocked value's hash. */
  readonly value: number;
  readonly ruleId: string;
  /** What a 429 advertises, from the decision. */
  readonly retryAfterMs: number;
  /** Milliseconds until the block lapses unless refreshed. */
  readonly remainingMs: number;
}

/** Counters of the cache, for tests and metrics. */
export interface DecisionCacheStats {
  /** Active blocks (expired ones not yet swept included). */
  readonly size: number;
  readonly blocks: number;
  readonly lifts: number;
  /** Decision messages (and aggregator announcements) that could not be decoded. */
  readonly malformed: number;
  /** Aggregator announcements received (they carry no decision). */
  readonly announcements: number;
  /** Blocks that had lapsed before they arrived. */
  readonly stale: number;
  /** Blocks evicted to stay within `maxEntries`. */
  readonly evicted: number;
  /** Blocks that lapsed without a refresh. */
  readonly expired: number;
}

interface Entry {
  readonly index: number;
  readonly dimension: Dimension;
  readonly value: number;
  expiresAt: number;
  retryAfterMs: number;
  ruleId: string;
}

/**
 * Map key of a u32 hash: as int32 it is a small integer V8 stores unboxed, so a lookup neither
 * allocates nor hashes a heap number.
 */
function keyOf(value: number): number {
  return value | 0;
}

const DIMENSION_INDEX: Readonly<Record<Dimension, number>> = Object.freeze({ resource: 0, path: 1, user: 2, ip: 3, tenant: 4 });

/**
 * The local decision cache.
 *
 * @example
 * const cache = new DecisionCache();
 * await cache.subscribe(transport); // applies every broadcast decision
 * const block = cache.match(resourceHash, pathHash, userHash, ipHash, tenantHash);
 * if (block) answer429(block.retryAfterMs);
 */
export class DecisionCache {
  readonly #maxEntries: number;
  readonly #maxTtlMs: number;
  readonly #maxSkewMs: number;
  readonly #sweepMs: number;
  readonly #clock: Clock;
  readonly #wallClock: () => number;
  readonly #observer: GatewayObserver | undefined;
  readonly #onAnnouncement: ((announcement: AggregatorAnnouncement) => void) | undefined;
  /** One map per dimension (index as in DIMENSION_INDEX), for the request path's lookups. */
  readonly #byDim: Map<number, Entry>[] = Array.from({ length: 5 }, () => new Map<number, Entry>());
  /** Every entry; insertion order is refresh order: the head is the least recently refreshed. */
  readonly #order = new Set<Entry>();
  readonly #subscriptions = new Set<Subscription>();
  #sweepTimer: TimerHandle | undefined;
  #closed = false;
  #blocks = 0;
  #lifts = 0;
  #malformed = 0;
  #announcements = 0;
  #stale = 0;
  #evicted = 0;
  #expired = 0;

  constructor(options: DecisionCacheOptions = {}) {
    this.#maxEntries = intOption(options.maxEntries, 'maxEntries', 100_000, 1, 10_000_000);
    this.#maxTtlMs = intOption(options.maxTtlMs, 'maxTtlMs', 60_000, 1, 3_600_000);
    this.#maxSkewMs = intOption(options.maxClockSkewMs, 'maxClockSkewMs', 2000, 0, 3_600_000);
    this.#sweepMs = intOption(options.sweepIntervalMs, 'sweepIntervalMs', 1000, 1, 3_600_000);
    this.#clock = options.clock ?? systemClock;
    this.#wallClock = storeClock(
      fnOption(options.wallClock, 'wallClock') ?? Date.now,
      clockOffsetOption(options.clockSkew, 'clockSkew'),
    );
    this.#observer = options.observer;
    this.#onAnnouncement = fnOption(options.onAnnouncement, 'onAnnouncement');
  }

  /** Number of blocks held (expired ones not yet swept included). */
  get size(): number {
    return this.#order.size;
  }

  /** Counters since the cache was created. */
  get stats(): DecisionCacheStats {
    return {
      size: this.#order.size,
      blocks: this.#blocks,
      lifts: this.#lifts,
      malformed: this.#malformed,
      announcements: this.#announcements,
      stale: this.#stale,
      evicted: this.#evicted,
      expired: this.#expired,
    };
  }

  /**
   * Applies one decoded decision: a block starts or extends (never shortens) the value's block
   * to `min(ttlMs, maxTtlMs)` from now; a lift removes it. Returns false when the decision was
   * ignored (stale block, or the cache is closed).
   */
  apply(d: GovernanceDecision): boolean {
    if (this.#closed) return false;
    const index = DIMENSION_INDEX[d.dimension];
    const map = this.#byDim[index]!;
    const key = keyOf(d.value);
    if (d.action === 'lift') {
      this.#lifts++;
      const e = map.get(key);
      if (e !== undefined) {
        this.#remove(e);
        this.#observer?.blocksChanged?.(this.#order.size);
      }
      this.#observer?.decisionApplied?.('lift');
      return true;
    }
    const ttl = Math.min(d.ttlMs, this.#maxTtlMs);
    if (this.#wallClock() - d.issuedAtMs > d.ttlMs + this.#maxSkewMs) {
      this.#stale++;
      return false;
    }
    this.#blocks++;
    const now = this.#clock.now();
    const expiresAt = now + ttl;
    const existing = map.get(key);
    if (existing !== undefined && existing.expiresAt > now) {
      // Re-insert so that the set's order stays the refresh order used for eviction.
      this.#order.delete(existing);
      existing.expiresAt = Math.max(existing.expiresAt, expiresAt);
      existing.retryAfterMs = d.retryAfterMs;
      existing.ruleId = d.ruleId;
      this.#order.add(existing);
    } else {
      if (existing !== undefined) this.#remove(existing);
      else if (this.#order.size >= this.#maxEntries) this.#makeRoom(now);
      const entry: Entry = {
        index,
        dimension: d.dimension,
        value: d.value,
        expiresAt,
        retryAfterMs: d.retryAfterMs,
        ruleId: d.ruleId,
      };
      map.set(key, entry);
      this.#order.add(entry);
      this.#observer?.blocksChanged?.(this.#order.size);
    }
    this.#observer?.decisionApplied?.('block');
    this.#scheduleSweep();
    return true;
  }

  /**
   * Decodes a broadcast message and applies its decisions; an aggregator announcement is handed
   * to `onAnnouncement`. A malformed message is counted and skipped (never thrown): one bad
   * publisher must not stop the gateway. Returns the number of decisions applied.
   */
  applyMessage(message: Uint8Array): number {
    let decisions: GovernanceDecision[];
    try {
      if (batchKind(message) === ANNOUNCEMENT_KIND) {
        const announcement = decodeAnnouncement(message);
        this.#announcements++;
        this.#onAnnouncement?.(announcement);
        return 0;
      }
      decisions = decodeDecisions(message);
    } catch (err) {
      this.#malformed++;
      this.#observer?.decisionMalformed?.(err);
      return 0;
    }
    let applied = 0;
    for (const d of decisions) if (this.apply(d)) applied++;
    return applied;
  }

  /** Subscribes to the transport's decision broadcast; the subscription ends with {@link close}. */
  async subscribe(transport: EventTransport): Promise<void> {
    if (this.#closed) return;
    const sub = await transport.subscribeDecisions((message) => {
      this.applyMessage(message);
    });
    if (this.#closed) {
      await sub.stop();
      return;
    }
    this.#subscriptions.add(sub);
  }

  /** The active block of one dimension value, if any. */
  lookup(dimension: Dimension, value: number): ActiveBlock | undefined {
    if (this.#order.size === 0 || value === 0) return undefined;
    const now = this.#clock.now();
    const entry = this.#live(DIMENSION_INDEX[dimension], value, now);
    return entry === undefined ? undefined : this.#view(entry, now);
  }

  /**
   * The request path's check: the block with the longest remaining time among the request's
   * dimension values (0 = none, never blocked), or undefined. Costs nothing while no block is
   * held.
   */
  match(resource: number, path: number, user: number, ip: number, tenant: number): ActiveBlock | undefined {
    if (this.#order.size === 0) return undefined;
    const now = this.#clock.now();
    let found = resource === 0 ? undefined : this.#live(0, resource, now);
    if (path !== 0) found = this.#longer(found, this.#live(1, path, now));
    if (user !== 0) found = this.#longer(found, this.#live(2, user, now));
    if (ip !== 0) found = this.#longer(found, this.#live(3, ip, now));
    if (tenant !== 0) found = this.#longer(found, this.#live(4, tenant, now));
    return found === undefined ? undefined : this.#view(found, now);
  }

  /** Every active block (for diagnostics). */
  active(): ActiveBlock[] {
    const now = this.#clock.now();
    const out: ActiveBlock[] = [];
    for (const e of this.#order) if (e.expiresAt > now) out.push(this.#view(e, now));
    return out;
  }

  /** Removes every expired block now. Returns how many were removed. */
  sweep(): number {
    const now = this.#clock.now();
    let removed = 0;
    for (const e of this.#order) {
      if (e.expiresAt <= now) {
        this.#remove(e);
        removed++;
      }
    }
    if (removed > 0) {
      this.#expired += removed;
      this.#observer?.blocksChanged?.(this.#order.size);
    }
    return removed;
  }

  /** Stops the decision subscriptions and the sweep, and forgets every block. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.#clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    const subs = [...this.#subscriptions];
    this.#subscriptions.clear();
    await Promise.allSettled(subs.map((s) => s.stop()));
    this.#order.clear();
    for (const m of this.#byDim) m.clear();
  }

  #live(index: number, value: number, now: number): Entry | undefined {
    const e = this.#byDim[index]!.get(keyOf(value));
    if (e === undefined) return undefined;
    if (e.expiresAt > now) return e;
    this.#remove(e);
    this.#expired++;
    this.#observer?.blocksChanged?.(this.#order.size);
    return undefined;
  }

  #longer(a: Entry | undefined, b: Entry | undefined): Entry | undefined {
    if (a === undefined) return b;
    return b !== undefined && b.expiresAt > a.expiresAt ? b : a;
  }

  #view(e: Entry, now: number): ActiveBlock {
    return {
      dimension: e.dimension,
      value: e.value,
      ruleId: e.ruleId,
      retryAfterMs: e.retryAfterMs,
      remainingMs: e.expiresAt - now,
    };
  }

  /** Frees one slot: an expired block if the oldest ones include one, else the least recently refreshed. */
  #makeRoom(now: number): void {
    let checked = 0;
    for (const e of this.#order) {
      if (e.expiresAt <= now) {
        this.#remove(e);
        this.#expired++;
        return;
      }
      if (++checked >= 16) break;
    }
    const head = this.#order.values().next();
    if (head.done !== true) {
      this.#remove(head.value);
      this.#evicted++;
    }
  }

  #remove(e: Entry): void {
    this.#order.delete(e);
    this.#byDim[e.index]!.delete(keyOf(e.value));
  }

  #scheduleSweep(): void {
    if (this.#sweepTimer !== undefined || this.#closed) return;
    this.#sweepTimer = this.#clock.setTimer(
      () => {
        this.#sweepTimer = undefined;
        this.sweep();
        if (this.#order.size > 0) this.#scheduleSweep();
      },
      this.#sweepMs,
      true,
    );
  }
}
