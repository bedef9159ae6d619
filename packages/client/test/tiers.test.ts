import { RemoteLimiter } from '@sluice/client';
import { ErrorCodes } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { rulesFile, startServicePair, type Serve, type ServicePair } from './support.js';

// A day-long bucket: nothing comes back during the test, so the counts are exact.
const RULES = `
resources:
  payments:
    limits: { algorithm: token-bucket, limit: 40, windowMs: 86400000 }
    priority:
      tiers: [{ name: vip, share: 0.25 }, { name: standard }]
    boost: { limit: 10, windowMs: 86400000, algorithm: token-bucket, tiers: [vip] }
`;

describe('tiers through remote clients of two services sharing one Redis', () => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('client-tiers');
  let a: Serve;
  let b: Serve;
  let ca: RemoteLimiter;
  let cb: RemoteLimiter;
  let pair: ServicePair | undefined;

  beforeAll(async () => {
    pair = await startServicePair(rules.path, prefix);
    ({ a, b, ca, cb } = pair);
  });
  afterAll(async () => {
    await pair?.close();
    rules.remove();
  });

  it('keep limit + boost.limit fleet-wide, and the standard tier to its part', async () => {
    const burst = (c: RemoteLimiter, priority: string, n: number) =>
      Promise.all(Array.from({ length: n }, () => c.try('payments', { key: 'acct', priority })));
    const [sa, sb] = await Promise.all([burst(ca, 'standard', 30), burst(cb, 'standard', 30)]);
    const standard = [...sa, ...sb];
    // Standard sees 40 x 0.75 = 30, across both services; it never reaches the pool.
    expect(standard.filter((d) => d.allowed)).toHaveLength(30);
    expect(standard.some((d) => d.boosted === true)).toBe(false);
    const [va, vb] = await Promise.all([burst(ca, 'vip', 20), burst(cb, 'vip', 20)]);
    const vip = [...va, ...vb];
    expect(vip.filter((d) => d.allowed && d.boosted !== true)).toHaveLength(10);
    expect(vip.filter((d) => d.boosted === true)).toHaveLength(10);
    expect(vip.filter((d) => !d.allowed).every((d) => d.reason === 'rate_limited')).toBe(true);
  });

  it('pass the service refusal of an unknown tier on as SLUICE_ERR_UNKNOWN_TIER', async () => {
    await expect(ca.try('payments', { priority: 'gold' })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_TIER });
    await expect(cb.acquire('payments', { priority: 'gold', maxWaitMs: 0 })).rejects.toMatchObject({
      code: ErrorCodes.UNKNOWN_TIER,
    });
    // A name no tier can have is refused before it leaves the process.
    await expect(ca.try('payments', { priority: 'not a tier' })).rejects.toMatchObject({
      code: ErrorCodes.INVALID_OPTIONS,
      field: 'priority',
    });
  });

  it('take a client-wide default tier for calls that name none', async () => {
    expect(() => new RemoteLimiter({ url: a.url, priority: 'not a tier' })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'priority' }),
    );
    const vipClient = new RemoteLimiter({ url: b.url, checkTimeoutMs: 2000, priority: 'vip' });
    try {
      expect(await vipClient.ready()).toBe(true);
      const standard = await Promise.all(Array.from({ length: 31 }, () => ca.try('payments', { key: 'solo' })));
      expect(standard.filter((d) => d.allowed)).toHaveLength(30);
      // Past standard's part: this client's calls are vip, and vip may use the rest.
      expect(await vipClient.try('payments', { key: 'solo' })).toMatchObject({ allowed: true });
      expect(await vipClient.try('payments', { key: 'solo', priority: 'standard' })).toMatchObject({ allowed: false });
    } finally {
      await vipClient.close();
    }
  });
});
