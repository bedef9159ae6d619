import type { CircuitBreaker } from '../breakers/circuit-breaker.js';
import type { FleetBreakerPolicy } from '../breakers/fleet-breaker-state.js';
import type { OutcomeRecorderStats } from '../breakers/outcome-recorder.js';
import type { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import type { OutcomeReport, OutcomeTotals, TallyRead } from '../breakers/outcomes.js';
import type { Failover, StoreHealth } from '../failover/failover.js';
import type { HotKeyReport, HotKeyTrackers } from '../local/hot-keys.js';
import type { LeaseCache } from '../local/lease-cache.js';
import type { Prefilter } from '../local/prefilter.js';
import type { Clock } from '../shared/clock.js';
import { withReason, type Decision } from '../shared/decision.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { intOption } from '../shared/options.js';
import { callKey, checkCostAtMost, type CompiledLimit } from '../shared/policy.js';
import type { LimitStore } from '../store/store.js';
import type { Bookings } from './book.js';
import type { Charges } from './charges.js';
import type { Decider } from './decide.js';
import { checkClient, throwIfAborted, waitKind, type Call } from './limiter-calls.js';
import type { LimiterOptions } from './limiter-options.js';
import { MAX_WAIT_BOUND_MS, limiterParts } from './limiter-parts.js';
import type {
  AcquireOptions,
  AdjustOptions,
  BookOptions,
  CancelOptions,
  PermitOptions,
  RateLimiter,
  TryOptions,
} from './rate-limiter.js';
import type { ResourceTable } from './resource-table.js';
import type { CompiledResource, ResourceConfig } from './resource.js';
import { tierOf, type CompiledTier } from './tiers.js';
import type { Waiting } from './wait-queue.js';

export type { LimiterOptions } from './limiter-options.js';

/** The options of a call that gives none (shared, so such a call allocates nothing for them). */
const NO_OPTIONS: TryOptions = Object.freeze({});

/**
 * Decides whether calls to a downstream resource may proceed. `try` answers at once; `acquire`
 * waits (bounded, cancellable, FIFO per key and client, clients in turn); `release`/`renew`
 * manage concurrency permits; `adjust` charges the real cost after the fact.
 *
 * The verbs validate a call against its compiled resource ({@link ResourceTable}), read what the
 * resource allows them from its `paths` (decided once, when it was compiled), and funnel into one
 * decision path ({@link Decider}).
 *
 * @example
 * const limiter = new Limiter({ resources: { 'api:payments': { algorithm: 'gcra', limit: 100 } } });
 * const d = await limiter.acquire('api:payments', { key: tenant, maxWaitMs: 2000 });
 * if (!d.allowed) throw new Error(`busy, retry in ${d.retryAfterMs} ms`);
 */
export class Limiter implements RateLimiter {
  readonly #clock: Clock;
  readonly #maxKeyLength: number;
  readonly #maxWaitMs: number;
  readonly #store: LimitStore;
  readonly #ownsStore: boolean;
  readonly #failover: Failover;
  readonly #resources: ResourceTable;
  /** {@link ResourceTable.byName}, for `trySync`. */
  readonly #byName: ReadonlyMap<string, CompiledResource>;
  readonly #prefilter: Prefilter;
  readonly #leases: LeaseCache;
  /** Hot-key trackers of the resources that configure `hotKeys`. */
  readonly #hot: HotKeyTrackers;
  readonly #waiting: Waiting;
  /** Outcomes on their way to the store, and fleet breakers' states. */
  readonly #outcomes: OutcomeRecorders;
  /** The one decision path the verbs funnel into. */
  readonly #decider: Decider;
  readonly #bookings: Bookings;
  readonly #charges: Charges;
  #closed = false;

  constructor(options: LimiterOptions) {
    const parts = limiterParts(options);
    this.#clock = parts.clock;
    this.#maxKeyLength = parts.maxKeyLength;
    this.#maxWaitMs = parts.maxWaitMs;
    this.#store = parts.store;
    this.#ownsStore = parts.ownsStore;
    this.#failover = parts.failover;
    this.#resources = parts.resources;
    this.#byName = parts.resources.byName;
    this.#prefilter = parts.prefilter;
    this.#leases = parts.leases;
    this.#hot = parts.hot;
    this.#waiting = parts.waiting;
    this.#outcomes = parts.outcomes;
    this.#decider = parts.decider;
    this.#bookings = parts.bookings;
    this.#charges = parts.charges;
  }

  /**
   * Sets or replaces a resource's limits (a rule update). Existing state carries over: usage
   * already counted is judged against the new limits instead of being reset.
   */
  setLimits(resource: string, config: ResourceConfig): void {
    this.#resources.set(resource, config);
  }

  /**
   * Replaces every resource at once (a new rule version): resources not in `resources` are
   * removed, the others set as by {@link setLimits}. Validates everything before changing
   * anything, so an invalid set leaves the limiter as it was.
   */
  setResources(resources: Record<string, ResourceConfig>): void {
    this.#resources.setAll(resources);
  }

  /**
   * Removes a resource's limits: calls to it are refused from then on. What its keys counted
   * stays in the store under the resource's name, so limits set again under the same name
   * carry on from that state. False when the resource had no limits.
   */
  removeLimits(resource: string): boolean {
    return this.#resources.remove(resource);
  }

  /**
   * The heaviest keys of every resource that tracks them (`ResourceOptions.hotKeys`), or of
   * `resource` alone, as this process counted them, by resource name.
   */
  hotKeys(resource?: string): HotKeyReport[] {
    return this.#hot.report(resource);
  }

  /** True if the resource has limits configured. */
  has(resource: string): boolean {
    return this.#resources.has(resource);
  }

  /** Names of the configured resources. */
  resources(): string[] {
    return this.#resources.names();
  }

  /** The compiled limits of a resource. Throws `SLUICE_ERR_UNKNOWN_RESOURCE` if none. */
  limitsOf(resource: string): readonly CompiledLimit[] {
    return this.#resources.get(resource).limits;
  }

  /** The circuit breaker of a resource, if it has one. */
  breakerOf(resource: string): CircuitBreaker | undefined {
    return this.#resources.get(resource).breaker;
  }

  /**
   * Reports how an admitted call to the resource's downstream went, for its circuit breaker
   * ({@link call} does this for you).
   */
  record(resource: string, outcome: { success: boolean; durationMs: number }): void {
    const r = this.#resources.get(resource);
    r.breaker?.record(outcome.success, outcome.durationMs);
    this.#outcomes.of(r)?.record(outcome.success, outcome.durationMs);
  }

  /**
   * Reports the outcome of `count` like calls to the resource's downstream (the outcome API of
   * the service, the Temporal gate): judged by its breaker, tallied in the store (with a fleet
   * breaker or `tallyOutcomes`), under `cohort` as well when one is named.
   */
  reportOutcome(report: OutcomeReport, cohort?: string): void {
    const r = this.#resources.get(report.resource);
    const count = report.count ?? 1;
    if (r.breaker !== undefined) for (let i = 0; i < Math.min(count, 1000); i++) r.breaker.record(report.ok, report.durationMs);
    this.#outcomes.of(r)?.record(report.ok, report.durationMs, cohort, count);
  }

  /**
   * The fleet-wide breaker of a resource as this process last heard of it, with its reporting
   * counters; undefined if the resource has none (or made no call yet).
   */
  fleetBreakerOf(resource: string): (OutcomeRecorderStats & { policy: FleetBreakerPolicy }) | undefined {
    const r = this.#resources.get(resource);
    if (r.fleetBreaker === undefined) return undefined;
    const stats = this.#outcomes.stats(resource);
    return stats === undefined ? undefined : { ...stats, policy: r.fleetBreaker.policy };
  }

  /**
   * The fleet-wide breaker of a resource as the store has it now (one report, without outcomes
   * unless some were pending); undefined if the resource has none.
   */
  async readFleetBreaker(resource: string): Promise<(OutcomeRecorderStats & { policy: FleetBreakerPolicy }) | undefined> {
    const r = this.#resources.get(resource);
    const recorder = r.fleetBreaker === undefined ? undefined : this.#outcomes.of(r);
    if (recorder === undefined) return undefined;
    await recorder.flush();
    return this.fleetBreakerOf(resource);
  }

  /** Outcome tallies of a resource over the last `windowMs`, from the store (see `OutcomeSource`). */
  outcomeTotals(resource: string, windowMs: number, cohort?: string, read?: TallyRead): Promise<OutcomeTotals> {
    return this.#outcomes.totals(resource, windowMs, cohort, read);
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

  /**
   * Decides without I/O when this process already knows the answer (a leased permit, or a key
   * known to be over its limit); undefined means only the store can tell (use {@link try}).
   * The hot path of gateways: no promise, no allocation beyond the decision.
   */
  trySync(resource: string, options: TryOptions = NO_OPTIONS): Decision | undefined {
    const startedAt = this.#decider.start();
    const leased = this.#byName.get(resource);
    if (leased?.paths.leasedByCaller === true && options.tenant === undefined && !this.#closed) {
      return this.#tryLease(leased, options, startedAt);
    }
    const call = this.#prepare(resource, options);
    const r = call.resource;
    const sync = r.paths.sync;
    if (sync === 'none') return undefined;
    if (r.breaker !== undefined && r.breaker.state === 'open') return undefined;
    if (r.fleetBreaker !== undefined && this.#outcomes.of(r)?.stateForAdmission() !== 'closed') return undefined;
    let local: Decision | undefined;
    if (sync === 'lease') {
      // A tenant's call draws on two leases (the tenant's and the resource's) all-or-nothing:
      // `try` takes them in order and gives the first back if the second denies.
      if (this.#decider.tenantLimits(call) !== undefined) return undefined;
      local = this.#leases.takeLocal(call.key, call.limits, call.cost);
    } else if (sync === 'hot-lease' && call.tenant === undefined && this.#decider.hotLease(r, call.parts) !== undefined) {
      local = this.#leases.takeLocal(call.key, call.limits, call.cost);
    } else {
      local = r.prefilter ? this.#prefilter.check(call.key, call.cost, this.#clock.now()) : undefined;
    }
    if (local === undefined) return undefined;
    // Counted only when answered here: a call left to `try` is counted there.
    this.#decider.noteHot(call);
    return this.#decider.observe(resource, 'try', local, call.tier, startedAt);
  }

  /**
   * `trySync` on a resource whose keys are leased, without a tenant: the lease is found by the
   * caller's key as given, without building its storage key. A key found there was validated when
   * its lease was taken; one that is not found is validated here, and has nothing to serve.
   */
  #tryLease(r: CompiledResource, options: TryOptions, startedAt: number): Decision | undefined {
    if (r.breaker !== undefined && r.breaker.state === 'open') return undefined;
    if (r.fleetBreaker !== undefined && this.#outcomes.of(r)?.stateForAdmission() !== 'closed') return undefined;
    const tier = tierOf(r.priority, options.priority, r.name);
    const cost = options.cost === undefined ? 1 : checkCostAtMost(options.cost, r.paths.maxCost);
    // An empty key is refused before a lease of the resource-wide key could answer it.
    const sub = options.key === '' ? callKey('') : (options.key ?? '');
    const local = this.#leases.takeLocalOf(r.name, sub, r.limits, cost);
    if (local === undefined) {
      callKey(options.key, this.#maxKeyLength);
      return undefined;
    }
    if (r.hotKeys !== undefined) this.#hot.record(r.name, sub);
    return this.#decider.observe(r.name, 'try', local, tier, startedAt);
  }

  /** Decides now, without waiting. Being limited resolves to a denied decision. */
  try(resource: string, options: TryOptions = NO_OPTIONS): Promise<Decision> {
    const startedAt = this.#decider.start();
    let decided: Decision | Promise<Decision>;
    let tier: CompiledTier;
    try {
      const call = this.#prepare(resource, options);
      this.#decider.noteHot(call);
      tier = call.tier;
      decided = this.#decider.decide(call);
      // Decided at once (the MemoryStore): the caller's promise is the only one.
      if (!(decided instanceof Promise)) return Promise.resolve(this.#decider.observe(resource, 'try', decided, tier, startedAt));
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return decided.then((d) => this.#decider.observe(resource, 'try', d, tier, startedAt));
  }

  /**
   * Waits up to `maxWaitMs` for permits. Callers on one key are served in arrival order (clients
   * in turn, see `client`) and woken paced by the retry-after of the last denial. Resolves to a denied decision with reason
   * `wait_timeout` (the wait would exceed its bound) or `queue_full`; rejects with
   * `SLUICE_ERR_ABORTED` when the signal fires.
   */
  async acquire(resource: string, options: AcquireOptions = {}): Promise<Decision> {
    const call = this.#prepare(resource, options);
    this.#decider.noteHot(call);
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
      last = await this.#decider.consume(call);
      if (last.allowed) {
        if (signal?.aborted) {
          await this.#decider.giveBack(this.#decider.chargesOf(last), cost);
          throwIfAborted(signal);
        }
        return this.#decider.observe(resource, 'acquire', last, call.tier, startedAt);
      }
      // A rate limit's retry-after is exact, so a wait that cannot fit is refused at once. A
      // concurrency limit's is only the worst case (permits may be released sooner): queue.
      if (last.reason === 'rate_limited' && last.retryAfterMs > maxWaitMs) {
        const timedOut = { ...withReason(last, 'wait_timeout', false), waitedMs: 0 };
        return this.#decider.observe(resource, 'acquire', timedOut, call.tier, startedAt);
      }
      if (last.reason !== 'rate_limited' && last.reason !== 'concurrency_limited')
        return this.#decider.observe(resource, 'acquire', last, call.tier, startedAt);
    } else {
      last = queue.last;
    }
    const wait = { startedAt, deadline: startedAt + maxWaitMs, signal, client };
    return this.#waiting.enqueue(this.#decider.waitCall(call, startedAt), wait, last);
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
    return this.#bookings.cancel(this.#prepare(resource, { key: options.key, cost: 0 }), options);
  }

  async #book(resource: string, options: BookOptions, create: boolean): Promise<Decision> {
    const startedAt = this.#decider.start();
    return this.#bookings.book(this.#prepare(resource, options), options, create, () => this.try(resource, options), startedAt);
  }

  /** Frees a concurrency permit. False if it had already expired or been released. */
  async release(resource: string, options: PermitOptions): Promise<boolean> {
    return this.#charges.release(this.#prepare(resource, { key: options.key, cost: 0 }), options);
  }

  /** Extends a concurrency permit. False if it was lost (expired): stop the work it guards. */
  async renew(resource: string, options: PermitOptions): Promise<boolean> {
    return this.#charges.renew(this.#prepare(resource, { key: options.key, cost: 0 }), options);
  }

  /**
   * Charges the real cost after the work: `delta` more permits, or a refund when negative.
   * E.g. a call admitted with cost 100 that used 350 LLM tokens adjusts by +250.
   */
  async adjust(resource: string, options: AdjustOptions): Promise<void> {
    const tenant = options.tenant === undefined ? {} : { tenant: options.tenant };
    return this.#charges.adjust(this.#prepare(resource, { key: options.key, cost: 0, ...tenant }), options);
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
    return this.#charges.reserve(this.#prepare(resource, { key: options.key, cost: 0 }), options);
  }

  /**
   * What remote clients need to know of a resource: its limits, lease settings, store-failure
   * policy, and whether {@link reserve} accepts it.
   */
  settingsOf(resource: string): Pick<CompiledResource, 'limits' | 'lease' | 'onStoreFailure'> & { reservable: boolean } {
    const { limits, lease, onStoreFailure, paths } = this.#resources.get(resource);
    return { limits, lease, onStoreFailure, reservable: paths.reserveRefusal === undefined };
  }

  /**
   * The store's health as the failover sees it: reachable or not (and since when, and why), the
   * store-failure policies in force, and the decisions the fallback made since start.
   */
  storeHealth(): StoreHealth {
    return this.#failover.status(this.#resources.defaultPolicy, this.#resources.policies());
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
    await this.#outcomes.close();
    if (this.#ownsStore) await this.#store.close();
  }

  /** A caller's options on a resource, validated (see {@link ResourceTable.call}). */
  #prepare(resource: string, options: TryOptions): Call {
    if (this.#closed) throw new SluiceError(ErrorCodes.CLOSED, 'the limiter was closed');
    return this.#resources.call(resource, options);
  }
}
