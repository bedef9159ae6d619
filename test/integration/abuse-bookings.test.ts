/* eslint-disable @typescript-eslint/no-explicit-any -- the assertions read parsed JSON answers dynamically */
/**
 * Bookings against the real service (`sluice serve`, built CLI) on the embedded store and on
 * Redis: a booking answers only its maker's token (a caller that knows the resource, key and id
 * cannot claim, cancel or take it over), one batch of bookings cannot book a key's whole horizon
 * (a neighbour's plain checks keep the rest), and a flood of bookings is bounded per client and,
 * on the embedded store, by `--max-keys`. Assertions count answers; where time is the subject,
 * the horizon is read on the service's answers and the bounds are generous.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rulesFile, spawnSluice, storeFlags, deleteRedisKeys, type Serve, type TestStore } from '../sluice-serve.js';
import { randomPrefix } from '../env.js';
import { clearOfWindowEnd } from '../wait-for.js';

const RULES = `
resources:
  api:owned:
    limits: { algorithm: fixed-window, limit: 1, windowMs: 60000 }
  api:shared:
    limits: { algorithm: fixed-window, limit: 4, windowMs: 500 }
    booking: { maxAheadMs: 6000 }
  api:flood:
    limits: { algorithm: fixed-window, limit: 1, windowMs: 60000 }
`;

async function post(base: string, path: string, body: object): Promise<{ status: number; json: any }> {
  const res = await fetch(new URL(path, base), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How many of `results` are each booking outcome, or each error code. */
function tally(results: readonly any[]): Record<string, number> {
  const t: Record<string, number> = {};
  for (const r of results) {
    const what = (r.error?.code ?? r.booking?.outcome) as string;
    t[what] = (t[what] ?? 0) + 1;
  }
  return t;
}

const STORES: { name: string; store: TestStore }[] = [
  { name: 'embedded', store: 'memory' },
  { name: 'redis', store: 'redis' },
];

