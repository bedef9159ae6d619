import type { Clock, TimerHandle } from '../shared/clock.js';
import { combineStatuses, type Decision } from '../shared/decision.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import type { Failover } from '../failover/failover.js';
import { fallbackDecision, type StoreFailurePolicy } from '../failover/failover-state.js';
import { OldestFirst } from './oldest-first.js';
import { algorithmOf } from '../algorithms/index.js';
import { maxCost, type CompiledLimit } from '../shared/policy.js';
import type { StorageKeyParts } from '../store/storage-key.js';

/** Client-side leases of one resource. */
export interface LeaseSettings {
  /**
   * How long leased permits may be served locally; leftovers are then returned to the store.
   * This is also the bound on how far leases shift admissions in time (see docs/leases.md).
   * @default 200
   */
  ttlMs?: number;
  /**
   * Most permits taken in one round trip. A batch should outlast a round trip at the rates
   * leases are for (10,000 is 5 ms at 2M decisions/s); `maxShare` bounds it for small limits.
   * @default 10000
   */
  maxBatch?: number;
  /**
   * A batch is sized to last about this long at the current local demand, in ms; or four refill
   * round trips when those take longer (at most half of `ttlMs`).
   * @default 50
   */
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
    maxBatch: Math.floor(check(o.maxBatch, 'maxBatch', 10_000, 1, 1_000_000)),
    targetMs: check(o.targetMs, 'targetMs', 50, 1, 60_000),
    maxShare: check(o.maxShare, 'maxShare', 0.1, 0.001, 1),
  });
}

/** Permits of one key held by this process. */
class Held {
  constructor(
    /** The storage key. */
    readonly key: string,
    /** What the storage key was made of: the resource and caller key it is indexed by. */
    readonly parts: StorageKeyParts,
    public limits: readonly CompiledLimit[],
  ) {}
  /** Permits being served, usable until `expiresAt`; the store stamped their charge `stamp`. */
  available = 0;
  expiresAt = 0;
  stamp = 0;
  /** Permits taken ahead (see `lowWater`), served once `available` runs out; usable until `spareExpiresAt`. */
  spare = 0;
  spareExpiresAt = 0;
  spareStamp = 0;
  /** When serving leaves fewer than this many permits, the next batch is taken ahead, in the background. */
  lowWater = 0;
  /** How long the last batch may serve (its TTL, or its hold on windows), ms. */
  holdMs = 0;
  /** Settings of the last refill, for refills taken ahead. */
  settings: CompiledLeaseSettings | undefined;
  policy: StoreFailurePolicy = 'local';
  /** Local demand in permits per ms, smoothed over `DEMAND_INTERVAL_MS` intervals. */
  rate = 0;
  demand = 0;
  intervalStart = 0;
  /** After a denied refill, the key is denied locally until then. */
  denyUntil = 0;
  /** The last store decision, the template for local denials. */
  last: Decision | undefined;
  /** The last granting store decision as an allowed one, the template for permits served. */
  granted: Decision | undefined;
  refill: Promise<Decision> | undefined;
  /** Round trips of refills, smoothed (ms). */
  rttMs = 0;
  touchedAt = 0;
}

const DEMAND_INTERVAL_MS = 100;
/** The shortest a batch on a sliding window or log serves (see `#holdFor`). */
const MIN_HOLD_MS = 10;
/** Most keys one sweep tick visits. */
const SWEEP_BATCH = 10_000;
/** The next batch is taken ahead when a batch is down to this share of its size. */
const LOW_WATER_SHARE = 0.5;
/**
 * A batch taken ahead waits up to this long (ms) for those of other keys, so that they share a
 * round trip: with many keys, a round trip per refill was most of a leased decision's cost.
 */
const AHEAD_GATHER_MS = 1;
/**
 * A batch taken ahead waits only while what is left of the current one lasts at least this many
 * times (the wait plus a refill round trip). A batch is taken ahead with about two round trips of
 * it left (see #batchSize); a hot key, whose batch lasts about a millisecond, sends at once.
 */
const AHEAD_GATHER_MARGIN = 2;

