import { ErrorCodes, SluiceError, invalid } from '../shared/errors.js';
import { ALGORITHM_TRAITS, type AlgorithmTraits } from '../algorithms/index.js';
import { compileLimit, type Algorithm, type CompiledLimit } from '../shared/policy.js';

/**
 * Priority tiers and the boost pool of a resource.
 *
 * Tiers are ordered highest first. Each keeps a `share` of every limit that the tiers below it
 * may not use: a call of tier `i` is admitted only while `used + cost <= limit x (1 - h_i)`,
 * where its core share `h_i` is the sum of the shares of the tiers ranked above it. The top tier
 * sees the whole limit, the lowest is shed first. A tier's core share is the store's `coreShare`
 * of a consume, so a tier costs no extra store step and the fleet-wide limit holds exactly as before.
 *
 * `priority.coreShare: s` is the two-tier case: `core` (share `s`, sees the whole limit) above
 * `normal` (the default, sees `limit x (1 - s)`).
 *
 * The boost pool is a second, separate bounded limit on its own storage key: a call of an
 * eligible tier that the resource's limits deny (`rate_limited`) is tried against it once; if the
 * pool admits, the call is admitted with `boosted: true` and charged to the pool alone. Per key and
 * per window, at most `limit + boost.limit` calls are then admitted.
 */

/** One tier of a resource, as a user writes it (see {@link PriorityOptions}). */
export interface TierOptions {
  /** The tier's name, as calls give it in `priority` (1 to 64 of `A-Z a-z 0-9 _ . : -`). */
  name: string;
  /**
   * Share of every limit (0..0.9) that only this tier and those above it may use. The lowest
   * tier has none below it: its share must be 0.
   * @default 0
   */
  share?: number;
}

/** The boost pool of a resource (see the module's description). */
export interface BoostOptions {
  /** Permits of the pool per window (for every key of the resource apart). */
  limit: number;
  /** The pool's window. @default 1000 */
  windowMs?: number;
  /**
   * How the pool counts; a rate algorithm. `sliding-window` admits at most `limit` in any window.
   * @default 'sliding-window'
   */
  algorithm?: Exclude<Algorithm, 'concurrency'>;
  /** The tiers that may draw on the pool (at least one, each a tier of the resource). */
  tiers: readonly string[];
}

/** A tier, compiled. */
export interface CompiledTier {
  readonly name: string;
  readonly share: number;
  /** Share of every limit this tier may not use: the sum of the shares of the tiers above it. */
  readonly coreShare: number;
  /** Position, 0 for the highest. */
  readonly rank: number;
  /** True if calls of this tier may draw on the resource's boost pool. */
  readonly boost: boolean;
  /** The name, when the resource declares its tiers (what observers are told); else undefined. */
  readonly label: string | undefined;
}

/** A resource's tiers, compiled. */
export interface CompiledPriority {
  /** Highest first. */
  readonly tiers: readonly CompiledTier[];
  readonly byName: ReadonlyMap<string, CompiledTier>;
  /** The tier of calls that give no `priority`. */
  readonly default: CompiledTier;
  /** True when the resource declares `priority.tiers` (else the tiers are `core` and `normal`). */
  readonly named: boolean;
  /** Every tier's `coreShare`, in tier order (what a refund makes the pre-filter forget). */
  readonly coreShares: readonly number[];
}

/** A resource's boost pool, compiled. */
export interface CompiledBoost {
  readonly limits: readonly CompiledLimit[];
  readonly tiers: readonly string[];
}

/** A tier name: 1 to 64 of `A-Z a-z 0-9 _ . : -` (no `|`, which separates wait-queue kinds). */
export const TIER_NAME = /^[A-Za-z0-9_.:-]{1,64}$/;
/** Most tiers a resource may declare. */
export const MAX_TIERS = 16;
/**
 * Largest share of a limit a resource may keep from its lowest traffic: `priority.coreShare`, or
 * the tiers' shares together.
 */
export const MAX_CORE_SHARE = 0.9;

/** A resource's traffic classes (see the module's description). */
export interface PriorityOptions {
  /** Two tiers: a share of every limit (0..0.9) that only `core` traffic may use. */
  coreShare?: number;
  /** Tiers, highest first (not with `coreShare`). */
  tiers?: readonly TierOptions[];
  /** The tier of calls that give none. @default the lowest tier */
  default?: string;
}

/** True for a string that {@link TIER_NAME} accepts. */
export function isTierName(name: unknown): name is string {
  return typeof name === 'string' && TIER_NAME.test(name);
}

/** The tiers `core` (keeping `coreShare`) and `normal` (the default): `priority.coreShare`. */
export function twoTiers(coreShare: number, boosted: readonly string[] = []): CompiledPriority {
  return freezePriority(
    [
      { name: 'core', share: coreShare },
      { name: 'normal', share: 0 },
    ],
    'normal',
    false,
    boosted,
  );
}

