import { ManualClock, MemoryStore } from '@sluice/core';
import type { ApplyOptions, RuleStore, RuleVersion } from '@sluice/rules';
import { afterEach, describe, expect, it } from 'vitest';
import { ruleVersion } from '../../../test/rule-version.js';
import { ADAPTIVE_AUTHOR, AdaptiveController, judgedIntervals } from './controller.js';
import { MemoryDemandStore } from './demand-store.js';

const RULES = `resources:
  api:x:
    limits: { algorithm: sliding-window, limit: 100, windowMs: 1000 }
adaptive:
  api:x: { min: 50, max: 500, policy: demand, intervalMs: 1000, cooldownMs: 1000, demand: { rejectForMs: 2000 } }
`;

/** The part of a rule store the controller uses: current and apply, in memory. */
class Versions {
  readonly list: RuleVersion[];
  constructor(rules = RULES) {
    this.list = [ruleVersion(rules, 1)];
  }
  readonly applied: ApplyOptions[] = [];
  readonly store = {
    current: () => Promise.resolve(this.list.at(-1)),
    apply: (text: string, options: ApplyOptions) => {
      this.applied.push(options);
      const v = { ...ruleVersion(text, this.list.length + 1), author: options.author, reason: options.reason };
      this.list.push(v);
      return Promise.resolve(v);
    },
  } as unknown as RuleStore;
}

describe('AdaptiveController', () => {
  const controllers: AdaptiveController[] = [];
  afterEach(async () => {
    for (const c of controllers.splice(0)) await c.close();
  });

  async function setup(hold = false) {
    let now = 10_000;
    const demand = new MemoryDemandStore(() => now);
    const versions = new Versions();
    const make = (owner: string) => {
      const c = new AdaptiveController({
        ruleStore: versions.store,
        demand,
        owner,
        now: () => now,
        tickMs: 3_600_000,
        hold: () => hold,
      });
      c.update(versions.list[0]!);
      controllers.push(c);
      return c;
    };
    // Two busy seconds: 20% rejected in each.
    for (const start of [8_000, 9_000]) {
      await demand.add('api:x', 1000, start, { decided: 100, rejected: 20, peakShare: 1, waits: 0, waitedMs: 0 }, 60_000);
    }
    return { demand, versions, make, advance: (ms: number) => (now += ms) };
  }

  it('moves a limit once, as a version on top of the one judged, from whichever server decides', async () => {
    const { versions, make } = await setup();
    const [a, b] = [make('a'), make('b')];
    await a.tick();
    await b.tick();
    expect(versions.applied).toEqual([
      expect.objectContaining({
        author: ADAPTIVE_AUTHOR,
        expectedVersion: 1,
        reason: expect.stringMatching(/^api:x 100 -> 120: rejections 20\.0%/),
      }),
    ]);
    expect(versions.list.at(-1)!.ruleSet.resources['api:x']!.limits[0]!.limit).toBe(120);
    expect((await a.status())[0]).toMatchObject({ resource: 'api:x', limit: 120, deciding: true });
    expect((await b.status())[0]).toMatchObject({ deciding: false });
  });

  it('answers its status while the store is away, the last move unknown', async () => {
    const { demand, make } = await setup();
    const a = make('a');
    demand.lastMove = () => Promise.reject(new Error('connection is closed'));
    expect(await a.status()).toEqual([
      {
        resource: 'api:x',
        policy: 'demand',
        min: 50,
        max: 500,
        limit: 100,
        windowMs: 1000,
        lastMoveUnknown: true,
        deciding: false,
      },
    ]);
  });

  it('holds every limit while told to (a rollout under way)', async () => {
    const { versions, make } = await setup(true);
    await make('a').tick();
    expect(versions.applied).toEqual([]);
  });
});

const aimdRules = (intervalMs: number): string => `resources:
  db:x:
    limits: { algorithm: sliding-window, limit: 100, windowMs: 1000 }
adaptive:
  db:x: { min: 10, max: 500, policy: aimd, intervalMs: ${intervalMs}, aimd: { increase: 5, minCalls: 20 } }
`;

describe.each([500, 1000])('AdaptiveController, aimd at intervalMs %i', (intervalMs) => {
  const closing: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const c of closing.splice(0)) await c.close();
  });

  /**
   * A decider 300 ms into second 10 (the bucket in progress holds nothing yet), with outcomes
   * reported during second 9 and one interval of demand recorded before now's.
   */
  async function round(ok: boolean) {
    const clock = new ManualClock(9_600);
    const outcomes = new MemoryStore({ clock });
    closing.push(outcomes);
    await outcomes.outcomes({
      resource: 'db:x',
      totals: { calls: 100, failures: ok ? 0 : 100, slow: 0, totalDurationMs: 2000 },
    });
    clock.advance(700);
    const demand = new MemoryDemandStore(() => clock.now());
    const reads: [number, number][] = [];
    const read = demand.read.bind(demand);
    demand.read = (resource, ms, from, to) => {
      reads.push([from, to]);
      return read(resource, ms, from, to);
    };
    const last = Math.floor(clock.now() / intervalMs) * intervalMs - intervalMs;
    await demand.add('db:x', intervalMs, last, { decided: 50, rejected: 10, peakShare: 1, waits: 0, waitedMs: 0 }, 60_000);
    const versions = new Versions(aimdRules(intervalMs));
    const c = new AdaptiveController({
      ruleStore: versions.store,
      demand,
      outcomes,
      owner: 'a',
      now: () => clock.now(),
      tickMs: 3_600_000,
    });
    closing.push(c);
    c.update(versions.list[0]!);
    await c.tick();
    return { versions, reads, last };
  }

  it('judges the last whole second of outcomes, not the one in progress: all failing cuts the limit', async () => {
    const { versions } = await round(false);
    expect(versions.applied).toEqual([
      expect.objectContaining({ reason: 'db:x 100 -> 70: downstream error ratio 100.0% (100 of 100) > 10.0%: x0.7' }),
    ]);
  });

  it('adds while the last whole second was healthy and the limit rejected calls', async () => {
    const { versions } = await round(true);
    expect(versions.applied).toEqual([
      expect.objectContaining({ reason: expect.stringMatching(/^db:x 100 -> 105: downstream healthy/) }),
    ]);
  });

  it('reads only the interval it judges from the demand store', async () => {
    const { reads, last } = await round(false);
    expect(reads).toEqual([[last, last]]);
  });
});

describe('judgedIntervals', () => {
  it("spans a demand rule's longest streak", () => {
    const rule = ruleVersion(RULES, 1).ruleSet.adaptive['api:x']!;
    // rejectForMs 2000, idleForMs 30 min by default: 1,801 one-second intervals.
    const [from, to] = judgedIntervals(rule, 10_500);
    expect([from, to]).toEqual([9_000 - 1_800_000, 9_000]);
  });
});
