import { ErrorCodes, SluiceError, invalid, shown } from './errors.js';
import { algorithmOf, ALGORITHM_TRAITS } from '../algorithms/index.js';
import { ALGORITHMS, POLICY_BOUNDS, type Algorithm, type CompiledLimit } from './limits.js';
import { hasLoneSurrogate } from '../store/storage-key.js';

export { ALGORITHMS, ALGORITHM_CODES, POLICY_BOUNDS, type Algorithm, type CompiledLimit } from './limits.js';

/**
 * One limit on a key, as a user writes it. A key may carry several (e.g. 100/s and 10,000/day);
 * they are evaluated all-or-nothing.
 */
export interface LimitPolicy {
  /** Which algorithm enforces this limit. */
  algorithm: Algorithm;
  /** Permits per window; for `concurrency`, permits that may be held at once. */
  limit: number;
  /**
   * Length of the window (or refill period) in milliseconds. Ignored by `concurrency`.
   * @default 1000
   */
  windowMs?: number;
  /**
   * Bucket capacity for `token-bucket` and `gcra`: how many permits may be taken at once after
   * an idle period. Ignored by the other algorithms. With the default, `{ algorithm: 'gcra',
   * limit: 5 }` admits 5 at once after idle time and refills 5 per second, so up to 10 in one
   * second (at most `burst + limit` in any window). `burst: 1` spaces calls evenly (one per
   * `windowMs / limit`); for at most `limit` in any window, use `sliding-window`.
   * @default limit
   */
  burst?: number;
  /**
   * Number of slices of the window for `sliding-window`.
   * @default 10
   */
  slices?: number;
  /**
   * How long a `concurrency` permit lives unless renewed; an abandoned permit frees itself after
   * this long.
   * @default 30000
   */
  permitTtlMs?: number;
  /**
   * Name of this limit within the key, stable across policy updates so state carries over
   * (also when the algorithm changes).
   * @default its position in the key's list: '0', '1', ...
   */
  id?: string;
}

const ID_PATTERN = /^[A-Za-z0-9_.:-]+$/;

function checkInt(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw invalid(ErrorCodes.INVALID_POLICY, field, `must be an integer, got ${shown(value)}`);
  }
  if (value < min || value > max) {
    throw invalid(ErrorCodes.INVALID_POLICY, field, `must be between ${min} and ${max}, got ${value}`);
  }
  return value;
}

/**
 * Validates one limit and fills its defaults. Throws `SLUICE_ERR_INVALID_POLICY` naming the field.
 *
 * @param path prefix for field names in errors, e.g. `limits[1]`
 */
export function compileLimit(policy: LimitPolicy, path = 'policy', defaultId?: string): CompiledLimit {
  if (typeof policy !== 'object' || policy === null) {
    throw invalid(ErrorCodes.INVALID_POLICY, path, 'must be an object');
  }
  const allowed = new Set(['algorithm', 'limit', 'windowMs', 'burst', 'slices', 'permitTtlMs', 'id']);
  for (const k of Object.keys(policy)) {
    if (!allowed.has(k)) throw invalid(ErrorCodes.INVALID_POLICY, `${path}.${k}`, 'unknown field');
  }
  const algorithm = policy.algorithm;
  if (!(ALGORITHMS as readonly string[]).includes(algorithm)) {
    throw invalid(
      ErrorCodes.INVALID_POLICY,
      `${path}.algorithm`,
      `unknown algorithm ${JSON.stringify(algorithm)}; expected one of ${ALGORITHMS.join(', ')}`,
    );
  }
  const traits = ALGORITHM_TRAITS[algorithm];
  const limit = checkInt(policy.limit, `${path}.limit`, 1, traits.largestLimit);
  const windowMs = checkInt(policy.windowMs ?? 1000, `${path}.windowMs`, 1, POLICY_BOUNDS.maxWindowMs);
  const burst = checkInt(policy.burst ?? limit, `${path}.burst`, 1, POLICY_BOUNDS.maxLimit);
  const slices = checkInt(policy.slices ?? 10, `${path}.slices`, 1, POLICY_BOUNDS.maxSlices);
  const permitTtlMs = checkInt(
    policy.permitTtlMs ?? 30_000,
    `${path}.permitTtlMs`,
    POLICY_BOUNDS.minPermitTtlMs,
    POLICY_BOUNDS.maxPermitTtlMs,
  );
  const id = policy.id ?? defaultId ?? '0';
  if (typeof id !== 'string' || id.length > POLICY_BOUNDS.maxIdLength || !ID_PATTERN.test(id)) {
    throw invalid(
      ErrorCodes.INVALID_POLICY,
      `${path}.id`,
      `must match ${ID_PATTERN} and be at most ${POLICY_BOUNDS.maxIdLength} characters`,
    );
  }
  return Object.freeze({ id, algorithm, code: traits.code, limit, windowMs, burst, slices, permitTtlMs });
}