/** The tiers of `priority` options, checked (`path` names them in errors). */
export function compilePriority(
  priority: PriorityOptions | undefined,
  coreShare: number,
  path: string,
  boosted: readonly string[] = [],
): CompiledPriority {
  if (priority?.tiers === undefined) {
    if (priority?.default !== undefined && priority.default !== 'core' && priority.default !== 'normal') {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.default`, 'must be core or normal without tiers');
    }
    const p = twoTiers(coreShare, boosted);
    return priority?.default === 'core' ? Object.freeze({ ...p, default: p.byName.get('core')! }) : p;
  }
  if (priority.coreShare !== undefined) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, path, 'give tiers or coreShare, not both');
  }
  const tiers = priority.tiers;
  if (!Array.isArray(tiers) || tiers.length < 1 || tiers.length > MAX_TIERS) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.tiers`, `must be a list of 1 to ${MAX_TIERS} tiers`);
  }
  const seen = new Set<string>();
  let sum = 0;
  const list = tiers.map((t: TierOptions, i) => {
    const at = `${path}.tiers[${i}]`;
    if (typeof t !== 'object' || t === null) throw invalid(ErrorCodes.INVALID_OPTIONS, at, 'must be an object');
    for (const k of Object.keys(t)) {
      if (k !== 'name' && k !== 'share') throw invalid(ErrorCodes.INVALID_OPTIONS, `${at}.${k}`, 'unknown field');
    }
    if (!isTierName(t.name)) throw invalid(ErrorCodes.INVALID_OPTIONS, `${at}.name`, `must match ${TIER_NAME}`);
    if (seen.has(t.name)) throw invalid(ErrorCodes.INVALID_OPTIONS, `${at}.name`, `duplicate tier ${JSON.stringify(t.name)}`);
    seen.add(t.name);
    const share = t.share ?? 0;
    if (typeof share !== 'number' || !(share >= 0 && share <= MAX_CORE_SHARE)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${at}.share`, `must be a number between 0 and ${MAX_CORE_SHARE}`);
    }
    if (i === tiers.length - 1 && share > 0) {
      throw invalid(
        ErrorCodes.INVALID_OPTIONS,
        `${at}.share`,
        'must be 0: the lowest tier has no tier below it to keep a share from',
      );
    }
    sum += share;
    return { name: t.name, share };
  });
  // Rounded so that 0.3 + 0.6 counts as 0.9.
  if (Math.round(sum * 1e9) / 1e9 > MAX_CORE_SHARE) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.tiers`, `the shares add up to more than ${MAX_CORE_SHARE}`);
  }
  const fallback = priority.default ?? list[list.length - 1]!.name;
  if (!seen.has(fallback)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.default`, `must name one of the tiers: ${[...seen].join(', ')}`);
  }
  return freezePriority(list, fallback, true, boosted);
}

function freezePriority(
  list: readonly { name: string; share: number }[],
  fallback: string,
  named: boolean,
  boosted: readonly string[],
): CompiledPriority {
  let above = 0;
  const tiers = list.map((t, rank) => {
    const tier = Object.freeze({
      name: t.name,
      share: t.share,
      coreShare: Math.min(MAX_CORE_SHARE, Math.round(above * 1e9) / 1e9),
      rank,
      boost: boosted.includes(t.name),
      label: named ? t.name : undefined,
    });
    above += t.share;
    return tier;
  });
  const byName = new Map(tiers.map((t) => [t.name, t]));
  return Object.freeze({
    tiers: Object.freeze(tiers),
    byName,
    default: byName.get(fallback)!,
    named,
    coreShares: Object.freeze(tiers.map((t) => t.coreShare)),
  });
}

/** The boost pool of `boost` options, checked against the resource's tier names. */
export function compileBoost(
  boost: BoostOptions | undefined,
  tierNames: readonly string[],
  path: string,
): CompiledBoost | undefined {
  if (boost === undefined) return undefined;
  if (typeof boost !== 'object' || boost === null) throw invalid(ErrorCodes.INVALID_OPTIONS, path, 'must be an object');
  for (const k of Object.keys(boost)) {
    if (!['limit', 'windowMs', 'algorithm', 'tiers'].includes(k)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${k}`, 'unknown field');
    }
  }
  const { limit, windowMs, algorithm = 'sliding-window', tiers } = boost;
  if ((ALGORITHM_TRAITS as Partial<Record<string, AlgorithmTraits>>)[algorithm]?.rate === false) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.algorithm`, 'must be a rate algorithm, not concurrency');
  }
  const policy = { id: 'boost', algorithm, limit, ...(windowMs === undefined ? {} : { windowMs }) };
  const limits = Object.freeze([compileLimit(policy, path)]);
  if (!Array.isArray(tiers) || tiers.length === 0) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.tiers`, 'must list at least one tier');
  }
  (tiers as readonly unknown[]).forEach((t, i) => {
    if (typeof t !== 'string' || !tierNames.includes(t)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.tiers[${i}]`, `must name one of the tiers: ${tierNames.join(', ')}`);
    }
  });
  return Object.freeze({ limits, tiers: Object.freeze([...(tiers as readonly string[])]) });
}

/**
 * The tier a call names, or the default. A name the resource does not have is
 * `SLUICE_ERR_UNKNOWN_TIER`; on a resource without declared tiers, only `core` and `normal` are
 * names (anything else is `SLUICE_ERR_INVALID_OPTIONS`, as before tiers existed).
 */
export function tierOf(priority: CompiledPriority, name: unknown, resource: string): CompiledTier {
  if (name === undefined) return priority.default;
  const tier = typeof name === 'string' ? priority.byName.get(name) : undefined;
  if (tier !== undefined) return tier;
  if (!priority.named) throw invalid(ErrorCodes.INVALID_OPTIONS, 'priority', 'must be one of core, normal');
  throw new SluiceError(
    ErrorCodes.UNKNOWN_TIER,
    `priority: resource ${JSON.stringify(resource)} has no tier ${JSON.stringify(name)} (tiers: ${[...priority.byName.keys()].join(', ')})`,
    { field: 'priority' },
  );
}
