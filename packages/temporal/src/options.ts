import { defaultOutcomeOf } from './outcomes.js';
import {
  ErrorCodes,
  MAX_COST,
  algorithmOf,
  SluiceError,
  checkCost,
  intOption,
  invalid,
  type CompiledLimit,
  type RateLimiter,
} from '@sluice/core';
import { isPriority, type SluicePriority } from './headers.js';
import type { SluiceTemporalObserver } from './observer.js';

/**
 * How an activity waits for a permit:
 * - `blocking`: waits in the activity, heartbeating, never past its remaining timeout budget;
 * - `non-blocking`: a denial fails the attempt with a retryable `SluiceRateLimited` failure whose
 *   `nextRetryDelay` points at when to come back, so Temporal retries it later. With a limiter
 *   that can book (`RateLimiter.book`), the denial books the activity's slot first and the retry
 *   claims it (see `booking`); otherwise the delay is the decision's retry-after plus jitter.
 */
export type PermitMode = 'blocking' | 'non-blocking';

/** What an activity does when the limiter throws instead of deciding. */
export type LimiterFaultPolicy = 'open' | 'closed';

/** A value given in the configuration, or computed from the activity's arguments. */
export type FromArgs<T> = T | ((args: readonly unknown[]) => T);

/** One downstream resource an activity type takes permits from. */
export interface ActivityPermit {
  /** The limiter's resource: the downstream (e.g. `db:user_center`), never a task queue. */
  resource: string;
  /** Permits per call. @default 1 */
  cost?: FromArgs<number>;
  /**
   * Sub-key within the resource (e.g. a merchant). Leave it out for the resource's one shared
   * limit; an empty key (given, or computed from the arguments) is refused.
   */
  key?: FromArgs<string>;
  /** @default the options' `mode` */
  mode?: PermitMode;
  /**
   * Longest blocking wait in ms; the activity's remaining budget bounds it further.
   * @default the options' `maxWaitMs`
   */
  maxWaitMs?: number;
  /**
   * When the limiter throws (it is closed, or a remote limiter is unreachable): `closed` fails
   * the attempt with a retryable `SluiceLimiterFault`, `open` runs the activity without a permit.
   * Store outages of a core `Limiter` never reach this: its per-resource `onStoreFailure` policy
   * decides those, and the decision says so (`source: 'fallback'`).
   * @default 'closed'
   */
  onLimiterFault?: LimiterFaultPolicy;
  /** Priority of every call, overriding the workflow's header. */
  priority?: FromArgs<SluicePriority>;
  /** Tenant of every call, overriding the workflow's header. */
  tenant?: FromArgs<string>;
}

/** Options of {@link createSluiceInterceptors} and {@link SluiceActivityGate}. */
export interface SluiceActivityOptions {
  /**
   * Decides permits: a core `Limiter` (embedded store or `RedisStore`), or a remote client of
   * `sluice serve`; anything implementing `RateLimiter`.
   */
  limiter: RateLimiter;
  /** Activity type -> the resources (and costs) it takes permits from, in order. */
  activities?: Record<string, ActivityPermit | readonly ActivityPermit[]>;
  /** @default 'blocking' */
  mode?: PermitMode;
  /** Default bound on a blocking wait, in ms. @default 300000 */
  maxWaitMs?: number;
  /**
   * Time kept free at the end of the activity's budget (start-to-close and schedule-to-close)
   * for the work itself: a wait never runs into it.
   * @default 1000
   */
  budgetMarginMs?: number;
  /** How often a waiting activity heartbeats, in ms (at most a third of its heartbeat timeout). @default 1000 */
  heartbeatIntervalMs?: number;
  /** Shortest `nextRetryDelay` of a `SluiceRateLimited` failure, in ms. @default 100 */
  minRetryDelayMs?: number;
  /** Jitter added to a retry delay, as a fraction of it (0..1). @default 0.2 */
  retryJitter?: number;
  /** `nextRetryDelay` of a `SluiceLimiterFault`, in ms. @default 1000 */
  faultRetryDelayMs?: number;
  /**
   * Non-blocking mode: book a denied attempt's slot (deferred admission) so its retry claims it
   * without competing. Needs a limiter with `book` (a core `Limiter`, or the remote client);
   * resources that cannot be booked (concurrency limits, tenants, ...) are retried as without.
   * @default true
   */
  booking?: boolean;
  /**
   * How much earlier than its slot a booked attempt's retry is scheduled, in ms, to allow for
   * Temporal delivering retries after they are due; the retry then waits the rest inside the
   * attempt. @default learned: the 90th percentile of how late this worker's retries arrived
   * (1000 until it has seen a few)
   */
  retryLeadMs?: number;
  /**
   * A booked slot at most this far away is waited for inside the attempt (the worker slot stays
   * taken) instead of failing the attempt; never past the attempt's remaining budget.
   * @default 2000
   */
  maxSlotWaitMs?: number;
  /**
   * How often a held concurrency permit is renewed, in ms.
   * @default a third of the limit's `permitTtlMs` when the limiter exposes it, else 5000
   */
  renewIntervalMs?: number;
  /** Metrics and other hooks (see `@sluice/temporal/metrics`). */
  observer?: SluiceTemporalObserver;
  /**
   * Report each attempt's outcome and duration to the limiter (`reportOutcome`) for every
   * resource it took permits from, which feeds the resources' circuit breakers (fleet-wide ones
   * in the store) and outcome tallies. Needs a limiter with `reportOutcome`.
   * @default false
   */
  reportOutcomes?: boolean;
  /**
   * How an attempt that threw counts (with `reportOutcomes`); an attempt that returned is a
   * success. @default defaultOutcomeOf: cancellations ignored, non-retryable failures a success
   * (the downstream answered), anything else a failure
   */
  outcomeOf?: (error: unknown) => 'success' | 'failure' | 'ignore';
  /** @default Math.random */
  random?: () => number;
  /** Wall clock in ms, comparable with Temporal's timestamps. @default Date.now */
  now?: () => number;
}

