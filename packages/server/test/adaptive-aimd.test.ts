import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { TOKEN, call, eventually, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

// Needs Redis (SLUICE_REDIS_URL). An aimd limit judged every half second and every second: each
// round judges the last whole second of reported outcomes (the store's tallies are per second).
const rules = (intervalMs: number): string => `resources:
  db:aimd:
    limits: { algorithm: sliding-window, limit: 20, windowMs: 1000 }
adaptive:
  db:aimd:
    min: 5
    max: 200
    policy: aimd
    intervalMs: ${intervalMs}
    aimd: { increase: 5, minCalls: 20 }
`;

interface Version {
  version: number;
  author: string;
  reason: string;
  source: string;
}

const limitOf = (v: Version): number =>
  (parse(v.source) as { resources: Record<string, { limits: { limit: number } }> }).resources['db:aimd']!.limits.limit;

describe.each([500, 1000])(
  'an aimd limit judged every %i ms on one server and Redis',
  (intervalMs) => {
    const tmp = scratch();
    const prefix = randomPrefix('aimdw');
    let server: ServerProcess;

    beforeAll(async () => {
      server = await spawnServer([
        '--rules',
        writeRules(tmp.dir, rules(intervalMs)),
        '--redis',
        redisUrl(),
        '--redis-prefix',
        prefix,
      ]);
    });
    afterAll(async () => {
      await server.stop();
      const redis = new Redis(redisUrl());
      for (const key of await redis.keys(`${prefix}*`)) await redis.del(key);
      redis.disconnect();
      tmp.remove();
    });

    async function moves(): Promise<Version[]> {
      const history = await call(server.url, '/v1/admin/rules/history', undefined, { token: TOKEN });
      const metas = (history.json.versions as Version[]).filter((m) => m.author === 'adaptive').reverse();
      return Promise.all(
        metas.map(
          async (m) =>
            (await call(server.url, `/v1/admin/rules?version=${m.version}`, undefined, { token: TOKEN })).json as Version,
        ),
      );
    }

    /** Checks past the limit and outcome reports (all `ok`, or all failing) until `done` holds. */
    async function drive(ok: boolean, done: (moves: Version[]) => boolean): Promise<Version[]> {
      let seen: Version[] = [];
      await eventually(
        async () => {
          for (let i = 0; i < 10; i++) {
            await Promise.all([
              ...[0, 1, 2].map(() => call(server.url, '/v1/check', { resource: 'db:aimd', key: 'k' })),
              call(
                server.url,
                '/v1/outcomes',
                { items: [{ resource: 'db:aimd', ok, durationMs: 20, count: 5 }] },
                { token: TOKEN },
              ),
            ]);
            await new Promise((r) => setTimeout(r, 50));
          }
          seen = await moves();
          return done(seen);
        },
        90_000,
        0,
      );
      return seen;
    }

    it('raises the limit while every reported outcome succeeds and the limit rejects calls', async () => {
      const up = await drive(true, (m) => m.length >= 1);
      expect(limitOf(up[0]!)).toBe(25);
      expect(up[0]!.reason).toMatch(/^db:aimd 20 -> 25: downstream healthy \(error ratio 0\.0%/);
    });

    it('cuts the limit while every reported outcome fails', async () => {
      const before = (await moves()).length;
      const down = await drive(false, (m) => m.slice(before).some((v) => v.reason.includes('downstream error ratio')));
      const cut = down.slice(before).find((v) => v.reason.includes('downstream error ratio'))!;
      const prior = down[down.indexOf(cut) - 1]!;
      expect(limitOf(cut)).toBe(Math.floor(limitOf(prior) * 0.7));
      // The first second judged may still hold some of the healthy reports before it.
      expect(cut.reason).toMatch(/downstream error ratio \d+\.\d% \(\d+ of \d+\) > 10\.0%: x0\.7$/);
    });
  },
  240_000,
);
