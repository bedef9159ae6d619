import { z } from 'zod';
import { compileOptions } from '../store/common.js';

/** One step of a rollout: the share of keys on the candidate, and how long it holds. */
export interface RolloutStep {
  /** Share of keys (0.01..100, in steps of 0.01) on the candidate version. */
  readonly percent: number;
  /** How long the step holds before the next one (or the promotion), in ms. */
  readonly holdMs: number;
}

/** When a candidate counts as worse than the baseline (each an increase over the baseline). */
export interface RolloutThresholds {
  /**
   * Largest rise of the downstream error ratio (failures / calls) over the baseline's.
   * @default 0.1
   */
  readonly maxErrorRatioIncrease: number;
  /**
   * Largest rise of the rejection ratio (denied / decided) over the baseline's.
   * @default 0.1
   */
  readonly maxRejectionRatioIncrease: number;
  /**
   * Largest factor of the mean downstream latency over the baseline's.
   * @default 2
   */
  readonly maxLatencyFactor: number;
  /**
   * Fewest decisions (or reported calls) a cohort needs before it is judged.
   * @default 20
   */
  readonly minCalls: number;
}

/** Where a rollout is. `running` and `paused` split keys; `watching` follows a full apply. */
export type RolloutStatus = 'running' | 'paused' | 'watching' | 'completed' | 'aborted' | 'rolled_back';

/** Statuses that end a rollout. */
export const FINISHED_STATUSES: readonly RolloutStatus[] = Object.freeze(['completed', 'aborted', 'rolled_back']);

/** The candidate rule text of a rollout (it becomes a version only when promoted). */
export interface RolloutCandidate {
  readonly source: string;
  readonly file: string;
  /** The candidate rule set's content hash. */
  readonly hash: string;
}

/**
 * A rollout as every server reads it from the rule store. `revision` counts its writes: each
 * change names the revision it read, so two writers never both win.
 */
export interface RolloutState {
  /** Random id; also the salt of the cohort hash. */
  readonly id: string;
  readonly revision: number;
  readonly status: RolloutStatus;
  /** The version in force for the baseline cohort. */
  readonly baseline: number;
  readonly candidate: RolloutCandidate;
  /** Native resources the candidate adds or changes: only their keys are split. */
  readonly resources: readonly string[];
  /**
   * Envoy domains the candidate adds or changes: their descriptors are split too, each by its
   * entries (see {@link rolloutDomainLabel}). Absent in rollouts that split none.
   */
  readonly domains?: readonly string[];
  readonly author: string;
  readonly reason: string;
  readonly steps: readonly RolloutStep[];
  /** Index of the step in force. */
  readonly step: number;
  readonly stepStartedAtMs: number;
  /** How long a promoted candidate is watched (and can still be rolled back), in ms. */
  readonly watchMs: number;
  readonly thresholds: RolloutThresholds;
  readonly startedAtMs: number;
  readonly updatedAtMs: number;
  /** Set once promoted: the version the candidate was recorded as. */
  readonly version?: number;
  /** Set once rolled back: the version that restored the baseline. */
  readonly rollbackVersion?: number;
  /** Why the rollout is where it is (the last action's author and reason, or the measured reason). */
  readonly note?: string;
}

/**
 * The name Envoy domain `domain` goes by in a rollout's cohort hash, tallies and verdicts:
 * `domain <name>`. No resource name holds a space, so the two never meet.
 */
export function rolloutDomainLabel(domain: string): string {
  return `domain ${domain}`;
}

/** Every name a rollout splits: its resources, then its domains' labels. */
export function rolloutSplitNames(state: RolloutState): string[] {
  return [...state.resources, ...(state.domains ?? []).map(rolloutDomainLabel)];
}

/** Options of a new rollout (see {@link compileRolloutPlan}). */
export interface RolloutPlanOptions {
  /**
   * The steps, shares rising.
   * @default 1 % -> 10 % -> 50 % -> 100 %, each held 5 minutes
   */
  steps?: readonly RolloutStep[];
  /**
   * How long a promoted candidate is watched, in ms.
   * @default 600000
   */
  watchMs?: number;
  /** When the candidate is rolled back (see {@link RolloutThresholds}). */
  thresholds?: Partial<RolloutThresholds>;
}

