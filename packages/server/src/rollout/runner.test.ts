import { Limiter, ManualClock, MemoryStore, cohortAt, type OutcomeSource, type OutcomeTotals } from '@sluice/core';
import { MemoryRolloutStore, type RuleStore, type RuleVersion } from '@sluice/rules';
import { describe, expect, it } from 'vitest';
import { LiveRules } from '../live-rules.js';
import { ruleVersion } from '../../test/rule-version.js';
import { AUTO_ROLLBACK_AUTHOR, RolloutRunner, candidateResourceName } from './runner.js';

const RULES = (limit: number) => `
resources:
  orders: { limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 3600000 } }
  search: { limits: { algorithm: fixed-window, limit: 100, windowMs: 3600000 } }
`;

/** The part of a rule store a rollout uses, in memory. */
class VersionList {
  readonly versions: RuleVersion[] = [ruleVersion(RULES(100), 1)];
  current(): Promise<RuleVersion | undefined> {
    return Promise.resolve(this.versions.at(-1));
  }
  apply(text: string, o: { author: string; reason: string; expectedVersion?: number }): Promise<RuleVersion> {
    const top = this.versions.at(-1)!.version;
    if (o.expectedVersion !== undefined && o.expectedVersion !== top) return Promise.reject(new Error('conflict'));
    const v = { ...ruleVersion(text, top + 1), author: o.author, reason: o.reason };
    this.versions.push(v);
    return Promise.resolve(v);
  }
  rollback(version: number, o: { author: string; reason: string }): Promise<RuleVersion> {
    const old = this.versions.find((v) => v.version === version)!;
    const v = {
      ...ruleVersion(old.source, this.versions.length + 1),
      author: o.author,
      reason: o.reason,
      rolledBackFrom: version,
    };
    this.versions.push(v);
    return Promise.resolve(v);
  }
}

/** Outcomes by cohort, set by the test. */
class FakeOutcomes implements OutcomeSource {
  readonly totals = new Map<string, OutcomeTotals>();
  readonly asked: { resource: string; cohort: string | undefined }[] = [];
  readonly windows: number[] = [];
  outcomeTotals(resource: string, windowMs: number, cohort?: string): Promise<OutcomeTotals> {
    this.asked.push({ resource, cohort });
    this.windows.push(windowMs);
    return Promise.resolve(this.totals.get(`${resource}/${cohort}`) ?? { calls: 0, failures: 0, slow: 0, totalDurationMs: 0 });
  }
}

function fleet(n: number, outcomes?: OutcomeSource) {
  const clock = new ManualClock();
  const store = new MemoryRolloutStore(() => clock.now());
  const ruleStore = new VersionList();
  // One store for the fleet, as Redis is.
  const limits = new MemoryStore({ clock });
  const servers = Array.from({ length: n }, () => {
    const limiter = new Limiter({ resources: {}, clock, store: limits });
    const rules = new LiveRules({ limiter });
    rules.apply(ruleStore.versions[0]!);
    const runner = new RolloutRunner({
      store,
      ruleStore: ruleStore as unknown as RuleStore,
      limiter,
      rules,
      now: () => clock.now(),
      leadershipTtlMs: 1000,
      ...(outcomes === undefined ? {} : { outcomes }),
    });
    return { limiter, rules, runner };
  });
  const tick = async () => {
    for (const s of servers) await s.runner.tick();
  };
  return { clock, store, ruleStore, servers, tick };
}

const keys = Array.from({ length: 400 }, (_, i) => `k${i}`);

