import {
  ALGORITHM_TRAITS,
  CircuitBreaker,
  ManualClock,
  RATE_ALGORITHMS,
  RESOURCE_PATTERN,
  STORE_FAILURE_POLICIES,
  compileLimits,
  compileResource,
  type Algorithm,
  type CircuitBreakerOptions,
  type LimitPolicy,
  type ResourceOptions,
} from '@sluice/core';
import { z } from 'zod';
import { adaptiveSchema } from './adaptive.js';
import { quotaSchema } from './quota.js';
import { governanceSchema } from './governance.js';
import { coreIssue, unlistLimits, type Path, type PathIssue } from './issues.js';

/** Circuit breaker settings in a rule file: core's `CircuitBreakerOptions` without the clock. */
export type RuleBreakerOptions = Omit<CircuitBreakerOptions, 'clock'>;

/** Lease settings in a rule file, as core's `ResourceOptions.lease`. */
export type RuleLeaseSettings = NonNullable<ResourceOptions['lease']>;

/** Booking bounds in a rule file, as core's `ResourceOptions.booking` (see `Limiter.book`). */
export type RuleBookingSettings = NonNullable<ResourceOptions['booking']>;

/**
 * One resource of a rule set, as core's `Limiter` takes it (`limiter.setResources(rules.resources)`):
 * core's `ResourceOptions` with the limits always a list, `shadow` always set, and each tenant's
 * quota as its list of limits.
 */
export type ResourceRule = Omit<ResourceOptions, 'limits' | 'breaker' | 'lease' | 'shadow' | 'tenants' | 'booking'> & {
  /** The limits, always as a list (a single limit in the file becomes a list of one). */
  readonly limits: readonly LimitPolicy[];
  readonly breaker?: RuleBreakerOptions;
  readonly lease?: RuleLeaseSettings;
  /** Bounds of deferred admission on the resource's keys (core's defaults when absent). */
  readonly booking?: Readonly<RuleBookingSettings>;
  /** Decide and count, but never block. */
  readonly shadow: boolean;
  /** Per-tenant quotas inside the resource's; `"*"` applies to every tenant not named. */
  readonly tenants?: Readonly<Record<string, readonly LimitPolicy[]>>;
};

const limitPolicy = z.strictObject({
  // Any string passes here: core's compileLimits names the algorithms in its own message.
  algorithm: z.string().transform((s) => s as Algorithm),
  limit: z.number(),
  windowMs: z.number().optional(),
  burst: z.number().optional(),
  slices: z.number().optional(),
  permitTtlMs: z.number().optional(),
  id: z.string().optional(),
});
const limits = z.union([limitPolicy, z.array(limitPolicy)]);

const breaker = z.strictObject({
  windowMs: z.number().optional(),
  buckets: z.number().optional(),
  minimumCalls: z.number().optional(),
  failureRateThreshold: z.number().optional(),
  slowCallDurationMs: z.number().optional(),
  slowCallRateThreshold: z.number().optional(),
  openDurationMs: z.number().optional(),
  halfOpenProbes: z.number().optional(),
  scope: z.enum(['process', 'fleet']).optional(),
  syncMs: z.number().optional(),
});

const lease = z.union([
  z.literal(true),
  z.strictObject({
    ttlMs: z.number().optional(),
    maxBatch: z.number().optional(),
    targetMs: z.number().optional(),
    maxShare: z.number().optional(),
  }),
]);

// Bounds (integers, ranges) are core's; only the shape is checked here.
const booking = z.strictObject({
  maxAheadMs: z.number().optional(),
  claimWindowMs: z.number().optional(),
  maxBookings: z.number().optional(),
  maxShare: z.number().optional(),
});

// Hot-key detection (see core's `HotKeyOptions`): bounds are core's, only the shape is checked here.
const hotKeyThreshold = z.strictObject({ rate: z.number().optional(), share: z.number().optional() });
const hotKeys = z.union([
  z.literal(true),
  z.strictObject({
    capacity: z.number().optional(),
    report: z.number().optional(),
    windowMs: z.number().optional(),
    threshold: hotKeyThreshold.optional(),
    action: z.literal('lease').optional(),
    lease: lease.optional(),
    coolAfterMs: z.number().optional(),
  }),
]);

/** Hot-key settings in a rule file, as core's `ResourceOptions.hotKeys`. */
export type RuleHotKeySettings = NonNullable<ResourceOptions['hotKeys']>;

