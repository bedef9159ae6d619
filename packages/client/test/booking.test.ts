import { RemoteLimiter } from '@sluice/client';
import { isSluiceError, type Decision } from '@sluice/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix, redisUrl } from '../../../test/env.js';
import { deleteRedisKeys, spawnSluice } from '../../../test/sluice-serve.js';
import { rulesFile, spawnServe, type Serve } from './support.js';

/** One permit per 1 s window: a denied call's slot is the next window, claimable all through it. */
const RULES = `
resources:
  api:slots:
    limits: { algorithm: fixed-window, limit: 1, windowMs: 1000 }
    booking: { claimWindowMs: 1000, maxAheadMs: 10000 }
    onStoreFailure: local
  api:closed:
    limits: { algorithm: fixed-window, limit: 5, windowMs: 1000 }
    onStoreFailure: closed
`;
const API_TOKEN = 'client-booking-token-0123456789';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let keys = 0;
const fresh = (label: string) => `${label}-${++keys}-${Math.random().toString(36).slice(2, 8)}`;

/** Just after a window of `api:slots` starts (windows run on the service's own clock). */
async function windowStart(client: RemoteLimiter): Promise<void> {
  const probe = await client.try('api:slots', { key: fresh('probe') });
  await sleep(probe.resetAfterMs + 30);
}

describe('RemoteLimiter bookings against sluice serve (embedded store)', () => {
  const rules = rulesFile(RULES);
  let serve: Serve | undefined;
  let client: RemoteLimiter;

  beforeAll(async () => {
    serve = await spawnServe({ rules: rules.path });
    client = new RemoteLimiter({ url: serve.url, clients: 2, checkTimeoutMs: 2000, logger: false });
    expect(await client.ready()).toBe(true);
  });
  afterAll(async () => {
    await client?.close();
    await serve?.stop('SIGKILL');
    rules.remove();
  });

  it('books, is told booked until the start, claims once in the span, and cancels', async () => {
    const key = fresh('k');
    await windowStart(client);
    expect((await client.book('api:slots', { key, id: 'first' })).booking).toMatchObject({ outcome: 'admitted', id: 'first' });
    const booked = await client.book('api:slots', { key, id: 'job' });
    expect(booked).toMatchObject({
      allowed: false,
      reason: 'rate_limited',
      source: 'store',
      booking: { outcome: 'booked', id: 'job' },
    });
    expect(booked.retryAfterMs).toBe(booked.booking!.startsInMs);
    expect(booked.statuses).toHaveLength(1);
    const other = await client.book('api:slots', { key, id: 'other' });
    expect(other.booking!.outcome).toBe('booked');
    const early = await client.claim('api:slots', { key, id: 'job' });
    expect(early.booking!.outcome).toBe('booked');
    expect(await client.cancel('api:slots', { key, id: 'other' })).toBe(true);
    expect(await client.cancel('api:slots', { key, id: 'other' })).toBe(false);
    await sleep(early.retryAfterMs);
    // A rival without a booking finds the window's permit promised; the booking's holder is admitted.
    expect((await client.try('api:slots', { key })).allowed).toBe(false);
    expect(await client.claim('api:slots', { key, id: 'job' })).toMatchObject({ allowed: true, booking: { outcome: 'claimed' } });
    expect((await client.claim('api:slots', { key, id: 'job' })).booking!.outcome).toBe('missing');
    expect(client.healthy).toBe(true);
  });

  it("batches one turn's bookings, each getting its own slot in line", async () => {
    const key = fresh('line');
    await windowStart(client);
    const ds = await Promise.all(Array.from({ length: 4 }, (_, i) => client.book('api:slots', { key, id: `j${i}` })));
    expect(ds.map((d) => d.booking!.outcome)).toEqual(['admitted', 'booked', 'booked', 'booked']);
    const starts = ds.slice(1).map((d) => d.booking!.startsInMs);
    // Each slot is one window (1 s) after the one before. startsInMs is counted from when each answer
    // was made, and a turn may be split over two store calls a few ms apart: allow for that.
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(750);
    for (let i = 1; i < 4; i++) expect(await client.cancel('api:slots', { key, id: `j${i}` })).toBe(true);
  });

  it('refuses a bad id locally and an unknown resource as the service does', async () => {
    const err = await client.book('api:slots', { id: 'no spaces please' }).catch((e: unknown) => e);
    expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
    const unknown = await client.claim('nope', { id: 'a' }).catch((e: unknown) => e);
    expect(isSluiceError(unknown, 'SLUICE_ERR_UNKNOWN_RESOURCE')).toBe(true);
  });

  it('answers by policy while the service is away (SIGKILL): plain decisions, claims missing, no errors', async () => {
    const key = fresh('away');
    await serve!.stop('SIGKILL');
    serve = undefined;
    const errors: unknown[] = [];
    const safe = <T>(p: Promise<T>) => p.catch((e: unknown) => void errors.push(e));
    const local = (await Promise.all(
      Array.from({ length: 3 }, (_, i) => safe(client.book('api:slots', { key, id: `l${i}` }))),
    )) as Decision[];
    const closed = (await safe(client.book('api:closed', { key, id: 'c' }))) as Decision;
    const claim = (await safe(client.claim('api:slots', { key, id: 'l0' }))) as Decision;
    const cancelled = await safe(client.cancel('api:slots', { key, id: 'l0' }));
    expect(errors).toEqual([]);
    expect(client.healthy).toBe(false);
    // The first call found the service gone; all are the fallback's, nothing booked anywhere.
    expect(local.every((d) => d.source === 'fallback' && ['admitted', 'denied'].includes(d.booking!.outcome))).toBe(true);
    // A fair share of 1 permit between 2 clients is at least 1: one admitted, the rest denied.
    expect(local.filter((d) => d.allowed)).toHaveLength(1);
    expect(closed).toMatchObject({
      allowed: false,
      reason: 'store_unavailable',
      source: 'fallback',
      booking: { outcome: 'denied' },
    });
    expect(claim).toMatchObject({
      allowed: false,
      reason: 'store_unavailable',
      source: 'fallback',
      booking: { outcome: 'missing' },
    });
    expect(cancelled).toBe(false);
  });
});

