/**
 * What each verb of the limiter may do with a resource, decided once when the resource is
 * compiled: the verbs read these facts instead of deriving them from the resource's options on
 * every call (one place says which options turn which path off).
 */
import type { CircuitBreaker, CompiledFleetBreaker } from '../breakers/circuit-breaker.js';
import type { CompiledHotKeyOptions } from '../local/hot-keys.js';
import type { CompiledLeaseSettings } from '../local/lease-cache.js';
import { hasConcurrency, maxCost, type CompiledLimit } from '../shared/policy.js';
import type { CompiledBoost } from './tiers.js';

/** Where `trySync` may find an answer without the store. */
export type SyncSource =
  /** Every key is leased: the key's lease (a tenant's call draws on two, so it is left to `try`). */
  | 'lease'
  /** Hot keys are leased: a hot key's lease, else the pre-filter if the resource keeps one. */
  | 'hot-lease'
  /** The pre-filter: keys known to be over their limit. */
  | 'prefilter'
  /** Nothing: only the store can tell. */
  | 'none';

/** The facts of a {@link CompiledResource} the limiter's verbs decide by (see `compileResource`). */
export interface ResourcePaths {
  /** The largest cost of one call: what its strictest limit holds (a split key's: one share's). */
  readonly maxCost: number;
  /**
   * `try` may go straight to the key's store call: one key, no breaker, shadow mode or boost
   * pool. A call with a tenant quota still takes the full path.
   */
  readonly direct: boolean;
  /** What `trySync` may serve. */
  readonly sync: SyncSource;
  /** `trySync` may serve a call without a tenant from its lease, found by the caller's key. */
  readonly leasedByCaller: boolean;
  /**
   * Why `reserve` refuses the resource (batches taken at once for a client's lease), undefined
   * when it may: a batch served locally would neither hold concurrency permits, spread over
   * split keys, keep the tiers' shares nor reach the boost pool.
   */
  readonly reserveRefusal: string | undefined;
  /**
   * `book` may book on the resource's keys: rate limits on one key, decided by the store alone
   * (no shadow mode, lease or boost pool). A call with a tenant or of a tier that holds a share
   * back is still decided as `try`.
   */
  readonly bookable: boolean;
  /** One of the resource's own limits is a concurrency limit: its calls take permits to hold. */
  readonly concurrency: boolean;
}

/** What {@link resourcePaths} reads of a resource being compiled. */
export interface PathInputs {
  readonly limits: readonly CompiledLimit[];
  readonly splitLimits: readonly (readonly CompiledLimit[])[];
  readonly split: number;
  readonly prefilter: boolean;
  readonly breaker: CircuitBreaker | undefined;
  readonly fleetBreaker?: CompiledFleetBreaker | undefined;
  readonly lease: CompiledLeaseSettings | undefined;
  readonly shadow: boolean;
  readonly coreShare: number;
  readonly boost: CompiledBoost | undefined;
  readonly hotKeys?: CompiledHotKeyOptions | undefined;
}

/** The paths of a resource, from its compiled options. */
export function resourcePaths(r: PathInputs): ResourcePaths {
  const concurrency = hasConcurrency(r.limits);
  const one = r.split === 1;
  return Object.freeze({
    maxCost: maxCost(one ? r.limits : r.splitLimits[r.split - 1]!),
    direct: r.breaker === undefined && r.fleetBreaker === undefined && one && !r.shadow && r.boost === undefined,
    sync: r.lease !== undefined ? 'lease' : r.hotKeys?.lease !== undefined ? 'hot-lease' : r.prefilter ? 'prefilter' : 'none',
    leasedByCaller: r.lease !== undefined && one,
    reserveRefusal: concurrency
      ? 'concurrency limits cannot be reserved'
      : !one
        ? 'split resources cannot be reserved'
        : r.coreShare > 0
          ? 'resources with a core share cannot be reserved'
          : r.boost !== undefined
            ? 'resources with a boost pool cannot be reserved'
            : undefined,
    bookable: one && !r.shadow && r.lease === undefined && r.boost === undefined && !concurrency,
    concurrency,
  });
}
