/* eslint-disable @typescript-eslint/no-unsafe-argument --
   the assertions read parsed JSON answers dynamically */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/env.js';
import { deleteRedisKeys, storeFlags, type TestStore } from '../../../test/sluice-serve.js';
import { TOKEN, call, scratch, spawnServer, writeRules, type ServerProcess } from './support.js';

/** One permit per 1 s window: a denied call's slot is the next window, claimable all through it. */
const RULES = `
resources:
  api:slots:
    limits: { algorithm: fixed-window, limit: 1, windowMs: 1000 }
    booking: { claimWindowMs: 1000, maxAheadMs: 10000, maxBookings: 20 }
  api:hour: { limits: { algorithm: token-bucket, limit: 1, windowMs: 3600000 } }
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 60000 } }
`;
const API_TOKEN = 'booking-api-token-0123456789';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/**
 * Waits until just after a 1 s window of `api:slots` starts: windows run on the service's own
 * monotonic clock, so a throwaway key's `resetAfterMs` says when the current one ends.
 */
async function windowStart(url: string): Promise<void> {
  const probe = await call(url, '/v1/check', { resource: 'api:slots', key: fresh('probe') });
  await sleep(probe.json.resetAfterMs + 30);
}
let keys = 0;
const fresh = (label: string) => `${label}-${++keys}-${Math.random().toString(36).slice(2, 8)}`;

const STORES: TestStore[] = ['memory', 'redis'];

