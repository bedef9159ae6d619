import { readFileSync } from 'node:fs';
import { Limiter, ManualClock } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compileRules, limiterResources } from '../ruleset.js';
import { matchDescriptor, matchDescriptors, wildcardMatch, type DescriptorEntry, type EnvoyDomain } from './match.js';

function load(name: string): EnvoyDomain {
  const file = `${name}.yaml`;
  const text = readFileSync(new URL(`../../test/fixtures/envoy/${file}`, import.meta.url), 'utf8');
  const rules = compileRules(text, { file });
  const [domain] = Object.values(rules.domains);
  return domain!;
}

const e = (...kv: string[]): DescriptorEntry[] => {
  const out: DescriptorEntry[] = [];
  for (let i = 0; i < kv.length; i += 2) out.push({ key: kv[i]!, value: kv[i + 1]! });
  return out;
};

describe('envoy descriptor matching (basic shapes)', () => {
  const shop = load('basic');

  it('matches nothing for an empty descriptor or an unconfigured key', () => {
    expect(matchDescriptor(shop, [])).toBeUndefined();
    expect(matchDescriptor(shop, e('nope', 'x'))).toBeUndefined();
  });

  it('applies no limit at a level that has none, nor to a request deeper than the limit', () => {
    expect(matchDescriptor(shop, e('tenant', 'acme'))).toBeUndefined();
    expect(matchDescriptor(shop, e('tenant', 'other'))).toBeUndefined();
    // batch=nightly has a limit, but the request goes one level deeper than anything matches.
    expect(matchDescriptor(shop, e('batch', 'nightly', 'job', 'other'))).toBeUndefined();
    // client has a limit and no children: a deeper request stops there and gets nothing.
    expect(matchDescriptor(shop, e('client', 'x', 'sub', 'y'))).toBeUndefined();
  });

  it('uses the key-only default for any value and the exact value override when listed', () => {
    const any = matchDescriptor(shop, e('tenant', 'acme', 'path', '/cart'))!;
    expect(any.policy).toEqual({ algorithm: 'fixed-window', limit: 5, windowMs: 1000 });
    expect(any.statsKey).toBe('shop.tenant_acme.path');
    const exact = matchDescriptor(shop, e('tenant', 'acme', 'path', '/checkout'))!;
    expect(exact.policy).toEqual({ algorithm: 'fixed-window', limit: 10, windowMs: 1000 });
    expect(exact.statsKey).toBe('shop.tenant_acme.path_/checkout');
    expect(exact.resource).not.toBe(any.resource);
  });

  it('counts each value of a key-only descriptor in its own bucket, under one resource', () => {
    const a = matchDescriptor(shop, e('client', 'a'))!;
    const b = matchDescriptor(shop, e('client', 'b'))!;
    expect(a.resource).toBe(b.resource);
    expect(a.key).toBe('shop|client=a');
    expect(b.key).toBe('shop|client=b');
    expect(a.statsKey).toBe('shop.client');
    expect(a.policy).toEqual({ algorithm: 'fixed-window', limit: 20, windowMs: 60_000 });
    expect(matchDescriptor(shop, e('client', 'partner'))!.policy!.limit).toBe(30);
  });

  it('allow-lists a value that has neither a limit nor children', () => {
    expect(matchDescriptor(shop, e('client', 'monitor'))).toBeUndefined();
  });

  it('converts every envoy unit to a fixed window (units are case-insensitive)', () => {
    expect(matchDescriptor(shop, e('region', 'eu'))!.policy!.windowMs).toBe(3_600_000);
    const plan = matchDescriptor(shop, e('plan', 'gold'))!;
    expect(plan.unit).toBe('day');
    expect(plan.name).toBe('plan_daily');
    expect(plan.policy!.windowMs).toBe(86_400_000);
    const w = (k: string) => matchDescriptor(shop, e('week_and_more', 'x', k, 'y'))!.policy!.windowMs;
    expect([w('w'), w('m'), w('y')]).toEqual([7 * 86_400_000, 30 * 86_400_000, 365 * 86_400_000]);
  });

  it('matches nested key/value pairs at the depth of the request', () => {
    expect(matchDescriptor(shop, e('batch', 'nightly'))!.policy!.limit).toBe(15);
    expect(matchDescriptor(shop, e('batch', 'nightly', 'job', 'export'))!.policy!.limit).toBe(25);
  });

  it('reports unlimited descriptors without a policy', () => {
    const m = matchDescriptor(shop, e('internal', 'anything'))!;
    expect(m.unlimited).toBe(true);
    expect(m.policy).toBeUndefined();
  });

  it('builds detailed metric keys from the request values', () => {
    expect(matchDescriptor(shop, e('api_key', 'k1'))!.statsKey).toBe('shop.api_key_k1');
    expect(matchDescriptor(shop, e('api_key', 'k2'))!.statsKey).toBe('shop.api_key_k2');
  });

  it('escapes separators so different requests never share a bucket key', () => {
    const a = matchDescriptor(shop, e('client', 'x|y=z'))!;
    expect(a.key).toBe('shop|client=x%7Cy%3Dz');
    expect(matchDescriptor(shop, e('client', '%7C'))!.key).toBe('shop|client=%257C');
  });

  it('takes a limit sent with the request over the configuration', () => {
    const m = matchDescriptor(shop, e('client', 'a'), { requestsPerUnit: 3, unit: 'hour' })!;
    expect(m.policy).toEqual({ algorithm: 'fixed-window', limit: 3, windowMs: 3_600_000 });
    expect(m.statsKey).toBe('shop.client_a');
    expect(m.shadow).toBe(false);
  });

  it('lists every limited descriptor as a resource the core limiter accepts', async () => {
    const resources = shop.resources();
    const any = matchDescriptor(shop, e('client', 'a'))!;
    expect(resources[any.resource]).toEqual({ limits: [any.policy], shadow: false });
    expect(Object.keys(resources)).toHaveLength(12);
    const limiter = new Limiter({ clock: new ManualClock(), resources });
    for (let i = 0; i < 20; i++) expect((await limiter.try(any.resource, { key: any.key })).allowed).toBe(true);
    expect((await limiter.try(any.resource, { key: any.key })).allowed).toBe(false);
    // Another value of the same key-only descriptor has a bucket of its own.
    const other = matchDescriptor(shop, e('client', 'b'))!;
    expect((await limiter.try(other.resource, { key: other.key })).allowed).toBe(true);
    await limiter.close();
  });
});

