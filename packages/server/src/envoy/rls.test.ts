import { Limiter, ManualClock } from '@sluice/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LiveRules } from '../live-rules.js';
import { ruleVersion } from '../../test/rule-version.js';
import { OverrideTable } from './overrides.js';
import { compileRules } from '@sluice/rules';
import type { DomainSplit } from '../service/routing.js';
import { descriptorCohortKey, shouldRateLimit, type RlsDescriptor, type RlsRequest } from './rls.js';

const RULES = `
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit: { unit: minute, requests_per_unit: 2 }
      - key: destination_cluster
        rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: route
    value: read
    descriptors:
      - key: user
        value: alice
        rate_limit: { name: specific, unit: second, requests_per_unit: 1 }
  - key: route
    value: items
    descriptors:
      - key: user
        value: alice
        rate_limit: { replaces: [{ name: specific }], unit: second, requests_per_unit: 3 }
  - key: bot
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: vip
    rate_limit: { unlimited: true }
  - key: quota_a
    quota_mode: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: quota_b
    quota_mode: true
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: path
    value: "/files/*"
    rate_limit: { unit: second, requests_per_unit: 1 }
`;

const d = (...kv: [string, string][]): RlsDescriptor => ({ entries: kv.map(([key, value]) => ({ key, value })) });
const req = (descriptors: RlsDescriptor[], hitsAddend = 0): RlsRequest => ({ domain: 'rl', descriptors, hitsAddend });

