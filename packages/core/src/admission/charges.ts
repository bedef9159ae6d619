/**
 * What a limiter charges outside a decision: adjustments after the work, batches reserved for
 * leases held elsewhere (`Limiter.reserve`), and concurrency permits' release and renewal.
 */
import { fallbackDecision } from '../failover/failover-state.js';
import type { Failover } from '../failover/failover.js';
import type { Prefilter } from '../local/prefilter.js';
import { combineStatuses, type Decision } from '../shared/decision.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import { intOption } from '../shared/options.js';
import { MAX_COST, checkCostAtMost, checkDelta, checkHold, checkStamp, optionsPermitId } from '../shared/policy.js';
import { storageKey } from '../store/storage-key.js';
import type { Decider } from './decide.js';
import type { Call } from './limiter-calls.js';
import type { AdjustOptions, PermitOptions } from './rate-limiter.js';
import type { Waiting } from './wait-queue.js';

/** What {@link Charges} charges with: the limiter's store guard and local state. */
export interface ChargeParts {
  readonly failover: Failover;
  readonly decider: Decider;
  readonly prefilter: Prefilter;
  readonly waiting: Waiting;
  readonly random: () => number;
  /** The longest a permit may be renewed for, in ms. */
  readonly maxTtlMs: number;
}

/** A batch taken for a lease held elsewhere (see `Limiter.reserve`). */
export interface Reservation {
  readonly granted: number;
  readonly decision: Decision;
  readonly fallback: boolean;
  readonly at: number;
}

/** The charges of one limiter, on validated calls of cost 0. */
export class Charges {
  readonly #parts: ChargeParts;

  constructor(parts: ChargeParts) {
    this.#parts = parts;
  }

  /** Frees a concurrency permit; false if it had already expired or been released. */
  async release(call: Call, options: PermitOptions): Promise<boolean> {
    const found = await this.#parts.failover.release({ key: call.key, limits: call.limits, permitId: optionsPermitId(options) });
    this.#parts.waiting.wake(call.key);
    return found;
  }

  /** Extends a concurrency permit; false if it was lost. */
  renew(call: Call, options: PermitOptions): Promise<boolean> {
    const ttlMs = options.ttlMs === undefined ? undefined : intOption(options.ttlMs, 'ttlMs', 0, 1, this.#parts.maxTtlMs);
    return this.#parts.failover.renew({
      key: call.key,
      limits: call.limits,
      permitId: optionsPermitId(options),
      ...(ttlMs === undefined ? {} : { ttlMs }),
    });
  }

  /** Charges `delta` more permits, or refunds them when negative (see `Limiter.adjust`). */
  async adjust(call: Call, options: AdjustOptions): Promise<void> {
    const { failover, decider, prefilter, waiting } = this.#parts;
    const resource = call.resource.name;
    const delta = checkDelta(options.delta);
    const at = checkStamp(options.at);
    const tenantLimits = decider.tenantLimits(call);
    let { key, limits, parts } = call;
    if (call.resource.split > 1) {
      // Charged on one sub-key: the sum over sub-keys is what matters.
      const i = Math.floor(this.#parts.random() * call.resource.split);
      parts = { resource, key: call.sub, part: i };
      key = storageKey(parts);
      limits = call.resource.splitLimits[i]!;
    }
    await failover.adjust({ key, parts, limits, delta, ...(at > 0 ? { at } : {}) });
    let tenantKey: string | undefined;
    if (tenantLimits !== undefined) {
      const tenant = { resource, key: '', tenant: call.tenant! };
      tenantKey = storageKey(tenant);
      await failover.adjust({ key: tenantKey, parts: tenant, limits: tenantLimits, delta });
    }
    if (delta < 0) {
      // Refunded here: what the pre-filter learnt of these keys no longer holds.
      const coreShares = call.resource.priority.coreShares;
      prefilter.forget(key, coreShares);
      if (tenantKey !== undefined) prefilter.forget(tenantKey, coreShares);
      waiting.wake(key);
    }
  }

  /** Takes between `min` and `max` permits in one decision (see `Limiter.reserve`). */
  async reserve(call: Call, options: { min: number; max: number; holdMs?: number }): Promise<Reservation> {
    const r = call.resource;
    const refusal = r.paths.reserveRefusal;
    if (refusal !== undefined) throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', refusal);
    const min = checkCostAtMost(options.min, r.paths.maxCost, 'min');
    const rawMax: unknown = options.max;
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < min || rawMax > MAX_COST || min < 1) {
      throw invalid(ErrorCodes.INVALID_COST, 'max', `must be an integer with 1 <= min <= max <= ${MAX_COST}`);
    }
    const holdMs = checkHold(options.holdMs);
    // More than the limit can ever hold is never granted anyway: ask for what can be.
    const max = Math.min(rawMax, r.paths.maxCost);
    const request = { key: call.key, parts: call.parts, limits: r.limits, min, max, holdMs };
    const result = await this.#parts.failover.reserve(request, r.onStoreFailure);
    let decision = combineStatuses(result.statuses);
    if (result.fallback) decision = fallbackDecision(decision, result.unavailable === true);
    return { granted: result.granted, decision, fallback: result.fallback, at: result.fallback ? 0 : result.now + holdMs };
  }
}
