import type { Clock, TimerHandle } from './clock.js';
import { combineStatuses, type Decision } from './decision.js';
import { ErrorCodes, invalid } from './errors.js';
import type { Failover, StoreFailurePolicy } from './failover.js';
import { maxCost, type CompiledLimit } from './policy.js';

/** Client-side leases of one resource. */
export interface LeaseSettings {
  /**
   * How long leased permits may be served locally; leftovers are then returned to the store.
   * This is also the bound on how far leases shift admissions in time (see docs/leases.md).
   * @default 200
   */
  ttlMs?: number;
  /** Most permits taken in one round trip. @default 1000 */
  maxBatch?: number;
  /** A batch is sized to last about this long at the current local demand, in ms. @default 50 */
  targetMs?: number;
  /** Most of a limit's capacity one batch may take. @default 0.1 */
  maxShare?: number;
}

/** Validated {@link LeaseSettings}. */
export interface CompiledLeaseSettings {
  readonly ttlMs: number;
  readonly maxBatch: number;
  readonly targetMs: number;
  readonly maxShare: number;
}

export function compileLeaseSettings(s: LeaseSettings | true, path: string): CompiledLeaseSettings {
  const o = s === true ? {} : s;
  const check = (v: unknown, field: string, fallback: number, min: number, max: number) => {
    const x = v ?? fallback;
    if (typeof x !== 'number' || Number.isNaN(x) || x < min || x > max) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${field}`, `must be a number between ${min} and ${max}`);
    }
    return x;
  };
  return Object.freeze({
    ttlMs: check(o.ttlMs, 'ttlMs', 200, 1, 60_000),
    maxBatch: Math.floor(check(o.maxBatch, 'maxBatch', 1000, 1, 1_000_000)),
    targetMs: check(o.targetMs, 'targetMs', 50, 1, 60_000),
    maxShare: check(o.maxShare, 'maxShare', 0.1, 0.001, 1),
  });
}

/** Permits of one key held by this process. */
class Held {
  constructor(public limits: readonly CompiledLimit[]) {}
  available = 0;
  expiresAt = 0;
  /** Local demand in permits per ms, smoothed over `DEMAND_INTERVAL_MS` intervals. */
  rate = 0;
  demand = 0;
  intervalStart = 0;
  /** After a denied refill, the key is denied locally until then. */
  denyUntil = 0;
  /** The last store decision, the template for local ones. */
  last: Decision | undefined;
  refill: Promise<Decision> | undefined;
  touchedAt = 0;
}

const DEMAND_INTERVAL_MS = 100;

/**
 * Leases: a process takes a batch of permits from the global budget in one round trip and
 * serves them locally. The batch follows local demand (about `targetMs` of it, capped by
 * `maxBatch` and `maxShare` of the limit), so leftovers stay small; leftovers are returned when
 * their TTL passes and on close. Because permits are deducted from the global budget when
 * taken, leases never let more through than the store admitted; they only move admissions
 * later by at most the TTL.
 */
export class LeaseCache {
  readonly #held = new Map<string, Held>();
  readonly #pending = new Set<Promise<unknown>>();
  #sweepTimer: TimerHandle | undefined;
  #closed = false;
  /** Round trips made to refill (for metrics). */
  refills = 0;

  constructor(
    private readonly store: Failover,
    private readonly clock: Clock,
    private readonly maxKeys: number,
    private readonly sweepMs = 100,
    private readonly onRefill?: (key: string, granted: number) => void,
  ) {}

  /**
   * Serves `cost` permits from the lease if it can, without I/O; undefined means a refill is
   * needed (call {@link take}).
   */
  takeLocal(key: string, limits: readonly CompiledLimit[], cost: number): Decision | undefined {
    const h = this.#held.get(key);
    if (h === undefined) return undefined;
    const now = this.clock.now();
    this.#noteDemand(h, cost, now);
    if (h.limits !== limits) {
      // The rule changed: permits leased under the old limits go back.
      this.#giveBack(key, h);
      h.limits = limits;
    }
    if (now >= h.expiresAt && h.available > 0) this.#giveBack(key, h);
    if (h.available >= cost && h.last !== undefined) {
      h.available -= cost;
      // What this caller could still get: the store's remaining plus this process's lease.
      return leaseDecision(h.last, h.last.remaining + h.available, h.last.retryAfterMs);
    }
    if (now < h.denyUntil && h.last !== undefined) {
      return leaseDecision(h.last, h.last.remaining, Math.ceil(h.denyUntil - now));
    }
    return undefined;
  }

  /** Serves `cost` permits, refilling the lease from the store when it runs short. */
  async take(
    key: string,
    limits: readonly CompiledLimit[],
    cost: number,
    settings: CompiledLeaseSettings,
    policy: StoreFailurePolicy,
  ): Promise<Decision> {
    for (;;) {
      const local = this.takeLocal(key, limits, cost);
      if (local !== undefined) return local;
      const h = this.#entry(key, limits);
      if (h.refill === undefined) {
        h.refill = this.#refill(key, limits, h, cost, settings, policy).finally(() => (h.refill = undefined));
        const d = await h.refill;
        if (!d.allowed) return d;
        // The caller that triggered the refill is served first.
        if (h.available >= cost) {
          h.available -= cost;
          return { ...d, remaining: d.remaining + h.available };
        }
        continue;
      }
      // Concurrent callers for the same key share one round trip.
      const d = await h.refill;
      if (!d.allowed && h.available < cost) return { ...d, source: 'lease' };
    }
  }

  /** Returns every leftover permit to the store and stops the sweep. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    for (const [key, h] of this.#held) this.#giveBack(key, h);
    await Promise.allSettled([...this.#pending]);
    this.#held.clear();
  }

  /** Permits held locally for `key` (tests, metrics). */
  held(key: string): number {
    return this.#held.get(key)?.available ?? 0;
  }

  async #refill(
    key: string,
    limits: readonly CompiledLimit[],
    h: Held,
    cost: number,
    settings: CompiledLeaseSettings,
    policy: StoreFailurePolicy,
  ): Promise<Decision> {
    const min = cost - h.available;
    const max = Math.max(min, this.#batchSize(h, limits, cost, settings) - h.available);
    this.refills++;
    const r = await this.store.reserve({ key, limits, min, max }, policy);
    this.onRefill?.(key, r.granted);
    const now = this.clock.now();
    const d = combineStatuses(r.statuses);
    h.last = { ...d, allowed: true, reason: 'allowed', retryAfterMs: 0 };
    if (r.granted > 0) {
      h.available += r.granted;
      h.expiresAt = now + settings.ttlMs;
      h.denyUntil = 0;
      return r.fallback ? { ...d, source: 'fallback' } : d;
    }
    h.denyUntil = now + d.retryAfterMs;
    h.last = d;
    return r.fallback ? { ...d, source: 'fallback' } : d;
  }

  /** About `targetMs` of local demand, within [cost, maxBatch] and `maxShare` of the tightest limit. */
  #batchSize(h: Held, limits: readonly CompiledLimit[], cost: number, s: CompiledLeaseSettings): number {
    const capacity = maxCost(limits);
    const share = Math.max(1, Math.floor(capacity * s.maxShare));
    // The running interval counts too, so a key that just got busy gets a big batch at once.
    const current = h.demand / Math.max(1, this.clock.now() - h.intervalStart);
    const wanted = Math.ceil(Math.max(h.rate, current) * s.targetMs);
    return Math.max(cost, Math.min(wanted, s.maxBatch, share));
  }

  #noteDemand(h: Held, cost: number, now: number): void {
    h.touchedAt = now;
    h.demand += cost;
    const elapsed = now - h.intervalStart;
    if (elapsed >= DEMAND_INTERVAL_MS) {
      const observed = h.demand / elapsed;
      // Rising demand is followed at once, falling demand halves per interval.
      h.rate = observed >= h.rate ? observed : (h.rate + observed) / 2;
      h.demand = 0;
      h.intervalStart = now;
    }
  }

  #entry(key: string, limits: readonly CompiledLimit[]): Held {
    let h = this.#held.get(key);
    if (h === undefined) {
      if (this.#held.size >= this.maxKeys) this.#evictOldest();
      h = new Held(limits);
      h.intervalStart = this.clock.now();
      this.#held.set(key, h);
      this.#noteDemand(h, 1, h.intervalStart);
      this.#scheduleSweep();
    }
    return h;
  }

  #evictOldest(): void {
    const first = this.#held.entries().next();
    if (first.done) return;
    const [key, h] = first.value;
    this.#giveBack(key, h);
    this.#held.delete(key);
  }

  #giveBack(key: string, h: Held): void {
    const n = h.available;
    h.available = 0;
    if (n <= 0) return;
    this.#track(this.store.adjust({ key, limits: h.limits, delta: -n }));
  }

  #track(p: Promise<unknown>): void {
    // A failed return only leaves permits unused until their window passes: never fatal.
    const tracked = p.catch(() => undefined).finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
  }

  #scheduleSweep(): void {
    if (this.#sweepTimer !== undefined || this.#closed) return;
    this.#sweepTimer = this.clock.setTimer(
      () => {
        this.#sweepTimer = undefined;
        this.#sweep();
      },
      this.sweepMs,
      true,
    );
  }

  /** Returns expired leftovers and forgets idle keys. */
  #sweep(): void {
    const now = this.clock.now();
    for (const [key, h] of this.#held) {
      if (now >= h.expiresAt && h.available > 0) this.#giveBack(key, h);
      if (now - h.touchedAt > 10 * this.sweepMs && h.available === 0 && h.refill === undefined) {
        this.#held.delete(key);
      }
    }
    if (this.#held.size > 0) this.#scheduleSweep();
  }
}

/**
 * A decision served from the lease. Built as a literal: this is the hot path (millions a
 * second), and spreading an object then adding a property is over twenty times slower.
 */
function leaseDecision(last: Decision, remaining: number, retryAfterMs: number): Decision {
  return {
    allowed: last.allowed,
    limit: last.limit,
    remaining,
    retryAfterMs,
    resetAfterMs: last.resetAfterMs,
    reason: last.reason,
    limitId: last.limitId,
    statuses: last.statuses,
    source: 'lease',
  };
}