describe('shouldRateLimit', () => {
  let clock: ManualClock;
  let limiter: Limiter;
  let rules: LiveRules;
  let overrides: OverrideTable;
  const ask = (r: RlsRequest) => shouldRateLimit(r, limiter, rules, overrides);

  beforeEach(() => {
    // Aligned to a minute so fixed windows do not roll over mid-test.
    clock = new ManualClock(1_800_000_000_000);
    limiter = new Limiter({ resources: {}, clock });
    rules = new LiveRules({ limiter });
    overrides = new OverrideTable({ limiter, maxOverrides: 2, perMinute: 3, idleMs: 10_000, clock });
    rules.apply(ruleVersion(RULES));
  });
  afterEach(() => limiter.close());

  it('matches nested descriptors, exact values before key-only ones', async () => {
    const bar = d(['source_cluster', 'proxy'], ['destination_cluster', 'bar']);
    const first = await ask(req([bar]));
    expect(first.overallCode).toBe('OK');
    expect(first.statuses[0]).toMatchObject({
      code: 'OK',
      currentLimit: { requestsPerUnit: 2, unit: 'minute', name: '' },
      limitRemaining: 1,
    });
    expect(first.statuses[0]!.durationUntilResetMs).toBe(60_000);
    expect((await ask(req([bar]))).overallCode).toBe('OK');
    const third = await ask(req([bar]));
    expect(third).toEqual({
      overallCode: 'OVER_LIMIT',
      statuses: [
        {
          code: 'OVER_LIMIT',
          currentLimit: { requestsPerUnit: 2, unit: 'minute', name: '' },
          limitRemaining: 0,
          durationUntilResetMs: 60_000,
        },
      ],
    });
    const other = await ask(req([d(['source_cluster', 'proxy'], ['destination_cluster', 'foo'])]));
    expect(other.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { requestsPerUnit: 3 }, limitRemaining: 2 });
    // Each value of a key-only descriptor has its own bucket.
    const baz = await ask(req([d(['source_cluster', 'proxy'], ['destination_cluster', 'baz'])]));
    expect(baz.statuses[0]!.limitRemaining).toBe(2);
  });

  it('answers unmatched descriptors and unknown domains OK without a limit', async () => {
    const r = await ask(req([d(['nothing', 'here']), d(['source_cluster', 'proxy'])]));
    expect(r).toEqual({
      overallCode: 'OK',
      statuses: [
        { code: 'OK', limitRemaining: 0 },
        { code: 'OK', limitRemaining: 0 },
      ],
    });
    const unknown = await ask({ domain: 'other', descriptors: [d(['remote_address', '1'])], hitsAddend: 0 });
    expect(unknown).toEqual({ overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }] });
  });

  it('drops limits replaced by another descriptor of the request', async () => {
    const read = d(['route', 'read'], ['user', 'alice']);
    const items = d(['route', 'items'], ['user', 'alice']);
    for (let i = 0; i < 3; i++) {
      const r = await ask(req([read, items]));
      expect(r.overallCode).toBe('OK');
      expect(r.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
      expect(r.statuses[1]).toMatchObject({ code: 'OK', limitRemaining: 2 - i });
    }
    expect((await ask(req([read, items]))).overallCode).toBe('OVER_LIMIT');
    // Alone, the specific limit applies: 1 a second.
    expect((await ask(req([read]))).overallCode).toBe('OK');
    expect((await ask(req([read]))).overallCode).toBe('OVER_LIMIT');
  });

  it('counts shadow-mode limits but never answers OVER_LIMIT for them', async () => {
    const bot = d(['bot', 'b1']);
    expect((await ask(req([bot]))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
    for (let i = 0; i < 3; i++) {
      const r = await ask(req([bot]));
      expect(r.overallCode).toBe('OK');
      expect(r.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0, currentLimit: { requestsPerUnit: 1 } });
    }
  });

  it('answers unlimited descriptors OK with the largest remaining', async () => {
    expect(await ask(req([d(['vip', 'x'])]))).toEqual({
      overallCode: 'OK',
      statuses: [{ code: 'OK', limitRemaining: 0xffffffff }],
    });
  });

  it('is over limit in quota mode only when every quota descriptor is', async () => {
    const a = d(['quota_a', 'k']);
    const b = d(['quota_b', 'k']);
    expect((await ask(req([a, b]))).overallCode).toBe('OK');
    const second = await ask(req([a, b]));
    expect(second.overallCode).toBe('OK');
    expect(second.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    const third = await ask(req([a, b]));
    expect(third.overallCode).toBe('OVER_LIMIT');
  });

  it('charges nothing when the request is over limit', async () => {
    const addr = d(['remote_address', '10.0.0.1']);
    const bar = d(['source_cluster', 'proxy'], ['destination_cluster', 'bar']);
    expect((await ask(req([addr]))).overallCode).toBe('OK');
    const both = await ask(req([addr, bar]));
    expect(both.overallCode).toBe('OVER_LIMIT');
    expect(both.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    // bar's permit was given back: both of its 2 per minute are still there.
    expect((await ask(req([bar]))).statuses[0]!.limitRemaining).toBe(1);
    expect((await ask(req([bar]))).statuses[0]!.limitRemaining).toBe(0);
  });

  it('charges hits_addend: per descriptor first, then per request, 0 meaning 1', async () => {
    const foo = d(['source_cluster', 'proxy'], ['destination_cluster', 'foo']);
    expect((await ask(req([{ ...foo, hitsAddend: 0 }]))).statuses[0]!.limitRemaining).toBe(3);
    expect((await ask(req([foo], 2))).statuses[0]!.limitRemaining).toBe(1);
    expect((await ask(req([foo], 2))).overallCode).toBe('OVER_LIMIT');
    const huge = await ask(req([d(['source_cluster', 'proxy'], ['destination_cluster', 'x'])], 1_000_000_001));
    expect(huge.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0 });
  });

  it('starts a new window when the unit has passed', async () => {
    const addr = d(['remote_address', '10.0.0.2']);
    expect((await ask(req([addr]))).overallCode).toBe('OK');
    expect((await ask(req([addr]))).overallCode).toBe('OVER_LIMIT');
    clock.advance(1000);
    expect((await ask(req([addr]))).overallCode).toBe('OK');
  });

  it('limits wildcard descriptors, whose names the limiter cannot take as they are', async () => {
    const f = d(['path', '/files/a.txt']);
    expect((await ask(req([f]))).statuses[0]).toMatchObject({ code: 'OK', currentLimit: { requestsPerUnit: 1 } });
    expect((await ask(req([f]))).overallCode).toBe('OVER_LIMIT');
    expect((await ask(req([d(['path', '/other'])]))).statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
  });

  const o = (rpu: number, ...kv: [string, string][]): RlsDescriptor => ({
    ...d(...(kv.length > 0 ? kv : [['remote_address', 'o'] as [string, string]])),
    limit: { requestsPerUnit: rpu, unit: 'hour' },
  });

  it('applies limit overrides', async () => {
    expect((await ask(req([o(1)]))).statuses[0]).toMatchObject({
      code: 'OK',
      currentLimit: { requestsPerUnit: 1, unit: 'hour' },
    });
    expect((await ask(req([o(1)]))).overallCode).toBe('OVER_LIMIT');
    expect((await ask(req([o(5)]))).overallCode).toBe('OK');
    expect(overrides.size).toBe(2);
  });

  it('decides an override the table cannot admit by the limit configured for its entries', async () => {
    await ask(req([o(1)]));
    await ask(req([o(2)]));
    // The table is full of overrides in use: remote_address falls back to its 1 a second.
    const fallback = await ask(req([o(3)]));
    expect(fallback.overallCode).toBe('OK');
    expect(fallback.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { requestsPerUnit: 1, unit: 'second' } });
    expect((await ask(req([o(3)]))).statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { requestsPerUnit: 1 } });
    expect(overrides.size).toBe(2);
  });

  it('answers an override it cannot count, with no configured limit, over its limit; the rest of the request is decided', async () => {
    await ask(req([o(1)]));
    await ask(req([o(2)]));
    const bar = d(['source_cluster', 'proxy'], ['destination_cluster', 'bar']);
    const r = await ask(req([o(3, ['nothing', 'here']), bar]));
    expect(r.overallCode).toBe('OVER_LIMIT');
    expect(r.statuses[0]).toEqual({
      code: 'OVER_LIMIT',
      currentLimit: { requestsPerUnit: 3, unit: 'hour', name: '' },
      limitRemaining: 0,
    });
    // bar was decided, and given back with the refused request.
    expect(r.statuses[1]).toMatchObject({ code: 'OK', limitRemaining: 1 });
    expect((await ask(req([bar]))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 1 });
    // An over-limit descriptor next to a fallback still answers OVER_LIMIT.
    await ask(req([bar]));
    const over = await ask(req([o(3), bar]));
    expect(over.overallCode).toBe('OVER_LIMIT');
    expect(over.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('admits new overrides again once idle ones make room, and an evicted override keeps its count', async () => {
    await ask(req([o(1)]));
    expect((await ask(req([o(1)]))).overallCode).toBe('OVER_LIMIT');
    await ask(req([o(2)]));
    // 20 s: both idle for longer than 10 s, and one more admission in the bucket.
    clock.advance(20_000);
    expect((await ask(req([o(3)]))).statuses[0]).toMatchObject({ currentLimit: { requestsPerUnit: 3, unit: 'hour' } });
    expect(overrides.size).toBe(1);
    clock.advance(20_000);
    // Back in the table within the same hour: its count carried over in the store.
    const back = await ask(req([o(1)]));
    expect(back.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { requestsPerUnit: 1, unit: 'hour' } });
  });

  it('admits at most perMinute new overrides a minute', async () => {
    overrides = new OverrideTable({ limiter, maxOverrides: 100, perMinute: 3, idleMs: 60_000, clock });
    for (const rpu of [1, 2, 3]) expect((await ask(req([o(rpu)]))).statuses[0]!.currentLimit?.unit).toBe('hour');
    expect((await ask(req([o(4)]))).statuses[0]!.currentLimit).toMatchObject({ requestsPerUnit: 1, unit: 'second' });
    // Admitted ones are still served.
    expect((await ask(req([o(3)]))).statuses[0]!.currentLimit).toMatchObject({ requestsPerUnit: 3, unit: 'hour' });
    clock.advance(20_000);
    expect((await ask(req([o(4)]))).statuses[0]!.currentLimit).toMatchObject({ requestsPerUnit: 4, unit: 'hour' });
    expect(overrides.size).toBe(4);
  });

  it("decides each descriptor of a split domain by its cohort's version, and counts it for that cohort", async () => {
    // The candidate: remote_address 3 a second instead of 1; a new `tenant` limit of 1 a second.
    const candidate = compileRules(
      `
domain: rl
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 3 }
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 1 }
`,
      { file: 'rl.yaml' },
    ).domains.rl!;
    const names = new Map(Object.keys(candidate.resources()).map((r) => [r, `cand/${r}`]));
    for (const [r, config] of Object.entries(candidate.resources())) limiter.setLimits(names.get(r)!, config);
    const seen: [string, boolean][] = [];
    const onCandidate = new Set([descriptorCohortKey([{ key: 'remote_address', value: 'c' }])]);
    onCandidate.add(descriptorCohortKey([{ key: 'tenant', value: 't' }]));
    const split: DomainSplit = {
      candidate,
      names,
      cohortOf: (key) => (onCandidate.has(key) ? 'candidate' : 'baseline'),
      observe: (key, allowed) => seen.push([key, allowed]),
    };
    const asks = (r: RlsRequest) => shouldRateLimit(r, limiter, rules, overrides, () => split);
    const codes = async (r: RlsRequest) => {
      const a = await asks(r);
      return [a.overallCode, ...a.statuses.map((x) => x.code)];
    };
    // Baseline address: 1 a second; candidate address: 3 a second, in the same request.
    const both = req([d(['remote_address', 'b']), d(['remote_address', 'c'])]);
    expect(await codes(both)).toEqual(['OK', 'OK', 'OK']);
    expect(await codes(req([d(['remote_address', 'c'])]))).toEqual(['OK', 'OK']);
    expect(await codes(req([d(['remote_address', 'c'])]))).toEqual(['OK', 'OK']);
    expect(await codes(req([d(['remote_address', 'c'])]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(await codes(req([d(['remote_address', 'b'])]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    // The candidate's new limit holds for its cohort; the baseline has no such limit.
    expect(await codes(req([d(['tenant', 't'])]))).toEqual(['OK', 'OK']);
    expect(await codes(req([d(['tenant', 't'])]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(await codes(req([d(['tenant', 'u'])]))).toEqual(['OK', 'OK']);
    expect(await codes(req([d(['tenant', 'u'])]))).toEqual(['OK', 'OK']);
    // The candidate's counts live under its own names: the baseline address's bucket is apart.
    expect(limiter.resources()).toEqual(expect.arrayContaining([...names.values()]));
    const b = descriptorCohortKey([{ key: 'remote_address', value: 'b' }]);
    const c = descriptorCohortKey([{ key: 'remote_address', value: 'c' }]);
    const t = descriptorCohortKey([{ key: 'tenant', value: 't' }]);
    expect(seen).toEqual([
      [b, true],
      [c, true],
      [c, true],
      [c, true],
      [c, false],
      [b, false],
      [t, true],
      [t, false],
    ]);
  });

  it('refuses empty domains and descriptor lists', async () => {
    await expect(ask({ domain: '', descriptors: [d(['a', 'b'])], hitsAddend: 0 })).rejects.toMatchObject({
      code: 'SLUICE_ERR_INVALID_REQUEST',
      field: 'domain',
    });
    await expect(ask(req([]))).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'descriptors' });
  });
});
