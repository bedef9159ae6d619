import type { OutcomeTotals } from '@sluice/core';
import type { RolloutThresholds } from './plan.js';

/** Decisions of one cohort of one resource: how many, and how many were denied. */
export interface DecisionTally {
  readonly decided: number;
  readonly denied: number;
}

/** What was measured of one changed resource, per cohort. */
export interface CohortMeasure {
  readonly resource: string;
  readonly baseline: DecisionTally;
  readonly candidate: DecisionTally;
  /** Downstream outcomes, when an outcome source is known. */
  readonly baselineOutcomes?: OutcomeTotals;
  readonly candidateOutcomes?: OutcomeTotals;
}

/** The judge's answer: roll back (and why, with the figures), or keep going. */
export type Verdict =
  | { readonly rollback: false }
  | { readonly rollback: true; readonly reason: string; readonly measure: 'rejections' | 'errors' | 'latency' };

const pct = (r: number) => `${(r * 100).toFixed(1)}%`;

/**
 * Compares the candidate cohort with the baseline, resource by resource. A cohort with fewer
 * than `minCalls` is not judged; a baseline without enough traffic (at 100 %, or after the
 * promotion) counts as 0 % errors and rejections, so the increase is the candidate's own ratio.
 * The first measure beyond its threshold rolls back.
 */
export function judgeRollout(measures: readonly CohortMeasure[], t: RolloutThresholds): Verdict {
  for (const m of measures) {
    if (m.candidate.decided >= t.minCalls) {
      const cand = m.candidate.denied / m.candidate.decided;
      const base = m.baseline.decided >= t.minCalls ? m.baseline.denied / m.baseline.decided : 0;
      if (cand - base > t.maxRejectionRatioIncrease) {
        return {
          rollback: true,
          measure: 'rejections',
          reason: `${m.resource}: candidate rejection ratio ${pct(cand)} (${m.candidate.denied}/${m.candidate.decided}) against ${pct(base)} for the baseline, over the allowed rise of ${pct(t.maxRejectionRatioIncrease)}`,
        };
      }
    }
    const co = m.candidateOutcomes;
    if (co === undefined || co.calls < t.minCalls) continue;
    const bo = m.baselineOutcomes;
    const baseKnown = bo !== undefined && bo.calls >= t.minCalls;
    const candErr = co.failures / co.calls;
    const baseErr = baseKnown ? bo.failures / bo.calls : 0;
    if (candErr - baseErr > t.maxErrorRatioIncrease) {
      return {
        rollback: true,
        measure: 'errors',
        reason: `${m.resource}: candidate downstream error ratio ${pct(candErr)} (${co.failures}/${co.calls}) against ${pct(baseErr)} for the baseline, over the allowed rise of ${pct(t.maxErrorRatioIncrease)}`,
      };
    }
    if (baseKnown && bo.totalDurationMs > 0) {
      const candMean = co.totalDurationMs / co.calls;
      const baseMean = bo.totalDurationMs / bo.calls;
      if (candMean > baseMean * t.maxLatencyFactor) {
        return {
          rollback: true,
          measure: 'latency',
          reason: `${m.resource}: candidate mean downstream latency ${candMean.toFixed(1)} ms against ${baseMean.toFixed(1)} ms for the baseline, over ${t.maxLatencyFactor}x`,
        };
      }
    }
  }
  return { rollback: false };
}
