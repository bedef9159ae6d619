import type { OutcomeTotals } from '@sluice/core';
import type { AdaptiveRule } from '@sluice/rules';

/**
 * What the fleet's decisions on one adaptive resource came to over one interval (every server's
 * counts summed). An interval with no record was not observed (no server was recording): it
 * breaks a streak instead of counting as idle.
 */
export interface IntervalDemand {
  /** Start of the interval (ms, a multiple of the rule's `intervalMs`). */
  readonly start: number;
  readonly decided: number;
  readonly rejected: number;
  /**
   * The highest share of the deciding limit in use after an admitted call (0..1; 0 when none
   * was admitted). The peak, not the mean, so a limit is lowered only when even its busiest
   * moment used little of it, and a fixed window's reset does not read as idle capacity.
   */
  readonly peakShare: number;
  /** Queued acquires that ended, and the sum of their waits (ms). */
  readonly waits: number;
  readonly waitedMs: number;
}

/** The limit as it stands when a rule is judged. */
export interface AdaptiveState {
  /** The moved limit's current value. */
  readonly limit: number;
  /** When the limit last moved (ms), if it has. */
  readonly lastMoveAt?: number;
}

/** A move the policy asks for. */
export interface AdaptiveMove {
  readonly from: number;
  readonly to: number;
  readonly direction: 'up' | 'down';
  /** The measured reason, recorded as the version's reason. */
  readonly reason: string;
}

/** What the policy is judged on. */
export interface AdaptiveSignals {
  /** The intervals observed, oldest first; only complete intervals (the current one excluded). */
  readonly intervals: readonly IntervalDemand[];
  /** Reported downstream outcomes over the last interval (the `aimd` policy only). */
  readonly outcomes?: OutcomeTotals;
}

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const clamp = (rule: AdaptiveRule, x: number): number => Math.min(rule.max, Math.max(rule.min, x));
/** `x` rounded to 9 digits first, so 100 x 1.1 is 110, not 110.00000000000001 (ceil: 111). */
const exact = (x: number): number => Math.round(x * 1e9) / 1e9;

/**
 * The last `n` intervals when they are contiguous, end with the last complete one and all
 * started after the latest move (an interval that saw the old limit says nothing of the new).
 */
function streak(
  rule: AdaptiveRule,
  intervals: readonly IntervalDemand[],
  n: number,
  now: number,
  since: number,
): IntervalDemand[] | undefined {
  const lastStart = Math.floor(now / rule.intervalMs) * rule.intervalMs - rule.intervalMs;
  const byStart = new Map(intervals.map((i) => [i.start, i]));
  const out: IntervalDemand[] = [];
  for (let k = n - 1; k >= 0; k--) {
    const start = lastStart - k * rule.intervalMs;
    const i = byStart.get(start);
    if (i === undefined || start < since) return undefined;
    out.push(i);
  }
  return out;
}

function judgeDemand(rule: AdaptiveRule, state: AdaptiveState, signals: AdaptiveSignals, now: number): AdaptiveMove | undefined {
  const d = rule.demand;
  const since = state.lastMoveAt ?? Number.NEGATIVE_INFINITY;
  const busy = streak(rule, signals.intervals, Math.max(1, Math.ceil(d.rejectForMs / rule.intervalMs)), now, since);
  if (busy?.every((i) => i.decided > 0 && i.rejected / i.decided > d.rejectAbove)) {
    const decided = busy.reduce((s, i) => s + i.decided, 0);
    const rejected = busy.reduce((s, i) => s + i.rejected, 0);
    const waits = busy.reduce((s, i) => s + i.waits, 0);
    const meanWait = waits === 0 ? 0 : busy.reduce((s, i) => s + i.waitedMs, 0) / waits;
    const fast = meanWait < d.fastWaitMs;
    const raise = fast ? d.raiseFast : d.raiseSlow;
    const to = clamp(rule, Math.ceil(exact(state.limit * (1 + raise))));
    if (to <= state.limit) return undefined;
    return {
      from: state.limit,
      to,
      direction: 'up',
      reason:
        `rejections ${pct(rejected / decided)} (${rejected} of ${decided}) > ${pct(d.rejectAbove)} in every interval ` +
        `for ${d.rejectForMs / 1000} s, mean wait ${meanWait.toFixed(0)} ms ${fast ? '<' : '>='} ${d.fastWaitMs} ms: ` +
        `+${pct(raise)}`,
    };
  }
  const idle = streak(rule, signals.intervals, Math.max(1, Math.ceil(d.idleForMs / rule.intervalMs)), now, since);
  if (idle?.every((i) => i.peakShare < d.utilisationBelow)) {
    const peak = Math.max(...idle.map((i) => i.peakShare));
    const to = clamp(rule, Math.floor(exact(state.limit * (1 - d.lower))));
    if (to >= state.limit) return undefined;
    return {
      from: state.limit,
      to,
      direction: 'down',
      reason: `utilisation at most ${pct(peak)} < ${pct(d.utilisationBelow)} in every interval for ${d.idleForMs / 1000} s: -${pct(d.lower)}`,
    };
  }
  return undefined;
}

function judgeAimd(rule: AdaptiveRule, state: AdaptiveState, signals: AdaptiveSignals, now: number): AdaptiveMove | undefined {
  const a = rule.aimd;
  const o = signals.outcomes;
  // The last interval must have run wholly under the current limit, so its outcomes are its own.
  const last = streak(rule, signals.intervals, 1, now, state.lastMoveAt ?? Number.NEGATIVE_INFINITY)?.[0];
  if (last === undefined || o === undefined || o.calls < a.minCalls) return undefined;
  const errorRatio = o.failures / o.calls;
  const latency = o.totalDurationMs / o.calls;
  const slowDown = a.latencyAboveMs !== undefined && latency > a.latencyAboveMs;
  if (errorRatio > a.errorRatioAbove || slowDown) {
    const to = clamp(rule, Math.floor(exact(state.limit * a.decrease)));
    if (to >= state.limit) return undefined;
    const why =
      errorRatio > a.errorRatioAbove
        ? `downstream error ratio ${pct(errorRatio)} (${o.failures} of ${o.calls}) > ${pct(a.errorRatioAbove)}`
        : `downstream mean latency ${latency.toFixed(0)} ms > ${a.latencyAboveMs} ms`;
    return { from: state.limit, to, direction: 'down', reason: `${why}: x${a.decrease}` };
  }
  // Healthy, but raise only while the limit binds: with no rejections a higher limit is untested.
  if (last.rejected === 0) return undefined;
  const to = clamp(rule, state.limit + a.increase);
  if (to <= state.limit) return undefined;
  return {
    from: state.limit,
    to,
    direction: 'up',
    reason:
      `downstream healthy (error ratio ${pct(errorRatio)}, mean latency ${latency.toFixed(0)} ms over ${o.calls} calls) ` +
      `and ${last.rejected} of ${last.decided} calls rejected: +${a.increase}`,
  };
}

/**
 * Judges one adaptive limit at `now`: the move its policy asks for, or none. Pure: the same
 * signals give the same answer on any server, so it does not matter which one decides. No move
 * within `cooldownMs` of the last one; the result always lies within `[min, max]`.
 */
export function judgeAdaptive(
  rule: AdaptiveRule,
  state: AdaptiveState,
  signals: AdaptiveSignals,
  now: number,
): AdaptiveMove | undefined {
  if (state.lastMoveAt !== undefined && now - state.lastMoveAt < rule.cooldownMs) return undefined;
  return rule.policy === 'demand' ? judgeDemand(rule, state, signals, now) : judgeAimd(rule, state, signals, now);
}
