/* eslint-disable @typescript-eslint/no-unsafe-return --
   the assertions read parsed JSON answers dynamically */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { TOKEN, call, eventually, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

// The seed's demand policy with its spans shortened: over 5% rejected in every half-second
// interval for 1.5 s raises the limit 20% (calls here do not wait), at most once per 2 s.
const RULES = `# the payment API's limit, moved by the service
resources:
  api:adaptive:
    limits: { algorithm: sliding-window, limit: 20, windowMs: 1000 }
adaptive:
  api:adaptive:
    min: 10
    max: 60
    policy: demand
    intervalMs: 500
    cooldownMs: 2000
    demand: { rejectForMs: 1500, idleForMs: 600000 }
`;

const TIMEOUT = ['--store-timeout-ms', '2000'];

interface Version {
  version: number;
  author: string;
  reason: string;
  createdAt: string;
  source: string;
}

async function versions(server: ServerProcess): Promise<Version[]> {
  const history = await call(server.url, '/v1/admin/rules/history', undefined, { token: TOKEN });
  const metas = (history.json.versions as Version[]).slice().reverse();
  return Promise.all(
    metas.map(
      async (m) => (await call(server.url, `/v1/admin/rules?version=${m.version}`, undefined, { token: TOKEN })).json as Version,
    ),
  );
}

interface RuleText {
  resources: Record<string, { limits: { limit: number } }>;
}
const limitOf = (v: Version): number => (parse(v.source) as RuleText).resources['api:adaptive']!.limits.limit;

describe('adaptive limits on two sluice serve processes sharing one Redis', () => {
  const tmp = scratch();
  const prefix = randomPrefix('adapt');
  let servers: ServerProcess[] = [];
  let load: Promise<void> | undefined;
  let stop = false;

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, RULES);
    servers = await Promise.all(
      [0, 1].map(() => spawnServer(['--rules', rules, '--redis', redisUrl(), '--redis-prefix', prefix, ...TIMEOUT])),
    );
  });
  afterAll(async () => {
    stop = true;
    await load;
    await Promise.all(servers.map((s) => s.stop()));
    const redis = new Redis(redisUrl());
    for (const key of await redis.keys(`${prefix}*`)) await redis.del(key);
    redis.disconnect();
    tmp.remove();
  });

  it('raises a limit that rejects too much, one move per cooldown across the fleet, each a version', async () => {
    // About 60 checks a second of one key, alternating between the servers, until stopped.
    load = (async () => {
      for (let i = 0; !stop; i++) {
        await Promise.all(
          [0, 1, 2].map((j) =>
            call(servers[(i + j) % 2]!.url, '/v1/check', { resource: 'api:adaptive', key: 'k' }).catch(() => undefined),
          ),
        );
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await eventually(async () => (await versions(servers[0]!)).filter((v) => v.author === 'adaptive').length >= 3, 90_000, 500);
    stop = true;
    await load;

    const all = await versions(servers[0]!);
    const moves = all.filter((v) => v.author === 'adaptive');
    // Each move is +20% of the limit it was judged on: no server moved a limit another had just moved.
    let before = limitOf(all[0]!);
    for (const move of moves) {
      expect(limitOf(move)).toBe(Math.ceil(before * 1.2));
      expect(move.reason).toMatch(
        /^api:adaptive \d+ -> \d+: rejections \d+\.\d% \(\d+ of \d+\) > 5\.0% in every interval for 1\.5 s/,
      );
      before = limitOf(move);
    }
    for (let i = 1; i < moves.length; i++) {
      expect(Date.parse(moves[i]!.createdAt) - Date.parse(moves[i - 1]!.createdAt)).toBeGreaterThanOrEqual(2000 - 100);
    }
    // The text is the file as written, with the one value changed.
    expect(moves.at(-1)!.source).toBe(RULES.replace('limit: 20,', `limit: ${before},`));

    // Both servers decide by the moved limit; one of them is the decider.
    await eventually(async () => {
      const stats = await Promise.all(servers.map(async (s) => (await call(s.url, '/v1/stats')).json));
      return stats.every((s) => s.adaptive?.[0]?.limit >= before);
    });
    const stats = await Promise.all(servers.map(async (s) => (await call(s.url, '/v1/stats')).json));
    expect(stats.filter((s) => s.adaptive[0].deciding === true)).toHaveLength(1);
    expect(stats[0].adaptive[0]).toMatchObject({ resource: 'api:adaptive', policy: 'demand', min: 10, max: 60 });
    const decider = stats.findIndex((s) => s.adaptive[0].deciding === true);
    const metrics = (await call(servers[decider]!.url, '/metrics')).json as string;
    expect(metrics).toMatch(/sluice_adaptive_moves_total\{resource="api:adaptive",direction="up"\} [1-9]/);
    expect(metrics).toMatch(new RegExp(`sluice_adaptive_limit\\{resource="api:adaptive"\\} ${limitOf(all.at(-1)!)}`));
  });

  it('hands the decision to the other server when the decider dies', async () => {
    const stats = await Promise.all(servers.map(async (s) => (await call(s.url, '/v1/stats')).json));
    const decider = stats.findIndex((s) => s.adaptive[0].deciding === true);
    const other = servers[1 - decider]!;
    await servers[decider]!.stop('SIGKILL');
    servers = [other];
    await eventually(async () => (await call(other.url, '/v1/stats')).json.adaptive[0].deciding === true, 30_000, 200);
  });
});

// AIMD on reported outcomes: +5 a second while the downstream is healthy and the limit binds,
// x0.7 once the reported error ratio passes 10%.
const AIMD_RULES = `resources:
  db:orders:
    limits: { algorithm: sliding-window, limit: 20, windowMs: 1000 }
adaptive:
  db:orders:
    min: 10
    max: 200
    policy: aimd
    intervalMs: 1000
    aimd: { increase: 5, minCalls: 20 }
`;

describe('an aimd limit driven by outcomes reported to the service', () => {
  const tmp = scratch();
  const prefix = randomPrefix('aimd');
  let server: ServerProcess;

  beforeAll(async () => {
    const rules = writeRules(tmp.dir, AIMD_RULES);
    server = await spawnServer(['--rules', rules, '--redis', redisUrl(), '--redis-prefix', prefix, ...TIMEOUT]);
  });
  afterAll(async () => {
    await server.stop();
    const redis = new Redis(redisUrl());
    for (const key of await redis.keys(`${prefix}*`)) await redis.del(key);
    redis.disconnect();
    tmp.remove();
  });

  /** Checks past the limit and outcome reports (`ok` or not) until `done` says so. */
  async function drive(ok: (i: number) => boolean, done: (moves: Version[]) => boolean): Promise<Version[]> {
    let moves: Version[] = [];
    for (let i = 0; ; i++) {
      await Promise.all([
        ...[0, 1, 2].map(() => call(server.url, '/v1/check', { resource: 'db:orders', key: 'k' })),
        call(
          server.url,
          '/v1/outcomes',
          { items: [{ resource: 'db:orders', ok: ok(i), durationMs: 20, count: 5 }] },
          // Reports need a credential; the admin token is one.
          { token: TOKEN },
        ),
      ]);
      await new Promise((r) => setTimeout(r, 50));
      if (i % 10 === 9) {
        moves = (await versions(server)).filter((v) => v.author === 'adaptive');
        if (done(moves)) return moves;
      }
    }
  }

  const limitOfOrders = (v: Version): number => (parse(v.source) as RuleText).resources['db:orders']!.limits.limit;

  it('adds while the downstream is healthy and cuts when its reported errors pass 10%', async () => {
    const up = await drive(
      () => true,
      (moves) => moves.length >= 2,
    );
    expect(up.map(limitOfOrders).slice(0, 2)).toEqual([25, 30]);
    expect(up[0]!.reason).toMatch(/^db:orders 20 -> 25: downstream healthy \(error ratio 0\.0%.*calls rejected: \+5$/);
    const before = up.length;
    // Every other report fails: a 50% error ratio.
    const down = await drive(
      (i) => i % 2 === 0,
      (moves) => moves.slice(before).some((m) => m.reason.includes('downstream error ratio')),
    );
    const cut = down.slice(before).find((m) => m.reason.includes('downstream error ratio'))!;
    const prior = down[down.indexOf(cut) - 1]!;
    expect(limitOfOrders(cut)).toBe(Math.floor(limitOfOrders(prior) * 0.7));
    expect(cut.reason).toMatch(/downstream error ratio \d+\.\d% \(\d+ of \d+\) > 10\.0%: x0\.7$/);
  });
}, 120_000);
