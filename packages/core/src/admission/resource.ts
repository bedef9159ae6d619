import {
  CircuitBreaker,
  compileFleetBreaker,
  type CircuitBreakerOptions,
  type CompiledFleetBreaker,
} from '../breakers/circuit-breaker.js';
import type { Clock } from '../shared/clock.js';
import { ErrorCodes, invalid } from '../shared/errors.js';
import { STORE_FAILURE_POLICIES, type StoreFailurePolicy } from '../failover/failover-state.js';
import { compileHotKeyOptions, type CompiledHotKeyOptions, type HotKeyOptions } from '../local/hot-keys.js';
import { compileLeaseSettings, type CompiledLeaseSettings, type LeaseSettings } from '../local/lease-cache.js';
import { BOOKING_BOUNDS, DEFAULT_BOOKING, type BookingBounds } from '../store/booking.js';
import { intOption } from '../shared/options.js';
import { compileLimits, hasConcurrency, type CompiledLimit, type LimitPolicy } from '../shared/policy.js';
import { resourcePaths, type ResourcePaths } from './resource-paths.js';
import { hasLoneSurrogate } from '../store/storage-key.js';
import {
  MAX_CORE_SHARE,
  compileBoost,
  compilePriority,
  twoTiers,
  type BoostOptions,
  type CompiledBoost,
  type CompiledPriority,
  type PriorityOptions,
} from './tiers.js';

export type { PriorityOptions } from './tiers.js';

/** Everything configured for one downstream resource. */
export interface ResourceOptions {
  /** The limits every call is checked against, all-or-nothing. */
  limits: LimitPolicy | readonly LimitPolicy[];
  /** Open a circuit breaker when the downstream fails (see {@link CircuitBreaker}). */
  breaker?: CircuitBreakerOptions;
  /**
   * Deny keys known to be over their limit locally, until their retry-after, without asking
   * the store.
   * @default true
   */
  prefilter?: boolean;
  /** What to do while the store is unavailable. @default the limiter's `onStoreFailure` */
  onStoreFailure?: StoreFailurePolicy;
  /**
   * Take permits from the store in batches and serve them locally (`true` for the defaults).
   * For hot keys and very high rates; not for concurrency limits.
   */
  lease?: LeaseSettings | true;
  /**
   * Spread each key over this many sub-keys, each holding its share of the limits, so one hot
   * key's traffic lands on several Redis Cluster slots (shards). A denied sub-key sends the
   * call to the next one, so the sum stays close to the limit. Not for concurrency limits.
   * @default 1
   */
  split?: number;
  /** Decide and count, never block: denials are returned as admissions marked `shadow`. */
  shadow?: boolean;
  /**
   * `coreShare`: a share of every limit (0..0.9) that only `core` traffic may use; `normal` is
   * shed first.
   * `tiers` (instead of `coreShare`): ordered tiers, highest first, each keeping a share of every
   * limit from the tiers below it; `default` names the tier of calls that give none (see tiers.ts).
   */
  priority?: PriorityOptions;
  /**
   * A bounded pool that calls of the listed tiers draw on when the resource's limits deny them
   * (see tiers.ts). Not with concurrency limits or leases.
   */
  boost?: BoostOptions;
  /**
   * Quotas per tenant, inside the resource's limits: a call for a tenant must fit both. The
   * `'*'` entry applies to tenants without their own.
   */
  tenants?: Record<string, LimitPolicy | readonly LimitPolicy[]>;
  /** Bounds of deferred admission (`Limiter.book`) on this resource's keys. */
  booking?: BookingOptions;
  /**
   * Track the resource's heaviest keys (`true` for the defaults), and optionally lease a key's
   * calls while it is hot (see {@link HotKeyOptions}). @default off
   */
  hotKeys?: HotKeyOptions | true;
}

