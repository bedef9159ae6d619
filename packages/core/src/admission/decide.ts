/**
 * The limiter's one decision path: every verb that admits permits (`try`, `acquire`, and `book`
 * where nothing can be booked) funnels into {@link Decider.decide} or {@link Decider.consume},
 * which take the breakers, tenant quota, the resource's keys (local pre-filter or lease, then the
 * store or its fallback), the boost pool and shadow mode in one order.
 */
import { randomUUID } from 'node:crypto';
import type { OutcomeRecorders } from '../breakers/outcome-recorders.js';
import { fallbackDecision } from '../failover/failover-state.js';
import type { Failover, FailoverResult } from '../failover/failover.js';
import type { HotKeyTrackers } from '../local/hot-keys.js';
import type { CompiledLeaseSettings, LeaseCache } from '../local/lease-cache.js';
import { filterKey, type Prefilter } from '../local/prefilter.js';
import type { Clock } from '../shared/clock.js';
import { combineStatuses, type Decision } from '../shared/decision.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import type { DecisionMode, LimiterObserver } from '../shared/observer.js';
import { hasConcurrency, type CompiledLimit } from '../shared/policy.js';
import { storageKey, type StorageKeyParts } from '../store/storage-key.js';
import { breakerDecision, waitKind, type Call, type Charge } from './limiter-calls.js';
import type { CompiledResource } from './resource.js';
import type { CompiledTier } from './tiers.js';
import type { WaitCall } from './wait-queue.js';

/** What a {@link Decider} decides with: the limiter's store guard, local state and hooks. */
export interface DeciderParts {
  readonly failover: Failover;
  readonly clock: Clock;
  readonly random: () => number;
  readonly prefilter: Prefilter;
  readonly leases: LeaseCache;
  readonly hot: HotKeyTrackers;
  readonly outcomes: OutcomeRecorders;
  readonly observer: LimiterObserver | undefined;
}

/** Decides validated calls (see the module's comment); owned by one {@link Limiter}. */
export class Decider {
  readonly #failover: Failover;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #prefilter: Prefilter;
  readonly #leases: LeaseCache;
  readonly #hot: HotKeyTrackers;
  readonly #outcomes: OutcomeRecorders;
  readonly #observer: LimiterObserver | undefined;
  /** Decisions are timed for the observer (see {@link start}). */
  readonly #timed: boolean;
  /** Where an admitted decision charged its permits, to give them back if nobody takes them. */
  readonly #charges = new WeakMap<Decision, Charge[]>();

  constructor(parts: DeciderParts) {
    this.#failover = parts.failover;
    this.#clock = parts.clock;
    this.#random = parts.random;
    this.#prefilter = parts.prefilter;
    this.#leases = parts.leases;
    this.#hot = parts.hot;
    this.#outcomes = parts.outcomes;
    this.#observer = parts.observer;
    this.#timed = parts.observer?.decided !== undefined;
  }

  /**
   * When a call started, for {@link observe} to time it: the clock's reading while the observer
   * times decisions, else 0 (no clock read).
   */
  start(): number {
    return this.#timed ? this.#clock.now() : 0;
  }

  /**
   * `try`'s decision. The common call (the resource's `paths.direct`, no tenant quota) goes
   * straight to its key: {@link consume} would decide it the same way, with bookkeeping only
   * `acquire` needs. Answered at once (no promise) when the store decides synchronously.
   */
  decide(call: Call): Decision | Promise<Decision> {
    const r = call.resource;
    return r.paths.direct && this.tenantLimits(call) === undefined
      ? this.#consumeKey(r, call.key, call.parts, call.limits, call.cost, call.tier.coreShare)
      : this.consume(call);
  }

