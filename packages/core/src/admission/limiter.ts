import { randomUUID } from 'node:crypto';
import { systemClock, type Clock } from '../shared/clock.js';
import type { CircuitBreaker } from '../breakers/circuit-breaker.js';
import { combineStatuses, withReason, type Decision } from '../shared/decision.js';
import { checkBookingId, checkBookingToken, newBookingToken } from '../store/booking.js';
import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { Failover } from '../failover/failover.js';
import { STORE_FAILURE_POLICIES, fallbackDecision, type StoreFailurePolicy } from '../failover/failover-state.js';
import { MemoryStore } from '../store/memory-store.js';
import { intOption } from '../shared/options.js';
import type { DecisionMode, LimiterObserver } from '../shared/observer.js';
import {
  DEFAULT_MAX_KEY_LENGTH,
  MAX_COST,
  checkCost,
  checkDelta,
  checkHold,
  checkKey,
  optionsPermitId,
  checkStamp,
  hasConcurrency,
  maxCost,
  type CompiledLimit,
} from '../shared/policy.js';
import { HotKeyTrackers, type HotKeyReport } from '../local/hot-keys.js';
import { LeaseCache, type CompiledLeaseSettings } from '../local/lease-cache.js';
import { Prefilter, filterKey } from '../local/prefilter.js';
import type {
  AcquireOptions,
  AdjustOptions,
  BookOptions,
  CancelOptions,
  PermitOptions,
  RateLimiter,
  TryOptions,
} from './rate-limiter.js';

