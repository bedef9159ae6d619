import { ErrorCodes, SluiceError, type Decision, type Limiter, type TryOptions } from '@sluice/core';

type Priority = NonNullable<TryOptions['priority']>;
import type { LiveRules } from './live-rules.js';

/** One check: the limiter's `try`. */
export interface CheckItem {
  readonly resource: string;
  readonly key?: string;
  readonly cost?: number;
  readonly tenant?: string;
  readonly priority?: Priority;
}

/** One acquire: waits up to `maxWaitMs` (bounded by the server). */
export interface AcquireItem extends CheckItem {
  readonly maxWaitMs?: number;
}

/** Frees a concurrency permit. */
export interface ReleaseItem {
  readonly resource: string;
  readonly key?: string;
  readonly leaseId: string;
}

/** Charges `delta` more permits (negative: a refund). */
export interface AdjustItem {
  readonly resource: string;
  readonly key?: string;
  readonly delta: number;
}

/**
 * The operations of the HTTP API over the limiter. Only resources of the active rules are
 * served; everything else about an item is the limiter's to validate and decide.
 */
export class RateLimitService {
  readonly #limiter: Limiter;
  readonly #rules: LiveRules;

  constructor(limiter: Limiter, rules: LiveRules) {
    this.#limiter = limiter;
    this.#rules = rules;
  }

  async check(item: CheckItem): Promise<Decision> {
    this.#active(item.resource);
    return this.#limiter.try(item.resource, opts(item));
  }

  async acquire(item: AcquireItem, signal: AbortSignal): Promise<Decision> {
    this.#active(item.resource);
    return this.#limiter.acquire(item.resource, {
      ...opts(item),
      signal,
      ...(item.maxWaitMs === undefined ? {} : { maxWaitMs: item.maxWaitMs }),
    });
  }

  async release(item: ReleaseItem): Promise<{ released: boolean }> {
    this.#active(item.resource);
    return { released: await this.#limiter.release(item.resource, { key: item.key, leaseId: item.leaseId }) };
  }

  async adjust(item: AdjustItem): Promise<{ adjusted: true }> {
    this.#active(item.resource);
    await this.#limiter.adjust(item.resource, { key: item.key, delta: item.delta });
    return { adjusted: true };
  }

  #active(resource: string): void {
    if (!this.#rules.has(resource)) {
      throw new SluiceError(ErrorCodes.UNKNOWN_RESOURCE, `no limits configured for resource ${JSON.stringify(resource)}`, {
        field: 'resource',
      });
    }
  }
}

function opts(item: CheckItem) {
  return {
    ...(item.key === undefined ? {} : { key: item.key }),
    ...(item.cost === undefined ? {} : { cost: item.cost }),
    ...(item.tenant === undefined ? {} : { tenant: item.tenant }),
    ...(item.priority === undefined ? {} : { priority: item.priority }),
  };
}
