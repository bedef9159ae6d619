import { readFile } from 'node:fs/promises';
import { invalidRules, isRulesError, type RuleIssue } from './errors.js';
import { MAX_RULES_BYTES } from './parse.js';
import { compileRules, mergeRuleSets, type RuleFile, type RuleSet } from './ruleset.js';

/**
 * Reads, validates and merges rule files: native Sluice files and any number of
 * envoyproxy/ratelimit files (one domain each), in the order given. Resource and domain names
 * must be unique across them. Every problem of every file is reported at once, each message
 * naming its file as given in `paths`.
 *
 * @example
 * const rules = await loadRuleFiles(['rules.yaml', 'envoy/edge.yaml', 'envoy/internal.yaml']);
 */
export async function loadRuleFiles(paths: readonly string[]): Promise<RuleSet> {
  const issues: RuleIssue[] = [];
  const files: RuleFile[] = [];
  for (const file of paths) {
    let text: string;
    try {
      const buf = await readFile(file);
      if (buf.length > MAX_RULES_BYTES) {
        issues.push({ file, path: '', message: `is ${buf.length} bytes, the bound is ${MAX_RULES_BYTES}` });
        continue;
      }
      text = buf.toString('utf8');
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      issues.push({ file, path: '', message: `cannot be read${code ? ` (${code})` : ''}` });
      continue;
    }
    try {
      files.push({ file, ruleSet: compileRules(text, { file }) });
    } catch (e) {
      if (!isRulesError(e)) throw e;
      issues.push(...e.issues);
    }
  }
  if (issues.length > 0) throw invalidRules(issues);
  return mergeRuleSets(files);
}