// Compile-time checks that the schema names exactly core's fields: a field added to core
// fails the build here instead of being rejected as unknown at run time.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const fieldsMatch: [
  Same<keyof z.infer<typeof limitPolicy>, keyof LimitPolicy>,
  Same<keyof z.infer<typeof breaker>, keyof RuleBreakerOptions>,
  Same<keyof Exclude<z.infer<typeof lease>, true>, keyof Exclude<RuleLeaseSettings, true>>,
  Same<keyof z.infer<typeof booking>, keyof RuleBookingSettings>,
  Same<keyof Exclude<z.infer<typeof hotKeys>, true>, keyof Exclude<RuleHotKeySettings, true>>,
] = [true, true, true, true, true];
void fieldsMatch;

// Bounds of the core share and tenant names are core's; only shapes are checked here.
// Tiers (instead of `coreShare`): names, shares, their sum and the default are core's to check.
const priority = z.strictObject({
  coreShare: z.number().optional(),
  tiers: z.array(z.strictObject({ name: z.string(), share: z.number().optional() })).optional(),
  default: z.string().optional(),
});

// The boost pool: its limit is a policy (core's bounds), its tiers must be the resource's.
const boost = z.strictObject({
  limit: z.number(),
  windowMs: z.number().optional(),
  algorithm: z.enum(RATE_ALGORITHMS).optional(),
  tiers: z.array(z.string()),
});

const resourceName = z.string().refine((n) => RESOURCE_PATTERN.test(n), {
  error: `is not a valid resource name: must match ${String(RESOURCE_PATTERN)}`,
});
/** Prefix of the resources that hold envoy domains' limits (see `EnvoyDomain.resources`). */
export const ENVOY_RESOURCE_PREFIX = 'envoy:';
const notEnvoy = z.string().refine((n) => !n.startsWith(ENVOY_RESOURCE_PREFIX), {
  error: `is reserved: names starting with "${ENVOY_RESOURCE_PREFIX}" hold the limits of envoy domains`,
});

const clock = new ManualClock();
// Core validates with `resources.<name>` in its field names; any valid name will do here.
const PLACEHOLDER = 'r';

const resource = z
  .strictObject({
    limits,
    onStoreFailure: z.enum(STORE_FAILURE_POLICIES).optional(),
    shadow: z.boolean().optional(),
    priority: priority.optional(),
    tenants: z.record(z.string(), z.strictObject({ limits })).optional(),
    breaker: breaker.optional(),
    lease: lease.optional(),
    split: z.number().optional(),
    prefilter: z.boolean().optional(),
    booking: booking.optional(),
    hotKeys: hotKeys.optional(),
    boost: boost.optional(),
  })
  .superRefine((r, ctx) => {
    for (const issue of coreChecks(r)) ctx.addIssue({ code: 'custom', path: [...issue.path], message: issue.message });
  });

type ResourceInput = z.infer<typeof resource>;

/** Core's own validation of a resource, located in the file (relative to the resource). */
function coreChecks(r: ResourceInput): PathIssue[] {
  const issues: PathIssue[] = [];
  // Each tenant's limits are checked on their own first, so a problem is located under
  // `tenants.<name>.limits` as written in the file.
  for (const [name, tenant] of Object.entries(r.tenants ?? {})) {
    const at: Path = ['tenants', name, 'limits'];
    const t = coreIssue(() => compileLimits(tenant.limits), 'limits', at);
    if (t) issues.push({ ...t, path: Array.isArray(tenant.limits) ? t.path : unlistLimits(t.path, 2) });
  }
  const tenants = issues.length > 0 || r.tenants === undefined ? undefined : tenantLimits(r.tenants);
  const {
    limits: policies,
    onStoreFailure,
    lease: leaseOptions,
    split,
    prefilter,
    shadow,
    priority: p,
    booking: b,
    boost: bp,
  } = r;
  const { hotKeys: hk } = r;
  // The breaker is checked apart: core names its fields without the resource's path.
  const options: ResourceOptions = {
    limits: policies,
    onStoreFailure,
    lease: leaseOptions,
    split,
    prefilter,
    shadow,
    priority: p,
    tenants,
    booking: b,
    hotKeys: hk,
    boost: bp,
  };
  const base = coreIssue(() => compileResource(PLACEHOLDER, options, clock), `resources.${PLACEHOLDER}`, []);
  if (base)
    issues.push({
      ...base,
      path: !Array.isArray(r.limits) && base.path[0] === 'limits' ? unlistLimits(base.path, 0) : base.path,
    });
  if (b !== undefined) issues.push(...bookingIssues(r));
  if (r.breaker) {
    const breakerOptions = r.breaker;
    const b = coreIssue(() => new CircuitBreaker({ ...breakerOptions, clock }), '', ['breaker']);
    if (b) issues.push(b);
  }
  return issues;
}

