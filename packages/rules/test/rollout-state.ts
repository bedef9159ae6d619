import { compileRolloutPlan, type RolloutState } from '../src/rollout/plan.js';

/** A running rollout's state, for the rollout stores' tests. */
export const RUNNING_ROLLOUT: RolloutState = {
  id: 'r1',
  revision: 0,
  status: 'running',
  baseline: 1,
  candidate: { source: 'resources: {}', file: 'rules.yaml', hash: 'h' },
  resources: ['orders'],
  author: 'ana',
  reason: 'test',
  ...compileRolloutPlan(),
  step: 0,
  stepStartedAtMs: 0,
  startedAtMs: 0,
  updatedAtMs: 0,
};
