/**
 * Sluice rules: rule files (native YAML/JSON, and envoyproxy/ratelimit configurations loaded
 * unchanged) validated strictly, and a versioned rule store with history, diff, rollback and
 * live change notification, on disk or in Redis.
 *
 * @example
 * import { readFile } from 'node:fs/promises';
 * import { Limiter } from '@sluice/core';
 * import { FileRuleStore, compileRules, limiterResources, matchDescriptors } from '@sluice/rules';
 *
 * // Validate a file: every problem is reported as `rules.yaml: resources."db:users".limits[0].burst: ...`
 * const rules = compileRules(await readFile('rules.yaml', 'utf8'), { file: 'rules.yaml' });
 *
 * // Version it; every process watching the store gets each new version within a second.
 * const store = new FileRuleStore({ dir: '/var/lib/sluice/rules' });
 * await store.apply(text, { author: 'ana', reason: 'payments quota raised to 1200/min' });
 * const limiter = new Limiter({ resources: {} });
 * const stop = store.watch((v) => limiter.setResources(limiterResources(v.ruleSet)));
 *
 * // envoy descriptors: which limit applies to each descriptor of a request.
 * const [m] = matchDescriptors(rules.domains['edge']!, [{ entries: [{ key: 'remote_address', value: ip }] }]);
 * if (m && !m.unlimited) await limiter.try(m.resource, { key: m.key });
 */
export {
  ADAPTIVE_BOUNDS,
  ADAPTIVE_POLICIES,
  adaptiveLimitIndex,
  type AdaptivePolicy,
  type AdaptiveRule,
  type AdaptiveRules,
  type AimdSettings,
  type DemandSettings,
} from './adaptive.js';
export {
  QUOTA_BOUNDS,
  matchQuotaBucket,
  type QuotaBucketRule,
  type QuotaDomain,
  type QuotaMatch,
  type QuotaRules,
} from './quota.js';
export { setLimitInText, type LimitLocation } from './set-limit.js';
export { diffRuleSets, fieldChanges, type FieldChange, type RuleSetDiff, type SectionDiff } from './diff.js';
export {
  ENVOY_UNITS,
  type EnvoyDescriptorInput,
  type EnvoyDomainInput,
  type EnvoyRateLimitInput,
  type EnvoyUnit,
} from './envoy/schema.js';
export type { EnvoyDescriptor, EnvoyRateLimit } from './envoy/compile.js';
export {
  EnvoyDomain,
  OVERRIDE_RESOURCE_PREFIX,
  matchDescriptor,
  matchDescriptors,
  wildcardMatch,
  type DescriptorEntry,
  type LimitOverride,
  type MatchedLimit,
  type RequestDescriptor,
} from './envoy/match.js';
export {
  RulesError,
  RulesErrorCodes,
  formatIssue,
  isRulesError,
  type RuleIssue,
  type RulesErrorCode,
  type RulesErrorOptions,
} from './errors.js';
export { diffLines, unifiedDiff, type LineOp, type UnifiedDiffOptions } from './line-diff.js';
export {
  EXPRESSION_LIMITS,
  EXPRESSION_VARIABLES,
  MAX_EXPRESSION_LENGTH,
  MAX_PATTERN_LENGTH,
  compileExpression,
  expressionEnvironment,
  expressionProblem,
  type CompiledExpression,
  type ExpressionInput,
} from './expression.js';
export {
  GOVERNANCE_DEFAULTS,
  GOVERNANCE_DIMENSIONS,
  GOVERNANCE_RULE_ID,
  GOVERNANCE_RULE_TYPES,
  MAX_GOVERNANCE_RULES,
  type GovernanceDimension,
  type GovernanceMatch,
  type GovernanceRule,
  type GovernanceRuleType,
  type GovernanceRules,
} from './governance.js';
export { loadRuleFiles } from './load.js';
export {
  ENVOY_RESOURCE_PREFIX,
  type ResourceRule,
  type RuleBookingSettings,
  type RuleBreakerOptions,
  type RuleLeaseSettings,
  type RuleHotKeySettings,
} from './native.js';
export { MAX_COMPILE_THREADS, OFF_THREAD_BYTES, compileRulesOffThread, type CompileOffThreadOptions } from './off-thread.js';
export { MAX_RULES_BYTES, type RuleFormat } from './parse.js';
export {
  canonicalJson,
  compileRules,
  limiterResources,
  mergeRuleSets,
  type CompileRulesOptions,
  type RuleFile,
  type RuleSet,
} from './ruleset.js';
export { DEFAULT_MAX_VERSIONS, MAX_LABEL_LENGTH } from './store/common.js';
export { FileRuleStore, type FileRuleStoreOptions } from './store/file-store.js';
export { RedisRuleStore, type RedisRuleStoreOptions, type RuleClusterSeed } from './store/redis-store.js';
export type {
  ApplyOptions,
  HistoryOptions,
  RollbackOptions,
  RuleDiff,
  RuleListener,
  RuleStore,
  RuleVersion,
  RuleVersionMeta,
} from './store/types.js';
export { FileRolloutStore } from './rollout/file.js';
export { judgeRollout, type CohortMeasure, type DecisionTally, type Verdict } from './rollout/judge.js';
export {
  DEFAULT_ROLLOUT_THRESHOLDS,
  FINISHED_STATUSES,
  MAX_ROLLOUT_STEPS,
  compileRolloutPlan,
  rampAction,
  rolloutDomainLabel,
  rolloutPercent,
  rolloutPhase,
  rolloutSplitNames,
  type RampAction,
  type RolloutCandidate,
  type RolloutPlan,
  type RolloutPlanOptions,
  type RolloutState,
  type RolloutStatus,
  type RolloutStep,
  type RolloutThresholds,
} from './rollout/plan.js';
export { MemoryRolloutStore } from './rollout/memory.js';
export { RedisRolloutStore } from './rollout/redis.js';
export { MAX_ROLLOUT_RESOURCES, tallyField, tallyServerField, type RolloutStore } from './rollout/store.js';