/**
 * Compiles the limits of one key. Ids default to the algorithm name and must be unique.
 */
export function compileLimits(policies: readonly LimitPolicy[] | LimitPolicy, path = 'limits'): readonly CompiledLimit[] {
  const list: readonly LimitPolicy[] = Array.isArray(policies) ? (policies as readonly LimitPolicy[]) : [policies as LimitPolicy];
  if (list.length === 0) throw invalid(ErrorCodes.INVALID_POLICY, path, 'needs at least one limit');
  if (list.length > POLICY_BOUNDS.maxLimitsPerKey) {
    throw invalid(ErrorCodes.INVALID_POLICY, path, `at most ${POLICY_BOUNDS.maxLimitsPerKey} limits per key`);
  }
  const seen = new Set<string>();
  const compiled = list.map((p, i) => {
    // Position-based ids keep state attached to "the first limit" when a rule edits it in place.
    const c = compileLimit(p, `${path}[${i}]`, String(i));
    if (seen.has(c.id)) throw invalid(ErrorCodes.INVALID_POLICY, `${path}[${i}].id`, `duplicate id ${JSON.stringify(c.id)}`);
    seen.add(c.id);
    return c;
  });
  if (compiled.filter((c) => !algorithmOf(c).rate).length > 1) {
    throw invalid(ErrorCodes.INVALID_POLICY, path, 'at most one concurrency limit per key');
  }
  return Object.freeze(compiled);
}

/** The most a limit can hold at once: a bucket's burst, a window's limit, concurrent permits. */
export function capacityOf(limit: CompiledLimit): number {
  return algorithmOf(limit).capacity(limit);
}

/** Largest cost one call may ask for under these limits; more can never be admitted. */
export function maxCost(limits: readonly CompiledLimit[]): number {
  let max = Infinity;
  for (const l of limits) max = Math.min(max, capacityOf(l));
  return max;
}

/** Upper bound on a cost or adjustment. */
export const MAX_COST = 1_000_000_000;

/** Validates a cost (a non-negative safe integer) against the key's limits. */
export function checkCost(cost: unknown, limits: readonly CompiledLimit[], field = 'cost'): number {
  return checkCostAtMost(cost, maxCost(limits), field);
}

/**
 * Validates a cost against the largest a key's limits admit, `max`, when it is known already (a
 * compiled resource's `paths.maxCost`); as {@link checkCost} otherwise.
 */
export function checkCostAtMost(cost: unknown, max: number, field = 'cost'): number {
  if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 0 || cost > MAX_COST) {
    throw invalid(ErrorCodes.INVALID_COST, field, `must be an integer between 0 and ${MAX_COST}, got ${shown(cost)}`);
  }
  if (cost > max) {
    throw new SluiceError(
      ErrorCodes.COST_EXCEEDS_LIMIT,
      `${field}: ${cost} exceeds the most any limit of this key can admit (${max})`,
      {
        field,
      },
    );
  }
  return cost;
}

