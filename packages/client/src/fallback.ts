import { randomUUID } from 'node:crypto';
import {
  Limiter,
  combineStatuses,
  type Clock,
  type Decision,
  type LimitPolicy,
  type PeerCount,
  type ResourceConfig,
} from '@sluice/core';
import type { RulesView, ViewResource } from './wire.js';

/** Lease ids of permits taken from the fallback start with this, so they are freed there. */
export const LOCAL_LEASE_PREFIX = 'local:';

/** A call as the fallback decides it. */
export interface FallbackCall {
  readonly resource: string;
  readonly view: ViewResource;
  readonly key: string;
  readonly cost: number;
}

/** A limit's fair share among `peers` clients (at least 1 permit). */
export function scale(p: LimitPolicy, peers: number): LimitPolicy {
  if (peers <= 1) return p;
  return {
    ...p,
    limit: Math.max(1, Math.floor(p.limit / peers)),
    ...(p.burst === undefined ? {} : { burst: Math.max(1, Math.floor(p.burst / peers)) }),
  };
}

/**
 * The store-failure policies of the remote client while the service is away, as the core
 * failover applies them to a store: `local` decides on an in-memory {@link Limiter} holding a fair
 * share of every limit, `open` admits, `closed` denies with `store_unavailable`. Decisions have
 * source `fallback`.
 */
export class PolicyFallback {
  readonly #limiter: Limiter;
  #peers = 0;
  #known = false;
  #version = -1;

  constructor(
    clock: Clock,
    maxKeyLength: number,
    maxWaitMs: number,
    private readonly maxProbeIntervalMs: number,
  ) {
    this.#limiter = new Limiter({ resources: {}, clock, maxKeyLength, maxWaitMs });
  }

  /** Keeps the fair shares in step with the rules and the number of clients. */
  sync(view: RulesView | undefined, peers: PeerCount): void {
    this.#known = peers.known !== false;
    if (view === undefined || (peers.count === this.#peers && this.#version === view.version)) return;
    const resources: Record<string, ResourceConfig> = {};
    for (const [name, r] of view.resources) {
      resources[name] = { limits: r.policies.map((p) => scale(p, peers.count)), prefilter: false };
    }
    this.#limiter.setResources(resources);
    this.#peers = peers.count;
    this.#version = view.version;
  }

  /** Decides `call` by its resource's policy. */
  async decide(call: FallbackCall, mode: 'try' | 'acquire', maxWaitMs = 0, signal?: AbortSignal): Promise<Decision> {
    if (call.view.compiled.onStoreFailure !== 'local') return this.byPolicy(call.view);
    // No count of clients yet: no share is known to be safe, so deny as `closed` does.
    if (!this.#known) return this.byPolicy(call.view, 'closed');
    const opts = { key: call.key, cost: call.cost };
    const d =
      mode === 'try'
        ? await this.#limiter.try(call.resource, opts)
        : await this.#limiter.acquire(call.resource, { ...opts, maxWaitMs, ...(signal ? { signal } : {}) });
    return { ...d, source: 'fallback', ...(d.leaseId === undefined ? {} : { leaseId: `${LOCAL_LEASE_PREFIX}${d.leaseId}` }) };
  }

  /** `open` admits, `closed` denies (`store_unavailable`), as the core failover does. */
  byPolicy(view: ViewResource, policy = view.compiled.onStoreFailure): Decision {
    const allowed = policy === 'open';
    const retry = allowed ? 0 : this.maxProbeIntervalMs;
    const statuses = view.compiled.limits.map((l) => ({
      id: l.id,
      algorithm: l.algorithm,
      allowed,
      limit: l.limit,
      remaining: allowed ? l.limit : 0,
      retryAfterMs: retry,
      resetAfterMs: retry,
    }));
    const concurrent = view.compiled.limits.some((l) => l.algorithm === 'concurrency');
    const d = combineStatuses(statuses, concurrent ? `${LOCAL_LEASE_PREFIX}${randomUUID()}` : undefined);
    return allowed ? { ...d, source: 'fallback' } : { ...d, reason: 'store_unavailable', source: 'fallback' };
  }

  /** Frees or renews a permit taken from the fallback (its id without the prefix). */
  lease(op: 'release' | 'renew', resource: string, lease: { key: string; leaseId: string; ttlMs?: number }): Promise<boolean> {
    return op === 'release' ? this.#limiter.release(resource, lease) : this.#limiter.renew(resource, lease);
  }

  adjust(resource: string, key: string, delta: number): Promise<void> {
    return this.#limiter.adjust(resource, { key, delta });
  }

  close(): Promise<void> {
    return this.#limiter.close();
  }
}