describe('envoy wildcards', () => {
  const files = load('wildcard');

  it('implements wildcardMatch as envoy: * anywhere, possibly empty, parts in order', () => {
    const p = (s: string) => s.split('*');
    expect(wildcardMatch(p('foo*'), 'foo')).toBe(true);
    expect(wildcardMatch(p('foo*'), 'fo')).toBe(false);
    expect(wildcardMatch(p('bar*b'), 'barb')).toBe(true);
    expect(wildcardMatch(p('bar*b'), 'bar123b')).toBe(true);
    expect(wildcardMatch(p('bar*b'), 'bara')).toBe(false);
    expect(wildcardMatch(p('bar*b'), 'xbarb')).toBe(false);
    expect(wildcardMatch(p('foo*bar*baz'), 'foobarbaz')).toBe(true);
    expect(wildcardMatch(p('foo*bar*baz'), 'foo123baz')).toBe(false);
    expect(wildcardMatch(p('ab*ba'), 'aba')).toBe(false);
    expect(wildcardMatch(p('exact'), 'exact')).toBe(true);
  });

  it('matches a trailing wildcard, keeping each value in its own bucket', () => {
    const a = matchDescriptor(files, e('path', '/docs/a'))!;
    const b = matchDescriptor(files, e('path', '/docs/b'))!;
    expect(a.policy!.limit).toBe(20);
    expect(a.resource).toBe(b.resource);
    expect(a.key).not.toBe(b.key);
    expect(a.statsKey).toBe('files.path_/docs/*');
    expect(matchDescriptor(files, e('path', '/img/a'))).toBeUndefined();
  });

  it('prefers an exact value over a wildcard', () => {
    expect(matchDescriptor(files, e('path', '/docs/index'))!.policy!.limit).toBe(200);
  });

  it('does not match a value eagerly without a wildcard', () => {
    expect(matchDescriptor(files, e('exact', 'foo1'))).toBeUndefined();
    expect(matchDescriptor(files, e('exact', 'foo'))!.policy!.limit).toBe(20);
  });

  it('matches middle and multiple wildcards', () => {
    expect(matchDescriptor(files, e('route', '/api/123/action'))!.statsKey).toBe('files.route_/api/*/action');
    expect(matchDescriptor(files, e('route', '/api/123/other'))).toBeUndefined();
    expect(matchDescriptor(files, e('multi', 'foo1bar2baz'))!.policy!.limit).toBe(10);
    expect(matchDescriptor(files, e('multi', 'bar2baz'))).toBeUndefined();
  });

  it('tries wildcards in file order, before the key-only default', () => {
    expect(matchDescriptor(files, e('first', 'abc'))!.policy!.limit).toBe(1);
    expect(matchDescriptor(files, e('first', 'acc'))!.policy!.limit).toBe(2);
    expect(matchDescriptor(files, e('first', 'zzz'))!.policy!.limit).toBe(3);
  });

  it('matches wildcards below a key/value', () => {
    const m = matchDescriptor(files, e('nested', 'v1', 'path', '/img/x'))!;
    expect(m.statsKey).toBe('files.nested_v1.path_/img/*');
    expect(m.key).toBe('files|nested=v1|path=/img/x');
    expect(matchDescriptor(files, e('nested', 'v2', 'path', '/img/x'))).toBeUndefined();
  });

  it('puts every value matching a share_threshold pattern in one bucket', () => {
    const a = matchDescriptor(files, e('shared', '/bulk/a'))!;
    const b = matchDescriptor(files, e('shared', '/bulk/b'))!;
    expect(a.key).toBe('files|shared=/bulk/*');
    expect(b.key).toBe(a.key);
  });
});

