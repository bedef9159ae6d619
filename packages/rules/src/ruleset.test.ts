import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Limiter, ManualClock, compileResource, isSluiceError } from '@sluice/core';
import { afterAll, describe, expect, it } from 'vitest';
import { RulesError, compileRules, loadRuleFiles, matchDescriptor, mergeRuleSets, type RuleSet } from './index.js';

const EXAMPLE = `
resources:
  db:user_center:
    limits:
      - { algorithm: gcra, limit: 200, windowMs: 1000, burst: 20 }
      - { algorithm: concurrency, limit: 20 }
    onStoreFailure: local
    shadow: false
    priority: { coreShare: 0.2 }
    tenants:
      acme: { limits: [{ algorithm: token-bucket, limit: 50 }] }
      "*":  { limits: [{ algorithm: token-bucket, limit: 20 }] }
    breaker: { failureRateThreshold: 0.5, minimumCalls: 20 }
    prefilter: true
  api:payments:
    limits: { algorithm: gcra, limit: 1000, windowMs: 60000 }
    shadow: true
    lease: { ttlMs: 200 }
    split: 4
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: { unit: second, requests_per_unit: 10 }
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

describe('compileRules (native files)', () => {
  const rules = compileRules(EXAMPLE, { file: 'rules.yaml' });

  it('emits each resource as the limiter takes it', () => {
    expect(rules.resources['db:user_center']).toEqual({
      limits: [
        { algorithm: 'gcra', limit: 200, windowMs: 1000, burst: 20 },
        { algorithm: 'concurrency', limit: 20 },
      ],
      onStoreFailure: 'local',
      shadow: false,
      priority: { coreShare: 0.2 },
      tenants: {
        acme: [{ algorithm: 'token-bucket', limit: 50 }],
        '*': [{ algorithm: 'token-bucket', limit: 20 }],
      },
      breaker: { failureRateThreshold: 0.5, minimumCalls: 20 },
      prefilter: true,
    });
    expect(rules.resources['api:payments']).toEqual({
      limits: [{ algorithm: 'gcra', limit: 1000, windowMs: 60_000 }],
      shadow: true,
      lease: { ttlMs: 200 },
      split: 4,
    });
  });

  it('is what core compiles: every resource, shadow, priority and tenants included', async () => {
    for (const [name, rule] of Object.entries(rules.resources)) {
      expect(compileResource(name, rule, new ManualClock()).name).toBe(name);
    }
    const db = compileResource('db:user_center', rules.resources['db:user_center']!, new ManualClock());
    expect(db.coreShare).toBe(0.2);
    expect([...db.tenants.keys()]).toEqual(['acme', '*']);
    const limiter = new Limiter({ clock: new ManualClock(), resources: {} });
    limiter.setResources(rules.resources);
    expect(limiter.resources().sort()).toEqual(['api:payments', 'db:user_center']);
    const d = await limiter.try('api:payments', { key: 'k' });
    expect(d.allowed).toBe(true);
    await limiter.close();
  });

  it('defaults shadow to false and freezes everything', () => {
    const r = compileRules('resources: { a: { limits: { algorithm: gcra, limit: 1 } } }', { file: 'a.yaml' });
    expect(r.resources.a!.shadow).toBe(false);
    expect(Object.isFrozen(r)).toBe(true);
    expect(Object.isFrozen(r.resources)).toBe(true);
    expect(Object.isFrozen(r.resources.a!.limits[0])).toBe(true);
    expect(Object.isFrozen(rules.domains.edge)).toBe(true);
  });

  it('compiles inline envoy domains', () => {
    const m = matchDescriptor(rules.domains.edge!, [{ key: 'remote_address', value: '10.0.0.1' }]);
    expect(m!.policy).toEqual({ algorithm: 'fixed-window', limit: 10, windowMs: 1000 });
  });

  it('hashes content, not formatting: key order, flow style and JSON give one hash', () => {
    const yaml = 'resources:\n  a:\n    shadow: true\n    limits: [{ limit: 5, algorithm: gcra }]\n';
    const json = '{"resources": {"a": {"limits": [{"algorithm": "gcra", "limit": 5}], "shadow": true}}}';
    const a = compileRules(yaml, { file: 'a.yaml' });
    const b = compileRules(json, { file: 'a.json' });
    expect(b.hash).toBe(a.hash);
    expect(a.hash).toMatch(/^[0-9a-f]{64}$/);
    const c = compileRules(yaml.replace('5', '6'), { file: 'a.yaml' });
    expect(c.hash).not.toBe(a.hash);
  });

  it('reads JSON strictly when the file or the format says so', () => {
    const e = rejection(() => compileRules('{"resources": {,}}', { file: 'rules.json' }));
    expect(e.message).toMatch(/^rules\.json: (line 1, column \d+: )?invalid JSON: /);
    expect(e.issues[0]!.path).toBe('');
    const dup = rejection(() => compileRules('{"resources": {}, "resources": {}}', { file: 'x.txt', format: 'json' }));
    expect(dup.message).toBe('x.txt: line 1, column 19: Map keys must be unique');
  });

  it('reports every problem of a file at once, each with file and path', () => {
    const e = rejection(() =>
      compileRules(
        [
          'resources:',
          '  a: { limits: { algorithm: gcra, limit: 0 } }',
          '  b: { limits: { algorithm: gcra, limit: 1 }, shadow: 1 }',
          '  c: { limits: { algorithm: gcra, limit: 1 }, prefilter: true, extra: 1 }',
        ].join('\n'),
        { file: 'many.yaml' },
      ),
    );
    expect(e.code).toBe('SLUICE_ERR_INVALID_RULES');
    expect(e.issues.map((i) => `${i.path}: ${i.message}`)).toEqual([
      'resources.a.limits.limit: must be between 1 and 1000000000, got 0',
      'resources.b.shadow: must be a boolean, got 1',
      'resources.c.extra: unknown field',
    ]);
    expect(e.message.split('\n')).toHaveLength(3);
    expect(e.field).toBe('resources.a.limits.limit');
    expect(e.file).toBe('many.yaml');
  });

  // Cases whose text a formatter cannot parse or keep, so they live here instead of fixtures.
  it.each([
    ['', 'e.yaml: the file is empty; expected a mapping with "resources" (or "domain" for an envoy file)'],
    [
      'resources:\n  api:\n    limits: { algorithm: gcra, limit: 100\n',
      'y.yaml: line 4, column 1: Flow map in block collection must be sufficiently indented and end with a }',
    ],
    ['resources:\n\tapi: {}\n', 'y.yaml: line 2, column 1: Tabs are not allowed as indentation'],
    [
      'resources: {}\n---\nresources: {}\n',
      'y.yaml: line 2, column 1: a rule file holds one YAML document; a second one starts here',
    ],
    ['resources:\n  api: { limits: "x\\q" }\n', 'y.yaml: line 2, column 20: Invalid escape sequence \\q'],
  ])('rejects %j exactly', (text, message) => {
    const file = text === '' ? 'e.yaml' : 'y.yaml';
    expect(rejection(() => compileRules(text, { file })).message).toBe(message);
  });

  it('bounds the size of the text', () => {
    const big = `# ${'x'.repeat(1024 * 1024)}\nresources: {}\n`;
    expect(rejection(() => compileRules(big, { file: 'big.yaml' })).message).toBe(
      `big.yaml: is ${big.length} bytes, the bound is 1048576`,
    );
  });

  it('bounds nesting depth, without exhausting the stack however deep the text goes', () => {
    const nest = (depth: number) => `domain: d\ndescriptors: ${'[{key: a, descriptors: '.repeat(depth)}[]${'}]'.repeat(depth)}\n`;
    const deep = rejection(() => compileRules(nest(40), { file: 'deep.yaml' }));
    expect(deep.message).toMatch(/^deep\.yaml: (descriptors\[0\]\.){31}descriptors\[0\]: is nested deeper than 64 levels$/);
    expect(Object.keys(compileRules(nest(30), { file: 'ok.yaml' }).domains)).toEqual(['d']);
    expect(rejection(() => compileRules(nest(20_000), { file: 'deeper.yaml' })).message).toMatch(/^deeper\.yaml: /);
  });

  it('bounds alias expansion', () => {
    const lines = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 12; i++)
      lines.push(
        `a${i}: &a${i} [${Array(10)
          .fill(`*a${i - 1}`)
          .join(', ')}]`,
      );
    const e = rejection(() => compileRules(lines.join('\n'), { file: 'laughs.yaml' }));
    expect(e.message).toMatch(/^laughs\.yaml: .*alias/i);
  });

  it('accepts a file with only domains, and an empty resource map', () => {
    expect(Object.keys(compileRules('resources: {}', { file: 'e.yaml' }).resources)).toEqual([]);
    const r = compileRules('domains: [{ domain: d }]', { file: 'd.yaml' });
    expect(Object.keys(r.domains)).toEqual(['d']);
  });
});

