import { canonicalJson, compileExpression, type GovernanceRule, type GovernanceRules } from '@sluice/rules';
import { DIMENSIONS, EventOutcome, hashValue, type Dimension, type GatewayEvent } from '@sluice/stream';
import { windowRequests, windowShape, windowStats, type SlidingWindow, type WindowShape } from './window.js';

/** A governance rule ready for the hot path: match values hashed, the expression parsed once. */
export interface CompiledRule {
  readonly id: string;
  readonly dimension: Dimension;
  /** Wire index of the dimension (its position in {@link DIMENSIONS}). */
  readonly dimensionIndex: number;
  readonly shape: WindowShape;
  readonly blockMs: number;
  /**
   * Identifies what the rule counts (type, dimension, match, window): a table kept across a rule
   * reload only when this is unchanged, and a restored snapshot only when it matches.
   */
  readonly signature: string;
  /**
   * True when the rule counts every request its match conditions select, whatever its answer
   * (no `status` or `outcome` condition): requests a gateway rejected count for it too, as
   * offered load. A rule counting failures (login failures, 5xx) does not count rejections.
   */
  readonly countsRejected: boolean;
  /** True when the event counts for this rule. */
  matches(e: GatewayEvent): boolean;
  /** True when the value's window makes the rule fire at `now`. Throws when an expression fails. */
  fires(w: SlidingWindow, now: number): boolean;
}

type Check = (e: GatewayEvent) => boolean;

function matcher(rule: GovernanceRule): Check {
  const checks: Check[] = [];
  for (const d of DIMENSIONS) {
    const v = rule.match[d];
    if (v !== undefined) {
      const h = hashValue(v);
      checks.push((e) => e[d] === h);
    }
  }
  if (rule.match.status !== undefined) {
    const statuses = new Set(rule.match.status);
    checks.push((e) => statuses.has(e.status));
  }
  if (rule.match.outcome !== undefined) {
    const want = rule.match.outcome === 'error' ? EventOutcome.ERROR : EventOutcome.PASSED;
    checks.push((e) => e.outcome === want);
  }
  const dimension = rule.dimension;
  // An event without a value for the rule's dimension (no user, say) is not counted.
  return (e) => {
    if (e[dimension] === 0) return false;
    for (const c of checks) if (!c(e)) return false;
    return true;
  };
}

/** Compiles one validated rule (from `@sluice/rules`). Throws when its expression is not a valid condition. */
export function compileRule(rule: GovernanceRule): CompiledRule {
  const shape = windowShape(rule.windowMs, rule.slices);
  const { blockMs: _blockMs, ...counted } = rule;
  const signature = canonicalJson(
    rule.type === 'expression' ? { ...counted, when: undefined } : { ...counted, limit: undefined },
  );
  let fires: CompiledRule['fires'];
  if (rule.when !== undefined) {
    // Checked again here (rules given in code skip the rule file's validation): RE2 for
    // `matches`, no loops, so one evaluation is bounded by the expression's size.
    const evaluate = compileExpression(rule.when);
    const windowSeconds = rule.windowMs / 1000;
    fires = (w, now) => {
      const s = windowStats(w, shape, now);
      return evaluate({
        requests: BigInt(Math.round(s.requests)),
        errors: BigInt(Math.round(s.errors)),
        status2xx: BigInt(Math.round(s.status2xx)),
        status3xx: BigInt(Math.round(s.status3xx)),
        status4xx: BigInt(Math.round(s.status4xx)),
        status5xx: BigInt(Math.round(s.status5xx)),
        windowSeconds,
        rate: s.requests / windowSeconds,
      });
    };
  } else {
    const limit = rule.limit ?? Number.POSITIVE_INFINITY;
    fires = (w, now) => windowRequests(w, shape, now) > limit;
  }
  return Object.freeze({
    id: rule.id,
    dimension: rule.dimension,
    dimensionIndex: DIMENSIONS.indexOf(rule.dimension),
    shape,
    blockMs: rule.blockMs,
    signature,
    countsRejected: rule.match.status === undefined && rule.match.outcome === undefined,
    matches: matcher(rule),
    fires,
  });
}

/** Compiles every rule of a rule set's `governance` section, in id order. */
export function compileRules(rules: GovernanceRules): CompiledRule[] {
  return Object.keys(rules)
    .sort()
    .map((id) => compileRule(rules[id]!));
}