describe('bookings across two services sharing one Redis', () => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('client-booking');
  let a: Serve;
  let b: Serve;
  let ca: RemoteLimiter;
  let cb: RemoteLimiter;

  beforeAll(async () => {
    // One after the other: the first seeds the shared rule store.
    a = await spawnServe({ rules: rules.path, redis: redisUrl(), prefix });
    b = await spawnServe({ rules: rules.path, redis: redisUrl(), prefix });
    ca = new RemoteLimiter({ url: a.url, checkTimeoutMs: 2000, logger: false });
    cb = new RemoteLimiter({ url: b.url, checkTimeoutMs: 2000, logger: false });
    expect(await ca.ready()).toBe(true);
    expect(await cb.ready()).toBe(true);
  });
  afterAll(async () => {
    await Promise.all([ca?.close(), cb?.close()]);
    await Promise.all([a?.stop(), b?.stop()]);
    await deleteRedisKeys(prefix);
    rules.remove();
  });

  it('keep one line: a slot booked through one service is claimed through the other, once', async () => {
    const key = fresh('global');
    await windowStart(ca);
    expect((await ca.book('api:slots', { key, id: 'first' })).booking!.outcome).toBe('admitted');
    const booked = await ca.book('api:slots', { key, id: 'job' });
    expect(booked.booking!.outcome).toBe('booked');
    // The other service sees the booking (to the one handed its token), and the line: a new
    // booking queues behind it.
    const token = booked.booking!.token!;
    await expect(cb.claim('api:slots', { key, id: 'job' })).rejects.toMatchObject({ code: 'SLUICE_ERR_BOOKING_TOKEN' });
    const early = await cb.claim('api:slots', { key, id: 'job', token });
    expect(early.booking!.outcome).toBe('booked');
    const behind = await cb.book('api:slots', { key, id: 'next' });
    expect(behind.booking!.outcome).toBe('booked');
    expect(behind.booking!.startsInMs).toBeGreaterThanOrEqual(early.booking!.startsInMs + 900);
    expect(await ca.cancel('api:slots', { key, id: 'next', token: behind.booking!.token! })).toBe(true);
    await sleep(early.retryAfterMs);
    expect((await ca.try('api:slots', { key })).allowed).toBe(false);
    expect(await cb.claim('api:slots', { key, id: 'job', token })).toMatchObject({
      allowed: true,
      booking: { outcome: 'claimed' },
    });
    expect((await ca.claim('api:slots', { key, id: 'job' })).booking!.outcome).toBe('missing');
    expect([ca.healthy, cb.healthy]).toEqual([true, true]);
  });
});

describe('RemoteLimiter bookings behind --api-token', () => {
  const rules = rulesFile(RULES);
  let serve: Serve;

  beforeAll(async () => {
    serve = await spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', '--api-token', API_TOKEN]);
  });
  afterAll(async () => {
    await serve?.stop();
    rules.remove();
  });

  it('books with the token, and throws SLUICE_ERR_UNAUTHORIZED without it', async () => {
    const withToken = new RemoteLimiter({ url: serve.url, token: API_TOKEN, logger: false });
    const without = new RemoteLimiter({ url: serve.url, logger: false });
    try {
      expect((await withToken.book('api:slots', { key: 't', id: 'a' })).booking!.outcome).toBe('admitted');
      const calls: (() => Promise<unknown>)[] = [
        () => without.book('api:slots', { key: 't', id: 'b' }),
        () => without.claim('api:slots', { key: 't', id: 'a' }),
        () => without.cancel('api:slots', { key: 't', id: 'a' }),
      ];
      for (const run of calls) {
        const err = await run().catch((e: unknown) => e);
        // The service's own code (not one of the core's).
        expect(isSluiceError(err) && (err.code as string) === 'SLUICE_ERR_UNAUTHORIZED').toBe(true);
      }
      expect(without.healthy).toBe(true);
    } finally {
      await Promise.all([withToken.close(), without.close()]);
    }
  });
});