describe('loadRuleFiles', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-rules-load-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const native = write('rules.yaml', 'resources:\n  api: { limits: { algorithm: gcra, limit: 100 } }\n');
  const edge = write(
    'edge.yaml',
    'domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: { unit: second, requests_per_unit: 5 }\n',
  );
  const internal = write('internal.yaml', 'domain: internal\ndescriptors:\n  - key: svc\n    rate_limit: { unlimited: true }\n');

  it('merges a native file with envoy domain files', async () => {
    const rules = await loadRuleFiles([native, edge, internal]);
    expect(Object.keys(rules.resources)).toEqual(['api']);
    expect(Object.keys(rules.domains)).toEqual(['edge', 'internal']);
    expect(matchDescriptor(rules.domains.internal!, [{ key: 'svc', value: 'x' }])!.unlimited).toBe(true);
  });

  it('rejects a domain or resource defined twice, naming both files', async () => {
    const again = write('edge-again.yaml', 'domain: edge\n');
    const more = write('more.yaml', 'resources:\n  api: { limits: { algorithm: gcra, limit: 1 } }\n');
    const err = await loadRuleFiles([native, edge, again, more]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RulesError);
    expect((err as RulesError).message).toBe(
      [
        `${again}: duplicate domain 'edge', already defined in ${edge}`,
        `${more}: resources.api: duplicate resource, already defined in ${native}`,
      ].join('\n'),
    );
  });

  it('reports the problems of every file, and files that cannot be read', async () => {
    const bad = write(
      'bad.yaml',
      'domain: x\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n',
    );
    const missing = join(dir, 'missing.yaml');
    const err = (await loadRuleFiles([bad, missing, native]).catch((e: unknown) => e)) as RulesError;
    expect(err.issues.map((i) => i.file)).toEqual([bad, missing]);
    expect(err.issues[1]!.message).toBe('cannot be read (ENOENT)');
  });

  it('merges compiled rule sets with a hash of the whole', () => {
    const a = compileRules('resources: { a: { limits: { algorithm: gcra, limit: 1 } } }', { file: 'a.yaml' });
    const b = compileRules('resources: { b: { limits: { algorithm: gcra, limit: 1 } } }', { file: 'b.yaml' });
    const both = compileRules(
      'resources: { a: { limits: { algorithm: gcra, limit: 1 } }, b: { limits: { algorithm: gcra, limit: 1 } } }',
      { file: 'ab.yaml' },
    );
    const merged: RuleSet = mergeRuleSets([
      { file: 'a.yaml', ruleSet: a },
      { file: 'b.yaml', ruleSet: b },
    ]);
    expect(merged.hash).toBe(both.hash);
  });

  it('is a RulesError, not a core error', () => {
    const e = rejection(() => compileRules('', { file: 'e.yaml' }));
    expect(isSluiceError(e)).toBe(false);
    expect(e.name).toBe('RulesError');
  });
});
