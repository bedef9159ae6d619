import { randomUUID } from 'node:crypto';
import {
  LOCAL_PERMIT_PREFIX,
  Limiter,
  answeringPolicy,
  combineStatuses,
  fairShareOf,
  fallbackDecision,
  isLocalPermit,
  policyStatuses,
  type Clock,
  type Decision,
  type FailoverMachine,
  type PeerCount,
  type ResourceConfig,
  type StoreFailurePolicy,
  cohortAt,
} from '@sluice/core';
import type { RulesView, ViewResource } from './wire.js';

/**
 * A validated key as a call's `key` option: `''` (the resource's one shared limit, as calls
 * carry it inside) is no option at all, since the limiters refuse an empty key from callers.
 */
export function keyed(key: string): { key?: string } {
  return key === '' ? {} : { key };
}

/** A call as the fallback decides it. */
export interface FallbackCall {
  readonly resource: string;
  readonly view: ViewResource;
  readonly key: string;
  readonly cost: number;
}

/**
 * The remote client's answers while the service cannot decide a call, by the core failover's
 * rules ({@link answeringPolicy}, {@link fallbackDecision}) on the client's shared
 * {@link FailoverMachine}: `local` decides on an in-memory {@link Limiter} holding a fair share
 * of every limit, `open` admits, `closed` denies with `store_unavailable`.
 */
export class PolicyFallback {
  readonly #limiter: Limiter;
  #peers = 0;
  #known = false;
  #version = '';
  /** Candidate limits of a rollout: split resource -> local name (and the split). */
  #rollout: { id: string; percent: number; names: Map<string, string> } | undefined;

  constructor(
    clock: Clock,
    maxKeyLength: number,
    maxWaitMs: number,
    private readonly health: FailoverMachine,
  ) {
    this.#limiter = new Limiter({ resources: {}, clock, maxKeyLength, maxWaitMs });
  }

  /** Keeps the fair shares in step with the rules and the number of clients. */
  sync(view: RulesView | undefined, peers: PeerCount): void {
    this.#known = peers.known !== false;
    const version = view === undefined ? '' : `${view.version}/${view.rollout?.id ?? ''}/${view.rollout?.percent ?? 0}`;
    if (view === undefined || (peers.count === this.#peers && this.#version === version)) return;
    const resources: Record<string, ResourceConfig> = {};
    for (const [name, r] of view.resources) {
      resources[name] = { limits: r.policies.map((p) => fairShareOf(p, peers.count)), prefilter: false };
    }
    // A rollout's candidate limits under local names of their own: the same split as the service's.
    this.#rollout = undefined;
    if (view.rollout !== undefined) {
      const names = new Map<string, string>();
      let i = 0;
      for (const [name, r] of view.rollout.resources) {
        const local = `rollout@${i++}`;
        resources[local] = { limits: r.policies.map((p) => fairShareOf(p, peers.count)), prefilter: false };
        names.set(name, local);
      }
      this.#rollout = { id: view.rollout.id, percent: view.rollout.percent, names };
    }
    this.#limiter.setResources(resources);
    this.#peers = peers.count;
    this.#version = version;
  }

  /** The local resource deciding `key` of `resource`: the rollout candidate's for its cohort. */
  #route(resource: string, key: string): string {
    const r = this.#rollout;
    const local = r?.names.get(resource);
    if (r === undefined || local === undefined || cohortAt(r.percent, r.id, resource, key) !== 'candidate') return resource;
    return local;
  }

  /**
   * Decides `call` by its resource's policy: while the service is away, or for a call that
   * failed before the switch (`switched` false: a `local` call is then denied, see
   * {@link answeringPolicy}). A call the client could not even queue passes `switched` true: it
   * outpaces the service and is decided on the local share.
   */
  async decide(
    call: FallbackCall,
    mode: 'try' | 'acquire',
    switched = !this.health.healthy,
    maxWaitMs = 0,
    signal?: AbortSignal,
  ): Promise<Decision> {
    const policy = answeringPolicy(call.view.compiled.onStoreFailure, !switched, this.#known);
    if (policy !== 'local') return this.byPolicy(call.view, policy);
    const opts = { ...keyed(call.key), cost: call.cost };
    const resource = this.#route(call.resource, call.key);
    const d =
      mode === 'try'
        ? await this.#limiter.try(resource, opts)
        : await this.#limiter.acquire(resource, { ...opts, maxWaitMs, ...(signal ? { signal } : {}) });
    return fallbackDecision(d, false);
  }

  /** `open` admits, `closed` denies (`store_unavailable`), as the core failover does. */
  byPolicy(view: ViewResource, policy: StoreFailurePolicy = view.compiled.onStoreFailure): Decision {
    const allowed = policy === 'open';
    const statuses = policyStatuses(view.compiled.limits, allowed, this.health.retryAfterMs);
    const concurrent = view.compiled.limits.some((l) => l.algorithm === 'concurrency');
    return fallbackDecision(combineStatuses(statuses, concurrent ? randomUUID() : undefined), !allowed);
  }

  /** Frees or renews a permit taken from the fallback (`local:` id). */
  permit(op: 'release' | 'renew', resource: string, permit: { key: string; permitId: string; ttlMs?: number }): Promise<boolean> {
    const permitId = isLocalPermit(permit.permitId) ? permit.permitId.slice(LOCAL_PERMIT_PREFIX.length) : permit.permitId;
    const local = this.#route(resource, permit.key);
    return op === 'release'
      ? this.#limiter.release(local, { ...permit, ...keyed(permit.key), permitId })
      : this.#limiter.renew(local, { ...permit, ...keyed(permit.key), permitId });
  }

  adjust(resource: string, key: string, delta: number): Promise<void> {
    return this.#limiter.adjust(this.#route(resource, key), { ...keyed(key), delta });
  }

  close(): Promise<void> {
    return this.#limiter.close();
  }
}
