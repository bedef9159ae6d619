import { describe, expect, it } from 'vitest';
import { judgeRollout, type CohortMeasure } from './judge.js';
import { DEFAULT_ROLLOUT_THRESHOLDS, compileRolloutPlan, rampAction, rolloutPercent, type RolloutState } from './plan.js';

const plan = compileRolloutPlan({
  steps: [
    { percent: 1, holdMs: 100 },
    { percent: 50, holdMs: 100 },
  ],
  watchMs: 50,
});
const state = (over: Partial<RolloutState>): RolloutState => ({
  id: 'r',
  revision: 1,
  status: 'running',
  baseline: 1,
  candidate: { source: '', file: 'rules.yaml', hash: 'h' },
  resources: ['orders'],
  author: 'ana',
  reason: 'test',
  ...plan,
  step: 0,
  stepStartedAtMs: 1000,
  startedAtMs: 1000,
  updatedAtMs: 1000,
  ...over,
});

describe('compileRolloutPlan', () => {
  it('fills the defaults: 1 -> 10 -> 50 -> 100 %, 10 points of error rate', () => {
    const p = compileRolloutPlan();
    expect(p.steps.map((s) => s.percent)).toEqual([1, 10, 50, 100]);
    expect(p.thresholds).toEqual(DEFAULT_ROLLOUT_THRESHOLDS);
    expect(p.thresholds.maxErrorRatioIncrease).toBe(0.1);
  });

  it.each([
    [{ steps: [] }, 'steps: must have at least one step'],
    [
      {
        steps: [
          { percent: 10, holdMs: 1 },
          { percent: 5, holdMs: 1 },
        ],
      },
      'steps: shares must rise from step to step',
    ],
    [{ steps: [{ percent: 101, holdMs: 1 }] }, 'steps[0].percent: must be at most 100'],
    [{ steps: [{ percent: 0.001, holdMs: 1 }] }, 'steps[0].percent: must be at least 0.01'],
    [{ steps: [{ percent: 1, holdMs: 1, extra: 1 }] }, 'steps[0]'],
    [{ thresholds: { minCalls: 0 } }, 'thresholds.minCalls'],
  ])('refuses %j', (options, message) => {
    expect(() => compileRolloutPlan(options as never)).toThrow(expect.objectContaining({ code: 'SLUICE_ERR_INVALID_OPTIONS' }));
    expect(() => compileRolloutPlan(options as never)).toThrow(message);
  });
});

describe('rampAction', () => {
  it('holds each step, advances, promotes after the last, and completes after the watch', () => {
    expect(rampAction(state({}), 1099)).toBeUndefined();
    expect(rampAction(state({}), 1100)).toBe('advance');
    expect(rampAction(state({ step: 1 }), 1100)).toBe('promote');
    expect(rampAction(state({ status: 'paused' }), 5000)).toBeUndefined();
    expect(rampAction(state({ status: 'watching' }), 1049)).toBeUndefined();
    expect(rampAction(state({ status: 'watching' }), 1050)).toBe('complete');
    expect(rampAction(state({ status: 'rolled_back' }), 9999)).toBeUndefined();
  });

  it('gives the share in force: the step while splitting, all once promoted, none once ended', () => {
    expect(rolloutPercent(state({ step: 1 }))).toBe(50);
    expect(rolloutPercent(state({ status: 'paused' }))).toBe(1);
    expect(rolloutPercent(state({ status: 'watching' }))).toBe(100);
    expect(rolloutPercent(state({ status: 'aborted' }))).toBe(0);
    expect(rolloutPercent(undefined)).toBe(0);
  });
});

describe('judgeRollout', () => {
  const t = { ...DEFAULT_ROLLOUT_THRESHOLDS, minCalls: 10 };
  const m = (over: Partial<CohortMeasure>): CohortMeasure => ({
    resource: 'orders',
    baseline: { decided: 100, denied: 5 },
    candidate: { decided: 100, denied: 10 },
    ...over,
  });
  const outcomes = (calls: number, failures: number, totalDurationMs = calls * 10) => ({
    calls,
    failures,
    slow: 0,
    totalDurationMs,
  });

  it('keeps a candidate within the thresholds', () => {
    expect(judgeRollout([m({})], t)).toEqual({ rollback: false });
  });

  it('rolls back on a rejection ratio risen beyond the threshold, naming the figures', () => {
    const v = judgeRollout([m({ candidate: { decided: 100, denied: 16 } })], t);
    expect(v).toEqual({
      rollback: true,
      measure: 'rejections',
      reason: 'orders: candidate rejection ratio 16.0% (16/100) against 5.0% for the baseline, over the allowed rise of 10.0%',
    });
  });

  it('does not judge a cohort with too few decisions', () => {
    expect(judgeRollout([m({ candidate: { decided: 9, denied: 9 } })], t).rollback).toBe(false);
  });

  it('judges downstream errors (the seed: above 10 %) and latency against the baseline', () => {
    const errors = judgeRollout([m({ baselineOutcomes: outcomes(100, 1), candidateOutcomes: outcomes(50, 6) })], t);
    expect(errors).toMatchObject({ rollback: true });
    expect(errors.rollback && errors.reason).toMatch(/downstream error ratio 12\.0% \(6\/50\) against 1\.0%/);
    expect(judgeRollout([m({ baselineOutcomes: outcomes(100, 1), candidateOutcomes: outcomes(50, 5) })], t).rollback).toBe(false);
    const slow = judgeRollout([m({ baselineOutcomes: outcomes(100, 0, 1000), candidateOutcomes: outcomes(50, 0, 1500) })], t);
    expect(slow.rollback && slow.reason).toMatch(/mean downstream latency 30\.0 ms against 10\.0 ms/);
  });

  it('compares with 0 % when the baseline has too little traffic (100 %, or after promotion)', () => {
    const v = judgeRollout([m({ baseline: { decided: 0, denied: 0 }, candidateOutcomes: outcomes(20, 3) })], t);
    expect(v.rollback && v.reason).toMatch(/error ratio 15\.0% \(3\/20\) against 0\.0%/);
  });
});
