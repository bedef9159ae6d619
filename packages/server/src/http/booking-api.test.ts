import { Limiter, ManualClock, checkBookingId, isSluiceError } from '@sluice/core';
import type { RuleStore } from '@sluice/rules';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LiveRules } from '../live-rules.js';
import { ServerMetrics } from '../metrics.js';
import { RateLimitService } from '../service/service.js';
import { ruleVersion } from '../../test/rule-version.js';
import { buildHttpApp } from './app.js';
import { decodeBody, itemSchemas } from './items.js';

const RULES = `
resources:
  api:slots:
    limits: { algorithm: fixed-window, limit: 2, windowMs: 10000 }
    booking: { claimWindowMs: 3000, maxAheadMs: 25000, maxBookings: 5 }
  db:pool: { limits: { algorithm: concurrency, limit: 1, permitTtlMs: 5000 } }
`;

describe('booking endpoints (embedded store, manual clock)', () => {
  let app: FastifyInstance;
  // At a window's start: fixed windows of 10 s begin at multiples of 10 s on the store's clock.
  const clock = new ManualClock(1_800_000_000_000);
  const metrics = new ServerMetrics();
  const limiter = new Limiter({ resources: {}, clock, observer: metrics.observer });
  const rules = new LiveRules({ limiter });
  const post = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });
  const fill = async (key: string) => {
    for (let i = 0; i < 2; i++) expect((await post('/v1/check', { resource: 'api:slots', key })).json().allowed).toBe(true);
  };

  beforeAll(async () => {
    rules.apply(ruleVersion(RULES, 3));
    app = buildHttpApp({
      settings: { maxBodyBytes: 4096, maxBatch: 5, maxKeyLength: 64, maxWaitMs: 1000, adminToken: 'a'.repeat(16) },
      service: new RateLimitService(limiter, rules),
      rules,
      ruleStore: {} as RuleStore,
      metrics,
      logger: pino({ level: 'silent' }),
      readiness: async () => ({ ready: true, checks: {} }),
    });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await limiter.close();
  });

  it('admits while there is room, then books the next window and claims it there', async () => {
    const first = await post('/v1/book', { resource: 'api:slots', key: 'a', id: 'job-1' });
    expect(first.statusCode).toBe(200);
    expect(first.headers['sluice-rules-version']).toBe('3');
    expect(first.json()).toMatchObject({ allowed: true, booking: { outcome: 'admitted', id: 'job-1' } });
    expect(first.headers['sluice-booking']).toBeUndefined();
    await post('/v1/check', { resource: 'api:slots', key: 'a' });

    const booked = await post('/v1/book?http429=1', { resource: 'api:slots', key: 'a', id: 'job-2' });
    expect(booked.statusCode).toBe(429);
    const body = booked.json();
    expect(body).toMatchObject({
      allowed: false,
      reason: 'rate_limited',
      retryAfterMs: 10_000,
      booking: { outcome: 'booked', id: 'job-2', startsInMs: 10_000, expiresInMs: 13_000 },
    });
    expect(booked.headers['sluice-booking']).toBe('job-2');
    expect(booked.headers['retry-after']).toBe('10');
    const token = body.booking.token as string;
    expect(token).toMatch(/^[\w-]{22}$/);

    // Before the start: still booked, with the time left; the same id books nothing more.
    clock.advance(4000);
    const early = await post('/v1/claim', { resource: 'api:slots', key: 'a', id: 'job-2', token });
    expect(early.statusCode).toBe(200);
    expect(early.json().booking).toEqual({ outcome: 'booked', id: 'job-2', startsInMs: 6000, expiresInMs: 9000, token });
    // Another caller naming it, without the token or with its own, is refused; nothing changes.
    for (const other of [{}, { token: 'not-the-makers-token' }]) {
      const refused = await post('/v1/claim', { resource: 'api:slots', key: 'a', id: 'job-2', ...other });
      expect({ status: refused.statusCode, code: refused.json().error.code }).toEqual({
        status: 403,
        code: 'SLUICE_ERR_BOOKING_TOKEN',
      });
    }
    expect(early.headers['retry-after']).toBe('6');

    // In the span: admitted without competing, once.
    clock.advance(6500);
    const claimed = await post('/v1/claim?http429=1', { resource: 'api:slots', key: 'a', id: 'job-2', token });
    expect(claimed.statusCode).toBe(200);
    expect(claimed.json()).toMatchObject({ allowed: true, reason: 'allowed', booking: { outcome: 'claimed', id: 'job-2' } });
    expect(claimed.headers['retry-after']).toBeUndefined();
    const again = await post('/v1/claim', { resource: 'api:slots', key: 'a', id: 'job-2', token });
    expect(again.json()).toMatchObject({ allowed: false, booking: { outcome: 'missing', id: 'job-2' } });
  });

  it('books on a check naming a booking id, answering 429 with Retry-After and Sluice-Booking', async () => {
    clock.advance(10_000 - (clock.now() % 10_000));
    await fill('c');
    const token = 'the-callers-own-token-7';
    const denied = await post('/v1/check?http429=1&statuses=1', { resource: 'api:slots', key: 'c', book: 'req-7', token });
    expect(denied.statusCode).toBe(429);
    expect(denied.headers['retry-after']).toBe('10');
    expect(denied.headers['sluice-booking']).toBe('req-7');
    expect(denied.headers['ratelimit-policy']).toBe('"api:slots";q=2;w=10');
    expect(denied.headers.ratelimit).toBe('"api:slots";r=0;t=10');
    expect(denied.json()).toMatchObject({ booking: { outcome: 'booked', id: 'req-7' }, statuses: [expect.any(Object)] });
    // A check without the id competes (and loses); one with it waits its turn, then is admitted.
    clock.advance(10_000);
    await fill('c-other');
    const retried = await post('/v1/check?http429=1', { resource: 'api:slots', key: 'c', book: 'req-7', token });
    expect(retried.statusCode).toBe(200);
    expect(retried.json()).toMatchObject({ allowed: true, booking: { outcome: 'claimed', id: 'req-7' } });
    expect(retried.headers['sluice-booking']).toBeUndefined();
    // A plain check carries no booking.
    expect((await post('/v1/check', { resource: 'api:slots', key: 'c' })).json().booking).toBeUndefined();
  });

  it('cancels a pending booking (its permits go back) and says when there was none', async () => {
    clock.advance(10_000 - (clock.now() % 10_000));
    await fill('x');
    type Booking = { outcome: string; token: string };
    const b1 = (await post('/v1/book', { resource: 'api:slots', key: 'x', id: 'b1' })).json<{ booking: Booking }>().booking;
    expect(b1.outcome).toBe('booked');
    const b2 = (await post('/v1/book', { resource: 'api:slots', key: 'x', id: 'b2' })).json<{ booking: Booking }>().booking;
    expect(b2.outcome).toBe('booked');
    const cancel = (id: string, token: string) => post('/v1/cancel', { resource: 'api:slots', key: 'x', id, token });
    expect((await post('/v1/cancel', { resource: 'api:slots', key: 'x', id: 'b1' })).statusCode).toBe(403);
    expect((await cancel('b1', b1.token)).json()).toEqual({ cancelled: true });
    expect((await cancel('b1', b1.token)).json()).toEqual({ cancelled: false });
    expect((await post('/v1/claim', { resource: 'api:slots', key: 'x', id: 'b1' })).json().booking.outcome).toBe('missing');
    const batch = await post('/v1/cancel', {
      items: [{ resource: 'api:slots', key: 'x', id: 'b2', token: b2.token }, { resource: 'api:slots' }],
    });
    expect(batch.json().results).toEqual([{ cancelled: true }, { error: expect.objectContaining({ field: 'id' }) }]);
  });

  it('answers batches item by item, and books nothing on a resource that cannot be booked', async () => {
    const res = await post('/v1/book', {
      items: [
        { resource: 'db:pool', key: 'p', id: 'p1' },
        { resource: 'nope', id: 'p2' },
        { resource: 'api:slots', key: 'batch', id: 'p3', cost: 2 },
      ],
    });
    expect(res.statusCode).toBe(200);
    const [pool, unknown, slots] = res.json().results;
    expect(pool).toMatchObject({ allowed: true, booking: { outcome: 'admitted', id: 'p1' } });
    expect(unknown.error.code).toBe('SLUICE_ERR_UNKNOWN_RESOURCE');
    expect(slots).toMatchObject({ allowed: true, booking: { outcome: 'admitted' } });
  });

  it('refuses bad items with stable codes, naming the field', async () => {
    const item = { resource: 'api:slots', key: 'v' };
    const cases: [string, unknown, string, string | undefined][] = [
      ['/v1/book', item, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: '' }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'has space' }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'é' }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'x'.repeat(129) }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 7 }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'a', book: 'b' }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/book', { ...item, id: 'a', maxWaitMs: 5 }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/book', { ...item, id: 'a', cost: -1 }, 'SLUICE_ERR_INVALID_REQUEST', 'cost'],
      ['/v1/book', { ...item, id: 'a', cost: 3 }, 'SLUICE_ERR_COST_EXCEEDS_LIMIT', undefined],
      ['/v1/claim', { ...item, id: 'a', extra: true }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/check', { ...item, book: '' }, 'SLUICE_ERR_INVALID_REQUEST', 'book'],
      ['/v1/check', { ...item, book: 'x'.repeat(129) }, 'SLUICE_ERR_INVALID_REQUEST', 'book'],
      ['/v1/check', { ...item, id: 'a' }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/acquire', { ...item, book: 'a' }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/cancel', { ...item, id: 'a', cost: 1 }, 'SLUICE_ERR_INVALID_REQUEST', undefined],
      ['/v1/cancel', { ...item, id: 'tab\there' }, 'SLUICE_ERR_INVALID_REQUEST', 'id'],
      ['/v1/book', { ...item, id: 'a', token: 'too-short' }, 'SLUICE_ERR_INVALID_REQUEST', 'token'],
      ['/v1/cancel', { ...item, id: 'a', token: 'a token with spaces' }, 'SLUICE_ERR_INVALID_REQUEST', 'token'],
      ['/v1/check', { ...item, token: 'a-token-without-a-booking' }, 'SLUICE_ERR_INVALID_REQUEST', 'token'],
    ];
    for (const [path, body, code, field] of cases) {
      const res = await post(path, body);
      const e = res.json().error;
      expect({ path, body, status: res.statusCode, code: e?.code }).toEqual({ path, body, status: 400, code });
      if (field !== undefined) expect(e.field).toBe(field);
    }
    for (const path of ['/v1/book', '/v1/claim', '/v1/cancel']) {
      const res = await post(`${path}?nope=1`, { ...item, id: 'a' });
      expect(res.statusCode, path).toBe(400);
      expect((await post(path, { resource: 'gone', id: 'a' })).statusCode).toBe(404);
    }
  });

  it('counts requests per route and booking outcomes', async () => {
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/sluice_http_requests_total\{route="\/v1\/book",method="POST",status="200"\} \d+/);
    expect(text).toMatch(/sluice_http_requests_total\{route="\/v1\/claim",method="POST",status="200"\} \d+/);
    expect(text).toMatch(/sluice_http_requests_total\{route="\/v1\/cancel",method="POST",status="200"\} \d+/);
    for (const outcome of ['admitted', 'booked', 'claimed', 'missing']) {
      expect(text).toMatch(new RegExp(`sluice_booking_outcomes_total\\{resource="api:slots",outcome="${outcome}"\\} [1-9]`));
    }
    expect(text).toMatch(/sluice_decisions_total\{resource="api:slots",mode="book",outcome="allowed",source="store"\} [1-9]/);
  });
});

describe('booking id schema', () => {
  const schemas = itemSchemas({ maxKeyLength: 8, maxWaitMs: 1000, maxBatch: 3 });
  const accepts = (id: unknown) => {
    const d = decodeBody({ resource: 'a', id }, schemas.book, 3);
    return !d.batch && d.item.ok;
  };
  const core = (id: unknown) => {
    try {
      checkBookingId(id);
      return true;
    } catch (e) {
      if (isSluiceError(e, 'SLUICE_ERR_INVALID_OPTIONS')) return false;
      throw e;
    }
  };

  it("accepts exactly the core's booking ids", () => {
    const ids: unknown[] = ['a', 'wf-1/run-2/act-3', '~!#$%^&*()', 'x'.repeat(128), 'x'.repeat(129), '', ' ', 'a b', '\u007f'];
    ids.push('é', 'a\nb', '\u0000', 7, null, {}, ['a']);
    for (let c = 0; c < 256; c++) ids.push(`id${String.fromCharCode(c)}`);
    for (const id of ids) expect(accepts(id), JSON.stringify(id)).toBe(core(id));
  });
});