describe('envoy replaces, unlimited and shadow across a request', () => {
  const domain = load('replaces');
  const read = { entries: e('route', 'read', 'user', 'alice') };
  const items = { entries: e('route', 'items', 'user', 'alice') };

  it('keeps a named limit when nothing in the request replaces it', () => {
    const [m] = matchDescriptors(domain, [read]);
    expect(m!.name).toBe('specific_limit');
    expect(m!.policy!.limit).toBe(5);
  });

  it('drops a named limit replaced by another descriptor of the same request, in any order', () => {
    const [r, i] = matchDescriptors(domain, [read, items]);
    expect(r).toBeUndefined();
    expect(i!.policy!.limit).toBe(10);
    const [i2, r2] = matchDescriptors(domain, [items, read]);
    expect(r2).toBeUndefined();
    expect(i2!.policy!.limit).toBe(10);
  });

  it('takes replaces from unlimited limits too, and never drops an unlimited one', () => {
    const audit = { entries: e('audit', 'x') };
    const vip = { entries: e('vip', 'y') };
    expect(matchDescriptors(domain, [audit])[0]!.name).toBe('shadowed');
    const [a, v] = matchDescriptors(domain, [audit, vip]);
    expect(a).toBeUndefined();
    expect(v!.unlimited).toBe(true);
    const [, u] = matchDescriptors(domain, [items, { entries: e('unlimited_named', 'z') }]);
    expect(u!.unlimited).toBe(true);
  });

  it('carries shadow and quota modes, and leaves unmatched descriptors undefined', () => {
    const [a, none] = matchDescriptors(domain, [{ entries: e('audit', 'x') }, { entries: e('nothing', 'x') }]);
    expect(a!.shadow).toBe(true);
    expect(a!.quota).toBe(true);
    expect(none).toBeUndefined();
    expect(domain.resources()[a!.resource]!.shadow).toBe(true);
  });
});