describe.each(STORES)('bookings have owners and bounds: $name store', ({ store }) => {
  const rules = rulesFile(RULES);
  const prefix = randomPrefix('abuse-bookings');
  let serve: Serve;
  /** A second service with small bounds, for the floods. */
  let small: Serve;
  const smallPrefix = randomPrefix('abuse-bookings-small');
  const MAX_KEYS = 300;
  const PER_CLIENT = 40;

  beforeAll(async () => {
    serve = await spawnSluice(['--rules', rules.path, '--port', '0', '--grpc-port', '0', ...storeFlags(store, prefix)]);
    small = await spawnSluice([
      '--rules',
      rules.path,
      '--port',
      '0',
      '--grpc-port',
      '0',
      '--max-keys',
      String(MAX_KEYS),
      '--max-bookings-per-client',
      String(store === 'memory' ? 100_000 : PER_CLIENT),
      ...storeFlags(store, smallPrefix),
    ]);
  });
  afterAll(async () => {
    await serve?.stop();
    await small?.stop();
    rules.remove();
    if (store === 'redis') await Promise.all([deleteRedisKeys(prefix), deleteRedisKeys(smallPrefix)]);
  });

  it("refuses a claim, cancel or re-booking of another's booking, and changes nothing", async () => {
    const key = 'acct-1';
    // Every call in one window of a minute: on Redis, windows run from multiples of a minute of
    // this machine's clock; the embedded store's first one from the service's start, seconds ago.
    if (store === 'redis') await clearOfWindowEnd(60_000, 10_000);
    expect((await post(serve.url, '/v1/book', { resource: 'api:owned', key, id: 'job-41' })).json.booking.outcome).toBe(
      'admitted',
    );
    const made = await post(serve.url, '/v1/book', { resource: 'api:owned', key, id: 'job-42' });
    expect(made.json.booking.outcome).toBe('booked');
    const token = made.json.booking.token as string;
    expect(token).toMatch(/^[\w-]{22}$/);
    // The attacker knows (resource, key, id): with no token, or one of its own, every call is refused.
    const attempts = [];
    for (const t of [{}, { token: 'an-attackers-own-token' }]) {
      const item = { resource: 'api:owned', key, id: 'job-42', ...t };
      attempts.push(await post(serve.url, '/v1/claim', item));
      attempts.push(await post(serve.url, '/v1/book', item));
      attempts.push(await post(serve.url, '/v1/check', { resource: 'api:owned', key, book: 'job-42', ...t }));
      attempts.push(await post(serve.url, '/v1/cancel', item));
    }
    const refused: [number, string][] = Array.from({ length: 8 }, () => [403, 'SLUICE_ERR_BOOKING_TOKEN']);
    expect(attempts.map((a) => [a.status, a.json.error?.code as string])).toEqual(refused);
    // The maker's booking is whole: the same slot, and only its token cancels it.
    const again = await post(serve.url, '/v1/claim', { resource: 'api:owned', key, id: 'job-42', token });
    expect(again.json.booking).toMatchObject({ outcome: 'booked', id: 'job-42', token });
    expect(Math.abs(again.json.booking.startsInMs - made.json.booking.startsInMs)).toBeLessThan(30_000);
    expect((await post(serve.url, '/v1/cancel', { resource: 'api:owned', key, id: 'job-42', token })).json).toEqual({
      cancelled: true,
    });
  });

  it("one batch of 100 bookings cannot book a key's whole horizon: a neighbour's checks get in", async () => {
    // 4 per 500 ms, 6 s ahead: a key admits 4 + 48 over the horizon, and its bookings hold at most half.
    const started = performance.now();
    const batch = await post(serve.url, '/v1/book', {
      items: Array.from({ length: 100 }, (_, i) => ({ resource: 'api:shared', key: 'shared', id: `atk-${i}` })),
    });
    expect(batch.status).toBe(200);
    const outcomes = tally(batch.json.results as any[]);
    // The neighbour's plain checks, until (at most) 5.8 s of the service's clock after the batch:
    // without the share, every window of the horizon is promised and none is admitted.
    let checks = 0;
    let allowed = 0;
    while (performance.now() - started < 5800) {
      const d = await post(serve.url, '/v1/check', { resource: 'api:shared', key: 'shared' });
      checks++;
      if (d.json.allowed === true) allowed++;
      await sleep(40);
    }
    console.log(`${store}: batch of 100 booked ${outcomes.booked ?? 0}; the neighbour got ${allowed} of ${checks} checks`);
    expect(outcomes.booked ?? 0).toBeGreaterThan(0);
    expect(outcomes.booked ?? 0).toBeLessThanOrEqual(26);
    expect(allowed).toBeGreaterThanOrEqual(4);
  });

  it('bounds a booking flood: per client (the service) and, embedded, by --max-keys', async () => {
    // Each key's one permit is taken, then one booking holds its next window.
    const items = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => [
        { resource: 'api:flood', key: `f-${from + i}`, id: 'a' },
        { resource: 'api:flood', key: `f-${from + i}`, id: 'b' },
      ]).flat();
    const results: unknown[] = [];
    // In one window, as above.
    if (store === 'redis') await clearOfWindowEnd(60_000, 10_000);
    for (let from = 0; from < 1000; from += 50)
      results.push(...((await post(small.url, '/v1/book', { items: items(from, 50) })).json.results as unknown[]));
    const t = tally(results as any[]);
    console.log(`${store}: a flood of 1000 keys x 2 bookings came to ${JSON.stringify(t)}`);
    if (store === 'memory') {
      // Keys and bookings share the table: each key's booking weighs 3 (itself and its ledger).
      expect(t.booked ?? 0).toBeGreaterThan(0);
      expect((t.booked ?? 0) * 4).toBeLessThanOrEqual(MAX_KEYS);
      expect(t.denied ?? 0).toBeGreaterThan(0);
    } else {
      // A call that could book holds a place while it is decided (so a batch cannot overshoot):
      // a batch's plain admissions may take some, never more than the bound.
      expect(t.booked ?? 0).toBeLessThanOrEqual(PER_CLIENT);
      expect(t.booked ?? 0).toBeGreaterThanOrEqual(PER_CLIENT / 2);
      expect(t.SLUICE_ERR_BOOKING_LIMIT ?? 0).toBeGreaterThanOrEqual(2000 - 4 * PER_CLIENT);
      // A claim or cancel of a booking held is never refused for the bound.
      const all = results as any[];
      const held = all.findIndex((r) => r.booking?.outcome === 'booked');
      const { id, token } = all[held].booking;
      const key = `f-${Math.floor(held / 2)}`;
      const cancel = await post(small.url, '/v1/cancel', { resource: 'api:flood', key, id, token });
      expect(cancel.json).toEqual({ cancelled: true });
      // That freed one place for this client.
      const next = await post(small.url, '/v1/book', { resource: 'api:flood', key: 'f-0', id: 'c' });
      expect(next.json.booking?.outcome ?? next.json.error?.code).not.toBe('SLUICE_ERR_BOOKING_LIMIT');
    }
  });
});