describe.each(STORES)('bookings over HTTP against sluice serve (%s store)', (store) => {
  const tmp = scratch();
  const prefix = randomPrefix('booking');
  let server: ServerProcess;

  beforeAll(async () => {
    server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), '--max-body-bytes', '2048', ...storeFlags(store, prefix)]);
  });
  afterAll(async () => {
    await server?.stop();
    if (store === 'redis') await deleteRedisKeys(prefix);
    tmp.remove();
  });

  it('book -> 429 with Retry-After and Sluice-Booking -> retry after Retry-After with the id -> admitted without competing', async () => {
    const key = fresh('flow');
    // Early in a window, so the next one (the booking's span) is still on when Retry-After is over.
    await windowStart(server.url);
    const first = await call(server.url, '/v1/check?http429=1', { resource: 'api:slots', key, book: 'req-1' });
    expect(first.json.booking.outcome).toBe('admitted');
    const denied = await call(server.url, '/v1/check?http429=1', { resource: 'api:slots', key, book: 'req-2' });
    expect(denied.status).toBe(429);
    expect(denied.headers.get('sluice-booking')).toBe('req-2');
    const { booking, retryAfterMs } = denied.json;
    expect(booking).toMatchObject({ outcome: 'booked', id: 'req-2' });
    expect(retryAfterMs).toBe(booking.startsInMs);
    expect(booking.startsInMs).toBeGreaterThan(0);
    expect(booking.startsInMs).toBeLessThanOrEqual(1000);
    // The span is the whole next window (ms rounded: the start up, the end down).
    expect(Math.abs(booking.expiresInMs - booking.startsInMs - 1000)).toBeLessThanOrEqual(1);
    expect(booking.expiresInMs).toBeGreaterThan(booking.startsInMs);
    const retryAfter = Number(denied.headers.get('retry-after'));
    expect(retryAfter).toBe(Math.max(1, Math.ceil(retryAfterMs / 1000)));
    // A well-behaved client waits Retry-After (whole seconds); meanwhile a competitor without a
    // booking finds the next window's permit already promised.
    await sleep(retryAfter * 1000);
    const rival = await call(server.url, '/v1/check?http429=1', { resource: 'api:slots', key });
    expect(rival.status).toBe(429);
    expect(rival.headers.get('sluice-booking')).toBeNull();
    const retried = await call(server.url, '/v1/check?http429=1', {
      resource: 'api:slots',
      key,
      book: 'req-2',
      token: booking.token,
    });
    expect(retried.status).toBe(200);
    expect(retried.json).toMatchObject({ allowed: true, reason: 'allowed', booking: { outcome: 'claimed', id: 'req-2' } });
    expect(retried.headers.get('sluice-booking')).toBeNull();
    expect(retried.headers.get('retry-after')).toBeNull();
  });

  it('books, answers booked before the start, claims in the span, and cancels', async () => {
    const key = fresh('ops');
    const item = { resource: 'api:hour', key };
    expect((await call(server.url, '/v1/book', { ...item, id: 'a' })).json.booking.outcome).toBe('admitted');
    // The next token is an hour away: beyond maxAheadMs (60 s by default), so nothing is booked.
    const far = await call(server.url, '/v1/book?http429=1', { ...item, id: 'b' });
    expect(far.status).toBe(429);
    expect(far.json.booking).toEqual({ outcome: 'denied', id: 'b', startsInMs: 0, expiresInMs: 0 });
    const tokens: Record<string, string> = {};
    expect(far.headers.get('sluice-booking')).toBeNull();

    const slot = { resource: 'api:slots', key };
    await windowStart(server.url);
    expect((await call(server.url, '/v1/book', { ...slot, id: 'first' })).json.booking.outcome).toBe('admitted');
    const booked = await call(server.url, '/v1/book', { ...slot, id: 'x' });
    expect(booked.status).toBe(200);
    expect(booked.headers.get('sluice-booking')).toBe('x');
    expect(booked.json.booking.outcome).toBe('booked');
    tokens.x = booked.json.booking.token;
    const later = await call(server.url, '/v1/book?statuses=1', { ...slot, id: 'y' });
    expect(later.json.booking.outcome).toBe('booked');
    tokens.y = later.json.booking.token;
    // In line: y starts a window after x.
    expect(later.json.booking.startsInMs).toBeGreaterThanOrEqual(booked.json.booking.startsInMs + 900);
    expect(later.json.statuses).toEqual([expect.objectContaining({ id: '0', algorithm: 'fixed-window' })]);
    // Asking again before the start books nothing more.
    const again = await call(server.url, '/v1/claim', { ...slot, id: 'x', token: tokens.x });
    expect(again.json.booking.outcome).toBe('booked');
    expect((await call(server.url, '/v1/cancel', { ...slot, id: 'y', token: tokens.y })).json).toEqual({ cancelled: true });
    expect((await call(server.url, '/v1/cancel', { ...slot, id: 'y', token: tokens.y })).json).toEqual({ cancelled: false });
    await sleep(again.json.booking.startsInMs);
    const claimed = await call(server.url, '/v1/claim?http429=1', { ...slot, id: 'x', token: tokens.x });
    expect(claimed.status).toBe(200);
    expect(claimed.json).toMatchObject({ allowed: true, booking: { outcome: 'claimed', id: 'x' } });
    const missing = await call(server.url, '/v1/claim?http429=1', { ...slot, id: 'x', token: tokens.x });
    expect(missing.status).toBe(429);
    expect(missing.json).toMatchObject({ allowed: false, booking: { outcome: 'missing', id: 'x' } });
    // Concurrency limits are never booked: a plain decision.
    expect((await call(server.url, '/v1/book', { resource: 'db:pool', key, id: 'p' })).json).toMatchObject({
      allowed: true,
      permitId: expect.any(String),
      booking: { outcome: 'admitted' },
    });
  });

  it('answers batches item by item', async () => {
    const key = fresh('batch');
    const res = await call(server.url, '/v1/book', {
      items: [
        { resource: 'api:hour', key, id: 'one' },
        { resource: 'api:hour', key, id: 'bad id' },
        { resource: 'nope', id: 'x' },
      ],
    });
    expect(res.status).toBe(200);
    const [one, bad, nope] = res.json.results;
    expect(one.booking).toMatchObject({ outcome: 'admitted', id: 'one' });
    expect(bad.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'id' });
    expect(nope.error.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
  });

  it('refuses bad ids, unknown fields, long ids and large bodies with stable codes, charging nothing', async () => {
    const key = fresh('valid');
    const item = { resource: 'api:hour', key };
    const cases: [string, unknown, number, string, string?][] = [
      ['/v1/book', item, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'two words' }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'ü' }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'i'.repeat(129) }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: ['a'] }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'a', unknown: 1 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      ['/v1/claim', { ...item, id: 'a', maxWaitMs: 10 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      ['/v1/cancel', { ...item, id: 'a', cost: 1 }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      ['/v1/cancel', { ...item, id: 'i'.repeat(129) }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/check', { ...item, book: '' }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'book'],
      ['/v1/check', { ...item, book: 'i'.repeat(129) }, 400, 'SLUICE_ERR_INVALID_REQUEST', 'book'],
      ['/v1/acquire', { ...item, book: 'a' }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
      ['/v1/book', { ...item, id: 'a', cost: 2 }, 400, 'SLUICE_ERR_COST_EXCEEDS_LIMIT'],
      ['/v1/book', { resource: 'nope', id: 'a' }, 404, 'SLUICE_ERR_UNKNOWN_RESOURCE'],
      ['/v1/book', { ...item, id: 'a', key: 'k'.repeat(3000) }, 413, 'SLUICE_ERR_BODY_TOO_LARGE'],
      ['/v1/book?http429=2', { ...item, id: 'a' }, 400, 'SLUICE_ERR_INVALID_REQUEST'],
    ];
    for (const [path, body, status, code, field] of cases) {
      const res = await call(server.url, path, body);
      expect({ path, status: res.status, code: res.json.error?.code }).toEqual({ path, status, code });
      if (field !== undefined) expect(res.json.error.field, path).toBe(field);
    }
    const bare = await fetch(new URL('/v1/book', server.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{',
    });
    expect(bare.status).toBe(400);
    expect(((await bare.json()) as { error: { code: string } }).error.code).toBe('SLUICE_ERR_MALFORMED_BODY');
    // None of them was charged: the key's one permit is still there.
    expect((await call(server.url, '/v1/check', item)).json.allowed).toBe(true);
  });

  it('counts the routes and booking outcomes in /metrics', async () => {
    const text = (await call(server.url, '/metrics')).json as string;
    for (const route of ['/v1/book', '/v1/claim', '/v1/cancel']) {
      expect(text).toMatch(new RegExp(`sluice_http_requests_total\\{route="${route}",method="POST",status="200"\\} [1-9]`));
    }
    expect(text).toMatch(/sluice_http_requests_total\{route="\/v1\/book",method="POST",status="400"\} [1-9]/);
    for (const outcome of ['admitted', 'booked', 'claimed', 'denied', 'missing']) {
      expect(text).toMatch(new RegExp(`sluice_booking_outcomes_total\\{resource="[^"]+",outcome="${outcome}"\\} [1-9]`));
    }
    expect(text).toMatch(/sluice_decisions_total\{resource="api:slots",mode="book",outcome="allowed",source="store"\} [1-9]/);
  });

  it('applies booking bounds from a new rule version, and shows them in the admin diff', async () => {
    const v2 = RULES.replace(
      'claimWindowMs: 1000, maxAheadMs: 10000, maxBookings: 20',
      'claimWindowMs: 1000, maxAheadMs: 10000, maxBookings: 1',
    );
    const applied = await call(
      server.url,
      '/v1/admin/rules',
      { text: v2, author: 'test', reason: 'one booking per key' },
      { token: TOKEN },
    );
    expect(applied.status).toBe(201);
    const version = applied.json.version as number;
    const diff = await call(server.url, `/v1/admin/rules/diff?from=${version - 1}&to=${version}`, undefined, { token: TOKEN });
    expect(diff.json.resources.changed).toEqual([
      { name: 'api:slots', changes: [{ path: 'booking.maxBookings', before: 20, after: 1 }] },
    ]);
    expect(diff.json.text).toContain('+    booking: { claimWindowMs: 1000, maxAheadMs: 10000, maxBookings: 1 }');
    // Active at once: a key holds one booking now, the second is a plain denial.
    const key = fresh('bounds');
    await windowStart(server.url);
    await call(server.url, '/v1/check', { resource: 'api:slots', key });
    expect((await call(server.url, '/v1/book', { resource: 'api:slots', key, id: 'one' })).json.booking.outcome).toBe('booked');
    expect((await call(server.url, '/v1/book', { resource: 'api:slots', key, id: 'two' })).json.booking.outcome).toBe('denied');
    // Invalid booking bounds are refused with the file's path, and change nothing.
    const bad = await call(
      server.url,
      '/v1/admin/rules',
      { text: RULES.replace('maxBookings: 20', 'maxBookings: 0'), author: 'test', reason: 'bad' },
      { token: TOKEN },
    );
    expect(bad.status).toBe(400);
    expect(bad.json.error.issues).toEqual([
      expect.objectContaining({
        path: 'resources."api:slots".booking.maxBookings',
        message: expect.stringContaining('between 1 and 10000'),
      }),
    ]);
  });
});

describe('bookings behind --api-token', () => {
  const tmp = scratch();
  let server: ServerProcess;

  beforeAll(async () => {
    server = await spawnServer(['--rules', writeRules(tmp.dir, RULES), '--api-token', API_TOKEN]);
  });
  afterAll(async () => {
    await server?.stop();
    tmp.remove();
  });

  it('refuses book, claim, cancel and checks with a booking id without the token, and changes nothing', async () => {
    const item = { resource: 'api:hour', key: 'guarded' };
    const bodies: [string, unknown][] = [
      ['/v1/book', { ...item, id: 'g' }],
      ['/v1/claim', { ...item, id: 'g' }],
      ['/v1/cancel', { ...item, id: 'g' }],
      ['/v1/check', { ...item, book: 'g' }],
    ];
    for (const token of [undefined, TOKEN, `${API_TOKEN}x`]) {
      for (const [path, body] of bodies) {
        const a = await call(server.url, path, body, token === undefined ? {} : { token });
        expect(a.status, path).toBe(401);
        expect(a.json.error.code, path).toBe('SLUICE_ERR_UNAUTHORIZED');
        expect(a.headers.get('www-authenticate')).toBe('Bearer');
      }
    }
    const ok = await call(server.url, '/v1/book', { ...item, id: 'g' }, { token: API_TOKEN });
    expect(ok.status).toBe(200);
    // The refused calls charged nothing: the one permit of the hour went to this call.
    expect(ok.json).toMatchObject({ allowed: true, booking: { outcome: 'admitted', id: 'g' } });
    expect((await call(server.url, '/v1/cancel', { ...item, id: 'g' }, { token: API_TOKEN })).json).toEqual({ cancelled: false });
  });
});