describe('RolloutRunner', () => {
  it('splits the changed resource by the hash on every server, each cohort on its own limits', async () => {
    const f = fleet(2);
    const [a, b] = f.servers;
    const s = await a!.runner.begin({
      text: RULES(1),
      author: 'ana',
      reason: 'tighter',
      steps: [{ percent: 10, holdMs: 60_000 }],
    });
    expect(s.resources).toEqual(['orders']);
    await f.tick();
    for (const k of keys) {
      expect(a!.runner.cohortOf('orders', k)).toBe(cohortAt(10, s.id, 'orders', k));
      expect(b!.runner.cohortOf('orders', k)).toBe(a!.runner.cohortOf('orders', k));
      expect(a!.runner.cohortOf('search', k)).toBeUndefined();
    }
    const cand = keys.find((k) => a!.runner.cohortOf('orders', k) === 'candidate')!;
    const base = keys.find((k) => a!.runner.cohortOf('orders', k) === 'baseline')!;
    expect(a!.runner.route('orders', cand)).toBe(candidateResourceName(s.id, 'orders'));
    expect(a!.runner.route('orders', base)).toBe('orders');
    expect(a!.limiter.limitsOf(candidateResourceName(s.id, 'orders'))[0]!.limit).toBe(1);
    expect(a!.runner.percent).toBe(10);
  });

  it('advances the ramp once per hold whichever servers poll, and promotes the candidate once', async () => {
    const f = fleet(3);
    const [a] = f.servers;
    await a!.runner.begin({
      text: RULES(200),
      author: 'ana',
      reason: 'more',
      steps: [
        { percent: 1, holdMs: 1000 },
        { percent: 50, holdMs: 1000 },
      ],
      watchMs: 500,
    });
    await f.tick();
    await f.tick();
    expect((await f.store.read())!.step).toBe(0);
    expect(f.servers.filter((s) => s.runner.leading)).toHaveLength(1);
    f.clock.advance(1000);
    await f.tick();
    await f.tick();
    expect((await f.store.read())!.step).toBe(1);
    f.clock.advance(1000);
    await f.tick();
    await f.tick();
    const watching = (await f.store.read())!;
    expect(watching).toMatchObject({ status: 'watching', version: 2 });
    expect(f.ruleStore.versions.map((v) => v.author)).toEqual(['test', 'ana']);
    for (const s of f.servers) expect(s.runner.cohortOf('orders', 'k1')).toBe('candidate');
    f.clock.advance(500);
    await f.tick();
    expect((await f.store.read())!.status).toBe('completed');
    expect(f.ruleStore.versions).toHaveLength(2);
  });

  it('rolls back when the candidate cohort is rejected far more often, recorded as auto-rollback', async () => {
    const f = fleet(2);
    const [a, b] = f.servers;
    const s = await a!.runner.begin({
      text: RULES(1),
      author: 'ana',
      reason: 'too tight',
      steps: [{ percent: 50, holdMs: 3_600_000 }],
      thresholds: { minCalls: 20 },
    });
    await f.tick();
    for (const k of keys.slice(0, 100)) {
      for (const server of [a!, b!]) {
        const d = await server.limiter.try(server.runner.route('orders', k), { key: k });
        server.runner.observe('orders', k, d.allowed);
      }
    }
    // One poll flushes every server's counts; the decider judges their sum at its next.
    await f.tick();
    await f.tick();
    const after = (await f.store.read())!;
    expect(after.status).toBe('rolled_back');
    expect(after.note).toMatch(/^orders: candidate rejection ratio 50\.0% \(\d+\/\d+\) against 0\.0% for the baseline/);
    const v = f.ruleStore.versions.at(-1)!;
    expect(v).toMatchObject({ author: AUTO_ROLLBACK_AUTHOR, rolledBackFrom: 1, version: after.rollbackVersion });
    expect(v.reason).toBe(after.note);
    await f.tick();
    for (const server of [a!, b!]) {
      expect(server.runner.percent).toBe(0);
      expect(server.limiter.has(candidateResourceName(s.id, 'orders'))).toBe(false);
    }
  });

  it('rolls back on the downstream error ratio of an outcome source, asked per cohort', async () => {
    const outcomes = new FakeOutcomes();
    const f = fleet(1, outcomes);
    const [a] = f.servers;
    await a!.runner.begin({ text: RULES(200), author: 'ana', reason: 'r', steps: [{ percent: 10, holdMs: 60_000 }] });
    outcomes.totals.set('orders/baseline', { calls: 500, failures: 5, slow: 0, totalDurationMs: 5000 });
    outcomes.totals.set('orders/candidate', { calls: 50, failures: 5, slow: 0, totalDurationMs: 500 });
    await f.tick();
    // 10 % against 1 %: a rise of 9 points is within the default 10.
    expect((await f.store.read())!.status).toBe('running');
    expect(outcomes.asked).toContainEqual({ resource: 'orders', cohort: 'candidate' });
    expect(outcomes.asked).toContainEqual({ resource: 'orders', cohort: 'baseline' });
    outcomes.totals.set('orders/candidate', { calls: 50, failures: 6, slow: 0, totalDurationMs: 500 });
    await f.tick();
    const s = (await f.store.read())!;
    expect(s.status).toBe('rolled_back');
    expect(s.note).toMatch(/downstream error ratio 12\.0% \(6\/50\) against 1\.0%/);
    expect(f.ruleStore.versions.at(-1)!.author).toBe('auto-rollback');
  });

  it('keeps judging a promoted candidate while it is watched, and rolls it back to the baseline', async () => {
    const f = fleet(1);
    const [a] = f.servers;
    await a!.runner.begin({
      text: RULES(1),
      author: 'ana',
      reason: 'r',
      steps: [{ percent: 100, holdMs: 0 }],
      watchMs: 60_000,
      thresholds: { minCalls: 10 },
    });
    await f.tick();
    expect((await f.store.read())!).toMatchObject({ status: 'watching', version: 2 });
    for (const k of keys.slice(0, 20)) {
      for (let i = 0; i < 2; i++) {
        const d = await a!.limiter.try(a!.runner.route('orders', k), { key: k });
        a!.runner.observe('orders', k, d.allowed);
      }
    }
    await f.tick();
    const s = (await f.store.read())!;
    expect(s.status).toBe('rolled_back');
    expect(s.note).toMatch(/^orders: candidate rejection ratio 50\.0% \(20\/40\) against 0\.0% for the baseline/);
    // Version 3 restores version 1: the limit in force is the baseline's again.
    expect(f.ruleStore.versions.at(-1)).toMatchObject({ version: 3, rolledBackFrom: 1, author: 'auto-rollback' });
    expect(a!.rules.version?.version).toBe(3);
    expect(a!.limiter.limitsOf('orders')[0]!.limit).toBe(100);
  });

  it('is paused, resumed and aborted by operators; a version applied meanwhile aborts it', async () => {
    const f = fleet(1);
    const [a] = f.servers;
    await a!.runner.begin({ text: RULES(5), author: 'ana', reason: 'r', steps: [{ percent: 10, holdMs: 0 }] });
    await expect(a!.runner.begin({ text: RULES(6), author: 'ana', reason: 'r' })).rejects.toMatchObject({
      code: 'SLUICE_ERR_ROLLOUT_CONFLICT',
    });
    expect((await a!.runner.pause('ana', 'look')).status).toBe('paused');
    f.clock.advance(10_000);
    await f.tick();
    expect((await f.store.read())!.status).toBe('paused');
    await expect(a!.runner.pause('ana', 'again')).rejects.toMatchObject({ code: 'SLUICE_ERR_ROLLOUT_CONFLICT' });
    expect((await a!.runner.resume('ana', 'go')).status).toBe('running');
    expect((await a!.runner.abort('ana', 'no')).status).toBe('aborted');
    expect(a!.runner.percent).toBe(0);

    await a!.runner.begin({ text: RULES(5), author: 'ana', reason: 'r', steps: [{ percent: 10, holdMs: 60_000 }] });
    await f.ruleStore.apply(RULES(7), { author: 'bo', reason: 'hotfix' });
    await f.tick();
    expect((await f.store.read())!).toMatchObject({ status: 'aborted', note: 'version 2 was applied during the rollout' });
  });

  it('keeps the counts the store did not take, and adds them with the next poll', async () => {
    const f = fleet(1);
    const [a] = f.servers;
    const s = await a!.runner.begin({ text: RULES(1), author: 'ana', reason: 'r', steps: [{ percent: 50, holdMs: 60_000 }] });
    await f.tick();
    const cand = keys.find((k) => a!.runner.cohortOf('orders', k) === 'candidate')!;
    const real = f.store.addTallies.bind(f.store);
    let fail = true;
    f.store.addTallies = (id, phase, counts) => (fail ? Promise.reject(new Error('store away')) : real(id, phase, counts));
    a!.runner.observe('orders', cand, false);
    await expect(a!.runner.tick()).rejects.toThrow('store away');
    a!.runner.observe('orders', cand, true);
    fail = false;
    await a!.runner.tick();
    const tallies = await f.store.tallies(s.id, 0);
    expect(tallies.get('candidate|orders|decided')).toBe(2);
    expect(tallies.get('candidate|orders|denied')).toBe(1);
  });

  it("leaves the store-failure policy's decisions out of the cohorts' counts", async () => {
    const f = fleet(1);
    const [a] = f.servers;
    const s = await a!.runner.begin({ text: RULES(1), author: 'ana', reason: 'r', steps: [{ percent: 50, holdMs: 60_000 }] });
    await f.tick();
    const cand = keys.find((k) => a!.runner.cohortOf('orders', k) === 'candidate')!;
    // A cold server's first calls, or an outage: denied by the fallback, not by the rules.
    for (let i = 0; i < 100; i++) a!.runner.observe('orders', cand, false, 'fallback');
    a!.runner.observe('orders', cand, false, 'store');
    a!.runner.observe('orders', cand, true, 'lease');
    await f.tick();
    const tallies = await f.store.tallies(s.id, 0);
    expect(tallies.get('candidate|orders|decided')).toBe(2);
    expect(tallies.get('candidate|orders|denied')).toBe(1);
  });

  it('refuses a candidate that changes no resource, and bad plans', async () => {
    const f = fleet(1);
    const [a] = f.servers;
    await expect(a!.runner.begin({ text: RULES(100), author: 'ana', reason: 'r' })).rejects.toMatchObject({
      code: 'SLUICE_ERR_INVALID_OPTIONS',
      field: 'text',
    });
    await expect(
      a!.runner.begin({ text: RULES(1), author: 'ana', reason: 'r', steps: [{ percent: 200, holdMs: 0 }] }),
    ).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_OPTIONS' });
    await expect(a!.runner.promote('ana', 'r')).rejects.toMatchObject({ code: 'SLUICE_ERR_ROLLOUT_NOT_FOUND' });
  });

  it('judges a step longer than the outcome tallies keep on their latest part', async () => {
    const outcomes = new FakeOutcomes();
    const f = fleet(1, outcomes);
    await f.servers[0]!.runner.begin({
      text: RULES(200),
      author: 'ana',
      reason: 'more',
      steps: [{ percent: 50, holdMs: 3_600_000 }],
    });
    await f.tick();
    f.clock.advance(20 * 60_000);
    await f.tick();
    expect(outcomes.windows.length).toBeGreaterThan(0);
    // The stores keep 600 one-second buckets; a longer window is refused by them.
    expect(Math.max(...outcomes.windows)).toBe(600_000);
  });
});
