import { describe, expect, it } from 'vitest';
import { compileRules } from './ruleset.js';
import { setLimitInText } from './set-limit.js';

const YAML = `# payments: tuned by the adaptive limit below
resources:
  api:pay:
    limits:
      - { id: second, algorithm: sliding-window, limit: 100 } # per second
      - { id: day, algorithm: fixed-window, limit: 100000, windowMs: 86400000 }
  api:other:
    limits: { algorithm: gcra, limit: 5 }
adaptive:
  api:pay: { limit: second, min: 50, max: 500, policy: demand }
`;

describe('setLimitInText', () => {
  it('changes one limit of a YAML file and keeps its comments and layout', () => {
    const next = setLimitInText(YAML, 'rules.yaml', { resource: 'api:pay', limit: 'second' }, 120);
    expect(next).toBe(YAML.replace('limit: 100 }', 'limit: 120 }'));
    expect(compileRules(next, { file: 'rules.yaml' }).resources['api:pay']!.limits[0]!.limit).toBe(120);
  });

  it('changes a single (unlisted) limit by its position, and JSON files too', () => {
    const next = setLimitInText(YAML, 'rules.yaml', { resource: 'api:other', limit: '0' }, 7);
    expect(compileRules(next, { file: 'rules.yaml' }).resources['api:other']!.limits[0]!.limit).toBe(7);
    const json = JSON.stringify({ resources: { 'api:x': { limits: [{ algorithm: 'gcra', limit: 5 }] } } });
    const out = setLimitInText(json, 'rules.json', { resource: 'api:x', limit: '0' }, 9);
    expect(JSON.parse(out)).toEqual({ resources: { 'api:x': { limits: [{ algorithm: 'gcra', limit: 9 }] } } });
  });

  it('refuses a limit the file does not have, and a value the adaptive bounds refuse', () => {
    expect(() => setLimitInText(YAML, 'rules.yaml', { resource: 'api:pay', limit: 'hour' }, 1)).toThrow(RangeError);
    expect(() => setLimitInText(YAML, 'rules.yaml', { resource: 'api:nope', limit: '0' }, 1)).toThrow(RangeError);
    expect(() => setLimitInText(YAML, 'rules.yaml', { resource: 'api:pay', limit: 'second' }, 501)).toThrow(
      /the limit \(501\) must lie within \[min, max\] = \[50, 500\]/,
    );
  });

  it('leaves the hash of rule sets without an adaptive section as it was', () => {
    const plain = compileRules('resources:\n  a:\n    limits: { algorithm: gcra, limit: 5 }\n', { file: 'r.yaml' });
    const withAdaptive = compileRules(
      'resources:\n  a:\n    limits: { algorithm: gcra, limit: 5 }\nadaptive:\n  a: { min: 1, max: 9, policy: aimd }\n',
      { file: 'r.yaml' },
    );
    expect(plain.adaptive).toEqual({});
    expect(withAdaptive.adaptive.a).toMatchObject({ min: 1, max: 9, policy: 'aimd', cooldownMs: 60_000, limit: '0' });
    expect(withAdaptive.hash).not.toBe(plain.hash);
  });
});