/**
 * Leases: a process takes a batch of permits from the global budget in one round trip and
 * serves them locally. The batch follows local demand (about `targetMs` of it, capped by
 * `maxBatch` and `maxShare` of the limit), so leftovers stay small; the next batch is taken ahead
 * while the current one still serves (see `#runningOut`); leftovers are returned when their TTL
 * passes and on close. Because permits are deducted from the global budget when
 * taken, leases never let more through than the store admitted; they only move admissions
 * later by at most the TTL.
 */
export class LeaseCache {
  readonly #held = new Map<string, Held>();
  /**
   * The same entries by resource and caller key (plain caller keys only, not tenants' or
   * shares'), so `trySync` finds a key's lease without building and hashing its storage key.
   */
  readonly #byCaller = new Map<string, Map<string, Held>>();
  readonly #oldest = new OldestFirst(this.#held);
  /** Where the sweep goes on from (see `#sweep`). */
  #sweepCursor: Iterator<[string, Held]> | undefined;
  /** Refills taken ahead waiting for company (see {@link AHEAD_GATHER_MS}), sent together. */
  #gathered: (() => void)[] = [];
  #gatherTimer: TimerHandle | undefined;
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
    private readonly onRefill?: (parts: StorageKeyParts, granted: number) => void,
  ) {}

  /**
   * Serves `cost` permits from the lease if it can, without I/O; undefined means a refill is
   * needed (call {@link take}).
   */
  takeLocal(key: string, limits: readonly CompiledLimit[], cost: number): Decision | undefined {
    const h = this.#held.get(key);
    return h === undefined ? undefined : this.#serve(h, limits, cost);
  }

  /**
   * {@link takeLocal} for caller key `caller` of `resource` (the storage key
   * `resourceKey(resource, caller)`), found without building that key. Only keys that were
   * validated when their lease was taken are found.
   */
  takeLocalOf(resource: string, caller: string, limits: readonly CompiledLimit[], cost: number): Decision | undefined {
    const h = this.#byCaller.get(resource)?.get(caller);
    return h === undefined ? undefined : this.#serve(h, limits, cost);
  }

  #serve(h: Held, limits: readonly CompiledLimit[], cost: number): Decision | undefined {
    const key = h.key;
    const now = this.clock.now();
    const sinceLastMs = now - h.touchedAt;
    this.#noteDemand(h, cost, now);
    if (h.limits !== limits) {
      // The rule changed: permits leased under the old limits go back.
      this.#giveBack(key, h);
      h.limits = limits;
    }
    this.#expire(key, h, now);
    if (h.available < cost && h.spare > 0) this.#promoteSpare(key, h);
    if (h.available >= cost && h.granted !== undefined) {
      h.available -= cost;
      if (h.refill === undefined && h.spare === 0 && now >= h.denyUntil && this.#runningOut(h, cost, now, sinceLastMs)) {
        this.#refillAhead(key, h, now);
      }
      // What this caller could still get: the store's remaining plus this process's lease.
      return leaseDecision(h.granted, h.granted.remaining + h.available + h.spare, 0);
    }
    if (now < h.denyUntil && h.last !== undefined) {
      return leaseDecision(h.last, h.last.remaining, Math.ceil(h.denyUntil - now));
    }
    return undefined;
  }

  /** Serves `cost` permits, refilling the lease from the store when it runs short. */
  async take(
    key: string,
    parts: StorageKeyParts,
    limits: readonly CompiledLimit[],
    cost: number,
    settings: CompiledLeaseSettings,
    policy: StoreFailurePolicy,
  ): Promise<Decision> {
    for (;;) {
      const local = this.takeLocal(key, limits, cost);
      if (local !== undefined) return local;
      const h = this.#entry(key, parts, limits);
      if (h.refill === undefined) {
        h.settings = settings;
        h.policy = policy;
        h.refill = this.#refill(key, limits, h, cost, false).finally(() => (h.refill = undefined));
        const d = await h.refill;
        if (!d.allowed) return d;
        // The caller that triggered the refill is served first; if the answer came after the
        // batch's TTL, the rest of it goes back at once.
        if (h.available >= cost) {
          h.available -= cost;
          const served = { ...d, remaining: d.remaining + h.available + h.spare };
          this.#expire(key, h, this.clock.now());
          return served;
        }
        continue;
      }
      // Concurrent callers for the same key share one round trip; one gathered (see
      // #refillAhead) is sent now, as a caller waits for it.
      this.#sendGathered();
      const d = await h.refill;
      if (!d.allowed && h.available < cost) return d.source === 'fallback' ? d : { ...d, source: 'lease' };
    }
  }

  /** Returns every leftover permit to the store and stops the sweep. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweepTimer !== undefined) this.clock.clearTimer(this.#sweepTimer);
    this.#sweepTimer = undefined;
    // Refills still gathering go now; what they bring goes straight back (see #refill).
    this.#sendGathered();
    for (const [key, h] of this.#held) this.#giveBack(key, h);
    // A refill that lands meanwhile returns its permits at once, adding a refund to wait for.
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
    this.#held.clear();
    this.#byCaller.clear();
  }

  /** Permits held locally for `key`, taken ahead included (tests, metrics). */
  held(key: string): number {
    const h = this.#held.get(key);
    return h === undefined ? 0 : h.available + h.spare;
  }

  /**
   * Takes permits from the store: enough for `cost` beyond what is available (a refill on the
   * caller's path), or, `ahead`, the next batch while the current one still serves (kept as
   * spare, with its own TTL, so every permit is still used within `ttlMs` of being taken).
   */
  async #refill(key: string, limits: readonly CompiledLimit[], h: Held, cost: number, ahead: boolean): Promise<Decision> {
    const settings = h.settings!;
    const min = ahead ? 1 : cost - h.available;
    const max = Math.max(min, this.#batchSize(h, limits, cost, settings) - (ahead ? 0 : h.available));
    this.refills++;
    // The batch's TTL runs from before the request, so it ends by the store's decision time plus
    // the hold under which windows count the permits (see ReserveRequest.holdMs).
    const sentAt = this.clock.now();
    const holdMs = this.#holdFor(h, limits, max, settings);
    const r = await this.store.reserve({ key, parts: h.parts, limits, min, max, holdMs }, h.policy);
    this.onRefill?.(h.parts, r.granted);
    const now = this.clock.now();
    h.rttMs = h.rttMs === 0 ? now - sentAt : 0.8 * h.rttMs + 0.2 * (now - sentAt);
    const d = combineStatuses(r.statuses);
    // What unused permits are returned with: the charge's stamp on the store's clock.
    const stamp = r.fallback ? 0 : (r.at ?? r.now + holdMs);
    if (r.granted > 0 && h.limits !== limits) {
      // The rule changed while the permits were on their way: they go back under the old limits.
      this.#return(h, limits, r.granted, stamp);
    } else if (r.granted > 0) {
      h.granted = { ...d, allowed: true, reason: 'allowed', retryAfterMs: 0 };
      h.last = h.granted;
      h.denyUntil = 0;
      h.lowWater = Math.floor(r.granted * LOW_WATER_SHARE);
      h.holdMs = holdMs;
      if (ahead) {
        h.spare += r.granted;
        h.spareExpiresAt = sentAt + holdMs;
        h.spareStamp = stamp;
      } else {
        h.available += r.granted;
        h.expiresAt = sentAt + holdMs;
        h.stamp = stamp;
      }
      // Permits that arrive after close go straight back.
      if (this.#closed) this.#giveBack(key, h);
    } else if (!r.fallback) {
      h.denyUntil = now + d.retryAfterMs;
      h.last = d;
    }
    // A fallback's denial (the store failed, or the local share is used up) is not learnt: like
    // the pre-filter, the lease only denies locally what the store denied. Otherwise one timed-out
    // refill taken ahead would deny the key as rate limited until its retry-after.
    return r.fallback ? fallbackDecision(d, r.unavailable === true) : d;
  }

  /**
   * True when the next batch should be taken ahead, after serving `cost` at `now`: the key's next
   * call is expected while a batch taken now would still serve it (else it would go back unused),
   * and by then the current batch will be short (under `lowWater`, or under this call's cost) or
   * past its TTL. The next call is expected after the longer of the last gap between calls and
   * the gap local demand implies (the smoothed demand lags when it falls); the refill also needs
   * a round trip or two, so a TTL ending within two round trips counts as ended. A steady caller
   * therefore finds the next batch in place both when a batch runs out and when it expires before
   * running out (demand low compared with the batch, or fallen since it was sized), and does not
   * wait for refills.
   */
  #runningOut(h: Held, cost: number, now: number, sinceLastMs: number): boolean {
    const perMs = this.#demandPerMs(h, now);
    if (perMs <= 0) return false;
    const gapMs = Math.max(cost / perMs, sinceLastMs);
    if (gapMs >= h.holdMs) return false;
    if (h.available < h.lowWater || h.available < cost) return true;
    return now + Math.max(gapMs, 2 * h.rttMs) >= h.expiresAt;
  }

  /**
   * Starts taking the next batch in the background; callers that run out meanwhile wait for it.
   * While the current batch lasts well beyond it, the refill first waits up to
   * {@link AHEAD_GATHER_MS} for those of other keys, and they go to the store together (one
   * round trip); a caller that needs it before then sends it at once (see {@link take}).
   */
  #refillAhead(key: string, h: Held, now: number): void {
    if (this.#closed || h.settings === undefined) return;
    const perMs = this.#demandPerMs(h, now);
    const lastsMs = Math.min(h.available / perMs, h.expiresAt - now);
    const gather = lastsMs >= AHEAD_GATHER_MARGIN * (AHEAD_GATHER_MS + h.rttMs);
    const sent = gather ? new Promise<void>((resolve) => this.#gather(resolve)) : undefined;
    const refill = (
      sent === undefined ? this.#refill(key, h.limits, h, 1, true) : sent.then(() => this.#refill(key, h.limits, h, 1, true))
    ).finally(() => (h.refill = undefined));
    h.refill = refill;
    this.#track(refill);
  }

  /** Queues a gathered refill's start; the first one queued sets the timer that sends them all. */
  #gather(send: () => void): void {
    this.#gathered.push(send);
    if (this.#gatherTimer === undefined)
      this.#gatherTimer = this.clock.setTimer(() => this.#sendGathered(), AHEAD_GATHER_MS, true);
  }

  /** Starts every gathered refill now: in one tick, so the store sends them in one call. */
  #sendGathered(): void {
    if (this.#gatherTimer !== undefined) this.clock.clearTimer(this.#gatherTimer);
    this.#gatherTimer = undefined;
    const gathered = this.#gathered;
    if (gathered.length === 0) return;
    this.#gathered = [];
    for (const send of gathered) send();
  }

  /** The current batch cannot serve the call: its leftovers go back and the spare batch takes over. */
  #promoteSpare(key: string, h: Held): void {
    this.#return(h, h.limits, h.available, h.stamp);
    h.available = h.spare;
    h.expiresAt = h.spareExpiresAt;
    h.stamp = h.spareStamp;
    h.spare = 0;
  }

  /**
   * How long a batch may serve: `ttlMs`, except on sliding windows and logs, which count the batch
   * as taken when it stops serving. There it is twice the time local demand needs to use what is
   * held and the batch, and at least four refill round trips and `MIN_HOLD_MS` (at most `ttlMs`):
   * a hot key's batch, used in milliseconds, is not counted for a whole TTL longer than its
   * permits were in use, and a batch still arrives before its TTL ends.
   */
  #holdFor(h: Held, limits: readonly CompiledLimit[], max: number, s: CompiledLeaseSettings): number {
    if (!limits.some(isWindowed)) return s.ttlMs;
    const perMs = this.#demandPerMs(h, this.clock.now());
    if (perMs <= 0) return s.ttlMs;
    const use = (2 * (h.available + h.spare + max)) / perMs;
    return Math.min(s.ttlMs, Math.ceil(Math.max(MIN_HOLD_MS, 4 * h.rttMs, use)));
  }

  /**
   * About `targetMs` of local demand, within [cost, maxBatch] and `maxShare` of the tightest limit;
   * and at least four refill round trips of it (at most half the TTL), so that the next batch,
   * taken ahead when half of this one is left, lands before this one runs out. When the process
   * is busy its round trips are long (a reply waits for the event loop), and a batch sized for
   * `targetMs` alone would run out before its successor lands, at every refill.
   */
  #batchSize(h: Held, limits: readonly CompiledLimit[], cost: number, s: CompiledLeaseSettings): number {
    const capacity = maxCost(limits);
    const share = Math.max(1, Math.floor(capacity * s.maxShare));
    const lastsMs = Math.max(s.targetMs, Math.min(4 * h.rttMs, s.ttlMs / 2));
    const wanted = Math.ceil(this.#demandPerMs(h, this.clock.now()) * lastsMs);
    return Math.max(cost, Math.min(wanted, s.maxBatch, share));
  }

  /**
   * Local demand in permits per ms: the smoothed rate, or the running interval's if higher, so a
   * key that just got busy is sized for it at once.
   */
  #demandPerMs(h: Held, now: number): number {
    return Math.max(h.rate, h.demand / Math.max(1, now - h.intervalStart));
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

  #entry(key: string, parts: StorageKeyParts, limits: readonly CompiledLimit[]): Held {
    let h = this.#held.get(key);
    if (h === undefined) {
      if (this.#held.size >= this.maxKeys) this.#evictOldest();
      h = new Held(key, parts, limits);
      h.intervalStart = this.clock.now();
      this.#held.set(key, h);
      this.#index(h);
      this.#noteDemand(h, 1, h.intervalStart);
      this.#scheduleSweep();
    }
    return h;
  }

  #evictOldest(): void {
    const first = this.#oldest.peek();
    if (first === undefined) return;
    const [key, h] = first;
    this.#giveBack(key, h);
    this.#oldest.shift();
    this.#unindex(h);
  }

  /** Adds a plain caller key's entry to {@link #byCaller}. */
  #index(h: Held): void {
    const { resource, key, tenant, part } = h.parts;
    if (tenant !== undefined || part !== undefined) return;
    let callers = this.#byCaller.get(resource);
    if (callers === undefined) this.#byCaller.set(resource, (callers = new Map<string, Held>()));
    callers.set(key, h);
  }

  /** Removes an entry that left {@link #held} from {@link #byCaller}. */
  #unindex(h: Held): void {
    const { resource, key } = h.parts;
    const callers = this.#byCaller.get(resource);
    if (callers?.get(key) !== h) return;
    callers.delete(key);
    if (callers.size === 0) this.#byCaller.delete(resource);
  }

  /** Returns every permit held for `key`, the spare batch included. */
  #giveBack(key: string, h: Held): void {
    if (h.limits.some(isWindowed)) {
      // Each batch's refund names its own stamp.
      this.#return(h, h.limits, h.available, h.stamp);
      this.#return(h, h.limits, h.spare, h.spareStamp);
    } else {
      this.#return(h, h.limits, h.available + h.spare, 0);
    }
    h.available = 0;
    h.spare = 0;
  }

  /** Returns the permits of each batch whose TTL has passed. */
  #expire(key: string, h: Held, now: number): void {
    if (now >= h.expiresAt && h.available > 0) {
      this.#return(h, h.limits, h.available, h.stamp);
      h.available = 0;
    }
    if (now >= h.spareExpiresAt && h.spare > 0) {
      this.#return(h, h.limits, h.spare, h.spareStamp);
      h.spare = 0;
    }
  }

  /**
   * Refunds `n` unused permits of the batch the store stamped `stamp` (in the background). Sliding
   * windows and logs refund that batch's charge only, never permits that may have been served;
   * a batch with no known stamp (a fallback's) keeps them counted until they leave the window.
   */
  #return(h: Held, limits: readonly CompiledLimit[], n: number, stamp: number): void {
    const { key, parts } = h;
    if (n <= 0) return;
    if (!limits.some(isWindowed)) this.#track(this.store.adjust({ key, parts, limits, delta: -n }));
    else if (stamp > 0) this.#track(this.store.adjust({ key, parts, limits, delta: -n, at: stamp }));
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

  /**
   * Returns expired leftovers and forgets idle keys, at most {@link SWEEP_BATCH} keys a tick,
   * continuing where the last tick ended: a cache filled by many keys costs each tick the same,
   * and its keys are visited within `size / SWEEP_BATCH` ticks.
   */
  #sweep(): void {
    const now = this.clock.now();
    for (let i = 0; i < SWEEP_BATCH; i++) {
      this.#sweepCursor ??= this.#held.entries();
      const next = this.#sweepCursor.next();
      if (next.done) {
        this.#sweepCursor = undefined;
        break;
      }
      const [key, h] = next.value;
      this.#expire(key, h, now);
      if (now - h.touchedAt > 10 * this.sweepMs && h.available + h.spare === 0 && h.refill === undefined) {
        this.#held.delete(key);
        this.#unindex(h);
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

/** Limits whose state stamps each charge (see `ReserveRequest.holdMs`). */
function isWindowed(limit: CompiledLimit): boolean {
  return algorithmOf(limit).windowed;
}
