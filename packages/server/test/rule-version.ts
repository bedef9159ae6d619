import { compileRules, type RuleVersion } from '@sluice/rules';

/** A rule version as a store would deliver it, for unit tests. */
export function ruleVersion(text: string, version = 1, file = 'rules.yaml'): RuleVersion {
  const ruleSet = compileRules(text, { file });
  return {
    version,
    author: 'test',
    reason: 'test',
    createdAt: new Date(0).toISOString(),
    hash: ruleSet.hash,
    file,
    source: text,
    ruleSet,
  };
}