/** Bounds of deferred admission on a resource's keys (see `Limiter.book`). */
export interface BookingOptions {
  /** Latest slot a booking may get, in ms from now; a later one is a plain denial. @default 60000 */
  maxAheadMs?: number;
  /**
   * How long after its start a booking may be claimed, in ms (a token bucket or GCRA allows at
   * most its spare burst, `(burst - cost) x windowMs / limit`, or one emission interval,
   * `windowMs / limit`, when that is longer; a fixed window until its end).
   * @default 1000
   */
  claimWindowMs?: number;
  /** Most bookings one key holds at once; more are a plain denial. @default 1000 */
  maxBookings?: number;
  /**
   * Largest share (0 to 1) of what a key can admit over `maxAheadMs` (its strictest limit's
   * capacity plus its rate over the horizon) that the key's bookings may hold at once; more is a
   * plain denial. Keeps one caller from booking a key's whole horizon: plain calls keep the rest.
   * @default 0.5
   */
  maxShare?: number;
}

/** A resource's limits alone, or its full options. */
export type ResourceConfig = LimitPolicy | readonly LimitPolicy[] | ResourceOptions;

/** A validated resource. */
export interface CompiledResource {
  readonly name: string;
  readonly limits: readonly CompiledLimit[];
  readonly prefilter: boolean;
  readonly breaker: CircuitBreaker | undefined;
  /** A fleet-wide breaker (`breaker.scope: 'fleet'`), kept in the store instead of `breaker`. */
  readonly fleetBreaker?: CompiledFleetBreaker;
  readonly onStoreFailure: StoreFailurePolicy;
  readonly lease: CompiledLeaseSettings | undefined;
  readonly split: number;
  /** With `split > 1`: the limits of each sub-key (shares summing to the whole). */
  readonly splitLimits: readonly (readonly CompiledLimit[])[];
  readonly shadow: boolean;
  /**
   * Share of every limit kept for core traffic (0 when none); with tiers, the share the lowest
   * tier may not use (the largest core share of its tiers).
   */
  readonly coreShare: number;
  /** The resource's tiers (`core` and `normal` unless it declares its own). */
  readonly priority: CompiledPriority;
  /** The boost pool, if any. */
  readonly boost: CompiledBoost | undefined;
  readonly tenants: ReadonlyMap<string, readonly CompiledLimit[]>;
  readonly booking: BookingBounds;
  /** Hot-key detection, when configured. */
  readonly hotKeys?: CompiledHotKeyOptions | undefined;
  /** What each verb may do with the resource, decided here once (see {@link ResourcePaths}). */
  readonly paths: ResourcePaths;
}

/** The tiers of a resource without `priority` options: `core` and `normal`, nothing kept. */
const NO_TIERS = twoTiers(0);

/** A resource's tiers and boost pool (the pool's tiers must be tiers of the resource). */
function compileTiers(config: ResourceOptions, path: string): { priority: CompiledPriority; boost: CompiledBoost | undefined } {
  const p = config.priority;
  if (p !== undefined && (typeof p !== 'object' || p === null)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.priority`, 'must be an object');
  }
  for (const k of Object.keys(p ?? {})) {
    if (!['coreShare', 'tiers', 'default'].includes(k)) {
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.priority.${k}`, 'unknown field');
    }
  }
  const coreShare = p?.tiers === undefined ? compileCoreShare(p, `${path}.priority`) : 0;
  const names = compilePriority(p, coreShare, `${path}.priority`).tiers.map((t) => t.name);
  const boost = compileBoost(config.boost, names, `${path}.boost`);
  if (boost === undefined)
    return { priority: p === undefined ? NO_TIERS : compilePriority(p, coreShare, `${path}.priority`), boost };
  return { priority: compilePriority(p, coreShare, `${path}.priority`, boost.tiers), boost };
}

