import { ManualClock, isSluiceError, type Decision } from '@sluice/core';
import { createPrometheusObserver } from '@sluice/core/metrics';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { RemoteLimiter } from './remote-limiter.js';
import { FakeService } from './testing/fake-service.js';

const window = { algorithm: 'fixed-window' as const, limit: 2, windowMs: 10_000 };
const RESOURCES = {
  'api:slots': { limits: window, booking: { claimWindowMs: 3000 }, onStoreFailure: 'local' as const },
  'api:open': { limits: window, onStoreFailure: 'open' as const },
  'api:closed': { limits: window, onStoreFailure: 'closed' as const },
  'api:leased': { limits: { ...window, limit: 100 }, lease: { ttlMs: 200, maxBatch: 10, maxShare: 0.5 } },
};

const open: RemoteLimiter[] = [];
function setup(options: Partial<ConstructorParameters<typeof RemoteLimiter>[0]> = {}) {
  // At the start of a 10 s window.
  const clock = new ManualClock(1_000_000);
  const service = new FakeService(RESOURCES, clock);
  service.clients = 2;
  const events: { healthy: boolean }[] = [];
  const limiter = new RemoteLimiter({
    url: 'http://sluice.test',
    transport: service,
    clock,
    observer: { storeSwitched: (e) => events.push(e) },
    logger: false,
    ...options,
  });
  open.push(limiter);
  return { clock, service, limiter, events };
}

afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

const code = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: unknown) => (isSluiceError(e) ? `${e.code}${e.field === undefined ? '' : `:${e.field}`}` : 'other'),
  );

