import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { Limiter, type LimiterOptions } from './limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import type { LimitStore } from '../store/store.js';

const limiters: Limiter[] = [];
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
});

function make(resources: LimiterOptions['resources'], store?: LimitStore) {
  const clock = new ManualClock(5_000_000);
  const limiter = new Limiter({ resources, clock, ...(store === undefined ? {} : { store }), failover: { logger: false } });
  limiters.push(limiter);
  return { limiter, clock };
}

const gcra = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 3 } as const;

describe('Limiter.book, claim and cancel', () => {
  it('answers a booked denial whose retry-after is the slot, then admits its claim', async () => {
    const { limiter, clock } = make({ api: gcra });
    for (let i = 0; i < 3; i++) expect((await limiter.book('api', { id: `a${i}` })).booking?.outcome).toBe('admitted');
    const d = await limiter.book('api', { id: 'x' });
    expect(d.allowed).toBe(false);
    expect(d.reason).toBe('rate_limited');
    expect(d.retryAfterMs).toBe(100);
    expect(d.booking).toEqual({ outcome: 'booked', id: 'x', startsInMs: 100, expiresInMs: 300, token: expect.any(String) });
    const token = d.booking!.token!;
    // A plain call in between stays behind the booking.
    clock.advance(100);
    expect((await limiter.try('api')).allowed).toBe(false);
    const claimed = await limiter.claim('api', { id: 'x', token });
    expect(claimed.allowed).toBe(true);
    expect(claimed.reason).toBe('allowed');
    expect(claimed.booking?.outcome).toBe('claimed');
    expect((await limiter.claim('api', { id: 'x', token })).booking?.outcome).toBe('missing');
  });

  it('cancels a booking, after which its claim finds nothing', async () => {
    const { limiter } = make({ api: gcra });
    for (let i = 0; i < 3; i++) await limiter.book('api', { id: `a${i}`, key: 'k' });
    const token = (await limiter.book('api', { id: 'x', key: 'k' })).booking!.token!;
    expect(await limiter.cancel('api', { id: 'x', key: 'k', token })).toBe(true);
    expect(await limiter.cancel('api', { id: 'x', key: 'k', token })).toBe(false);
    expect((await limiter.claim('api', { id: 'x', key: 'k' })).booking?.outcome).toBe('missing');
  });

  it('decides as try, booking nothing, where a call cannot be booked', async () => {
    const { limiter } = make({
      pool: { algorithm: 'concurrency', limit: 1 },
      quota: { limits: gcra, tenants: { '*': { algorithm: 'gcra', limit: 1, windowMs: 1000, burst: 1 } } },
    });
    const first = await limiter.book('pool', { id: 'p1' });
    expect(first.allowed).toBe(true);
    expect(first.permitId).toBeDefined();
    expect(first.booking?.outcome).toBe('admitted');
    const second = await limiter.book('pool', { id: 'p2' });
    expect(second.booking?.outcome).toBe('denied');
    expect(second.reason).toBe('concurrency_limited');
    await limiter.book('quota', { id: 't1', tenant: 'acme' });
    expect((await limiter.book('quota', { id: 't2', tenant: 'acme' })).booking?.outcome).toBe('denied');
    expect((await limiter.claim('pool', { id: 'p2' })).booking?.outcome).toBe('missing');
  });

  it('books nothing on a store that cannot book, and says so', async () => {
    const memory = new MemoryStore({ clock: new ManualClock(0), sweepIntervalMs: 0 });
    const plain: LimitStore = {
      name: 'plain',
      consume: (r) => memory.consume(r),
      adjust: (r) => memory.adjust(r),
      reserve: (r) => memory.reserve(r),
      renew: (r) => memory.renew(r),
      release: (r) => memory.release(r),
      ping: () => memory.ping(),
      close: () => memory.close(),
    };
    const { limiter } = make({ api: gcra }, plain);
    for (let i = 0; i < 3; i++) await limiter.book('api', { id: `a${i}` });
    const d = await limiter.book('api', { id: 'x' });
    expect(d.allowed).toBe(false);
    expect(d.booking?.outcome).toBe('denied');
    expect((await limiter.claim('api', { id: 'x' })).booking?.outcome).toBe('missing');
    await memory.close();
  });

  it('decides by the store-failure policy while the store is away: a fallback books nothing', async () => {
    const memory = new MemoryStore({ clock: new ManualClock(0), sweepIntervalMs: 0 });
    const away = (): Promise<never> => Promise.reject(new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'away'));
    const down: LimitStore = {
      name: 'down',
      consume: away,
      adjust: away,
      reserve: away,
      renew: away,
      release: away,
      book: away,
      cancel: away,
      ping: away,
      close: () => memory.close(),
    };
    const { limiter } = make({ api: { limits: gcra, onStoreFailure: 'open' } }, down);
    const d = await limiter.book('api', { id: 'x' });
    expect(d.allowed).toBe(true);
    expect(d.source).toBe('fallback');
    expect(d.booking?.outcome).toBe('admitted');
    const claim = await limiter.claim('api', { id: 'x' });
    expect(claim.booking?.outcome).toBe('missing');
    expect(claim.source).toBe('fallback');
    expect(claim.reason).toBe('store_unavailable');
    expect(await limiter.cancel('api', { id: 'x' })).toBe(false);
  });

  it('applies the resource booking bounds, and validates them and the id', async () => {
    const { limiter } = make({ api: { limits: gcra, booking: { maxBookings: 1 } } });
    for (let i = 0; i < 3; i++) await limiter.book('api', { id: `a${i}` });
    expect((await limiter.book('api', { id: 'b0' })).booking?.outcome).toBe('booked');
    expect((await limiter.book('api', { id: 'b1' })).booking?.outcome).toBe('denied');
    for (const id of ['', 'has space', 'x'.repeat(129), 7]) {
      await expect(limiter.book('api', { id: id as string })).rejects.toMatchObject({ code: ErrorCodes.INVALID_OPTIONS });
    }
    expect(() => make({ api: { limits: gcra, booking: { maxAheadMs: 0 } } })).toThrow(/booking.maxAheadMs/);
    expect(() => make({ api: { limits: gcra, booking: { later: 1 } as never } })).toThrow(/booking.later: unknown field/);
  });
});
