import { ALGORITHM_TRAITS, POLICY_BOUNDS, type LimitPolicy } from '@sluice/core';
import { z } from 'zod';
import type { Path, PathIssue } from './issues.js';
import type { ResourceRule } from './native.js';

/**
 * The `adaptive` section of a rule file: resources whose limit the service moves by itself,
 * within `[min, max]`, each move a new rule version with its reason.
 *
 * ```yaml
 * adaptive:
 *   api:payment_gateway:   # a resource of this file
 *     min: 500
 *     max: 5000
 *     policy: demand       # the seed's: raise on sustained rejections, lower on idle capacity
 *   db:orders:
 *     min: 50
 *     max: 400
 *     policy: aimd         # additive increase while the downstream is healthy, multiplicative decrease on trouble
 *     aimd: { errorRatioAbove: 0.05, latencyAboveMs: 250 }
 * ```
 */

/** How an adaptive limit moves. */
export const ADAPTIVE_POLICIES = ['demand', 'aimd'] as const;
/** One of {@link ADAPTIVE_POLICIES}. */
export type AdaptivePolicy = (typeof ADAPTIVE_POLICIES)[number];

/** Settings of the `demand` policy (the defaults are the seed's). */
export interface DemandSettings {
  /** Rejected / decided above this ... @default 0.05 */
  readonly rejectAbove: number;
  /** ... in every interval for this long raises the limit. @default 300000 (5 min) */
  readonly rejectForMs: number;
  /** The raise when queued calls waited less than `fastWaitMs` on average. @default 0.2 */
  readonly raiseFast: number;
  /** @default 100 */
  readonly fastWaitMs: number;
  /** The raise otherwise. @default 0.1 */
  readonly raiseSlow: number;
  /** Admitted / the limit's capacity below this ... @default 0.3 */
  readonly utilisationBelow: number;
  /** ... in every interval for this long lowers the limit ... @default 1800000 (30 min) */
  readonly idleForMs: number;
  /** ... by this share. @default 0.15 */
  readonly lower: number;
}

/** Settings of the `aimd` policy. */
export interface AimdSettings {
  /** Permits added per interval while healthy and the limit binds. @default 5% of max (at least 1) */
  readonly increase: number;
  /** The limit is multiplied by this on trouble. @default 0.7 */
  readonly decrease: number;
  /** Failed / reported calls above this is trouble. @default 0.1 (the seed's error-rate trigger) */
  readonly errorRatioAbove: number;
  /** Mean reported latency above this (ms) is trouble too. @default none */
  readonly latencyAboveMs?: number;
  /** Fewest reported calls in an interval to judge the downstream. @default 20 */
  readonly minCalls: number;
}

/** One validated adaptive limit, defaults filled. */
export interface AdaptiveRule {
  /** The resource whose limit moves. */
  readonly resource: string;
  /** Which of its limits moves: its `id` (or position, as a string). @default the first */
  readonly limit: string;
  readonly min: number;
  readonly max: number;
  readonly policy: AdaptivePolicy;
  /** How often the signals are judged (and the length of one interval). @default 60000 */
  readonly intervalMs: number;
  /** Least time between two moves of the limit. @default 300000 for `demand`, `intervalMs` for `aimd` */
  readonly cooldownMs: number;
  readonly demand: DemandSettings;
  readonly aimd: AimdSettings;
}

/** Resource name -> its adaptive limit. */
export type AdaptiveRules = Readonly<Record<string, AdaptiveRule>>;

/** Bounds on the timing fields, so a typo cannot make the decider spin or never move. */
export const ADAPTIVE_BOUNDS = Object.freeze({ minIntervalMs: 50, maxIntervalMs: 3_600_000, maxSpanMs: 7 * 24 * 3_600_000 });

const share = z.number().gt(0).lt(1);
const span = z.number().int().min(ADAPTIVE_BOUNDS.minIntervalMs).max(ADAPTIVE_BOUNDS.maxSpanMs);

const demand = z.strictObject({
  rejectAbove: share.optional(),
  rejectForMs: span.optional(),
  raiseFast: z.number().gt(0).max(10).optional(),
  fastWaitMs: z.number().min(0).max(POLICY_BOUNDS.maxHoldMs).optional(),
  raiseSlow: z.number().gt(0).max(10).optional(),
  utilisationBelow: share.optional(),
  idleForMs: span.optional(),
  lower: share.optional(),
});

const aimd = z.strictObject({
  increase: z.number().int().min(1).max(POLICY_BOUNDS.maxLimit).optional(),
  decrease: share.optional(),
  errorRatioAbove: share.optional(),
  latencyAboveMs: z.number().gt(0).max(POLICY_BOUNDS.maxHoldMs).optional(),
  minCalls: z.number().int().min(1).max(1_000_000).optional(),
});

