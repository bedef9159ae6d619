import { z } from 'zod';
import { MAX_EXPRESSION_LENGTH, expressionProblem } from './expression.js';

/**
 * The `governance` section of a rule file: rules that aggregators of `@sluice/governance` evaluate
 * over sliding windows of gateway events, and whose block/lift decisions every gateway applies.
 *
 * ```yaml
 * governance:
 *   rules:
 *     search-burst: # over 500 requests/s on one path blocks that path for 10 s
 *       type: threshold
 *       dimension: path
 *       limit: 500
 *       blockMs: 10000
 *     login-failures: # over 10 failed logins in 5 minutes blocks the user everywhere for 15 minutes
 *       type: correlated
 *       dimension: user
 *       match: { path: /login, status: [401, 403] }
 *       limit: 10
 *       windowMs: 300000
 *       blockMs: 900000
 *     failing-paths:
 *       type: expression
 *       dimension: path
 *       when: 'errors > 20 && double(errors) / double(requests) > 0.5'
 * ```
 */

/** The dimensions an event is counted and blocked by (the gateway's decision cache keys). */
export const GOVERNANCE_DIMENSIONS = ['resource', 'path', 'user', 'ip', 'tenant'] as const;
/** One of {@link GOVERNANCE_DIMENSIONS}. */
export type GovernanceDimension = (typeof GOVERNANCE_DIMENSIONS)[number];

/** The kinds of governance rules. */
export const GOVERNANCE_RULE_TYPES = ['threshold', 'correlated', 'expression'] as const;
/** One of {@link GOVERNANCE_RULE_TYPES}. */
export type GovernanceRuleType = (typeof GOVERNANCE_RULE_TYPES)[number];

/** Which events a rule counts. Values are the strings gateways hash (a path as routed, a user id). */
export interface GovernanceMatch {
  readonly resource?: string;
  readonly path?: string;
  readonly user?: string;
  readonly ip?: string;
  readonly tenant?: string;
  /** Only answers with one of these HTTP statuses. */
  readonly status?: readonly number[];
  /** Only passed answers, or only errors (5xx, aborted). */
  readonly outcome?: 'passed' | 'error';
}

/** One validated governance rule. */
export interface GovernanceRule {
  readonly id: string;
  readonly type: GovernanceRuleType;
  /** The dimension whose values are counted, and blocked when the rule fires. */
  readonly dimension: GovernanceDimension;
  /** Which events count (all when empty). */
  readonly match: GovernanceMatch;
  /** threshold, correlated: the rule fires when more than `limit` matching events fall in the window. */
  readonly limit?: number;
  /** expression: a CEL expression over the window's statistics that fires the rule when true. */
  readonly when?: string;
  /** Sliding window length. */
  readonly windowMs: number;
  /** Slices of the window (its resolution is `windowMs / slices`). */
  readonly slices: number;
  /** How long a value stays blocked at least once the rule fires. */
  readonly blockMs: number;
}

/** Rule id -> rule. */
export type GovernanceRules = Readonly<Record<string, GovernanceRule>>;

/** Most governance rules in one rule set. */
export const MAX_GOVERNANCE_RULES = 256;
/** Rule ids: at most 64 characters, as a decision carries them. */
export const GOVERNANCE_RULE_ID = /^[A-Za-z0-9_.:/@-]{1,64}$/;
/** Defaults of the optional rule fields. */
export const GOVERNANCE_DEFAULTS = Object.freeze({ windowMs: 1000, slices: 10, blockMs: 5000 });

const matchValue = z.string().min(1).max(256);
const integer = (min: number, max: number) =>
  z
    .number()
    .refine((n) => Number.isInteger(n), { error: 'must be an integer' })
    .refine((n) => n >= min && n <= max, { error: (i) => `must be between ${min} and ${max}, got ${String(i.input)}` });

