import { randomUUID } from 'node:crypto';
import { ErrorCodes, SluiceError } from '@sluice/core';
import {
  FINISHED_STATUSES,
  MAX_LABEL_LENGTH,
  MAX_ROLLOUT_RESOURCES,
  RulesError,
  RulesErrorCodes,
  compileRolloutPlan,
  compileRulesOffThread,
  diffRuleSets,
  type RolloutPlanOptions,
  type RolloutState,
  type RolloutStore,
  type RuleStore,
} from '@sluice/rules';

/** What a new rollout needs: the candidate text, who and why, and its plan. */
export interface StartRolloutInput extends RolloutPlanOptions {
  readonly text: string;
  readonly author: string;
  readonly reason: string;
  /** The name the text is validated as. @default 'rules.yaml' */
  readonly file?: string;
}

function label(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_LABEL_LENGTH) {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, `${field}: must be 1..${MAX_LABEL_LENGTH} characters`, { field });
  }
  return value;
}

/**
 * Writes a new rollout of `input.text` over the current version. The native resources and the
 * Envoy domains the candidate adds or changes are split; anything else it changes (removed
 * resources and domains, governance) takes effect when it is promoted. Refused while another
 * rollout runs (`SLUICE_ERR_ROLLOUT_CONFLICT`), without a current version
 * (`SLUICE_ERR_RULE_VERSION_NOT_FOUND`) and for a candidate that changes no resource or domain.
 */
export async function startRollout(
  store: RolloutStore,
  ruleStore: RuleStore,
  input: StartRolloutInput,
  nowMs: number,
): Promise<RolloutState> {
  const author = label(input.author, 'author');
  const reason = label(input.reason, 'reason');
  const file = input.file === undefined ? 'rules.yaml' : label(input.file, 'file');
  if (typeof input.text !== 'string') {
    throw new SluiceError(ErrorCodes.INVALID_OPTIONS, 'text: must be a string', { field: 'text' });
  }
  const plan = compileRolloutPlan({
    ...(input.steps === undefined ? {} : { steps: input.steps }),
    ...(input.watchMs === undefined ? {} : { watchMs: input.watchMs }),
    ...(input.thresholds === undefined ? {} : { thresholds: input.thresholds }),
  });
  const candidate = await compileRulesOffThread(input.text, { file });
  const before = await store.read();
  if (before !== undefined && !FINISHED_STATUSES.includes(before.status)) {
    throw new RulesError(
      RulesErrorCodes.ROLLOUT_CONFLICT,
      `rollout ${before.id} is ${before.status}; promote or abort it before starting another`,
    );
  }
  const baseline = await ruleStore.current();
  if (baseline === undefined) {
    throw new RulesError(RulesErrorCodes.RULE_VERSION_NOT_FOUND, 'there is no rule version to roll out from; apply one first');
  }
  const diff = diffRuleSets(baseline.ruleSet, candidate);
  const resources = [...diff.resources.added, ...diff.resources.changed.map((c) => c.name)].sort();
  const domains = [...diff.domains.added, ...diff.domains.changed.map((c) => c.name)].sort();
  if (resources.length + domains.length === 0) {
    throw new SluiceError(
      ErrorCodes.INVALID_OPTIONS,
      'text: the candidate adds or changes no resource or Envoy domain, so there are no keys to split; apply it directly',
      { field: 'text' },
    );
  }
  if (resources.length + domains.length > MAX_ROLLOUT_RESOURCES) {
    throw new SluiceError(
      ErrorCodes.INVALID_OPTIONS,
      `text: a rollout splits at most ${MAX_ROLLOUT_RESOURCES} resources and domains`,
      { field: 'text' },
    );
  }
  const state: RolloutState = {
    id: randomUUID(),
    revision: 0,
    status: 'running',
    baseline: baseline.version,
    candidate: { source: input.text, file, hash: candidate.hash },
    resources,
    ...(domains.length === 0 ? {} : { domains }),
    author,
    reason,
    steps: plan.steps,
    step: 0,
    stepStartedAtMs: nowMs,
    watchMs: plan.watchMs,
    thresholds: plan.thresholds,
    startedAtMs: nowMs,
    updatedAtMs: nowMs,
    note: `started by ${author}: ${reason}`,
  };
  return store.write(state, before?.revision ?? 0);
}