/**
 * Booking bounds on a resource whose calls are never booked (the limiter decides them as plain
 * checks, see `Limiter.book`) would have no effect: refused, so a file never promises bookings
 * it cannot give. Shadow mode and a core share are left alone: they are switched on and
 * off (and core-priority calls of a resource with a core share are booked).
 */
function bookingIssues(r: ResourceInput): PathIssue[] {
  const why = list(r.limits).some((l) => ALGORITHM_TRAITS[l.algorithm]?.rate === false)
    ? 'concurrency limits cannot be booked'
    : r.lease !== undefined
      ? 'a leased resource cannot be booked'
      : r.split !== undefined && r.split > 1
        ? 'a split resource cannot be booked'
        : undefined;
  return why === undefined ? [] : [{ path: ['booking'], message: why }];
}

const list = <T>(v: T | readonly T[]): readonly T[] => (Array.isArray(v) ? (v as readonly T[]) : [v as T]);
const frozenLimits = (v: LimitPolicy | readonly LimitPolicy[]) => Object.freeze(list(v).map((p) => Object.freeze({ ...p })));

function tenantLimits(tenants: NonNullable<ResourceInput['tenants']>): Readonly<Record<string, readonly LimitPolicy[]>> {
  return Object.freeze(Object.fromEntries(Object.entries(tenants).map(([name, t]) => [name, frozenLimits(t.limits)])));
}

/** The schema of an envoy domain, provided by the envoy module (it is shared with its files). */
export function nativeSchema<D extends z.ZodType>(domain: D) {
  return z.strictObject({
    resources: z.record(resourceName.pipe(notEnvoy), resource).optional(),
    domains: z.array(domain).optional(),
    governance: governanceSchema.optional(),
    adaptive: adaptiveSchema.optional(),
    quota: quotaSchema.optional(),
  });
}

/** The resource as the limiter takes it: lists everywhere, unset options left out, frozen. */
export function toResourceRule(r: ResourceInput): ResourceRule {
  const out: Record<string, unknown> = { limits: frozenLimits(r.limits) };
  if (r.onStoreFailure !== undefined) out.onStoreFailure = r.onStoreFailure;
  out.shadow = r.shadow ?? false;
  if (r.priority !== undefined) out.priority = Object.freeze({ ...r.priority });
  if (r.tenants !== undefined) out.tenants = tenantLimits(r.tenants);
  if (r.breaker !== undefined) out.breaker = Object.freeze({ ...r.breaker });
  if (r.lease !== undefined) out.lease = r.lease === true ? true : Object.freeze({ ...r.lease });
  if (r.split !== undefined) out.split = r.split;
  if (r.prefilter !== undefined) out.prefilter = r.prefilter;
  if (r.booking !== undefined) out.booking = Object.freeze({ ...r.booking });
  if (r.hotKeys !== undefined) out.hotKeys = r.hotKeys === true ? true : freezeHotKeys(r.hotKeys);
  if (r.priority?.tiers !== undefined) {
    out.priority = Object.freeze({ ...r.priority, tiers: Object.freeze(r.priority.tiers.map((t) => Object.freeze({ ...t }))) });
  }
  if (r.boost !== undefined) out.boost = Object.freeze({ ...r.boost, tiers: Object.freeze([...r.boost.tiers]) });
  return Object.freeze(out) as ResourceRule;
}

function freezeHotKeys(h: Exclude<NonNullable<ResourceInput['hotKeys']>, true>): RuleHotKeySettings {
  const out: Record<string, unknown> = { ...h };
  if (h.threshold !== undefined) out.threshold = Object.freeze({ ...h.threshold });
  if (h.lease !== undefined && h.lease !== true) out.lease = Object.freeze({ ...h.lease });
  return Object.freeze(out);
}