/** Most steps a rollout has. */
export const MAX_ROLLOUT_STEPS = 20;

/** The default thresholds: the candidate is rolled back when its error rate is 10 points above. */
export const DEFAULT_ROLLOUT_THRESHOLDS: RolloutThresholds = Object.freeze({
  maxErrorRatioIncrease: 0.1,
  maxRejectionRatioIncrease: 0.1,
  maxLatencyFactor: 2,
  minCalls: 20,
});

const DEFAULT_STEPS: readonly RolloutStep[] = Object.freeze(
  [1, 10, 50, 100].map((percent) => Object.freeze({ percent, holdMs: 300_000 })),
);

const step = z.strictObject({
  percent: z
    .number({ error: 'must be a number' })
    .min(0.01, 'must be at least 0.01')
    .max(100, 'must be at most 100')
    .refine((p) => Math.abs(p * 100 - Math.round(p * 100)) < 1e-9, 'must be a multiple of 0.01'),
  holdMs: z
    .number({ error: 'must be a number' })
    .int('must be an integer')
    .min(0)
    .max(7 * 86_400_000),
});

const planSchema = z.strictObject({
  steps: z
    .array(step)
    .min(1, 'must have at least one step')
    .max(MAX_ROLLOUT_STEPS, `must have at most ${MAX_ROLLOUT_STEPS} steps`)
    .refine((s) => s.every((x, i) => i === 0 || x.percent > s[i - 1]!.percent), 'shares must rise from step to step')
    .optional(),
  watchMs: z
    .number({ error: 'must be a number' })
    .int('must be an integer')
    .min(0)
    .max(7 * 86_400_000)
    .optional(),
  thresholds: z
    .strictObject({
      maxErrorRatioIncrease: z.number().min(0).max(1).optional(),
      maxRejectionRatioIncrease: z.number().min(0).max(1).optional(),
      maxLatencyFactor: z.number().min(1).max(1000).optional(),
      minCalls: z.number().int().min(1).max(1_000_000).optional(),
    })
    .optional(),
});

/** A validated plan: steps, watch time and thresholds with defaults filled. */
export interface RolloutPlan {
  readonly steps: readonly RolloutStep[];
  readonly watchMs: number;
  readonly thresholds: RolloutThresholds;
}

/** Validates a rollout's options (`SLUICE_ERR_INVALID_OPTIONS` naming the field) and fills defaults. */
export function compileRolloutPlan(options: RolloutPlanOptions = {}): RolloutPlan {
  const o = compileOptions(planSchema, options, 'rollout');
  return Object.freeze({
    steps: Object.freeze((o.steps ?? DEFAULT_STEPS).map((s) => Object.freeze({ ...s }))),
    watchMs: o.watchMs ?? 600_000,
    thresholds: Object.freeze({ ...DEFAULT_ROLLOUT_THRESHOLDS, ...stripUndefined(o.thresholds ?? {}) }),
  });
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The share of keys on the candidate in `state` (0 once it ended or was rolled back). */
export function rolloutPercent(state: RolloutState | undefined): number {
  if (state === undefined) return 0;
  if (state.status === 'running' || state.status === 'paused') return state.steps[state.step]?.percent ?? 0;
  return state.status === 'watching' || state.status === 'completed' ? 100 : 0;
}

/** The phase tallies are kept under: the step index, or `steps.length` while watching. */
export function rolloutPhase(state: RolloutState): number {
  return state.status === 'watching' ? state.steps.length : state.step;
}

/** What the ramp does next on its own: nothing yet, the next step, the promotion, or the end of the watch. */
export type RampAction = 'advance' | 'promote' | 'complete';

/** The ramp: a step whose hold is over advances (the last one promotes); a watch over completes. */
export function rampAction(state: RolloutState, nowMs: number): RampAction | undefined {
  if (state.status === 'watching') return nowMs - state.stepStartedAtMs >= state.watchMs ? 'complete' : undefined;
  if (state.status !== 'running') return undefined;
  const current = state.steps[state.step];
  if (current === undefined || nowMs - state.stepStartedAtMs < current.holdMs) return undefined;
  return state.step + 1 < state.steps.length ? 'advance' : 'promote';
}
