import { describe, expect, it } from 'vitest';
import { compileRules, diffRuleSets, matchQuotaBucket, mergeRuleSets } from './index.js';

const RESOURCES = `
resources:
  api:checkout: { limits: { algorithm: token-bucket, limit: 100 } }
  api:search: { limits: { algorithm: sliding-window, limit: 50, windowMs: 1000 } }
`;

const QUOTA = `${RESOURCES}
quota:
  - domain: gateway
    buckets:
      - bucket: { name: checkout }
        resource: api:checkout
      - bucket: { name: search, user: 'a*' }
        perValue: [user]
        resource: api:search
      - bucket: { name: search, user: '*' }
        resource: api:search
`;

describe('the quota section', () => {
  const rules = compileRules(QUOTA, { file: 'rules.yaml' });

  it('matches exact values, and wildcards with one key or a key per value', () => {
    expect(matchQuotaBucket(rules.quota, 'gateway', { name: 'checkout' })).toEqual({
      resource: 'api:checkout',
      key: '',
      entry: 0,
    });
    // The first entry that matches decides: users starting with "a" each have their own key.
    expect(matchQuotaBucket(rules.quota, 'gateway', { user: 'ana', name: 'search' })).toEqual({
      resource: 'api:search',
      key: '4:user3:ana',
      entry: 1,
    });
    expect(matchQuotaBucket(rules.quota, 'gateway', { name: 'search', user: 'bo' })).toEqual({
      resource: 'api:search',
      key: '',
      entry: 2,
    });
  });

  it('matches nothing with a key more or less, another value, or another domain', () => {
    expect(matchQuotaBucket(rules.quota, 'gateway', { name: 'checkout', user: 'ana' })).toBeUndefined();
    expect(matchQuotaBucket(rules.quota, 'gateway', { name: 'search' })).toBeUndefined();
    expect(matchQuotaBucket(rules.quota, 'gateway', { name: 'refunds' })).toBeUndefined();
    expect(matchQuotaBucket(rules.quota, 'edge', { name: 'checkout' })).toBeUndefined();
    expect(matchQuotaBucket(rules.quota, '__proto__', { name: 'checkout' })).toBeUndefined();
  });

  it('keeps per-value keys of different buckets apart, whatever their values hold', () => {
    const one = matchQuotaBucket(rules.quota, 'gateway', { name: 'search', user: 'a1:b' });
    const two = matchQuotaBucket(rules.quota, 'gateway', { name: 'search', user: 'a1' });
    expect(one?.key).not.toBe(two?.key);
  });

  it('is part of the rule set: its hash, its diff, and the files merged', () => {
    const without = compileRules(RESOURCES, { file: 'rules.yaml' });
    expect(without.quota).toEqual({});
    expect(rules.hash).not.toBe(without.hash);
    const changed = compileRules(QUOTA.replace('resource: api:checkout', 'resource: api:search'), { file: 'rules.yaml' });
    const d = diffRuleSets(rules, changed);
    expect(d.same).toBe(false);
    expect(d.quota.changed).toEqual([
      { name: 'gateway', changes: [{ path: 'buckets[0].resource', before: 'api:checkout', after: 'api:search' }] },
    ]);
    expect(diffRuleSets(without, rules).quota.added).toEqual(['gateway']);
    const other = compileRules(
      `resources:\n  api:x: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }\nquota:\n  - { domain: gateway, buckets: [{ bucket: { a: b }, resource: api:x }] }\n`,
      { file: 'other.yaml' },
    );
    expect(() =>
      mergeRuleSets([
        { file: 'rules.yaml', ruleSet: rules },
        { file: 'other.yaml', ruleSet: other },
      ]),
    ).toThrow("other.yaml: quota: duplicate quota domain 'gateway', already defined in rules.yaml");
    const merged = mergeRuleSets([{ file: 'rules.yaml', ruleSet: rules }]);
    expect(merged.hash).toBe(rules.hash);
  });
});