/** The schema of one entry of the `adaptive` section (shape and ranges; references are checked apart). */
export const adaptiveEntrySchema = z
  .strictObject({
    limit: z.string().min(1).max(POLICY_BOUNDS.maxIdLength).optional(),
    min: z.number().int().min(1).max(POLICY_BOUNDS.maxLimit),
    max: z.number().int().min(1).max(POLICY_BOUNDS.maxLimit),
    policy: z.enum(ADAPTIVE_POLICIES),
    intervalMs: z.number().int().min(ADAPTIVE_BOUNDS.minIntervalMs).max(ADAPTIVE_BOUNDS.maxIntervalMs).optional(),
    cooldownMs: span.optional(),
    demand: demand.optional(),
    aimd: aimd.optional(),
  })
  .superRefine((a, ctx) => {
    if (a.min > a.max) ctx.addIssue({ code: 'custom', path: ['max'], message: `must be at least min (${a.min})` });
    if (a.policy === 'demand' && a.aimd !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['aimd'], message: 'only for policy aimd' });
    }
    if (a.policy === 'aimd' && a.demand !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['demand'], message: 'only for policy demand' });
    }
  });

type AdaptiveInput = z.infer<typeof adaptiveEntrySchema>;

/** The schema of the `adaptive` section. */
export const adaptiveSchema = z.record(z.string(), adaptiveEntrySchema);

/** Index of the limit `ref` names (its id, else its position), or -1. */
export function adaptiveLimitIndex(limits: readonly LimitPolicy[], ref: string): number {
  const byId = limits.findIndex((l) => l.id === ref);
  if (byId >= 0) return byId;
  const at = /^(0|[1-9][0-9]?)$/.test(ref) ? Number(ref) : -1;
  return at >= 0 && at < limits.length && limits[at]!.id === undefined ? at : -1;
}

/**
 * Checks each entry against the resources of the same file and fills its defaults. The moved
 * limit must exist, count calls over a window (not `concurrency`) and lie within `[min, max]`.
 */
export function toAdaptiveRules(
  input: Readonly<Record<string, AdaptiveInput>> | undefined,
  resources: Readonly<Record<string, ResourceRule>>,
  issues: PathIssue[],
): AdaptiveRules {
  const out: Record<string, AdaptiveRule> = {};
  for (const [name, a] of Object.entries(input ?? {})) {
    const at: Path = ['adaptive', name];
    const resource = resources[name];
    if (resource === undefined) {
      issues.push({ path: at, message: 'is not a resource of this file' });
      continue;
    }
    const ref = a.limit ?? resource.limits[0]?.id ?? '0';
    const index = adaptiveLimitIndex(resource.limits, ref);
    const policy = resource.limits[index];
    if (policy === undefined) {
      issues.push({ path: [...at, 'limit'], message: `names no limit of the resource: ${JSON.stringify(ref)}` });
      continue;
    }
    if (ALGORITHM_TRAITS[policy.algorithm]?.rate === false) {
      issues.push({ path: [...at, 'limit'], message: 'a concurrency limit cannot adapt (it counts permits held, not calls)' });
      continue;
    }
    if (resource.split !== undefined && resource.split > 1) {
      issues.push({ path: at, message: 'a split resource cannot adapt' });
      continue;
    }
    if (policy.limit < a.min || policy.limit > a.max) {
      issues.push({
        path: [...at, 'min'],
        message: `the limit (${policy.limit}) must lie within [min, max] = [${a.min}, ${a.max}]`,
      });
      continue;
    }
    out[name] = Object.freeze({
      resource: name,
      limit: ref,
      min: a.min,
      max: a.max,
      policy: a.policy,
      intervalMs: a.intervalMs ?? 60_000,
      cooldownMs: a.cooldownMs ?? (a.policy === 'demand' ? 300_000 : (a.intervalMs ?? 60_000)),
      demand: Object.freeze({
        rejectAbove: a.demand?.rejectAbove ?? 0.05,
        rejectForMs: a.demand?.rejectForMs ?? 300_000,
        raiseFast: a.demand?.raiseFast ?? 0.2,
        fastWaitMs: a.demand?.fastWaitMs ?? 100,
        raiseSlow: a.demand?.raiseSlow ?? 0.1,
        utilisationBelow: a.demand?.utilisationBelow ?? 0.3,
        idleForMs: a.demand?.idleForMs ?? 1_800_000,
        lower: a.demand?.lower ?? 0.15,
      }),
      aimd: Object.freeze({
        increase: a.aimd?.increase ?? Math.max(1, Math.round(a.max * 0.05)),
        decrease: a.aimd?.decrease ?? 0.7,
        errorRatioAbove: a.aimd?.errorRatioAbove ?? 0.1,
        ...(a.aimd?.latencyAboveMs === undefined ? {} : { latencyAboveMs: a.aimd.latencyAboveMs }),
        minCalls: a.aimd?.minCalls ?? 20,
      }),
    });
  }
  return Object.freeze(out);
}
