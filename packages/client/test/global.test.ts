import { RemoteLimiter } from '@sluice/client';
import { isSluiceError, type Decision } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import {
  applyRules,
  clearOfWindowEnd,
  eventually,
  rulesFile,
  startServicePair,
  type Serve,
  type ServicePair,
} from './support.js';

const RULES = `
resources:
  api:global: { limits: { algorithm: fixed-window, limit: 100, windowMs: 600000 } }
  api:leased:
    limits: { algorithm: fixed-window, limit: 400, windowMs: 600000 }
    lease: { ttlMs: 2000, maxBatch: 20, targetMs: 50, maxShare: 0.05 }
    tenants: { acme: { limits: { algorithm: fixed-window, limit: 3, windowMs: 600000 } } }
  db:pool: { limits: { algorithm: concurrency, limit: 3, permitTtlMs: 10000 } }
`;

/** Before calls counted against one 10-minute window (see clearOfWindowEnd). */
const inOneWindow = () => clearOfWindowEnd(600_000, 20_000);

describe('two clients against two services sharing one Redis', () => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('client');
  let a: Serve;
  let ca: RemoteLimiter;
  let cb: RemoteLimiter;
  let pair: ServicePair | undefined;

  beforeAll(async () => {
    pair = await startServicePair(rules.path, prefix);
    ({ a, ca, cb } = pair);
  });
  afterAll(async () => {
    await pair?.close();
    rules.remove();
  });

  it('keep one global limit', async () => {
    await inOneWindow();
    const burst = (c: RemoteLimiter, key: string, n: number) =>
      Promise.all(Array.from({ length: n }, () => c.try('api:global', { key })));
    // Concurrent bursts through both services.
    const [da, db] = await Promise.all([burst(ca, 'shared', 150), burst(cb, 'shared', 150)]);
    expect([...da, ...db].filter((d) => d.allowed)).toHaveLength(100);
    // Global decisions: the store's, or the service's pre-filter for keys known to be over.
    expect([...da, ...db].every((d) => d.source === 'store' || d.source === 'prefilter')).toBe(true);
    // Alternating rounds: each client's share of the one budget is what it asked for first.
    const got = { a: 0, b: 0 };
    for (let round = 0; round < 15; round++) {
      got.a += (await burst(ca, 'rounds', 10)).filter((d) => d.allowed).length;
      got.b += (await burst(cb, 'rounds', 10)).filter((d) => d.allowed).length;
    }
    expect(got).toEqual({ a: 50, b: 50 });
  });

  it('refuse an empty key on a real service, leased or not, where no key is the resource-wide one', async () => {
    for (const resource of ['api:global', 'api:leased']) {
      await expect(ca.try(resource, { key: '' })).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY', field: 'key' });
      await expect(ca.acquire(resource, { key: '', maxWaitMs: 10 })).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY' });
    }
    expect((await ca.try('api:leased')).allowed).toBe(true);
    expect(() => new RemoteLimiter({ url: `${a.url}/sluice` })).toThrow(expect.objectContaining({ field: 'url' }));
  });

  it('hold concurrency permits across services, renew and release them', async () => {
    const held: Decision[] = [];
    for (const c of [ca, cb, ca, cb]) held.push(await c.acquire('db:pool', { key: 'p', maxWaitMs: 0 }));
    expect(held.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(await cb.renew('db:pool', { key: 'p', permitId: held[0]!.permitId!, ttlMs: 20_000 })).toBe(true);
    expect(await cb.release('db:pool', { key: 'p', permitId: held[0]!.permitId! })).toBe(true);
    expect((await ca.try('db:pool', { key: 'p' })).allowed).toBe(true);
  });

  it('end a waiting acquire on the service when its signal fires', async () => {
    const held: Decision[] = [];
    for (let i = 0; i < 3; i++) held.push(await ca.try('db:pool', { key: 'abort' }));
    expect(held.every((d) => d.allowed)).toBe(true);
    const ac = new AbortController();
    const waiting = cb.acquire('db:pool', { key: 'abort', maxWaitMs: 20_000, signal: ac.signal }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 200));
    ac.abort();
    expect(isSluiceError(await waiting, 'SLUICE_ERR_ABORTED')).toBe(true);
    // Had the service kept the wait, it would take the freed permit (it re-asks every 50 ms).
    expect(await ca.release('db:pool', { key: 'abort', permitId: held[0]!.permitId! })).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    expect((await ca.try('db:pool', { key: 'abort' })).allowed).toBe(true);
    expect(cb.healthy).toBe(true);
  });

  it('lease permits in batches and admit the same total within the lease bound', async () => {
    await inOneWindow();
    const run = async (c: RemoteLimiter) => {
      const ds: Decision[] = [];
      for (let round = 0; round < 30; round++) {
        ds.push(...(await Promise.all(Array.from({ length: 10 }, () => c.try('api:leased', { key: 'hot' })))));
        for (let i = 0; i < 10; i++) {
          const d = c.trySync('api:leased', { key: 'hot' });
          if (d !== undefined) ds.push(d);
        }
      }
      return ds;
    };
    const [da, db] = await Promise.all([run(ca), run(cb)]);
    const all = [...da, ...db];
    const admitted = all.filter((d) => d.allowed).length;
    // Never more than the limit; fewer only by what the two clients still hold (a batch each, and
    // at most one more taken ahead).
    expect(admitted).toBeLessThanOrEqual(400);
    expect(admitted).toBeGreaterThanOrEqual(400 - 2 * 2 * 20);
    expect(all.filter((d) => d.source === 'lease').length).toBeGreaterThan(100);
  });

  it("keep a tenant's quota on a leased resource: its calls go to the service", async () => {
    await inOneWindow();
    let admitted = 0;
    for (const c of [ca, cb, ca, cb, ca, cb]) {
      const d =
        c.trySync('api:leased', { key: 'quota', tenant: 'acme' }) ??
        (await c.try('api:leased', { key: 'quota', tenant: 'acme' }));
      if (d.allowed) admitted++;
    }
    expect(admitted).toBe(3);
  });

  it('apply a rule change made on one service on the other within about a second', async () => {
    await applyRules(a.url, `${RULES}\n  api:added: { limits: { algorithm: gcra, limit: 5, windowMs: 1000 } }\n`);
    await eventually(() => ca.has('api:added') && cb.has('api:added'), 10_000);
    expect((await cb.try('api:added')).allowed).toBe(true);
  });
});
