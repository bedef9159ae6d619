import { z } from 'zod';
import { RulesError, RulesErrorCodes } from '../errors.js';
import type { RolloutState } from './plan.js';

/**
 * Where a fleet keeps its rollout, next to the rule versions: the state every server reads,
 * the leadership that makes one server the decider, and the decisions counted per cohort.
 */
export interface RolloutStore {
  /** The latest rollout (running or finished), or undefined if none was ever started. */
  read(): Promise<RolloutState | undefined>;
  /**
   * Writes `next` (its `revision` is set to `expectedRevision + 1`) if the stored revision is
   * still `expectedRevision` (0: none stored); otherwise throws `SLUICE_ERR_ROLLOUT_CONFLICT`.
   */
  write(next: RolloutState, expectedRevision: number): Promise<RolloutState>;
  /** Takes or renews the decider's leadership for `ttlMs`; false while another owner leads. */
  lead(owner: string, ttlMs: number): Promise<boolean>;
  /** Resigns the leadership if `owner` leads. */
  resign(owner: string): Promise<void>;
  /** Adds decision counts (field -> count) to rollout `id`'s phase `phase`. */
  addTallies(id: string, phase: number, counts: ReadonlyMap<string, number>): Promise<void>;
  /** The counts of rollout `id`'s phase `phase`, summed over every writer the store reaches. */
  tallies(id: string, phase: number): Promise<Map<string, number>>;
  /** Releases what the store opened (never the rule store's own connection). */
  close(): Promise<void>;
}

/** Most resources a rollout splits, Envoy domains included (the bound of its tallies). */
export const MAX_ROLLOUT_RESOURCES = 1000;

const thresholds = z.strictObject({
  maxErrorRatioIncrease: z.number(),
  maxRejectionRatioIncrease: z.number(),
  maxLatencyFactor: z.number(),
  minCalls: z.number().int(),
});

/** The state as stored: every field checked on read. */
export const storedRolloutSchema = z.strictObject({
  id: z.string().min(1).max(64),
  revision: z.number().int().min(1),
  status: z.enum(['running', 'paused', 'watching', 'completed', 'aborted', 'rolled_back']),
  baseline: z.number().int().min(1),
  candidate: z.strictObject({ source: z.string(), file: z.string(), hash: z.string() }),
  resources: z.array(z.string()).max(MAX_ROLLOUT_RESOURCES),
  domains: z.array(z.string()).max(MAX_ROLLOUT_RESOURCES).optional(),
  author: z.string(),
  reason: z.string(),
  steps: z.array(z.strictObject({ percent: z.number(), holdMs: z.number().int() })).min(1),
  step: z.number().int().min(0),
  stepStartedAtMs: z.number(),
  watchMs: z.number().int(),
  thresholds,
  startedAtMs: z.number(),
  updatedAtMs: z.number(),
  version: z.number().int().min(1).optional(),
  rollbackVersion: z.number().int().min(1).optional(),
  note: z.string().optional(),
});

/** Parses a stored rollout; anything else is `SLUICE_ERR_RULE_STORE_CORRUPT`. */
export function parseRollout(raw: string, where: string): RolloutState {
  try {
    return Object.freeze(storedRolloutSchema.parse(JSON.parse(raw)) as RolloutState);
  } catch (e) {
    throw new RulesError(RulesErrorCodes.RULE_STORE_CORRUPT, `the rule store holds an unreadable rollout at ${where}`, {
      cause: e,
    });
  }
}

/** The error of a write that lost the race (or found no rollout where one was expected). */
export function rolloutConflict(expected: number, actual: number): RulesError {
  return new RulesError(
    RulesErrorCodes.ROLLOUT_CONFLICT,
    `the rollout changed meanwhile (expected revision ${expected}, found ${actual}); read it again and retry`,
  );
}

/**
 * The tally field a server bumps with each poll that adds counts: `server|<its id>`. How many
 * such fields a step's tally has is how many servers' decisions the judge sees.
 */
export function tallyServerField(server: string): string {
  return `server|${server}`;
}

/** A tally field: `<cohort>|<resource>|<decided|denied>`. */
export function tallyField(cohort: 'baseline' | 'candidate', resource: string, what: 'decided' | 'denied'): string {
  return `${cohort}|${resource}|${what}`;
}