  /** One decision: breaker, tenant quota, the resource's limits, boost pool, shadow mode. */
  async consume(call: Call): Promise<Decision> {
    const { resource, limits, cost } = call;
    if (resource.breaker !== undefined) {
      const pass = resource.breaker.tryPass();
      if (!pass.allowed) return breakerDecision(limits, pass.retryAfterMs);
    }
    if (resource.fleetBreaker !== undefined) {
      const pass = await this.#outcomes.of(resource)?.admit();
      if (pass?.allowed === false) return breakerDecision(limits, pass.retryAfterMs);
    }
    const coreShare = call.tier.coreShare;
    const tenantLimits = this.tenantLimits(call);
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
        if (!decision.allowed) await this.giveBack(charges.splice(0), cost);
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
   * every decision through the store passes here; a store that decides synchronously (the
   * `MemoryStore`) is answered without a promise.
   */
  #consumeKey(
    resource: CompiledResource,
    key: string,
    parts: StorageKeyParts,
    limits: readonly CompiledLimit[],
    cost: number,
    coreShare: number,
  ): Decision | Promise<Decision> {
    // An empty pre-filter (the usual state) has nothing to say: skip the lookup and the clock.
    const prefilter = resource.prefilter ? this.#prefilter : undefined;
    if (prefilter !== undefined && prefilter.size > 0) {
      // Normal and core traffic see different limits when a core share is kept: separate entries.
      const local = prefilter.check(filterKey(key, coreShare), cost, this.#clock.now());
      if (local !== undefined) return local;
    }
    const lease = resource.lease ?? (resource.hotKeys?.lease === undefined ? undefined : this.hotLease(resource, parts));
    if (lease !== undefined) return this.#leases.take(key, parts, limits, cost, lease, resource.onStoreFailure);
    // The resource's own limits were looked at once, when it was compiled.
    const concurrent = limits === resource.limits ? resource.paths.concurrency : hasConcurrency(limits);
    const permitId = concurrent ? randomUUID() : '';
    const request = { key, parts, limits, cost, permitId, coreShare };
    const result = this.#failover.consumeNow(request, resource.onStoreFailure);
    return result instanceof Promise
      ? result.then((r) => this.#decided(r, prefilter, key, coreShare, cost, permitId))
      : this.#decided(result, prefilter, key, coreShare, cost, permitId);
  }

  /** The decision of a store's (or its fallback's) result on one storage key. */
  #decided(
    result: FailoverResult,
    prefilter: Prefilter | undefined,
    key: string,
    coreShare: number,
    cost: number,
    permitId: string,
  ): Decision {
    let decision = combineStatuses(result.statuses, permitId === '' ? undefined : permitId);
    if (result.fallback === true) decision = fallbackDecision(decision, result.unavailable === true);
    // Only global decisions teach the pre-filter (a fallback's denials reflect a local share);
    // an admission only has something to unlearn when the pre-filter holds keys.
    if (prefilter !== undefined && result.fallback !== true && (!decision.allowed || prefilter.size > 0)) {
      prefilter.learn(filterKey(key, coreShare), cost, this.#clock.now(), decision);
    }
    return decision;
  }

  /** Where an admitted decision of {@link consume} charged its permits (none if it charged none). */
  chargesOf(decision: Decision): readonly Charge[] {
    return this.#charges.get(decision) ?? [];
  }

  /** Returns permits granted to a caller that is no longer there (aborted while in flight). */
  async giveBack(charges: readonly Charge[], cost: number): Promise<void> {
    for (const { key, parts, limits, permitId } of charges) {
      if (cost > 0) await this.#failover.adjust({ key, parts, limits, delta: -cost });
      if (permitId !== undefined) await this.#failover.release({ key, limits, permitId });
    }
  }

  /** The quota of the call's tenant (its own, or the `*` default); none without a tenant. */
  tenantLimits(call: Call): readonly CompiledLimit[] | undefined {
    const { tenant, resource } = call;
    return tenant === undefined ? undefined : (resource.tenants.get(tenant) ?? resource.tenants.get('*'));
  }

  /** The lease settings a call on a storage key is served with while its key is hot, if any. */
  hotLease(resource: CompiledResource, parts: StorageKeyParts): CompiledLeaseSettings | undefined {
    const lease = resource.hotKeys?.lease;
    // Tenant quotas, split sub-keys and the boost pool are keys of their own, never leased.
    if (lease === undefined || parts.tenant !== undefined || parts.part !== undefined || parts.pool !== undefined) {
      return undefined;
    }
    return this.#hot.mitigated(resource.name, parts.key) ? lease : undefined;
  }

  /** Counts a call for its resource's hot keys (calls of cost 0 ask nothing of a key). */
  noteHot(call: Call): void {
    if (call.cost === 0 || call.resource.hotKeys === undefined) return;
    this.#hot.record(call.resource.name, call.sub);
  }

  /**
   * How a waiting `acquire` call asks the store and answers its caller (see {@link Waiting});
   * `startedAt` is when the call started (see {@link start}).
   */
  waitCall(call: Call, startedAt: number): WaitCall {
    const resource = call.resource.name;
    return {
      key: call.key,
      kind: waitKind(call),
      cost: call.cost,
      decide: (cost) => this.consume({ ...call, cost }),
      giveBack: (d, cost) => this.giveBack(this.chargesOf(d), cost),
      answer: (d, waitedMs) => {
        if (waitedMs === undefined) return this.observe(resource, 'acquire', d, call.tier, startedAt);
        this.#observer?.waited?.({ resource, waitedMs, outcome: d.allowed ? 'granted' : 'timeout' });
        return this.observe(resource, 'acquire', { ...d, waitedMs }, call.tier, startedAt);
      },
      failed: (e, waitedMs) => {
        const outcome = e instanceof SluiceError && e.code === ErrorCodes.ABORTED ? 'aborted' : 'error';
        this.#observer?.waited?.({ resource, waitedMs, outcome });
      },
    };
  }

  /**
   * Tells the observer of a decision of a call started at `startedAt` (see {@link start}); `tier`
   * is named only on resources that declare tiers (bounded label values).
   */
  observe(resource: string, mode: DecisionMode, decision: Decision, tier: CompiledTier | undefined, startedAt: number): Decision {
    // Counted for the failover's log lines and the stores' health ("decisions by the fallback").
    if (decision.source === 'fallback') this.#failover.health.fallbackDecided();
    if (!this.#timed) return decision;
    const durationMs = this.#clock.now() - startedAt;
    const label = tier?.label;
    this.#observer?.decided?.(
      label === undefined ? { resource, mode, decision, durationMs } : { resource, mode, decision, tier: label, durationMs },
    );
    return decision;
  }
}
