/**
 * A hot key on a Redis Cluster: one caller key takes nearly every call of a resource, so the
 * master holding its slot does nearly all the work. With `hotKeys` configured from the start,
 * the limiter finds the key hot and serves it from leased batches; the busiest master's share of
 * the script calls falls, and no configuration changes in between. The cluster is the test's
 * own, so no other test's commands are counted.
 */
import { Limiter } from '@sluice/core';
import { startRedisCluster, type RedisCluster } from '@sluice/redis/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../src/index.js';
import { randomPrefix } from '../../../test/env.js';
import { TEST_COMMAND_TIMEOUT_MS } from './helpers.js';

const RESOURCE = 'api:payments';
const HOT = 'channel-hot';
/** Calls on the hot key per call on a background key (about 95% of the calls go to the hot key). */
const HOT_PER_BACKGROUND = 20;
const ROUNDS = 30;
/** The hot key is hot from 12 calls a second over a minute's window: its 720th call. */
const THRESHOLD_RATE = 12;
const WINDOW_MS = 60_000;

/** Script calls each master has served so far (the store runs everything as a script). */
async function scriptCalls(admins: readonly Redis[]): Promise<number[]> {
  return Promise.all(
    admins.map(async (a) => {
      const text = await a.info('commandstats');
      let calls = 0;
      for (const m of text.matchAll(/^cmdstat_(fcall|fcall_ro|evalsha|eval):calls=(\d+)/gm)) calls += Number(m[2]);
      return calls;
    }),
  );
}

/** The busiest master's share of the script calls between two readings. */
function busiestShare(before: readonly number[], after: readonly number[]): number {
  const deltas = after.map((n, i) => n - before[i]!);
  const total = deltas.reduce((a, b) => a + b, 0);
  return Math.max(...deltas) / total;
}

describe('hot keys on a Redis Cluster', () => {
  let cluster: RedisCluster;
  let admins: Redis[];

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    admins = cluster.servers.map((s) => new Redis({ host: '127.0.0.1', port: s.port }));
  });
  afterAll(async () => {
    for (const a of admins ?? []) a.disconnect();
    await cluster?.stop();
  });

  it("leases the hot key once it passes the threshold, and the busiest master's share falls", async () => {
    const store = new RedisStore({
      clusterNodes: cluster.nodes.map((n) => ({ host: n.split(':')[0]!, port: Number(n.split(':')[1]) })),
      prefix: randomPrefix('hot'),
      commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS,
    });
    const limiter = new Limiter({
      store,
      resources: {
        [RESOURCE]: {
          limits: { algorithm: 'fixed-window', limit: 10_000_000, windowMs: 60_000 },
          hotKeys: { windowMs: WINDOW_MS, threshold: { rate: THRESHOLD_RATE }, action: 'lease', lease: { ttlMs: 1000 } },
        },
      },
    });
    let background = 0;
    /** One round of the workload: the hot key's calls and one call on the next background key. */
    const round = async () => {
      for (let i = 0; i < HOT_PER_BACKGROUND; i++) expect((await limiter.try(RESOURCE, { key: HOT })).allowed).toBe(true);
      expect((await limiter.try(RESOURCE, { key: `merchant-${background++ % 60}` })).allowed).toBe(true);
    };
    try {
      // Warm up the connections to every master before counting.
      for (let i = 0; i < 60; i++) await limiter.try(RESOURCE, { key: `merchant-${i}` });
      // Before: 630 calls, 600 of them on the hot key, under the threshold (counted over a
      // minute, the hot key reaches 12 calls a second with its 720th call at the earliest).
      const start = await scriptCalls(admins);
      for (let r = 0; r < ROUNDS; r++) await round();
      const warm = await scriptCalls(admins);
      expect(limiter.hotKeys(RESOURCE)[0]?.keys[0]).toMatchObject({ key: HOT, mitigation: undefined });
      const before = busiestShare(start, warm);
      // The key turns hot on its next calls (bounded: the window is far longer than this test).
      let n = 0;
      while (limiter.hotKeys(RESOURCE)[0]?.mitigated !== 1 && n++ < 10_000) await limiter.try(RESOURCE, { key: HOT });
      expect(limiter.hotKeys(RESOURCE)[0]?.keys[0]).toMatchObject({ key: HOT, mitigation: 'lease' });
      // After: the same workload, the same configuration.
      const mitigated = await scriptCalls(admins);
      for (let r = 0; r < ROUNDS; r++) await round();
      const end = await scriptCalls(admins);
      const after = busiestShare(mitigated, end);
      expect(before).toBeGreaterThan(0.9);
      expect(after).toBeLessThan(0.75);
      // Every call was still counted globally: the leased batches came from the hot key's state.
      expect(limiter.trySync(RESOURCE, { key: HOT })?.source).toBe('lease');
    } finally {
      await limiter.close();
      await store.close();
    }
  });
});
