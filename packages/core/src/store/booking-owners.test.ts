import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_BOOKING, bookedCap, type BookingBounds } from './booking.js';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes } from '../shared/errors.js';
import { Limiter, type LimiterOptions } from '../admission/limiter.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits, type LimitPolicy } from '../shared/policy.js';

const closers: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c.close()));
});

function make(resources: LimiterOptions['resources'], maxKeys?: number) {
  const clock = new ManualClock(5_000_000);
  const s = new MemoryStore({ clock, sweepIntervalMs: 0, ...(maxKeys === undefined ? {} : { maxKeys }) });
  const limiter = new Limiter({ resources, clock, store: s, failover: { logger: false } });
  closers.push(limiter, s);
  return { limiter, clock, store: s };
}

const gcra = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 3 } as const;

describe('a booking belongs to the call that made it', () => {
  it('refuses a claim, a cancel or a re-booking under another token or none, changing nothing', async () => {
    const { limiter, clock } = make({ api: gcra });
    for (let i = 0; i < 3; i++) await limiter.book('api', { id: `a${i}`, key: 'k' });
    const made = await limiter.book('api', { id: 'job-42', key: 'k' });
    expect(made.booking?.outcome).toBe('booked');
    const token = made.booking!.token!;
    expect(token).toMatch(/^[\w-]{22}$/);
    clock.advance(made.booking!.startsInMs);
    const refused = { code: ErrorCodes.BOOKING_TOKEN };
    const other = 'another-callers-token-0000';
    await expect(limiter.claim('api', { id: 'job-42', key: 'k' })).rejects.toMatchObject(refused);
    await expect(limiter.claim('api', { id: 'job-42', key: 'k', token: other })).rejects.toMatchObject(refused);
    await expect(limiter.book('api', { id: 'job-42', key: 'k' })).rejects.toMatchObject(refused);
    await expect(limiter.book('api', { id: 'job-42', key: 'k', token: other })).rejects.toMatchObject(refused);
    await expect(limiter.cancel('api', { id: 'job-42', key: 'k' })).rejects.toMatchObject(refused);
    await expect(limiter.cancel('api', { id: 'job-42', key: 'k', token: other })).rejects.toMatchObject(refused);
    // The booking is still its maker's, whole: its claim admits.
    const claimed = await limiter.claim('api', { id: 'job-42', key: 'k', token });
    expect(claimed.booking?.outcome).toBe('claimed');
    expect(claimed.allowed).toBe(true);
  });

  it('keeps a token the caller gives, so another process can claim with it', async () => {
    const { limiter, clock } = make({ api: gcra });
    for (let i = 0; i < 3; i++) await limiter.book('api', { id: `a${i}` });
    const token = 'derived-from-a-shared-secret';
    const d = await limiter.book('api', { id: 'x', token });
    expect(d.booking?.token).toBe(token);
    expect((await limiter.book('api', { id: 'x', token })).booking?.outcome).toBe('booked');
    clock.advance(d.booking!.startsInMs);
    expect((await limiter.book('api', { id: 'x', token })).booking?.outcome).toBe('claimed');
  });

  it('validates tokens: too short or with spaces is an input error', async () => {
    const { limiter } = make({ api: gcra });
    for (const token of ['short', 'has a space in it, long enough', 'x'.repeat(129), 7]) {
      await expect(limiter.book('api', { id: 'x', token: token as string })).rejects.toMatchObject({
        code: ErrorCodes.INVALID_OPTIONS,
        field: 'token',
      });
    }
  });
});

