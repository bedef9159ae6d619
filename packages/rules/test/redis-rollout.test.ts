/** A RedisRuleStore's rollout against real standalone Redis and Redis Cluster. */
import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { RedisRuleStore } from '../src/index.js';
import { randomPrefix, redisClusterNodes, redisUrl } from '../../../test/env.js';
import { RUNNING_ROLLOUT as state } from './rollout-state.js';

function suite(name: string, connect: () => Redis | Cluster) {
  describe(name, () => {
    const client = connect();
    const prefix = randomPrefix('rollout');
    const a = new RedisRuleStore({ client, prefix });
    const b = new RedisRuleStore({ client, prefix });

    afterAll(async () => {
      await Promise.all([a.close(), b.close()]);
      for (const k of ['rollout', 'rollout:lease', 'rollout:tally:r1:0']) await client.del(`${prefix}{rules}:${k}`);
      await client.quit();
    });

    it('writes the rollout by compare-and-set: of two writers of one revision, one wins', async () => {
      expect(await a.rolloutStore().read()).toBeUndefined();
      const first = await a.rolloutStore().write(state, 0);
      expect(first.revision).toBe(1);
      const results = await Promise.allSettled([
        a.rolloutStore().write({ ...first, step: 1 }, 1),
        b.rolloutStore().write({ ...first, status: 'aborted' }, 1),
      ]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const lost = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(lost.reason).toMatchObject({ code: 'SLUICE_ERR_ROLLOUT_CONFLICT' });
      expect((await b.rolloutStore().read())!.revision).toBe(2);
    });

    it('makes one owner the decider at a time, renewable by it and free once resigned', async () => {
      const owners = await Promise.all(['x', 'y', 'z'].map((o) => a.rolloutStore().lead(o, 60_000)));
      expect(owners.filter(Boolean)).toHaveLength(1);
      const holder = ['x', 'y', 'z'][owners.indexOf(true)]!;
      expect(await b.rolloutStore().lead(holder, 60_000)).toBe(true);
      expect(await b.rolloutStore().lead('other', 60_000)).toBe(false);
      await a.rolloutStore().resign(holder);
      expect(await b.rolloutStore().lead('other', 60_000)).toBe(true);
    });

    it('sums every writer tallies', async () => {
      await Promise.all([
        a.rolloutStore().addTallies('r1', 0, new Map([['candidate|orders|decided', 3]])),
        b.rolloutStore().addTallies(
          'r1',
          0,
          new Map([
            ['candidate|orders|decided', 4],
            ['candidate|orders|denied', 1],
          ]),
        ),
      ]);
      expect(await a.rolloutStore().tallies('r1', 0)).toEqual(
        new Map([
          ['candidate|orders|decided', 7],
          ['candidate|orders|denied', 1],
        ]),
      );
    });
  });
}

suite('standalone Redis', () => new Redis(redisUrl()));
suite('Redis Cluster', () => new Cluster(redisClusterNodes()));