/** A validated {@link ActivityPermit}. */
export interface CompiledPermit {
  readonly resource: string;
  readonly cost: (args: readonly unknown[]) => number;
  /** Absent: the resource's one shared limit. */
  readonly key: ((args: readonly unknown[]) => string) | undefined;
  readonly priority: ((args: readonly unknown[]) => SluicePriority) | undefined;
  readonly tenant: ((args: readonly unknown[]) => string) | undefined;
  readonly mode: PermitMode;
  readonly maxWaitMs: number;
  readonly onLimiterFault: LimiterFaultPolicy;
  readonly renewIntervalMs: number;
}

/** Validated, defaulted and frozen {@link SluiceActivityOptions}. */
export interface CompiledActivityOptions {
  readonly limiter: RateLimiter;
  readonly activities: ReadonlyMap<string, readonly CompiledPermit[]>;
  readonly mode: PermitMode;
  readonly maxWaitMs: number;
  readonly budgetMarginMs: number;
  readonly heartbeatIntervalMs: number;
  readonly minRetryDelayMs: number;
  readonly retryJitter: number;
  readonly faultRetryDelayMs: number;
  readonly booking: boolean;
  /** undefined: learned from the delivery delays seen (see `DeliveryDelay`). */
  readonly retryLeadMs: number | undefined;
  readonly maxSlotWaitMs: number;
  readonly renewIntervalMs: number | undefined;
  readonly observer: SluiceTemporalObserver | undefined;
  /** How a thrown attempt counts; undefined: outcomes are not reported. */
  readonly outcomeOf: ((error: unknown) => 'success' | 'failure' | 'ignore') | undefined;
  readonly random: () => number;
  readonly now: () => number;
}

const MODES: readonly PermitMode[] = ['blocking', 'non-blocking'];
const FAULT_POLICIES: readonly LimiterFaultPolicy[] = ['open', 'closed'];
const DAY_MS = 24 * 3600 * 1000;
/** Most activity types one configuration maps; more is a mistake, not a plan. */
export const MAX_MAPPED_ACTIVITIES = 10_000;
/** Most resources one activity type takes permits from. */
export const MAX_PERMITS_PER_ACTIVITY = 8;
const PERMIT_KEYS = ['resource', 'cost', 'key', 'mode', 'maxWaitMs', 'onLimiterFault', 'priority', 'tenant'];