const match = z.strictObject({
  resource: matchValue.optional(),
  path: matchValue.optional(),
  user: matchValue.optional(),
  ip: matchValue.optional(),
  tenant: matchValue.optional(),
  status: z.array(integer(100, 599)).min(1).max(32).optional(),
  outcome: z.enum(['passed', 'error']).optional(),
});

const rule = z
  .strictObject({
    type: z.enum(GOVERNANCE_RULE_TYPES),
    dimension: z.enum(GOVERNANCE_DIMENSIONS),
    match: match.optional(),
    limit: integer(1, 1_000_000_000).optional(),
    when: z.string().max(MAX_EXPRESSION_LENGTH).optional(),
    windowMs: integer(100, 86_400_000).optional(),
    slices: integer(1, 60).optional(),
    blockMs: integer(100, 86_400_000).optional(),
  })
  .superRefine((r, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
    if (r.type === 'expression') {
      if (r.when === undefined) issue('when', 'is required for an expression rule');
      else {
        const problem = expressionProblem(r.when);
        if (problem !== undefined) issue('when', problem);
      }
      if (r.limit !== undefined)
        issue('limit', 'belongs to threshold and correlated rules; an expression rule states its condition in "when"');
    } else {
      if (r.limit === undefined) issue('limit', `is required for a ${r.type} rule`);
      if (r.when !== undefined) issue('when', `belongs to expression rules, not to a ${r.type} rule`);
    }
    if (r.type === 'correlated') {
      const others = Object.keys(r.match ?? {}).filter((k) => k !== r.dimension);
      if (others.length === 0) {
        issue(
          'match',
          `a correlated rule counts ${r.dimension}s by other conditions: give at least one of match.resource, path, user, ip, tenant, status, outcome other than ${r.dimension}`,
        );
      }
    }
    const windowMs = r.windowMs ?? GOVERNANCE_DEFAULTS.windowMs;
    const slices = r.slices ?? GOVERNANCE_DEFAULTS.slices;
    if (Number.isInteger(windowMs) && Number.isInteger(slices) && slices > 0 && windowMs % slices !== 0) {
      issue('slices', `must divide windowMs (${windowMs}) evenly, got ${slices}`);
    }
  });

type RuleInput = z.infer<typeof rule>;

const ruleId = z.string().refine((n) => GOVERNANCE_RULE_ID.test(n), {
  error: `is not a valid rule id: must match ${String(GOVERNANCE_RULE_ID)}`,
});

/** The schema of the `governance` section. */
export const governanceSchema = z.strictObject({
  rules: z.record(ruleId, rule).refine((r) => Object.keys(r).length <= MAX_GOVERNANCE_RULES, {
    error: `must hold at most ${MAX_GOVERNANCE_RULES} rules`,
  }),
});

/** The validated section as parsed. */
export type GovernanceInput = z.infer<typeof governanceSchema>;

function toRule(id: string, r: RuleInput): GovernanceRule {
  const m: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r.match ?? {})) {
    if (v !== undefined) m[k] = Array.isArray(v) ? Object.freeze([...v]) : v;
  }
  const out: Record<string, unknown> = {
    id,
    type: r.type,
    dimension: r.dimension,
    match: Object.freeze(m),
    windowMs: r.windowMs ?? GOVERNANCE_DEFAULTS.windowMs,
    slices: r.slices ?? GOVERNANCE_DEFAULTS.slices,
    blockMs: r.blockMs ?? GOVERNANCE_DEFAULTS.blockMs,
  };
  if (r.limit !== undefined) out.limit = r.limit;
  if (r.when !== undefined) out.when = r.when;
  return Object.freeze(out) as unknown as GovernanceRule;
}

/** The compiled, frozen rules of a validated section (defaults filled in). */
export function toGovernanceRules(input: GovernanceInput | undefined): GovernanceRules {
  if (input === undefined) return Object.freeze({});
  return Object.freeze(Object.fromEntries(Object.entries(input.rules).map(([id, r]) => [id, toRule(id, r)])));
}