describe('RemoteLimiter bookings over a fake service', () => {
  it('admits, books the next slot, answers booked until it starts, then claims it once', async () => {
    const { limiter, service, clock } = setup();
    await limiter.ready();
    const first = await limiter.book('api:slots', { key: 'k', id: 'a' });
    expect(first).toMatchObject({ allowed: true, source: 'store', booking: { outcome: 'admitted', id: 'a' } });
    expect(first.statuses).toHaveLength(1);
    await limiter.try('api:slots', { key: 'k' });
    const booked = await limiter.book('api:slots', { key: 'k', id: 'b' });
    expect(booked).toMatchObject({
      allowed: false,
      retryAfterMs: 10_000,
      booking: { outcome: 'booked', id: 'b', startsInMs: 10_000, expiresInMs: 13_000 },
    });
    // The client made the booking's token and sends it with every later call under the id.
    const token = booked.booking!.token!;
    expect(token).toMatch(/^[\w-]{22}$/);
    expect(service.seen.at(-1)!.body).toMatchObject({ items: [{ id: 'b', token }] });
    clock.advance(9000);
    expect((await limiter.claim('api:slots', { key: 'k', id: 'b' })).booking).toEqual({
      outcome: 'booked',
      id: 'b',
      startsInMs: 1000,
      expiresInMs: 4000,
      token,
    });
    clock.advance(1000);
    expect(await limiter.claim('api:slots', { key: 'k', id: 'b' })).toMatchObject({
      allowed: true,
      booking: { outcome: 'claimed', id: 'b' },
    });
    expect(await limiter.claim('api:slots', { key: 'k', id: 'b' })).toMatchObject({
      allowed: false,
      booking: { outcome: 'missing' },
    });
    expect(service.seen.map((s) => s.path)).toContain('/v1/book?statuses=1');
    expect(service.seen.map((s) => s.path)).toContain('/v1/claim?statuses=1');
  });

  it('batches the bookings and claims of one turn, each apart from the checks', async () => {
    const { limiter, service } = setup({ maxBatch: 4 });
    await limiter.ready();
    const ds = await Promise.all([
      ...Array.from({ length: 6 }, (_, i) => limiter.book('api:slots', { key: 'batch', id: `j${i}` })),
      ...Array.from({ length: 3 }, (_, i) => limiter.claim('api:slots', { key: 'batch', id: `c${i}` })),
      limiter.try('api:open'),
    ]);
    expect(service.count('/v1/book')).toBe(2);
    expect(service.count('/v1/claim')).toBe(1);
    expect(service.count('/v1/check')).toBe(1);
    expect(ds.slice(0, 6).map((d) => d.booking!.outcome)).toEqual([
      'admitted',
      'admitted',
      'booked',
      'booked',
      'booked',
      'booked',
    ]);
    expect(ds.slice(6, 9).every((d) => d.booking!.outcome === 'missing')).toBe(true);
    // Slots in line: each booking starts after the ones before it.
    const starts = ds.slice(2, 6).map((d) => d.booking!.startsInMs);
    expect([...starts].sort((a, b) => a - b)).toEqual(starts);
    expect(starts[0]).toBe(10_000);
  });

  it('cancels a pending booking, and says false when none is held', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    await Promise.all([limiter.try('api:slots', { key: 'x' }), limiter.try('api:slots', { key: 'x' })]);
    const { token } = (await limiter.book('api:slots', { key: 'x', id: 'gone' })).booking!;
    expect(await limiter.cancel('api:slots', { key: 'x', id: 'gone' })).toBe(true);
    expect(await limiter.cancel('api:slots', { key: 'x', id: 'gone' })).toBe(false);
    // The first with the booking's token; once it is gone the token is forgotten.
    expect(service.seen.filter((s) => s.path === '/v1/cancel').map((s) => s.body)).toEqual([
      { resource: 'api:slots', key: 'x', id: 'gone', token },
      { resource: 'api:slots', key: 'x', id: 'gone' },
    ]);
  });

  it("refuses another client's claim or cancel of a booking it did not make, unless given the token", async () => {
    const { limiter, service, clock } = setup();
    const other = new RemoteLimiter({ url: 'http://sluice.test', transport: service, clock, logger: false });
    open.push(other);
    await Promise.all([limiter.ready(), other.ready()]);
    await Promise.all([limiter.try('api:slots', { key: 'o' }), limiter.try('api:slots', { key: 'o' })]);
    const made = await limiter.book('api:slots', { key: 'o', id: 'job-42' });
    expect(made.booking!.outcome).toBe('booked');
    clock.advance(made.booking!.startsInMs);
    expect(await code(other.claim('api:slots', { key: 'o', id: 'job-42' }))).toBe('SLUICE_ERR_BOOKING_TOKEN');
    expect(await code(other.book('api:slots', { key: 'o', id: 'job-42' }))).toBe('SLUICE_ERR_BOOKING_TOKEN');
    expect(await code(other.cancel('api:slots', { key: 'o', id: 'job-42' }))).toBe('SLUICE_ERR_BOOKING_TOKEN');
    // Handed the token, the other process may claim it.
    const claimed = await other.claim('api:slots', { key: 'o', id: 'job-42', token: made.booking!.token! });
    expect(claimed.booking!.outcome).toBe('claimed');
  });

  it('validates ids and the rest of the call locally, with the core codes, without a call', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    const before = service.seen.length;
    for (const id of ['', 'a b', 'x'.repeat(129), 'é', undefined, 7]) {
      expect(await code(limiter.book('api:slots', { id } as never))).toBe('SLUICE_ERR_INVALID_OPTIONS:id');
      expect(await code(limiter.claim('api:slots', { id } as never))).toBe('SLUICE_ERR_INVALID_OPTIONS:id');
      expect(await code(limiter.cancel('api:slots', { id } as never))).toBe('SLUICE_ERR_INVALID_OPTIONS:id');
    }
    expect(await code(limiter.book('api:slots', { id: 'a', cost: 3 }))).toBe('SLUICE_ERR_COST_EXCEEDS_LIMIT:cost');
    expect(await code(limiter.book('nope', { id: 'a' }))).toBe('SLUICE_ERR_UNKNOWN_RESOURCE:resource');
    expect(await code(limiter.cancel('api:slots', { id: 'a', key: 'k'.repeat(300) }))).toBe('SLUICE_ERR_INVALID_KEY:key');
    expect(service.seen.length).toBe(before);
    // The service's own refusal is the caller's error, not an outage.
    service.limiter.setResources({ 'api:open': RESOURCES['api:open'] });
    expect(await code(limiter.book('api:slots', { id: 'a' }))).toBe('SLUICE_ERR_UNKNOWN_RESOURCE:resource');
    expect(await code(limiter.cancel('api:slots', { id: 'a' }))).toBe('SLUICE_ERR_UNKNOWN_RESOURCE:resource');
    expect(limiter.healthy).toBe(true);
  });

  it('decides booking calls by the store-failure policy while the service is away', async () => {
    const { limiter, service, events, clock } = setup();
    await limiter.ready();
    service.down = true;
    // local: a fair share (2 / 2 clients = 1), plain decisions: nothing is booked.
    const local = [
      await limiter.book('api:slots', { key: 'd', id: 'l1' }),
      await limiter.book('api:slots', { key: 'd', id: 'l2' }),
    ];
    expect(local.map((d) => [d.allowed, d.source, d.booking!.outcome])).toEqual([
      [true, 'fallback', 'admitted'],
      [false, 'fallback', 'denied'],
    ]);
    expect(local[1]!.booking).toEqual({ outcome: 'denied', id: 'l2', startsInMs: 0, expiresInMs: 0 });
    expect(await limiter.book('api:open', { id: 'o' })).toMatchObject({
      allowed: true,
      source: 'fallback',
      booking: { outcome: 'admitted' },
    });
    expect(await limiter.book('api:closed', { id: 'c' })).toMatchObject({
      allowed: false,
      reason: 'store_unavailable',
      source: 'fallback',
      booking: { outcome: 'denied' },
    });
    // A claim finds nothing here: the booking, if any, is on the service.
    const claim = await limiter.claim('api:slots', { key: 'd', id: 'l2' });
    expect(claim).toMatchObject({
      allowed: false,
      reason: 'store_unavailable',
      source: 'fallback',
      retryAfterMs: 500,
      booking: { outcome: 'missing', id: 'l2', startsInMs: 0, expiresInMs: 0 },
    });
    expect(await limiter.cancel('api:slots', { key: 'd', id: 'l2' })).toBe(false);
    expect(events).toEqual([{ healthy: false }]);
    const booked = service.count('/v1/book') + service.count('/v1/claim') + service.count('/v1/cancel');
    // Only the first call, which found the service away, went out.
    expect(booked).toBe(1);
    service.down = false;
    clock.advance(50);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(limiter.healthy).toBe(true);
    expect((await limiter.book('api:slots', { key: 'back', id: 'b' })).source).toBe('store');
  });

  it('answers one timed-out booking call by its policy without a switch, a claim as missing', async () => {
    const { limiter, service, events } = setup();
    await limiter.ready();
    service.slow = true;
    // local and not switched: the service's answers are this client's share, so it denies.
    expect(await limiter.book('api:slots', { key: 't', id: 'a' })).toMatchObject({
      allowed: false,
      reason: 'store_unavailable',
      source: 'fallback',
      booking: { outcome: 'denied' },
    });
    expect((await limiter.claim('api:slots', { key: 't', id: 'a' })).booking!.outcome).toBe('missing');
    expect(events).toEqual([]);
    expect(await limiter.cancel('api:slots', { key: 't', id: 'a' })).toBe(false);
    expect(events).toEqual([{ healthy: false }]);
  });

  it('decides leased resources from the lease: nothing booked, claims find nothing', async () => {
    const { limiter, service } = setup();
    await limiter.ready();
    const d = await limiter.book('api:leased', { key: 'l', id: 'x' });
    expect(d).toMatchObject({ allowed: true, booking: { outcome: 'admitted', id: 'x' } });
    expect((await limiter.claim('api:leased', { key: 'l', id: 'x' })).booking!.outcome).toBe('missing');
    expect(await limiter.cancel('api:leased', { key: 'l', id: 'x' })).toBe(false);
    expect(service.count('/v1/book') + service.count('/v1/claim') + service.count('/v1/cancel')).toBe(0);
  });

  it('counts booking decisions with mode "book"', async () => {
    const registry = new Registry();
    const { limiter } = setup({ observer: createPrometheusObserver({ registry }) });
    await limiter.ready();
    const ds: Decision[] = [];
    for (let i = 0; i < 3; i++) ds.push(await limiter.book('api:slots', { key: 'm', id: `m${i}` }));
    expect(ds.map((d) => d.allowed)).toEqual([true, true, false]);
    const text = await registry.metrics();
    expect(text).toMatch(/sluice_decisions_total\{resource="api:slots",mode="book",outcome="allowed",source="store"\} 2/);
    expect(text).toMatch(/sluice_decisions_total\{resource="api:slots",mode="book",outcome="denied",source="store"\} 1/);
  });
});
