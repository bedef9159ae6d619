import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { deleteRedisKeys, storeFlags, type TestStore } from '../../../test/sluice-serve.js';
import { call, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

/** A day-long bucket: nothing comes back during the test, so the counts are exact. */
const RULES = `
resources:
  payments:
    limits: { algorithm: token-bucket, limit: 10, windowMs: 86400000 }
    priority:
      tiers: [{ name: vip, share: 0.2 }, { name: standard }]
    boost: { limit: 3, windowMs: 86400000, algorithm: token-bucket, tiers: [vip] }
`;

const STORES: TestStore[] = ['memory', 'redis'];

describe.each(STORES)('priority tiers and the boost pool over HTTP (%s store)', (store) => {
  const tmp = scratch();
  const prefix = randomPrefix('tiers');
  let server: ServerProcess;

  beforeAll(async () => {
    server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), ...storeFlags(store, prefix)]);
  });
  afterAll(async () => {
    await server?.stop();
    if (store === 'redis') await deleteRedisKeys(prefix);
    tmp.remove();
  });

  it('admits standard up to its part, vip up to the limit, then from the pool, and says so', async () => {
    const check = (priority?: string) =>
      call(server.url, '/v1/check', { resource: 'payments', key: 'acct', ...(priority === undefined ? {} : { priority }) });
    const standard: { allowed: boolean }[] = [];
    for (let i = 0; i < 10; i++) standard.push((await check()).json as { allowed: boolean });
    expect(standard.filter((d) => d.allowed)).toHaveLength(8);
    const vip: { allowed: boolean; boosted?: boolean }[] = [];
    for (let i = 0; i < 6; i++) vip.push((await check('vip')).json as { allowed: boolean; boosted?: boolean });
    expect(vip.map((d) => [d.allowed, d.boosted === true])).toEqual([
      [true, false],
      [true, false],
      [true, true],
      [true, true],
      [true, true],
      [false, false],
    ]);
    expect(vip[5]).toMatchObject({ reason: 'rate_limited' });

    // A batch answers per item, each with its own tier.
    const batch = await call(server.url, '/v1/check', {
      items: [
        { resource: 'payments', key: 'other', priority: 'vip' },
        { resource: 'payments', key: 'other', priority: 'gold' },
      ],
    });
    expect(batch.json.results[0]).toMatchObject({ allowed: true });
    expect(batch.json.results[1]).toMatchObject({ error: { code: 'SLUICE_ERR_UNKNOWN_TIER', field: 'priority' } });
  });

  it('refuses a tier the resource does not declare with 400 and SLUICE_ERR_UNKNOWN_TIER', async () => {
    const res = await call(server.url, '/v1/check', { resource: 'payments', priority: 'core' });
    expect(res.status).toBe(400);
    expect(res.json.error).toMatchObject({ code: 'SLUICE_ERR_UNKNOWN_TIER', field: 'priority' });
    const acquire = await call(server.url, '/v1/acquire', { resource: 'payments', priority: 'gold', maxWaitMs: 0 });
    expect(acquire.json.error).toMatchObject({ code: 'SLUICE_ERR_UNKNOWN_TIER' });
    const malformed = await call(server.url, '/v1/check', { resource: 'payments', priority: 'not a tier' });
    expect(malformed.json.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'priority' });
  });

  it('counts decisions by tier and boosts in metrics and stats', async () => {
    const metrics = (await call(server.url, '/metrics')).json as string;
    expect(metrics).toMatch(/^sluice_boosted_decisions_total\{resource="payments",tier="vip"\} 3$/m);
    expect(metrics).toMatch(/^sluice_tier_decisions_total\{resource="payments",tier="vip",outcome="boosted"\} 3$/m);
    expect(metrics).toMatch(/^sluice_tier_decisions_total\{resource="payments",tier="standard",outcome="denied"\} 2$/m);
    const stats = await call(server.url, '/v1/stats');
    const resources = (stats.json as { resources: { resource: string; boosted?: number; tiers?: unknown }[] }).resources;
    const payments = resources.find((r) => r.resource === 'payments')!;
    expect(payments.boosted).toBe(3);
    expect(payments.tiers).toEqual(
      expect.arrayContaining([
        { tier: 'standard', allowed: 8, denied: 2, boosted: 0, shadowDenied: 0 },
        expect.objectContaining({ tier: 'vip', boosted: 3 }),
      ]),
    );
  });
});