function bool(value: unknown, field: string, fallback: boolean): boolean {
  const v = value ?? fallback;
  if (typeof v !== 'boolean') throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be a boolean, got ${JSON.stringify(v)}`);
  return v;
}

const LIMITER_METHODS = ['try', 'acquire', 'release', 'renew', 'adjust', 'has'] as const;

/** True if `value` has every method of a `RateLimiter`. */
function isRateLimiter(value: unknown): value is RateLimiter {
  if (typeof value !== 'object' || value === null) return false;
  const methods = value as Record<string, unknown>;
  return LIMITER_METHODS.every((m) => typeof methods[m] === 'function');
}

/** The limits of a resource when the limiter exposes them (a core `Limiter` does). */
function limitsOf(limiter: RateLimiter, resource: string): readonly CompiledLimit[] | undefined {
  const l = limiter as RateLimiter & { limitsOf?: (resource: string) => readonly CompiledLimit[] };
  return typeof l.limitsOf === 'function' ? l.limitsOf(resource) : undefined;
}

function constant<T>(value: FromArgs<T> | undefined, fallback: T | undefined): ((args: readonly unknown[]) => T) | undefined {
  if (typeof value === 'function') return value as (args: readonly unknown[]) => T;
  const v = value ?? fallback;
  return v === undefined ? undefined : () => v;
}

/**
 * Validates the options once, at worker start: a missing limiter, an activity mapped to a
 * resource the limiter does not know, or an invalid cost, key, mode or bound throws a
 * `SluiceError` (`SLUICE_ERR_INVALID_OPTIONS`, `SLUICE_ERR_UNKNOWN_RESOURCE`,
 * `SLUICE_ERR_INVALID_COST`, `SLUICE_ERR_COST_EXCEEDS_LIMIT`) whose message names the activity.
 */
export function compileActivityOptions(options: SluiceActivityOptions): CompiledActivityOptions {
  if (typeof options !== 'object' || options === null) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'options', 'must be an object with a limiter and activities');
  }
  if (!isRateLimiter(options.limiter)) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'limiter',
      `is missing or not a RateLimiter (needs ${LIMITER_METHODS.join(', ')}); pass a Limiter or a remote client`,
    );
  }
  const limiter = options.limiter;
  const mode = options.mode ?? 'blocking';
  if (!MODES.includes(mode)) throw invalid(ErrorCodes.INVALID_OPTIONS, 'mode', `must be one of ${MODES.join(', ')}`);
  const maxWaitMs = intOption(options.maxWaitMs, 'maxWaitMs', 300_000, 0, DAY_MS);
  const retryJitter = options.retryJitter ?? 0.2;
  if (typeof retryJitter !== 'number' || !(retryJitter >= 0 && retryJitter <= 1)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'retryJitter', 'must be a number between 0 and 1');
  }
  const renewIntervalMs =
    options.renewIntervalMs === undefined ? undefined : intOption(options.renewIntervalMs, 'renewIntervalMs', 0, 10, DAY_MS);
  const entries = Object.entries(options.activities ?? {});
  if (entries.length > MAX_MAPPED_ACTIVITIES) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'activities', `at most ${MAX_MAPPED_ACTIVITIES} activity types`);
  }
  const activities = new Map<string, readonly CompiledPermit[]>();
  for (const [activityType, config] of entries) {
    activities.set(
      activityType,
      compilePermits(limiter, activityType, config, `activities.${activityType}`, { mode, maxWaitMs, renewIntervalMs }),
    );
  }
  const reportOutcomes = bool(options.reportOutcomes, 'reportOutcomes', false);
  if (reportOutcomes && typeof limiter.reportOutcome !== 'function') {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      'reportOutcomes',
      'needs a limiter with reportOutcome (a Limiter or the remote client)',
    );
  }
  if (options.outcomeOf !== undefined && typeof options.outcomeOf !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, 'outcomeOf', 'must be a function');
  }
  return Object.freeze({
    outcomeOf: reportOutcomes ? (options.outcomeOf ?? defaultOutcomeOf) : undefined,
    limiter,
    activities,
    mode,
    maxWaitMs,
    budgetMarginMs: intOption(options.budgetMarginMs, 'budgetMarginMs', 1000, 0, DAY_MS),
    heartbeatIntervalMs: intOption(options.heartbeatIntervalMs, 'heartbeatIntervalMs', 1000, 10, DAY_MS),
    minRetryDelayMs: intOption(options.minRetryDelayMs, 'minRetryDelayMs', 100, 1, DAY_MS),
    retryJitter,
    faultRetryDelayMs: intOption(options.faultRetryDelayMs, 'faultRetryDelayMs', 1000, 1, DAY_MS),
    booking: bool(options.booking, 'booking', true),
    retryLeadMs: options.retryLeadMs === undefined ? undefined : intOption(options.retryLeadMs, 'retryLeadMs', 0, 0, 60_000),
    maxSlotWaitMs: intOption(options.maxSlotWaitMs, 'maxSlotWaitMs', 2000, 0, 60_000),
    renewIntervalMs,
    observer: options.observer,
    random: options.random ?? Math.random,
    now: options.now ?? Date.now,
  });
}

/**
 * Validates the resources one activity type takes permits from (one mapping or a list of 1 to
 * {@link MAX_PERMITS_PER_ACTIVITY}); `path` prefixes field names in errors.
 */
export function compilePermits(
  limiter: RateLimiter,
  activityType: string,
  config: ActivityPermit | readonly ActivityPermit[],
  path: string,
  defaults: PermitDefaults,
): readonly CompiledPermit[] {
  const list: readonly ActivityPermit[] = Array.isArray(config) ? config : [config as ActivityPermit];
  if (list.length === 0 || list.length > MAX_PERMITS_PER_ACTIVITY) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      path,
      `activity "${activityType}" must take permits from 1 to ${MAX_PERMITS_PER_ACTIVITY} resources`,
    );
  }
  const compiled = list.map((p, i) =>
    compilePermit(limiter, activityType, p, Array.isArray(config) ? `${path}[${i}]` : path, defaults),
  );
  return Object.freeze(compiled);
}

/** The options-wide defaults a permit falls back on. */
export type PermitDefaults = Pick<CompiledActivityOptions, 'mode' | 'maxWaitMs' | 'renewIntervalMs'>;

/** Validates one activity -> resource mapping; `path` prefixes field names in errors. */
export function compilePermit(
  limiter: RateLimiter,
  activityType: string,
  permit: ActivityPermit,
  path: string,
  defaults: PermitDefaults,
): CompiledPermit {
  const where = `activity "${activityType}"`;
  if (typeof permit !== 'object' || permit === null) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, path, `${where}: must be an object with a resource`);
  }
  for (const k of Object.keys(permit)) {
    if (!PERMIT_KEYS.includes(k)) throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.${k}`, `${where}: unknown field`);
  }
  const { resource } = permit;
  if (typeof resource !== 'string' || resource.length === 0) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.resource`, `${where}: must name a resource`);
  }
  if (!limiter.has(resource)) {
    throw new SluiceError(
      ErrorCodes.UNKNOWN_RESOURCE,
      `${path}.resource: ${where} maps to resource ${JSON.stringify(resource)}, which the limiter has no limits for`,
      { field: `${path}.resource` },
    );
  }
  const limits = limitsOf(limiter, resource);
  if (typeof permit.cost !== 'function') {
    const cost = permit.cost ?? 1;
    if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > MAX_COST) {
      throw invalid(
        ErrorCodes.INVALID_COST,
        `${path}.cost`,
        `${where}: must be an integer between 1 and ${MAX_COST}, got ${String(cost)}`,
      );
    }
    if (limits !== undefined) {
      try {
        checkCost(cost, limits, `${path}.cost`);
      } catch (err) {
        if (err instanceof SluiceError) {
          throw new SluiceError(err.code, `${where}: ${err.message}`, { field: `${path}.cost`, cause: err });
        }
        throw err;
      }
    }
  }
  if (permit.key !== undefined && typeof permit.key !== 'function' && typeof permit.key !== 'string') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.key`, `${where}: must be a string or a function of the arguments`);
  }
  if (permit.key === '') {
    throw invalid(
      ErrorCodes.INVALID_KEY,
      `${path}.key`,
      `${where}: is empty: leave it out for the resource's one shared limit, or name the shared key`,
    );
  }
  const mode = permit.mode ?? defaults.mode;
  if (!MODES.includes(mode))
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.mode`, `${where}: must be one of ${MODES.join(', ')}`);
  const onLimiterFault = permit.onLimiterFault ?? 'closed';
  if (!FAULT_POLICIES.includes(onLimiterFault)) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.onLimiterFault`, `${where}: must be one of ${FAULT_POLICIES.join(', ')}`);
  }
  if (permit.priority !== undefined && typeof permit.priority !== 'function' && !isPriority(permit.priority)) {
    throw invalid(
      ErrorCodes.INVALID_OPTIONS,
      `${path}.priority`,
      `${where}: must be a tier name ('core', 'normal', 'vip', ...) or a function`,
    );
  }
  if (permit.tenant !== undefined && typeof permit.tenant !== 'function' && typeof permit.tenant !== 'string') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, `${path}.tenant`, `${where}: must be a string or a function`);
  }
  const ttl = limits?.find((l) => !algorithmOf(l).rate)?.permitTtlMs;
  return Object.freeze({
    resource,
    cost: constant(permit.cost, 1)!,
    key: constant(permit.key, undefined),
    priority: constant(permit.priority, undefined),
    tenant: constant(permit.tenant, undefined),
    mode,
    maxWaitMs: intOption(permit.maxWaitMs, `${path}.maxWaitMs`, defaults.maxWaitMs, 0, DAY_MS),
    onLimiterFault,
    renewIntervalMs: defaults.renewIntervalMs ?? (ttl === undefined ? 5000 : Math.max(10, Math.floor(ttl / 3))),
  });
}