import { compileResource, type CompiledResource, type ResourceConfig } from './resource.js';
import { resourceKey, storageKey, type StorageKeyParts } from '../store/storage-key.js';
import { tierOf, type CompiledTier } from './tiers.js';
import type { LimitStore } from '../store/store.js';
import { Waiting, type WaitCall } from './wait-queue.js';
import type { LimiterOptions } from './limiter-options.js';
import {
  bookable,
  breakerDecision,
  checkClient,
  checkTenant,
  info,
  nothingToClaim,
  throwIfAborted,
  waitKind,
  type Call,
  type Charge,
} from './limiter-calls.js';
import type { FleetBreakerPolicy } from '../breakers/fleet-breaker-state.js';
import type { OutcomeRecorderStats } from '../breakers/outcome-recorder.js';
import { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import type { OutcomeReport, OutcomeTotals } from '../breakers/outcomes.js';

export type { LimiterOptions } from './limiter-options.js';

/** The options of a call that gives none (shared, so such a call allocates nothing for them). */
const NO_OPTIONS: TryOptions = Object.freeze({});

const MAX_WAIT_BOUND_MS = 24 * 3600 * 1000;

/**
 * Decides whether calls to a downstream resource may proceed. `try` answers at once; `acquire`
 * waits (bounded, cancellable, FIFO per key and client, clients in turn); `release`/`renew`
 * manage concurrency permits; `adjust` charges the real cost after the fact.
 *
 * @example
 * const limiter = new Limiter({ resources: { 'api:payments': { algorithm: 'gcra', limit: 100 } } });
 * const d = await limiter.acquire('api:payments', { key: tenant, maxWaitMs: 2000 });
 * if (!d.allowed) throw new Error(`busy, retry in ${d.retryAfterMs} ms`);
 */
export class Limiter implements RateLimiter {
  readonly #store: LimitStore;
  readonly #failover: Failover;
  readonly #onStoreFailure: StoreFailurePolicy;
  readonly #ownsStore: boolean;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #observer: LimiterObserver | undefined;
  readonly #maxKeyLength: number;
  readonly #maxWaitMs: number;
  readonly #resources = new Map<string, CompiledResource>();
  readonly #prefilter: Prefilter;
  readonly #leases: LeaseCache;
  readonly #waiting: Waiting;
  /** Hot-key trackers of the resources that configure `hotKeys`. */
  readonly #hot: HotKeyTrackers;
  /** Where an admitted decision charged its permits, to give them back if nobody takes them. */
  readonly #charges = new WeakMap<Decision, Charge[]>();
  /** Outcomes on their way to the store, and fleet breakers' states (set once the store is). */
  #outcomes: OutcomeRecorders | undefined;
  #closed = false;

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null || typeof options.resources !== 'object') {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'resources', 'must be an object of resource -> limits');
    }
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#observer = options.observer;
    this.#hot = new HotKeyTrackers(this.#clock, (resource, change) => this.#observer?.hotKey?.({ resource, ...change }));
    this.#maxKeyLength = intOption(options.maxKeyLength, 'maxKeyLength', DEFAULT_MAX_KEY_LENGTH, 1, 65_536);
    this.#maxWaitMs = intOption(options.maxWaitMs, 'maxWaitMs', 30_000, 0, MAX_WAIT_BOUND_MS);
    this.#waiting = new Waiting({
      clock: this.#clock,
      random: this.#random,
      maxWaitersPerKey: intOption(options.maxWaitersPerKey, 'maxWaitersPerKey', 1000, 1, 1_000_000),
      maxWaitingKeys: intOption(options.maxWaitingKeys, 'maxWaitingKeys', 10_000, 1, 10_000_000),
      maxWaitersPerClient: intOption(options.maxWaitersPerClient, 'maxWaitersPerClient', 1000, 1, 10_000_000),
      concurrencyPollMs: intOption(options.concurrencyPollMs, 'concurrencyPollMs', 50, 1, 60_000),
    });
    const policy = options.onStoreFailure ?? 'local';
    if (!STORE_FAILURE_POLICIES.includes(policy)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'onStoreFailure', `must be one of ${STORE_FAILURE_POLICIES.join(', ')}`);
    }
    this.#onStoreFailure = policy;
    this.#prefilter = new Prefilter(intOption(options.prefilterMaxKeys, 'prefilterMaxKeys', 100_000, 1, 10_000_000));
    for (const [resource, config] of Object.entries(options.resources)) this.setLimits(resource, config);
    if (options.closeStore !== undefined && typeof options.closeStore !== 'boolean') {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'closeStore', 'must be a boolean');
    }
    this.#ownsStore = options.store === undefined || options.closeStore === true;
    if (options.store !== undefined && options.maxKeys !== undefined) {
      throw invalid(
        ErrorCodes.INVALID_OPTIONS,
        'maxKeys',
        "bounds the limiter's own MemoryStore: give it to the store passed in",
      );
    }
    this.#store =
      options.store ??
      new MemoryStore({
        clock: this.#clock,
        ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }),
        ...(this.#observer === undefined ? {} : { observer: this.#observer }),
      });
    this.#failover = new Failover(this.#store, this.#clock, {
      ...options.failover,
      onSwitch: (e) => {
        options.failover?.onSwitch?.(e);
        this.#observer?.storeSwitched?.({ healthy: e.healthy });
      },
    });
    const outcomes = new OutcomeRecorders({
      store: this.#store,
      clock: this.#clock,
      tallyAll: options.tallyOutcomes === true,
      onStateChange: (resource, from, to) => this.#observer?.fleetBreakerChanged?.({ resource, from, to }),
      onError: (resource, error) => this.#observer?.outcomesFailed?.({ resource, error }),
    });
    for (const r of this.#resources.values()) outcomes.check(r);
    this.#outcomes = outcomes;
    this.#leases = new LeaseCache(this.#failover, this.#clock, 100_000, 100, (parts, granted) => {
      this.#observer?.leaseRefilled?.({ resource: parts.resource, granted });
    });
  }

  /**
   * Sets or replaces a resource's limits (a rule update). Existing state carries over: usage
   * already counted is judged against the new limits instead of being reset.
   */
  setLimits(resource: string, config: ResourceConfig): void {
    const compiled = compileResource(resource, config, this.#clock, this.#onStoreFailure);
    this.#outcomes?.check(compiled);
    // Keep a running breaker's history when only the limits change.
    const breaker = this.#resources.get(resource)?.breaker;
    this.#resources.set(resource, breaker && compiled.breaker ? { ...compiled, breaker } : compiled);
    this.#hot.sync(compiled.name, compiled.hotKeys);
    this.#prefilter.clear();
  }

  /**
   * Replaces every resource at once (a new rule version): resources not in `resources` are
   * removed, the others set as by {@link setLimits}. Validates everything before changing
   * anything, so an invalid set leaves the limiter as it was.
   */
  setResources(resources: Record<string, ResourceConfig>): void {
    const compiled = Object.entries(resources).map(([name, config]) =>
      compileResource(name, config, this.#clock, this.#onStoreFailure),
    );
    for (const r of compiled) this.#outcomes?.check(r);
    const next = new Map<string, CompiledResource>();
    for (const r of compiled) {
      const breaker = this.#resources.get(r.name)?.breaker;
      next.set(r.name, breaker && r.breaker ? { ...r, breaker } : r);
    }
    for (const name of this.#resources.keys()) if (!next.has(name)) this.#outcomes?.remove(name);
    this.#resources.clear();
    for (const [name, r] of next) this.#resources.set(name, r);
    this.#hot.keepOnly(next);
    for (const r of next.values()) this.#hot.sync(r.name, r.hotKeys);
    this.#prefilter.clear();
  }

  /**
   * Removes a resource's limits: calls to it are refused from then on. What its keys counted
   * stays in the store under the resource's name, so limits set again under the same name
   * carry on from that state. False when the resource had no limits.
   */
  removeLimits(resource: string): boolean {
    this.#outcomes?.remove(resource);
    this.#hot.drop(resource);
    return this.#resources.delete(resource);
  }

  /**
   * The heaviest keys of every resource that tracks them (`ResourceOptions.hotKeys`), or of
   * `resource` alone, as this process counted them, by resource name.
   */
  hotKeys(resource?: string): HotKeyReport[] {
    return this.#hot.report(resource);
  }

  /** Counts a call for its resource's hot keys (calls of cost 0 ask nothing of a key). */
  #noteHot(call: Call): void {
    if (call.cost === 0 || call.resource.hotKeys === undefined) return;
    this.#hot.record(call.resource.name, call.sub);
  }

  /** The lease settings a call on a storage key is served with while its key is hot, if any. */
  #hotLease(resource: CompiledResource, parts: StorageKeyParts): CompiledLeaseSettings | undefined {
    const lease = resource.hotKeys?.lease;
    // Tenant quotas, split sub-keys and the boost pool are keys of their own, never leased.
    if (lease === undefined || parts.tenant !== undefined || parts.part !== undefined || parts.pool !== undefined) {
      return undefined;
    }
    return this.#hot.mitigated(resource.name, parts.key) ? lease : undefined;
  }

  /** True if the resource has limits configured. */
  has(resource: string): boolean {
    return this.#resources.has(resource);
  }

  /** Names of the configured resources. */
  resources(): string[] {
    return [...this.#resources.keys()];
  }

  /** The compiled limits of a resource. Throws `SLUICE_ERR_UNKNOWN_RESOURCE` if none. */
  limitsOf(resource: string): readonly CompiledLimit[] {
    return this.#resource(resource).limits;
  }

  /** The circuit breaker of a resource, if it has one. */
  breakerOf(resource: string): CircuitBreaker | undefined {
    return this.#resource(resource).breaker;
  }

  /**
   * Reports how an admitted call to the resource's downstream went, for its circuit breaker
   * ({@link call} does this for you).
   */
  record(resource: string, outcome: { success: boolean; durationMs: number }): void {
    const r = this.#resource(resource);
    r.breaker?.record(outcome.success, outcome.durationMs);
    this.#outcomes?.of(r)?.record(outcome.success, outcome.durationMs);
  }

  /**
   * Reports the outcome of `count` like calls to the resource's downstream (the outcome API of
   * the service, the Temporal gate): judged by its breaker, tallied in the store (with a fleet
   * breaker or `tallyOutcomes`), under `cohort` as well when one is named.
   */
  reportOutcome(report: OutcomeReport, cohort?: string): void {
    const r = this.#resource(report.resource);
    const count = report.count ?? 1;
    if (r.breaker !== undefined) for (let i = 0; i < Math.min(count, 1000); i++) r.breaker.record(report.ok, report.durationMs);
    this.#outcomes?.of(r)?.record(report.ok, report.durationMs, cohort, count);
  }

  /**
   * The fleet-wide breaker of a resource as this process last heard of it, with its reporting
   * counters; undefined if the resource has none (or made no call yet).
   */
  fleetBreakerOf(resource: string): (OutcomeRecorderStats & { policy: FleetBreakerPolicy }) | undefined {
    const r = this.#resource(resource);
    if (r.fleetBreaker === undefined) return undefined;
    const stats = this.#outcomes?.stats(resource);
    return stats === undefined ? undefined : { ...stats, policy: r.fleetBreaker.policy };
  }

  /**
   * The fleet-wide breaker of a resource as the store has it now (one report, without outcomes
   * unless some were pending); undefined if the resource has none.
   */
  async readFleetBreaker(resource: string): Promise<(OutcomeRecorderStats & { policy: FleetBreakerPolicy }) | undefined> {
    const r = this.#resource(resource);
    const recorder = r.fleetBreaker === undefined ? undefined : this.#outcomes?.of(r);
    if (recorder === undefined) return undefined;
    await recorder.flush();
    return this.fleetBreakerOf(resource);
  }

  /** Outcome tallies of a resource over the last `windowMs`, from the store (see `OutcomeSource`). */
  outcomeTotals(resource: string, windowMs: number, cohort?: string): Promise<OutcomeTotals> {
    return this.#outcomes!.totals(resource, windowMs, cohort);
  }

  /**
   * Runs `fn` under the resource's limits: acquires (waiting up to `maxWaitMs`), runs, records
   * the outcome for the breaker and releases a concurrency permit. A denial rejects with
   * `SLUICE_ERR_LIMITED`, whose `decision` says why and when to retry.
   */
  async call<T>(resource: string, fn: () => Promise<T>, options: AcquireOptions = {}): Promise<T> {
    const d = await this.acquire(resource, options);
    if (!d.allowed) {
      throw new SluiceError(ErrorCodes.LIMITED, `${resource}: ${d.reason}, retry in ${d.retryAfterMs} ms`, { decision: d });
    }
    const started = this.#clock.now();
    try {
      const result = await fn();
      this.record(resource, { success: true, durationMs: this.#clock.now() - started });
      return result;
    } catch (err) {
      this.record(resource, { success: false, durationMs: this.#clock.now() - started });
      throw err;
    } finally {
      if (d.permitId !== undefined) await this.release(resource, { key: options.key, permitId: d.permitId });
    }
  }

  #resource(resource: string): CompiledResource {
    const r = this.#resources.get(resource);
    if (r === undefined) {
      throw new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, `no limits configured for resource ${JSON.stringify(resource)}`, {
        field: 'resource',
      });
    }
    return r;
  }

  /**
   * Decides without I/O when this process already knows the answer (a leased permit, or a key
   * known to be over its limit); undefined means only the store can tell (use {@link try}).
   * The hot path of gateways: no promise, no allocation beyond the decision.
   */
  trySync(resource: string, options: TryOptions = NO_OPTIONS): Decision | undefined {
    const leased = this.#resources.get(resource);
    if (leased?.lease !== undefined && leased.split === 1 && options.tenant === undefined && !this.#closed) {
      return this.#tryLease(leased, options);
    }
    const call = this.#prepare(resource, options);
    const r = call.resource;
    if (r.breaker !== undefined && r.breaker.state === 'open') return undefined;
    if (r.fleetBreaker !== undefined && this.#outcomes?.of(r)?.stateForAdmission() !== 'closed') return undefined;
    // A tenant's call draws on two leases (the tenant's and the resource's) all-or-nothing:
    // `try` takes them in order and gives the first back if the second denies.
    if (r.lease !== undefined && this.#tenantLimits(call) !== undefined) return undefined;
    const local =
      r.lease !== undefined || (call.tenant === undefined && this.#hotLease(r, call.parts) !== undefined)
        ? this.#leases.takeLocal(call.key, call.limits, call.cost)
        : r.prefilter
          ? this.#prefilter.check(call.key, call.cost, this.#clock.now())
          : undefined;
    if (local === undefined) return undefined;
    // Counted only when answered here: a call left to `try` is counted there.
    this.#noteHot(call);
    return this.#observe(resource, 'try', local, call.tier);
  }

  /**
   * `trySync` on a leased resource without a tenant, the hot path: the lease is found by the
   * caller's key as given, without building its storage key. A key found there was validated when
   * its lease was taken; one that is not found is validated here, and has nothing to serve.
   */
  #tryLease(r: CompiledResource, options: TryOptions): Decision | undefined {
    if (r.breaker !== undefined && r.breaker.state === 'open') return undefined;
    if (r.fleetBreaker !== undefined && this.#outcomes?.of(r)?.stateForAdmission() !== 'closed') return undefined;
    const tier = tierOf(r.priority, options.priority, r.name);
    const cost = options.cost === undefined ? 1 : checkCost(options.cost, r.limits);
    const sub = options.key ?? '';
    const local = this.#leases.takeLocalOf(r.name, sub, r.limits, cost);
    if (local === undefined) {
      checkKey(sub, this.#maxKeyLength);
      return undefined;
    }
    if (r.hotKeys !== undefined) this.#hot.record(r.name, sub);
    return this.#observe(r.name, 'try', local, tier);
  }

  /** Decides now, without waiting. Being limited resolves to a denied decision. */
  try(resource: string, options: TryOptions = {}): Promise<Decision> {
    let decided: Promise<Decision>;
    let tier: CompiledTier;
    try {
      const call = this.#prepare(resource, options);
      this.#noteHot(call);
      tier = call.tier;
      const r = call.resource;
      // The common call (one key, no breaker, tenant or shadow mode) goes straight to its key;
      // #consume would decide it the same way, with bookkeeping only `acquire` needs.
      decided =
        r.breaker === undefined &&
        r.fleetBreaker === undefined &&
        r.split === 1 &&
        !r.shadow &&
        r.boost === undefined &&
        this.#tenantLimits(call) === undefined
          ? this.#consumeKey(r, call.key, call.parts, call.limits, call.cost, call.tier.holdback)
          : this.#consume(call);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return decided.then((d) => this.#observe(resource, 'try', d, tier));
  }

  /**
   * Waits up to `maxWaitMs` for permits. Callers on one key are served in arrival order (clients
   * in turn, see `client`) and woken paced by the retry-after of the last denial. Resolves to a denied decision with reason
   * `wait_timeout` (the wait would exceed its bound) or `queue_full`; rejects with
   * `SLUICE_ERR_ABORTED` when the signal fires.
   */
  async acquire(resource: string, options: AcquireOptions = {}): Promise<Decision> {
    const call = this.#prepare(resource, options);
    this.#noteHot(call);
    const { key, cost } = call;
    const maxWaitMs = intOption(options.maxWaitMs, 'maxWaitMs', this.#maxWaitMs, 0, MAX_WAIT_BOUND_MS);
    const signal = options.signal;
    const client = checkClient(options.client);
    throwIfAborted(signal);
    const startedAt = this.#clock.now();
    const queue = this.#waiting.queues.get(key, waitKind(call));
    let last: Decision;
    if (queue === undefined || queue.size === 0) {
      // Nobody is waiting: ask directly, so uncontended keys pay no queueing.
      last = await this.#consume(call);
      if (last.allowed) {
        if (signal?.aborted) {
          await this.#giveBack(this.#charges.get(last) ?? [], cost);
          throwIfAborted(signal);
        }
        return this.#observe(resource, 'acquire', last, call.tier);
      }
      // A rate limit's retry-after is exact, so a wait that cannot fit is refused at once. A
      // concurrency limit's is only the worst case (leases may be released sooner): queue.
      if (last.reason === 'rate_limited' && last.retryAfterMs > maxWaitMs) {
        return this.#observe(resource, 'acquire', { ...withReason(last, 'wait_timeout', false), waitedMs: 0 }, call.tier);
      }
      if (last.reason !== 'rate_limited' && last.reason !== 'concurrency_limited')
        return this.#observe(resource, 'acquire', last, call.tier);
    } else {
      last = queue.last;
    }
    return this.#waiting.enqueue(this.#waitCall(call), { startedAt, deadline: startedAt + maxWaitMs, signal, client }, last);
  }

  /**
   * Deferred admission: admits now if the key has room; otherwise books the earliest slot at
   * which the permits will be free, after every slot already promised, and answers a denial
   * whose `retryAfterMs` is that slot's start and whose `booking` says so (`booked`). A call
   * with the same `id` and the booking's `token` from then on claims it: before its start it
   * answers `booked` again (the time left), within its span it admits (`claimed`) without
   * competing with anyone, and after its span the booking has expired (its permits went back)
   * and the call starts afresh. A booking keeps the token the call gave, or a fresh one answered
   * in `booking.token`; a call naming a held booking with another token (or none) is refused,
   * `SLUICE_ERR_BOOKING_TOKEN`, and changes nothing.
   *
   * No booking is made (the call is decided as {@link try}, `booking.outcome` `admitted` or
   * `denied`) on resources with a concurrency limit, a core share, a split, leases or shadow
   * mode, for a tenant, while the store is down, or when the slot lies beyond the resource's
   * `booking.maxAheadMs`, its key holds `booking.maxBookings` or its `booking.maxShare` already,
   * or the store has no room for another booking.
   */
  async book(resource: string, options: BookOptions): Promise<Decision> {
    return this.#book(resource, options, true);
  }

  /**
   * Claims a booking made by {@link book}, never making one: `claimed` (admitted), `booked`
   * (not yet due: `retryAfterMs` says when) or `missing` (nothing held under that id).
   */
  async claim(resource: string, options: BookOptions): Promise<Decision> {
    return this.#book(resource, options, false);
  }

  /** Cancels a booking not yet claimed; its permits go back where the algorithm's bound allows. */
  async cancel(resource: string, options: CancelOptions): Promise<boolean> {
    const { key, limits, resource: r } = this.#prepare(resource, { key: options.key, cost: 0 });
    const id = checkBookingId(options.id, 'id');
    // No token names no booking: a held one is refused by the store, as a wrong token is.
    const token = options.token === undefined ? '' : checkBookingToken(options.token);
    if (!bookable(r, undefined, 0)) return false;
    const found = await this.#failover.cancel({ key, limits, id, token });
    if (found) {
      this.#prefilter.forget(filterKey(key, false));
      this.#waiting.wake(key);
    }
    return found;
  }

  async #book(resource: string, options: BookOptions, create: boolean): Promise<Decision> {
    const call = this.#prepare(resource, options);
    const id = checkBookingId(options.id, 'id');
    // A booking made without a token gets a fresh one, answered to its maker alone. A claim
    // without one can only find nothing (or be refused, if the id is held).
    const token = options.token !== undefined ? checkBookingToken(options.token) : create ? newBookingToken() : '';
    const r = call.resource;
    // A plain call is counted by `try` below.
    if (bookable(r, call.tenant, call.tier.holdback)) this.#noteHot(call);
    const plain = (d: Decision): Decision => ({ ...d, booking: info(d.allowed ? 'admitted' : 'denied', id) });
    if (!bookable(r, call.tenant, call.tier.holdback)) {
      // Nothing of it can have been booked: a claim finds nothing, a booking is a plain call.
      if (!create) return this.#observe(resource, 'book', nothingToClaim(r.limits, id), call.tier);
      return plain(await this.try(resource, options));
    }
    if (r.breaker !== undefined) {
      const pass = r.breaker.tryPass();
      if (!pass.allowed) return this.#observe(resource, 'book', plain(breakerDecision(r.limits, pass.retryAfterMs)), call.tier);
    }
    const fleet = r.fleetBreaker === undefined ? undefined : await this.#outcomes?.of(r)?.admit();
    if (fleet?.allowed === false) {
      return this.#observe(resource, 'book', plain(breakerDecision(r.limits, fleet.retryAfterMs)));
    }
    const result = await this.#failover.book(
      { key: call.key, limits: call.limits, cost: call.cost, id, token, create, bounds: r.booking },
      r.onStoreFailure,
    );
    let decision = combineStatuses(result.statuses);
    let booking = info(result.outcome, id);
    const span = result.booking;
    if (result.outcome === 'booked' && span !== undefined) {
      const startsInMs = Math.max(1, Math.ceil(span.start - result.now));
      booking = { ...booking, startsInMs, expiresInMs: Math.max(0, Math.floor(span.end - result.now)), token };
      decision = { ...decision, allowed: false, reason: 'rate_limited', retryAfterMs: startsInMs };
    } else if (result.outcome === 'claimed' && span !== undefined) {
      booking = { ...booking, expiresInMs: Math.max(0, Math.floor(span.end - result.now)) };
      decision = { ...decision, allowed: true, reason: 'allowed', retryAfterMs: 0 };
    } else if (result.outcome === 'missing') {
      decision = { ...decision, allowed: false, reason: 'rate_limited', retryAfterMs: 0 };
    }
    if (result.fallback === true) decision = fallbackDecision(decision, result.unavailable === true);
    return this.#observe(resource, 'book', { ...decision, booking }, call.tier);
  }

  /** Frees a concurrency permit. False if it had already expired or been released. */
  async release(resource: string, options: PermitOptions): Promise<boolean> {
    const { key, limits } = this.#prepare(resource, { key: options.key, cost: 0 });
    const found = await this.#failover.release({ key, limits, permitId: optionsPermitId(options) });
    this.#waiting.wake(key);
    return found;
  }

  /** Extends a concurrency permit. False if it was lost (expired): stop the work it guards. */
  async renew(resource: string, options: PermitOptions): Promise<boolean> {
    const { key, limits } = this.#prepare(resource, { key: options.key, cost: 0 });
    const ttlMs = options.ttlMs === undefined ? undefined : intOption(options.ttlMs, 'ttlMs', 0, 1, MAX_WAIT_BOUND_MS);
    return this.#failover.renew({
      key,
      limits,
      permitId: optionsPermitId(options),
      ...(ttlMs === undefined ? {} : { ttlMs }),
    });
  }

  /**
   * Charges the real cost after the work: `delta` more permits, or a refund when negative.
   * E.g. a call admitted with cost 100 that used 350 LLM tokens adjusts by +250.
   */
  async adjust(resource: string, options: AdjustOptions): Promise<void> {
    const call = this.#prepare(resource, {
      key: options.key,
      cost: 0,
      ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
    });
    const delta = checkDelta(options.delta);
    const at = checkStamp(options.at);
    const tenantLimits = this.#tenantLimits(call);
    let { key, limits, parts } = call;
    if (call.resource.split > 1) {
      // Charged on one sub-key: the sum over sub-keys is what matters.
      const i = Math.floor(this.#random() * call.resource.split);
      parts = { resource, key: call.sub, part: i };
      key = storageKey(parts);
      limits = call.resource.splitLimits[i]!;
    }
    await this.#failover.adjust({ key, parts, limits, delta, ...(at > 0 ? { at } : {}) });
    let tenantKey: string | undefined;
    if (tenantLimits !== undefined) {
      const tenant = { resource, key: '', tenant: call.tenant! };
      tenantKey = storageKey(tenant);
      await this.#failover.adjust({ key: tenantKey, parts: tenant, limits: tenantLimits, delta });
    }
    if (delta < 0) {
      // Refunded here: what the pre-filter learnt of these keys no longer holds.
      const holdbacks = call.resource.priority.holdbacks;
      this.#prefilter.forget(key, holdbacks);
      if (tenantKey !== undefined) this.#prefilter.forget(tenantKey, holdbacks);
      this.#waiting.wake(key);
    }
  }

  /**
   * Takes between `min` and `max` permits of a key in one decision, for leases held elsewhere
   * (the remote client): the store's `reserve`, or the resource's store-failure policy while
   * the store is away. Concurrency limits, split keys and resources with a core share are
   * never reserved (`SLUICE_ERR_INVALID_OPTIONS`); leftovers go back through {@link adjust} with
   * a negative delta (except on sliding windows and logs, see `holdMs`). Tenant quotas are not
   * applied. `holdMs` is how long the caller may serve the permits (its lease TTL, 0..60,000):
   * sliding windows and logs count them as taken then (see `ReserveRequest.holdMs`). `at` is the
   * stamp of the charge, to pass to {@link adjust} with the unused permits (0 when the fallback
   * decided: its clock is not the store's).
   */
  async reserve(
    resource: string,
    options: { key?: string; min: number; max: number; holdMs?: number },
  ): Promise<{ granted: number; decision: Decision; fallback: boolean; at: number }> {
    const call = this.#prepare(resource, { key: options.key, cost: 0 });
    const r = call.resource;
    if (hasConcurrency(r.limits)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'concurrency limits cannot be reserved');
    }
    if (r.split > 1) throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'split resources cannot be reserved');
    // A batch taken at once cannot keep the share kept for core traffic.
    if (r.coreShare > 0) throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'resources with a core share cannot be reserved');
    if (r.boost !== undefined)
      throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', 'resources with a boost pool cannot be reserved');
    const min = checkCost(options.min, r.limits, 'min');
    const rawMax: unknown = options.max;
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < min || rawMax > MAX_COST || min < 1) {
      throw invalid(ErrorCodes.INVALID_COST, 'max', `must be an integer with 1 <= min <= max <= ${MAX_COST}`);
    }
    const holdMs = checkHold(options.holdMs);
    // More than the limit can ever hold is never granted anyway: ask for what can be.
    const max = Math.min(rawMax, maxCost(r.limits));
    const request = { key: call.key, parts: call.parts, limits: r.limits, min, max, holdMs };
    const result = await this.#failover.reserve(request, r.onStoreFailure);
    let decision = combineStatuses(result.statuses);
    if (result.fallback) decision = fallbackDecision(decision, result.unavailable === true);
    return { granted: result.granted, decision, fallback: result.fallback, at: result.fallback ? 0 : result.now + holdMs };
  }

  /**
   * What remote clients need to know of a resource: its limits, lease settings, store-failure
   * policy, and whether {@link reserve} accepts it.
   */
  settingsOf(resource: string): Pick<CompiledResource, 'limits' | 'lease' | 'onStoreFailure'> & { reservable: boolean } {
    const { limits, lease, onStoreFailure, split, coreShare, boost } = this.#resource(resource);
    // A batch served locally would neither keep the tiers' shares nor reach the boost pool.
    const reservable = split === 1 && coreShare === 0 && boost === undefined && !hasConcurrency(limits);
    return { limits, lease, onStoreFailure, reservable };
  }

  /**
   * Ends every wait (they reject with `SLUICE_ERR_CLOSED`), waits for background work and closes
   * the store if the limiter created it (or was given it with `closeStore: true`).
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#waiting.close(new SluiceError(ErrorCodes.CLOSED, 'the limiter was closed'));
    await this.#leases.close();
    await this.#failover.close();
    await this.#outcomes?.close();
    if (this.#ownsStore) await this.#store.close();
  }

  #prepare(resource: string, options: TryOptions): Call {
    if (this.#closed) throw new SluiceError(ErrorCodes.CLOSED, 'the limiter was closed');
    const r = this.#resource(resource);
    const sub = checkKey(options.key ?? '', this.#maxKeyLength);
    // A split key's call must fit in one sub-key's share.
    const cost = checkCost(options.cost ?? 1, r.split > 1 ? r.splitLimits[r.split - 1]! : r.limits);
    const tenant = options.tenant === undefined ? undefined : checkTenant(options.tenant);
    const tier = tierOf(r.priority, options.priority, resource);
    const parts = { resource, key: sub };
    return {
      resource: r,
      sub,
      key: resourceKey(resource, sub),
      parts,
      limits: r.limits,
      cost,
      tenant,
      priority: tier.name,
      tier,
    };
  }

  /** One decision: breaker, tenant quota, the resource's limits, shadow mode. */
  async #consume(call: Call): Promise<Decision> {
    const { resource, limits, cost } = call;
    if (resource.breaker !== undefined) {
      const pass = resource.breaker.tryPass();
      if (!pass.allowed) return breakerDecision(limits, pass.retryAfterMs);
    }
    if (resource.fleetBreaker !== undefined) {
      const pass = await this.#outcomes?.of(resource)?.admit();
      if (pass?.allowed === false) return breakerDecision(limits, pass.retryAfterMs);
    }
    const coreShare = call.tier.holdback;
    const tenantLimits = this.#tenantLimits(call);
    let decision: Decision;
    const charges: Charge[] = [];
    if (tenantLimits === undefined) {
      decision = await this.#consumeResource(call, coreShare, charges);
    } else {
      // The tenant's quota first, then the resource's limits; a denial by the resource gives
      // the tenant's permits back, so the pair behaves all-or-nothing.
      const parts = { resource: resource.name, key: '', tenant: call.tenant! };
      const key = storageKey(parts);
      const t = await this.#consumeKey(resource, key, parts, tenantLimits, cost, coreShare);
      if (!t.allowed) {
        decision = { ...t, limitId: `tenant:${t.limitId}` };
      } else {
        charges.push({ key, parts, limits: tenantLimits, permitId: t.permitId });
        decision = await this.#consumeResource(call, coreShare, charges);
        if (!decision.allowed) await this.#giveBack(charges.splice(0), cost);
      }
    }
    if (call.tier.boost && !decision.allowed && decision.reason === 'rate_limited') {
      decision = await this.#boost(call, decision, charges);
    }
    if (resource.shadow && !decision.allowed) {
      // Shadow mode: decide and count, never block.
      const shadow = { reason: decision.reason, retryAfterMs: decision.retryAfterMs };
      decision = { ...decision, allowed: true, shadow, reason: 'allowed', retryAfterMs: 0 };
    }
    if (decision.allowed && charges.length > 0) this.#charges.set(decision, charges);
    return decision;
  }

  /**
   * A denied call of a tier that may draw on the boost pool: one consume on the pool's own key.
   * Admitted: the call is charged to the pool alone (`charges` names it) and marked `boosted`.
   * Denied: the resource's denial, retrying when either the limits or the pool have room again.
   */
  async #boost(call: Call, denied: Decision, charges: Charge[]): Promise<Decision> {
    const limits = call.resource.boost!.limits;
    const parts = { resource: call.resource.name, key: call.sub, pool: 'boost' as const };
    const key = storageKey(parts);
    const d = await this.#consumeKey(call.resource, key, parts, limits, call.cost, 0);
    if (d.allowed) {
      charges.push({ key, parts, limits, permitId: undefined });
      return { ...d, boosted: true };
    }
    return d.reason === 'rate_limited' ? { ...denied, retryAfterMs: Math.min(denied.retryAfterMs, d.retryAfterMs) } : denied;
  }

  /** The resource's own limits, on its key or spread over its sub-keys. */
  async #consumeResource(
    { resource, sub, key, parts, limits, cost }: Call,
    coreShare: number,
    charges: Charge[],
  ): Promise<Decision> {
    if (resource.split === 1) {
      const d = await this.#consumeKey(resource, key, parts, limits, cost, coreShare);
      if (d.allowed) charges.push({ key, parts, limits, permitId: d.permitId });
      return d;
    }
    // A split key: start at a random sub-key and move on while they deny.
    const start = Math.floor(this.#random() * resource.split);
    let best: Decision | undefined;
    for (let j = 0; j < resource.split; j++) {
      const i = (start + j) % resource.split;
      const partParts = { resource: resource.name, key: sub, part: i };
      const part = storageKey(partParts);
      const d = await this.#consumeKey(resource, part, partParts, resource.splitLimits[i]!, cost, coreShare);
      const whole = limits.find((l) => l.id === d.limitId)?.limit ?? d.limit;
      if (d.allowed) {
        charges.push({ key: part, parts: partParts, limits: resource.splitLimits[i]!, permitId: undefined });
        return { ...d, limit: whole };
      }
      if (best === undefined || d.retryAfterMs < best.retryAfterMs) best = { ...d, limit: whole };
    }
    return best!;
  }

  /**
   * One storage key: the local pre-filter or lease, then the store (or its fallback). Not async:
   * every decision through the store passes here, and one reaction costs less than a frame.
   */
  #consumeKey(
    resource: CompiledResource,
    key: string,
    parts: StorageKeyParts,
    limits: readonly CompiledLimit[],
    cost: number,
    coreShare: number,
  ): Promise<Decision> {
    // Normal and core traffic see different limits when a core share is kept: separate entries.
    const entry = filterKey(key, coreShare);
    // An empty pre-filter (the usual state) has nothing to say: skip the lookup and the clock.
    const prefilter = resource.prefilter ? this.#prefilter : undefined;
    if (prefilter !== undefined && prefilter.size > 0) {
      const local = prefilter.check(entry, cost, this.#clock.now());
      if (local !== undefined) return Promise.resolve(local);
    }
    const lease = resource.lease ?? (resource.hotKeys?.lease === undefined ? undefined : this.#hotLease(resource, parts));
    if (lease !== undefined) return this.#leases.take(key, parts, limits, cost, lease, resource.onStoreFailure);
    const permitId = hasConcurrency(limits) ? randomUUID() : '';
    const request = { key, parts, limits, cost, permitId, coreShare };
    return this.#failover.consume(request, resource.onStoreFailure).then((result) => {
      let decision = combineStatuses(result.statuses, permitId === '' ? undefined : permitId);
      if (result.fallback === true) decision = fallbackDecision(decision, result.unavailable === true);
      // Only global decisions teach the pre-filter (a fallback's denials reflect a local share);
      // an admission only has something to unlearn when the pre-filter holds keys.
      if (prefilter !== undefined && result.fallback !== true && (!decision.allowed || prefilter.size > 0)) {
        prefilter.learn(entry, cost, this.#clock.now(), decision);
      }
      return decision;
    });
  }

  /** Returns permits granted to a caller that is no longer there (aborted while in flight). */
  async #giveBack(charges: readonly Charge[], cost: number): Promise<void> {
    for (const { key, parts, limits, permitId } of charges) {
      if (cost > 0) await this.#failover.adjust({ key, parts, limits, delta: -cost });
      if (permitId !== undefined) await this.#failover.release({ key, limits, permitId });
    }
  }

  /** How a waiting `acquire` call asks the store and answers its caller (see {@link Waiting}). */
  #waitCall(call: Call): WaitCall {
    const resource = call.resource.name;
    return {
      key: call.key,
      kind: waitKind(call),
      cost: call.cost,
      decide: (cost) => this.#consume({ ...call, cost }),
      giveBack: (d, cost) => this.#giveBack(this.#charges.get(d) ?? [], cost),
      answer: (d, waitedMs) => {
        if (waitedMs === undefined) return this.#observe(resource, 'acquire', d, call.tier);
        this.#observer?.waited?.({ resource, waitedMs, outcome: d.allowed ? 'granted' : 'timeout' });
        return this.#observe(resource, 'acquire', { ...d, waitedMs }, call.tier);
      },
      failed: (e, waitedMs) => {
        const outcome = e instanceof SluiceError && e.code === ErrorCodes.ABORTED ? 'aborted' : 'error';
        this.#observer?.waited?.({ resource, waitedMs, outcome });
      },
    };
  }

  /** The quota of the call's tenant (its own, or the `*` default); none without a tenant. */
  #tenantLimits(call: Call): readonly CompiledLimit[] | undefined {
    const { tenant, resource } = call;
    return tenant === undefined ? undefined : (resource.tenants.get(tenant) ?? resource.tenants.get('*'));
  }

  /** Tells the observer; `tier` is named only on resources that declare tiers (bounded label values). */
  #observe(resource: string, mode: DecisionMode, decision: Decision, tier?: CompiledTier): Decision {
    const label = tier?.label;
    this.#observer?.decided?.(label === undefined ? { resource, mode, decision } : { resource, mode, decision, tier: label });
    return decision;
  }
}
