import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { RulesError, RulesErrorCodes, formatIssue, isRulesError } from './index.js';

it('documents every error code in the README', () => {
  const doc = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  for (const code of Object.values(RulesErrorCodes)) expect(doc).toContain(`| \`${code}\``);
});

it('carries its issues, the first one as field, and formats them with file and path', () => {
  const issues = [
    { file: 'a.yaml', path: 'resources.api.limits', message: 'is required' },
    { file: 'a.yaml', path: '', message: 'line 1, column 1: oops' },
  ];
  const e = new RulesError(RulesErrorCodes.INVALID_RULES, issues.map(formatIssue).join('\n'), { issues });
  expect(e.message).toBe('a.yaml: resources.api.limits: is required\na.yaml: line 1, column 1: oops');
  expect(e.field).toBe('resources.api.limits');
  expect(e.file).toBe('a.yaml');
  expect(isRulesError(e, 'SLUICE_ERR_INVALID_RULES')).toBe(true);
  expect(isRulesError(e, 'SLUICE_ERR_RULE_CONFLICT')).toBe(false);
  expect(Object.isFrozen(e.issues)).toBe(true);
});
