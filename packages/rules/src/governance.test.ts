import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FileRuleStore, RulesError, compileRules, diffRuleSets, expressionProblem, mergeRuleSets } from './index.js';

const GOVERNANCE = `
governance:
  rules:
    search-burst:
      type: threshold
      dimension: path
      match: { resource: api }
      limit: 500
      blockMs: 10000
    login-failures:
      type: correlated
      dimension: user
      match: { path: /login, status: [401, 403] }
      limit: 10
      windowMs: 300000
      blockMs: 900000
    failing-paths:
      type: expression
      dimension: path
      when: 'errors > 20 && double(errors) / double(requests) > 0.5'
`;

function rejection(run: () => unknown): RulesError {
  try {
    run();
  } catch (e) {
    if (e instanceof RulesError) return e;
    throw e;
  }
  throw new Error('expected a RulesError');
}

describe('the governance section', () => {
  const rules = compileRules(GOVERNANCE, { file: 'rules.yaml' });

  it('compiles each rule with its defaults filled in', () => {
    expect(rules.governance['search-burst']).toEqual({
      id: 'search-burst',
      type: 'threshold',
      dimension: 'path',
      match: { resource: 'api' },
      limit: 500,
      windowMs: 1000,
      slices: 10,
      blockMs: 10000,
    });
    expect(rules.governance['login-failures']).toMatchObject({
      type: 'correlated',
      dimension: 'user',
      match: { path: '/login', status: [401, 403] },
      limit: 10,
      windowMs: 300000,
      slices: 10,
      blockMs: 900000,
    });
    expect(rules.governance['failing-paths']).toMatchObject({ type: 'expression', when: expect.stringContaining('errors > 20') });
    expect(Object.isFrozen(rules.governance['login-failures']!.match)).toBe(true);
  });

  it('keeps the hash of a rule set without governance rules, and changes it with them', () => {
    const base = 'resources:\n  api: { limits: { algorithm: gcra, limit: 10 } }\n';
    const plain = compileRules(base, { file: 'a.yaml' });
    const empty = compileRules(`${base}governance: { rules: {} }\n`, { file: 'a.yaml' });
    expect(empty.hash).toBe(plain.hash);
    const withRule = compileRules(`${base}${GOVERNANCE}`, { file: 'a.yaml' });
    expect(withRule.hash).not.toBe(plain.hash);
    expect(Object.keys(plain.governance)).toEqual([]);
  });

  it('rejects a rule id defined by two files, naming the first', () => {
    const other = compileRules(GOVERNANCE, { file: 'b.yaml' });
    const err = rejection(() =>
      mergeRuleSets([
        { file: 'a.yaml', ruleSet: rules },
        { file: 'b.yaml', ruleSet: other },
      ]),
    );
    expect(err.message.split('\n')).toContain('b.yaml: governance.rules.search-burst: duplicate rule, already defined in a.yaml');
  });

  it('diffs rules by id, field by field', () => {
    const after = compileRules(GOVERNANCE.replace('limit: 500', 'limit: 800').replace(/ {4}failing-paths:[\s\S]*$/, ''), {
      file: 'rules.yaml',
    });
    const d = diffRuleSets(rules, after);
    expect(d.governance.removed).toEqual(['failing-paths']);
    expect(d.governance.changed).toEqual([{ name: 'search-burst', changes: [{ path: 'limit', before: 500, after: 800 }] }]);
    expect(d.same).toBe(false);
  });

  it('reports every problem of every rule at once', () => {
    const err = rejection(() =>
      compileRules(
        'governance:\n  rules:\n    a: { type: threshold, dimension: path }\n    b: { type: expression, dimension: ip, when: "rate" }\n',
        { file: 'g.yaml' },
      ),
    );
    expect(err.issues.map((i) => i.path)).toEqual(['governance.rules.a.limit', 'governance.rules.b.when']);
  });
});

describe('expressionProblem', () => {
  it('accepts boolean expressions over the window statistics', () => {
    expect(expressionProblem('rate > 100.0 || status5xx > 3')).toBeUndefined();
    expect(expressionProblem('requests > 10 && status4xx * 2 > requests')).toBeUndefined();
  });

  it('rejects unknown names, wrong types and oversized expressions', () => {
    expect(expressionProblem('now() > 1')).toMatch(/^invalid CEL expression: /);
    expect(expressionProblem('requests')).toBe('must be a CEL expression of type bool, got int');
    expect(expressionProblem(`${'('.repeat(100)}true${')'.repeat(100)}`)).toMatch(/^invalid CEL expression: /);
  });
});

describe('governance rules in the rule store', () => {
  it('never records a version with an invalid expression, and records a valid one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-governance-'));
    const store = new FileRuleStore({ dir });
    try {
      const bad = GOVERNANCE.replace('errors > 20 &&', 'errors > "20" &&');
      await expect(store.apply(bad, { author: 'ana', reason: 'typo' })).rejects.toMatchObject({
        code: 'SLUICE_ERR_INVALID_RULES',
        message: expect.stringContaining('rules.yaml: governance.rules.failing-paths.when: invalid CEL expression: '),
      });
      expect(await store.current()).toBeUndefined();
      const v = await store.apply(GOVERNANCE, { author: 'ana', reason: 'governance' });
      expect(Object.keys(v.ruleSet.governance).sort()).toEqual(['failing-paths', 'login-failures', 'search-burst']);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
