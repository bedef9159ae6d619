import { cohortAt } from '@sluice/core';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { TOKEN, admin, call, FAST_ROLLOUT, scratch, type ServerProcess, spawnServer, eventually, writeRules } from './support.js';

// A candidate no stricter by its limits: only the downstream can tell it is worse.
const RULES = (limit: number) => `
resources:
  payments:
    limits: { algorithm: fixed-window, limit: ${limit}, windowMs: 3600000 }
`;

describe('automatic rollback on downstream outcomes reported to the service', () => {
  const tmp = scratch();
  const prefix = randomPrefix('rollout-out');
  let server: ServerProcess;

  beforeAll(async () => {
    server = await spawnServer([
      '--rules',
      writeRules(tmp.dir, RULES(1000)),
      '--redis',
      redisUrl(),
      '--redis-prefix',
      prefix,
      ...FAST_ROLLOUT,
    ]);
  });
  afterAll(async () => {
    expect(await server.stop()).toBe(0);
    const redis = new Redis(redisUrl());
    for (const key of await redis.keys(`${prefix}*`)) await redis.del(key);
    redis.disconnect();
    tmp.remove();
  });

  it("rolls back when the candidate keys' reported error ratio rises past the baseline's", async () => {
    const start = await admin(server, '/rollout', {
      text: RULES(999),
      author: 'ana',
      reason: 'new payment provider',
      steps: [{ percent: 50, holdMs: 3_600_000 }],
      thresholds: { minCalls: 20 },
    });
    expect(start.status).toBe(201);
    const id = start.json.rollout.id as string;
    await eventually(async () => (await call(server.url, '/v1/rollout')).json.rollout?.percent === 50);

    // Calls on both cohorts' keys, all admitted; the candidate's downstream calls then fail.
    const keys = Array.from({ length: 80 }, (_, i) => `acct-${i}`);
    const cohort = (k: string) => cohortAt(50, id, 'payments', k);
    for (const key of keys) expect((await call(server.url, '/v1/check', { resource: 'payments', key })).json.allowed).toBe(true);
    const items = keys.map((key) => ({ resource: 'payments', key, ok: cohort(key) === 'baseline', durationMs: 30 }));
    // Reports need a credential; the admin token is one.
    const reported = await call(server.url, '/v1/outcomes', { items: items.slice(0, 40) }, { token: TOKEN });
    expect(reported.status).toBe(200);
    expect((await call(server.url, '/v1/outcomes', { items: items.slice(40) }, { token: TOKEN })).status).toBe(200);
    expect(keys.filter((k) => cohort(k) === 'candidate').length).toBeGreaterThanOrEqual(20);

    await eventually(async () => (await admin(server, '/rollout')).json.rollout?.status === 'rolled_back', 30_000, 200);
    const state = (await admin(server, '/rollout')).json.rollout;
    expect(state.note).toMatch(
      /^payments: candidate downstream error ratio 100\.0% \(\d+\/\d+\) against 0\.0% for the baseline, over the allowed rise of 10\.0% \(outcomes reported in \d+(\.\d)? s of step 1\)$/,
    );
    const history = (await admin(server, '/rules/history')).json.versions;
    expect(history[0]).toMatchObject({ author: 'auto-rollback', rolledBackFrom: 1, reason: state.note });
  });
});