/** The core share of `priority` options, checked (`path` names them in errors). */
export function compileCoreShare(priority: PriorityOptions | undefined, path: string): number {
  if (priority === undefined) return 0;
  if (typeof priority !== 'object' || priority === null) throw invalid(ErrorCodes.INVALID_OPTIONS, path, 'must be an object');
  const share = priority.coreShare ?? 0;
  if (typeof share !== 'number' || !(share >= 0 && share <= MAX_CORE_SHARE)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.coreShare`, `must be a number between 0 and ${MAX_CORE_SHARE}`);
  }
  return share;
}

/** A tenant name: 1 to 128 characters without `|`, which separates the parts of a storage key. */
export const TENANT_NAME = /^[^|]{1,128}$/;

/**
 * True for a valid tenant name: {@link TENANT_NAME}, and well-formed Unicode (a lone surrogate
 * has no UTF-8 form, so stores and transports would merge such names).
 */
export function isTenantName(tenant: string): boolean {
  return TENANT_NAME.test(tenant) && !hasLoneSurrogate(tenant);
}

/** Share `i` of `n` of a whole, the remainder going to the first shares (never below 1). */
function share(whole: number, i: number, n: number): number {
  return Math.max(1, Math.floor(whole / n) + (i < whole % n ? 1 : 0));
}

/** The limits of each of `n` sub-keys. */
export function splitLimits(limits: readonly CompiledLimit[], n: number): readonly (readonly CompiledLimit[])[] {
  return Array.from({ length: n }, (_, i) =>
    Object.freeze(limits.map((l) => Object.freeze({ ...l, limit: share(l.limit, i, n), burst: share(l.burst, i, n) }))),
  );
}

/** Resource names: no '|' (it separates resource and key in storage keys), at most 128 chars. */
export const RESOURCE_PATTERN = /^[A-Za-z0-9_.:/@-]{1,128}$/;

function isOptions(config: ResourceConfig): config is ResourceOptions {
  return typeof config === 'object' && config !== null && !Array.isArray(config) && 'limits' in config;
}

/** Validates a resource's configuration; errors name the field under `resources.<name>`. */
export function compileResource(
  name: string,
  config: ResourceConfig,
  clock: Clock,
  onStoreFailure: StoreFailurePolicy = 'local',
): CompiledResource {
  if (typeof name !== 'string' || !RESOURCE_PATTERN.test(name)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'resource', `must match ${RESOURCE_PATTERN}, got ${JSON.stringify(name)}`);
  }
  const path = `resources.${name}`;
  if (!isOptions(config)) {
    return withPaths({
      name,
      limits: compileLimits(config, path),
      prefilter: true,
      breaker: undefined,
      onStoreFailure,
      lease: undefined,
      split: 1,
      splitLimits: [],
      shadow: false,
      coreShare: 0,
      priority: NO_TIERS,
      boost: undefined,
      tenants: new Map(),
      booking: DEFAULT_BOOKING,
    });
  }
  for (const k of Object.keys(config)) {
    if (
      ![
        'limits',
        'breaker',
        'prefilter',
        'onStoreFailure',
        'lease',
        'split',
        'shadow',
        'priority',
        'tenants',
        'booking',
        'hotKeys',
        'boost',
      ].includes(k)
    )
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${k}`, 'unknown field');
  }
  if (config.prefilter !== undefined && typeof config.prefilter !== 'boolean') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.prefilter`, 'must be a boolean');
  }
  if (config.onStoreFailure !== undefined && !STORE_FAILURE_POLICIES.includes(config.onStoreFailure)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.onStoreFailure`, `must be one of ${STORE_FAILURE_POLICIES.join(', ')}`);
  }
  const limits = compileLimits(config.limits, `${path}.limits`);
  if (config.lease !== undefined && hasConcurrency(limits)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.lease`, 'concurrency limits cannot be leased');
  }
  const split = config.split ?? 1;
  if (typeof split !== 'number' || !Number.isInteger(split) || split < 1 || split > 64) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.split`, 'must be an integer between 1 and 64');
  }
  if (split > 1 && hasConcurrency(limits)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.split`, 'concurrency limits cannot be split');
  }
  if (config.shadow !== undefined && typeof config.shadow !== 'boolean') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.shadow`, 'must be a boolean');
  }
  const { priority, boost } = compileTiers(config, `${path}`);
  const coreShare = priority.tiers[priority.tiers.length - 1]!.coreShare;
  if (coreShare > 0 && config.lease !== undefined) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.priority`, 'a core share cannot be combined with leases');
  }
  if (boost !== undefined && config.lease !== undefined) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.boost`, 'a boost pool cannot be combined with leases');
  }
  if (boost !== undefined && hasConcurrency(limits)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.boost`, 'resources with a concurrency limit cannot have a boost pool');
  }
  const tenants = new Map<string, readonly CompiledLimit[]>();
  for (const [tenant, policies] of Object.entries(config.tenants ?? {})) {
    if (!isTenantName(tenant)) {
      throw invalid(
        ErrorCodes.INVALID_OPTIONS,
        `${path}.tenants`,
        `tenant names are 1 to 128 characters without '|' or lone surrogates, got ${JSON.stringify(tenant)}`,
      );
    }
    tenants.set(tenant, compileLimits(policies, `${path}.tenants.${tenant}`));
  }
  const hotKeys = config.hotKeys === undefined ? undefined : compileHotKeyOptions(config.hotKeys, `${path}.hotKeys`);
  if (hotKeys?.action === 'lease') checkHotKeyLease(limits, config, split, coreShare, `${path}.hotKeys.action`);
  return withPaths({
    name,
    hotKeys,
    booking: compileBooking(config.booking, `${path}.booking`),
    split,
    shadow: config.shadow ?? false,
    coreShare,
    priority,
    boost,
    tenants,
    splitLimits: split > 1 ? splitLimits(limits, split) : [],
    onStoreFailure: config.onStoreFailure ?? onStoreFailure,
    lease: config.lease === undefined ? undefined : compileLeaseSettings(config.lease, `${path}.lease`),
    limits,
    prefilter: config.prefilter ?? true,
    ...compiledBreaker(config.breaker, clock),
  });
}

/** A compiled resource, with the paths its options open, frozen. */
function withPaths(r: Omit<CompiledResource, 'paths'>): CompiledResource {
  return Object.freeze({ ...r, paths: resourcePaths(r) });
}

function compileBooking(options: BookingOptions | undefined, path: string): BookingBounds {
  if (options === undefined) return DEFAULT_BOOKING;
  if (typeof options !== 'object' || options === null) throw invalid(ErrorCodes.INVALID_OPTIONS, path, 'must be an object');
  for (const k of Object.keys(options)) {
    if (!['maxAheadMs', 'claimWindowMs', 'maxBookings', 'maxShare'].includes(k))
      throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${k}`, 'unknown field');
  }
  const int = (field: 'maxAheadMs' | 'claimWindowMs' | 'maxBookings'): number =>
    intOption(options[field], `${path}.${field}`, DEFAULT_BOOKING[field], 1, BOOKING_BOUNDS[field]);
  const share = options.maxShare ?? DEFAULT_BOOKING.maxShare;
  if (typeof share !== 'number' || !(share > 0 && share <= BOOKING_BOUNDS.maxShare)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.maxShare`, 'must be a number above 0 and at most 1');
  }
  return Object.freeze({
    maxAheadMs: int('maxAheadMs'),
    claimWindowMs: int('claimWindowMs'),
    maxBookings: int('maxBookings'),
    maxShare: share,
  });
}

/** A process's breaker, or the compiled settings of a fleet-wide one. */
function compiledBreaker(
  options: CircuitBreakerOptions | undefined,
  clock: Clock,
): { breaker: CircuitBreaker | undefined; fleetBreaker?: CompiledFleetBreaker } {
  if (options === undefined) return { breaker: undefined };
  const fleet = compileFleetBreaker({ clock, ...options });
  return fleet === undefined
    ? { breaker: new CircuitBreaker({ clock, ...options }) }
    : { breaker: undefined, fleetBreaker: fleet };
}

/** Leasing hot keys needs what leasing every key needs, and a key that is not leased already. */
function checkHotKeyLease(
  limits: readonly CompiledLimit[],
  config: ResourceOptions,
  split: number,
  coreShare: number,
  path: string,
): void {
  const why = hasConcurrency(limits)
    ? 'concurrency limits cannot be leased'
    : config.lease !== undefined
      ? 'the resource leases every key already'
      : split > 1
        ? 'split keys cannot be leased'
        : coreShare > 0
          ? 'a core share cannot be combined with leases'
          : undefined;
  if (why !== undefined) throw invalid(ErrorCodes.INVALID_OPTIONS, path, why);
}