describe('envoy limits as core resources', () => {
  it('names every configured limit uniquely, even when envoy stats keys coincide', () => {
    const rules = compileRules(
      [
        'domain: d',
        'descriptors:',
        '  - key: a_b',
        '    descriptors: [{ key: c, rate_limit: { unit: second, requests_per_unit: 1 } }]',
        '  - key: a',
        '    value: b.c',
        '    rate_limit: { unit: second, requests_per_unit: 2 }',
      ].join('\n'),
      { file: 'd.yaml' },
    );
    const d = rules.domains.d!;
    const one = matchDescriptor(d, e('a_b', 'x', 'c', 'y'))!;
    const two = matchDescriptor(d, e('a', 'b.c'))!;
    expect(one.statsKey).toBe('d.a_b.c');
    expect(two.statsKey).toBe('d.a_b.c');
    expect(one.resource).toBe('envoy:d.a_b.c');
    expect(two.resource).toMatch(/^envoy:\/[0-9a-f]{32}$/);
    expect(Object.keys(d.resources()).sort()).toEqual([one.resource, two.resource].sort());
  });

  it('gives the limiter every resource of a rule set, native and envoy', async () => {
    const rules = compileRules(
      [
        'resources:',
        '  api: { limits: { algorithm: gcra, limit: 5 } }',
        'domains:',
        '  - domain: edge',
        '    descriptors: [{ key: ip, shadow_mode: true, rate_limit: { unit: second, requests_per_unit: 1 } }]',
      ].join('\n'),
      { file: 'r.yaml' },
    );
    const all = limiterResources(rules);
    expect(Object.keys(all).sort()).toEqual(['api', 'envoy:edge.ip']);
    const limiter = new Limiter({ clock: new ManualClock(), resources: {} });
    limiter.setResources(all);
    const m = matchDescriptor(rules.domains.edge!, e('ip', '10.0.0.1'))!;
    await limiter.try(m.resource, { key: m.key });
    // Over the limit, but in shadow mode: admitted and marked.
    const d = await limiter.try(m.resource, { key: m.key });
    expect(d.allowed).toBe(true);
    expect(d.shadow).toBeDefined();
    await limiter.close();
  });
});

describe('envoy files read as envoy reads them', () => {
  it('takes key, value and name scalars as their source text, and YAML 1.1 booleans', () => {
    const rules = compileRules(
      [
        'domain: codes',
        'descriptors:',
        '  - key: status',
        '    value: 010',
        '    shadow_mode: yes',
        '    rate_limit: { unit: Minute, requests_per_unit: 3, name: 429 }',
        '  - key: empty',
        '    value:',
        '    rate_limit: { unit: second, requests_per_unit: 1 }',
      ].join('\n'),
      { file: 'codes.yaml' },
    );
    const d = rules.domains.codes!;
    const m = matchDescriptor(d, e('status', '010'))!;
    expect(m.shadow).toBe(true);
    expect(m.name).toBe('429');
    expect(m.unit).toBe('minute');
    expect(matchDescriptor(d, e('empty', 'any'))!.policy!.limit).toBe(1);
    expect(d.descriptors[0]).toEqual({
      key: 'status',
      value: '010',
      shadow_mode: true,
      rate_limit: { unit: 'minute', requests_per_unit: 3, name: '429' },
    });
  });

  it('accepts every key envoy knows, metadata free-form', () => {
    const rules = compileRules(
      [
        'domain: all',
        'descriptors:',
        '  - key: k',
        '    value: v*',
        '    value_to_metric: true',
        '    detailed_metric: false',
        '    share_threshold: true',
        '    quota_mode: false',
        '    metadata: { team: { name: edge }, key: 1 }',
        '    rate_limit: { unit: second, requests_per_unit: 1 }',
      ].join('\n'),
      { file: 'all.yaml' },
    );
    const m = matchDescriptor(rules.domains.all!, e('k', 'vx'))!;
    expect(m.metadata).toEqual({ team: { name: 'edge' }, key: 1 });
    expect(m.statsKey).toBe('all.k_v*');
    expect(m.key).toBe('all|k=v*');
  });

  it('puts the request values in the stats key with value_to_metric', () => {
    const rules = compileRules(
      [
        'domain: m',
        'descriptors:',
        '  - key: route',
        '    value_to_metric: true',
        '    descriptors:',
        '      - key: method',
        '        rate_limit: { unit: second, requests_per_unit: 1 }',
      ].join('\n'),
      { file: 'm.yaml' },
    );
    expect(matchDescriptor(rules.domains.m!, e('route', '/a', 'method', 'GET'))!.statsKey).toBe('m.route_/a.method');
  });
});