describe('a key keeps most of its horizon for plain calls', () => {
  it('bounds what bookings hold to maxShare of what the strictest limit admits over maxAheadMs', () => {
    const bounds: BookingBounds = { ...DEFAULT_BOOKING, maxAheadMs: 2000, maxShare: 0.5 };
    // GCRA 10/s, burst 3: 3 + 20 over the horizon, half of it rounded down.
    expect(bookedCap(compileLimits(gcra), bounds)).toBe(11);
    const two: LimitPolicy[] = [
      { id: 'fast', algorithm: 'fixed-window', limit: 100, windowMs: 1000 },
      { id: 'slow', algorithm: 'sliding-window', limit: 10, windowMs: 10_000 },
    ];
    expect(bookedCap(compileLimits(two), bounds)).toBe(6);
    expect(bookedCap(compileLimits(gcra), { ...bounds, maxShare: 1 })).toBe(23);
  });

  it('one burst of bookings cannot book the whole maxAheadMs', async () => {
    const resources = { api: { limits: gcra, booking: { maxAheadMs: 2000 } } };
    const { limiter } = make(resources);
    const outcomes: string[] = [];
    for (let i = 0; i < 100; i++) outcomes.push((await limiter.book('api', { id: `b${i}` })).booking!.outcome);
    const booked = outcomes.filter((o) => o === 'booked').length;
    // Without the share, the 2 s horizon takes 20 bookings (10/s); with it, 11 permits at most.
    expect(outcomes.filter((o) => o === 'admitted')).toHaveLength(3);
    expect(booked).toBe(11);
    expect(outcomes.filter((o) => o === 'denied')).toHaveLength(100 - 3 - 11);
  });

  it('lets plain calls in before the horizon ends (the half it kept)', async () => {
    const { limiter, clock } = make({ api: { limits: gcra, booking: { maxAheadMs: 2000 } } });
    for (let i = 0; i < 100; i++) await limiter.book('api', { id: `b${i}` });
    let allowed = 0;
    for (let t = 0; t < 2000; t += 50) {
      clock.advance(50);
      if ((await limiter.try('api')).allowed) allowed++;
    }
    // The bookings reach ~1.1 s ahead: the last ~0.9 s of the horizon admits plain calls.
    expect(allowed).toBeGreaterThanOrEqual(5);
  });

  it('refuses a maxShare outside (0, 1]', () => {
    for (const maxShare of [0, -0.1, 1.5, Number.NaN, '0.5']) {
      expect(() => make({ api: { limits: gcra, booking: { maxShare: maxShare as number } } })).toThrow(/booking.maxShare/);
    }
  });
});

describe('bookings in the embedded store weigh as keys', () => {
  it('counts live bookings in maxKeys, and makes a booking past it a plain denial', async () => {
    const { limiter, clock, store } = make({ api: gcra }, 20);
    // Two keys, each with its burst spent and one booking: 2 keys + 2 bookings + 2 ledgers of 2 = 8.
    for (const key of ['a', 'b']) {
      for (let i = 0; i < 3; i++) await limiter.book('api', { key, id: `${key}${i}` });
      expect((await limiter.book('api', { key, id: `${key}-b` })).booking?.outcome).toBe('booked');
    }
    expect(store.stats).toMatchObject({ keys: 2, bookings: 2 });
    const more: string[] = [];
    for (let i = 0; i < 20; i++) more.push((await limiter.book('api', { key: 'a', id: `more${i}` })).booking!.outcome);
    // Room is kept for another key's first booking (1 + 2): 8 + 10 + 3 = 21 > 20 stops the 11th.
    expect(more.filter((o) => o === 'booked')).toHaveLength(10);
    expect(more.slice(10)).toEqual(Array(10).fill('denied'));
    expect(store.stats).toMatchObject({ keys: 2, bookings: 12, refusedBookings: 10 });
    // A third key gets a slot (2 + 16 < 20) but no booking: a plain denial once its burst is spent.
    for (let i = 0; i < 3; i++) expect((await limiter.book('api', { key: 'c', id: `c${i}` })).booking?.outcome).toBe('admitted');
    expect((await limiter.book('api', { key: 'c', id: 'c-b' })).booking?.outcome).toBe('denied');
    expect(store.stats).toMatchObject({ keys: 3, bookings: 12, refusedBookings: 11 });
    // Once the bookings have ended, the table empties and books again.
    clock.advance(10_000);
    expect(store.sweep()).toBe(3);
    expect(store.stats).toMatchObject({ keys: 0, bookings: 0 });
    for (let i = 0; i < 3; i++) await limiter.book('api', { key: 'd', id: `d${i}` });
    expect((await limiter.book('api', { key: 'd', id: 'd-b' })).booking?.outcome).toBe('booked');
  });
});