/** Validates an adjustment (a safe integer, negative for a refund). */
export function checkDelta(delta: unknown, field = 'delta'): number {
  if (typeof delta !== 'number' || !Number.isInteger(delta) || Math.abs(delta) > MAX_COST) {
    throw invalid(ErrorCodes.INVALID_COST, field, `must be an integer between -${MAX_COST} and ${MAX_COST}, got ${shown(delta)}`);
  }
  return delta;
}

/** A reservation's hold (`ReserveRequest.holdMs`): an integer in [0, maxHoldMs]; 0 when omitted. */
export function checkHold(holdMs: unknown, field = 'holdMs'): number {
  if (holdMs === undefined) return 0;
  if (typeof holdMs !== 'number' || !Number.isInteger(holdMs) || holdMs < 0 || holdMs > POLICY_BOUNDS.maxHoldMs) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      field,
      `must be an integer between 0 and ${POLICY_BOUNDS.maxHoldMs}, got ${shown(holdMs)}`,
    );
  }
  return holdMs;
}

/** A refund's stamp (`AdjustRequest.at`): a number in [0, maxStampMs]; 0 when omitted. */
export function checkStamp(at: unknown, field = 'at'): number {
  if (at === undefined) return 0;
  if (typeof at !== 'number' || !(at >= 0 && at <= POLICY_BOUNDS.maxStampMs)) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      field,
      `must be a number between 0 and ${POLICY_BOUNDS.maxStampMs}, got ${shown(at)}`,
    );
  }
  return at;
}

/** Default bound on key length (in UTF-16 code units). */
export const DEFAULT_MAX_KEY_LENGTH = 256;

/**
 * Validates a key: a string of 0..maxLength characters, well-formed Unicode. A lone surrogate
 * has no UTF-8 form (Redis and every transport would carry it as U+FFFD), so such keys are
 * refused rather than merged.
 */
export function checkKey(key: unknown, maxLength = DEFAULT_MAX_KEY_LENGTH, field = 'key'): string {
  if (typeof key !== 'string') throw invalid(ErrorCodes.INVALID_KEY, field, `must be a string, got ${typeof key}`);
  if (key.length > maxLength)
    throw invalid(ErrorCodes.INVALID_KEY, field, `is ${key.length} characters, the bound is ${maxLength}`);
  if (hasLoneSurrogate(key)) throw invalid(ErrorCodes.INVALID_KEY, field, 'must be well-formed Unicode (no lone surrogates)');
  return key;
}

/**
 * A caller's `key` option: absent for the resource's one shared key (returned as `''`, how
 * storage names it), else validated by {@link checkKey}. An empty string is refused rather than
 * read as absent: a key computed from a request (a user id, an address) that comes out empty
 * would otherwise put every such caller in one shared bucket without a word.
 */
export function callKey(key: unknown, maxLength = DEFAULT_MAX_KEY_LENGTH, field = 'key'): string {
  if (key === undefined) return '';
  if (key === '') {
    throw invalid(
      ErrorCodes.INVALID_KEY,
      field,
      "is empty: leave it out for the resource's one shared limit, or name the shared key (e.g. 'anonymous')",
    );
  }
  return checkKey(key, maxLength, field);
}

/** Validates a concurrency permit's id (a decision's `permitId`): 1 to 128 characters. */
export function checkPermitId(permitId: unknown, field = 'permitId'): string {
  if (typeof permitId !== 'string' || permitId.length === 0 || permitId.length > 128) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, 'must be a non-empty string of at most 128 characters');
  }
  return permitId;
}

/** The permit `release` and `renew` options name, validated by {@link checkPermitId}. */
export function optionsPermitId(options: { readonly permitId?: unknown }): string {
  return checkPermitId(options.permitId);
}

/** True when one of `limits` is a concurrency limit (its calls take permits to hold). */
export function hasConcurrency(limits: readonly CompiledLimit[]): boolean {
  // Indexed: every decision asks, and an iterator showed in profiles.
  for (let i = 0; i < limits.length; i++) if (!algorithmOf(limits[i]!).rate) return true;
  return false;
}
