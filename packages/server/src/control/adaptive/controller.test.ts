import type { ApplyOptions, RuleStore, RuleVersion } from '@sluice/rules';
import { afterEach, describe, expect, it } from 'vitest';
import { ruleVersion } from '../../../test/rule-version.js';
import { ADAPTIVE_AUTHOR, AdaptiveController } from './controller.js';
import { MemoryDemandStore } from './demand-store.js';

const RULES = `resources:
  api:x:
    limits: { algorithm: sliding-window, limit: 100, windowMs: 1000 }
adaptive:
  api:x: { min: 50, max: 500, policy: demand, intervalMs: 1000, cooldownMs: 1000, demand: { rejectForMs: 2000 } }
`;

/** The part of a rule store the controller uses: current and apply, in memory. */
class Versions {
  readonly list: RuleVersion[] = [ruleVersion(RULES, 1)];
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
