import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_BOOKING, type BookingBounds } from './booking.js';
import { ManualClock } from '../shared/clock.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits, type Algorithm, type LimitPolicy } from '../shared/policy.js';
import type { BookResult } from './store.js';
import { busiestWindow, prng } from '../../test/support.js';
import { rateAlgorithm } from '../algorithms/index.js';
import { ALGORITHM_CODES } from '../shared/limits.js';

/** Each booking's token in these tests: its maker's, derived from its id. */
const tokenOf = (id: string): string => `token-of-${id}-0123456789`;

const stores: MemoryStore[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

function setup(policies: LimitPolicy | LimitPolicy[], bounds: Partial<BookingBounds> = {}) {
  const clock = new ManualClock(1_000_000);
  const store = new MemoryStore({ clock, sweepIntervalMs: 0 });
  stores.push(store);
  const limits = compileLimits(policies);
  const b: BookingBounds = { ...DEFAULT_BOOKING, ...bounds };
  const book = (id: string, cost = 1, create = true, key = 'k') =>
    store.book({ key, limits, cost, id, token: tokenOf(id), create, bounds: b });
  const consume = (cost = 1, key = 'k') => store.consume({ key, limits, cost, permitId: '' });
  const cancel = (id: string, key = 'k') => store.cancel({ key, limits, id, token: tokenOf(id) });
  return { clock, store, limits, book, consume, cancel };
}

/** The most permits used in any window (t - windowMs, t], from (time, cost) pairs. */
function busiest(used: [number, number][], windowMs: number): number {
  return busiestWindow(
    used.slice().sort((a, b) => a[0] - b[0]),
    windowMs,
  );
}

/** The most permits used in one aligned window [k*windowMs, (k+1)*windowMs). */
function busiestAligned(used: [number, number][], windowMs: number): number {
  const per = new Map<number, number>();
  for (const [t, c] of used) per.set(Math.floor(t / windowMs), (per.get(Math.floor(t / windowMs)) ?? 0) + c);
  return Math.max(0, ...per.values());
}

describe('booking on a GCRA key', () => {
  const policy: LimitPolicy = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 5 };

  it('admits while there is room, then books slots in line, one emission interval apart', async () => {
    const { book } = setup(policy);
    for (let i = 0; i < 5; i++) expect((await book(`a${i}`)).outcome).toBe('admitted');
    const first = await book('b0');
    const second = await book('b1');
    expect(first.outcome).toBe('booked');
    expect(first.allowed).toBe(false);
    // The next permit is free 100 ms from now; the one after it 100 ms later.
    expect(first.booking!.start - first.now).toBeCloseTo(100, 6);
    expect(second.booking!.start - first.booking!.start).toBeCloseTo(100, 6);
    // The span is the spare burst: (5 - 1) x 100 ms, under the default claim window of 1 s.
    expect(first.booking!.end - first.booking!.start).toBeCloseTo(400, 6);
  });

  it('answers a booking again before its start, and admits it without competing once due', async () => {
    const { book, consume, clock } = setup(policy);
    for (let i = 0; i < 5; i++) await book(`a${i}`);
    const made = await book('x');
    expect((await book('x')).booking).toEqual(made.booking);
    clock.advance(50);
    expect((await book('x')).outcome).toBe('booked');
    clock.advance(50);
    // Someone else arriving at the slot is still behind the booking.
    expect((await consume()).allowed).toBe(false);
    const claimed = await book('x');
    expect(claimed.outcome).toBe('claimed');
    expect(claimed.allowed).toBe(true);
    // Claimed once: the id starts afresh (here: denied and booked again, at the end of the line).
    expect((await book('x')).outcome).toBe('booked');
  });

  it('a claim never books: missing without a booking, and nothing is charged', async () => {
    const { book, consume } = setup(policy);
    const r = await book('nobody', 1, false);
    expect(r.outcome).toBe('missing');
    for (let i = 0; i < 5; i++) expect((await consume()).allowed).toBe(true);
  });

  it('gives the newest booking back when it expires or is cancelled, and keeps the others', async () => {
    const { book, consume, cancel, clock } = setup(policy);
    for (let i = 0; i < 5; i++) await book(`a${i}`);
    await book('b0');
    await book('b1');
    // b1 is the newest: cancelling it takes its slot out of the line.
    expect(await cancel('b1')).toBe(true);
    expect(await cancel('b1')).toBe(false);
    const again = await book('b2');
    expect(again.booking!.start - again.now).toBeCloseTo(200, 6);
    // b0 is no longer the newest: cancelling it leaves its slot charged (a later admission was
    // judged on it), so b2 keeps its place.
    expect(await cancel('b0')).toBe(true);
    clock.advance(150);
    expect((await consume()).allowed).toBe(false);
  });

  it('refuses to book beyond maxAheadMs or past maxBookings (a plain denial)', async () => {
    const ahead = setup(policy, { maxAheadMs: 250 });
    for (let i = 0; i < 5; i++) await ahead.book(`a${i}`);
    expect((await ahead.book('b0')).outcome).toBe('booked');
    expect((await ahead.book('b1')).outcome).toBe('booked');
    expect((await ahead.book('b2')).outcome).toBe('denied');
    const many = setup(policy, { maxBookings: 2 });
    for (let i = 0; i < 5; i++) await many.book(`a${i}`);
    expect((await many.book('b0')).outcome).toBe('booked');
    expect((await many.book('b1')).outcome).toBe('booked');
    const full = await many.book('b2');
    expect(full.outcome).toBe('denied');
    expect(full.booking).toBeUndefined();
  });

  for (const algorithm of ['gcra', 'token-bucket'] as const) {
    it(`${algorithm}: with no spare burst (burst = cost) books a span of one emission interval, slots one interval apart`, async () => {
      const { book, consume, clock } = setup({ algorithm, limit: 10, windowMs: 1000, burst: 1 });
      expect((await book('a')).outcome).toBe('admitted');
      const b = await book('b');
      const c = await book('c');
      expect(b.outcome).toBe('booked');
      expect(b.booking!.start - b.now).toBeCloseTo(100, 6);
      expect(b.booking!.end - b.booking!.start).toBeCloseTo(100, 6);
      // Charged at its start, not its end: the next slot follows one interval later, not two.
      expect(c.booking!.start - b.booking!.start).toBeCloseTo(100, 6);
      // Claimed late in its span, b still gets in; c's slot is unchanged and nobody else gets in.
      clock.advance(199);
      expect((await consume()).allowed).toBe(false);
      expect((await book('b', 1, false)).outcome).toBe('claimed');
      clock.advance(2);
      expect((await book('c', 1, false)).outcome).toBe('claimed');
      expect((await consume()).allowed).toBe(false);
      clock.advance(99);
      expect((await consume()).allowed).toBe(true);
    });
  }

  it('the span is the spare burst, or one emission interval when that is shorter', () => {
    for (const algorithm of ['gcra', 'token-bucket'] as const) {
      const rate = rateAlgorithm(ALGORITHM_CODES[algorithm])!;
      const span = (burst: number, cost: number) =>
        rate.claimSpan(undefined, cost, 0, 0, compileLimits({ algorithm, limit: 10, windowMs: 1000, burst })[0]!);
      expect(span(1, 1)).toBeCloseTo(100, 9);
      expect(span(3, 3)).toBeCloseTo(100, 9);
      expect(span(2, 1)).toBeCloseTo(100, 9);
      expect(span(5, 1)).toBeCloseTo(400, 9);
    }
  });

  it('drops bookings when the key is judged under another policy', async () => {
    const { store, book, clock } = setup(policy);
    for (let i = 0; i < 5; i++) await book(`a${i}`);
    await book('b0');
    const other = compileLimits({ ...policy, limit: 20 });
    await store.consume({ key: 'k', limits: other, cost: 0, permitId: '' });
    clock.advance(100);
    const r = await store.book({
      key: 'k',
      limits: other,
      cost: 1,
      id: 'b0',
      token: tokenOf('b0'),
      create: false,
      bounds: DEFAULT_BOOKING,
    });
    expect(r.outcome).toBe('missing');
  });
});

describe('booking on a fixed window', () => {
  it('books the next window with room and lets it be claimed until that window ends', async () => {
    const { book, consume, clock } = setup({ algorithm: 'fixed-window', limit: 2, windowMs: 1000 });
    // Align to a window start.
    clock.advance(1000 - (clock.now() % 1000));
    expect((await book('a')).outcome).toBe('admitted');
    expect((await book('b')).outcome).toBe('admitted');
    const c = await book('c');
    expect(c.outcome).toBe('booked');
    expect(c.booking!.start).toBe(clock.now() + 1000);
    expect(c.booking!.end).toBe(c.booking!.start + 1000);
    const d = await book('d');
    const e = await book('e');
    expect(d.booking!.start).toBe(c.booking!.start);
    // The next window holds two bookings already: the one after it.
    expect(e.booking!.start).toBe(c.booking!.start + 1000);
    clock.advance(1000);
    // The window the bookings hold is full for everyone else.
    expect((await consume()).allowed).toBe(false);
    expect((await book('c')).outcome).toBe('claimed');
    expect((await book('d')).outcome).toBe('claimed');
  });

  it('gives an unclaimed booking back to its window', async () => {
    const { book, consume, cancel, clock } = setup({ algorithm: 'fixed-window', limit: 1, windowMs: 1000 });
    clock.advance(1000 - (clock.now() % 1000));
    await book('a');
    await book('b');
    expect(await cancel('b')).toBe(true);
    clock.advance(1000);
    expect((await consume()).allowed).toBe(true);
  });
});

describe.each(['sliding-window', 'sliding-log'] as const)('booking on a %s', (algorithm) => {
  const policy: LimitPolicy = { algorithm, limit: 4, windowMs: 1000 };

  it('books when the oldest permits leave the window, counting each booking to its span end', async () => {
    const { book, clock } = setup(policy, { claimWindowMs: 200 });
    for (let i = 0; i < 4; i++) {
      await book(`a${i}`);
      clock.advance(100);
    }
    const b = await book('b');
    // The first admission (400 ms ago) leaves at 600 ms from now.
    expect(b.booking!.start - b.now).toBe(600);
    expect(b.booking!.end - b.booking!.start).toBe(200);
  });

  it('an expired booking gives its permits back', async () => {
    const { book, consume, clock } = setup(policy, { claimWindowMs: 100 });
    for (let i = 0; i < 4; i++) await book(`a${i}`);
    const b = await book('b');
    clock.advance(b.booking!.end - b.now);
    // 1 s after the first four, they have left; the expired booking must not hold a permit.
    clock.advance(1000);
    for (let i = 0; i < 4; i++) expect((await consume()).allowed).toBe(true);
  });
});

describe('the bound with bookings', () => {
  /**
   * Callers arrive at random; a denied caller books and later claims somewhere in its span (or
   * too early, or too late, or cancels). Every permit used is recorded at the time it was used:
   * no window may hold more than the algorithm's bound.
   */
  async function drive(algorithm: Algorithm, seed: number, burst = 6) {
    const policy: LimitPolicy = { algorithm, limit: 10, windowMs: 1000, burst, slices: 2 };
    // A claim window longer than a bucket's spare burst: the algorithm's own span bound must hold.
    const { book, consume, cancel, clock } = setup(policy, { claimWindowMs: 2000, maxAheadMs: 5000, maxBookings: 50 });
    const rnd = prng(seed);
    const used: [number, number][] = [];
    const plans = new Map<string, { at: number; cost: number; cancel: boolean }>();
    let seq = 0;
    let booked = 0;
    const note = (r: BookResult, cost: number) => {
      if (r.allowed) used.push([r.now, cost]);
    };
    for (let step = 0; step < 1500; step++) {
      clock.advance(Math.floor(rnd() * 40));
      const now = clock.now();
      for (const [id, plan] of [...plans]) {
        if (plan.at > now) continue;
        plans.delete(id);
        if (plan.cancel) {
          await cancel(id);
          continue;
        }
        const r = await book(id, plan.cost, false);
        note(r, plan.cost);
        if (r.outcome === 'booked') plans.set(id, { ...plan, at: r.booking!.start });
      }
      const cost = 1 + Math.floor(rnd() * Math.min(2, burst));
      if (rnd() < 0.3) {
        const r = await consume(cost);
        if (r.allowed) used.push([r.now, cost]);
        continue;
      }
      const id = `c${seq++}`;
      const r = await book(id, cost);
      note(r, cost);
      if (r.outcome !== 'booked') continue;
      booked++;
      const { start, end } = r.booking!;
      const x = rnd();
      // Mostly inside the span; sometimes early (asked again), late (expired), or cancelled.
      const at = x < 0.1 ? start - 50 : x < 0.15 ? end + 10 : Math.min(end - 1e-3, start + rnd() * (end - start));
      plans.set(id, { at, cost, cancel: x > 0.95 });
    }
    return { used, booked };
  }

  for (const algorithm of ['gcra', 'token-bucket'] as const) {
    it(`${algorithm}: any window of 1 s holds at most burst + limit`, async () => {
      for (const seed of [1, 2, 3]) {
        const { used, booked } = await drive(algorithm, seed);
        expect(booked).toBeGreaterThan(50);
        expect(busiest(used, 1000)).toBeLessThanOrEqual(6 + 10);
        // and any window of one emission interval's multiple: burst + k
        expect(busiest(used, 500)).toBeLessThanOrEqual(6 + 5);
      }
    });

    it(`${algorithm}: with burst 1 (spans of one emission interval), any window of 1 s holds at most burst + limit`, async () => {
      for (const seed of [1, 2, 3]) {
        const { used, booked } = await drive(algorithm, seed, 1);
        expect(booked).toBeGreaterThan(50);
        expect(busiest(used, 1000)).toBeLessThanOrEqual(1 + 10);
        expect(busiest(used, 500)).toBeLessThanOrEqual(1 + 5);
        // A window of 1.5 intervals: below burst + 1.5 + 1 permits (one late claim), so at most 3.
        expect(busiest(used, 150)).toBeLessThanOrEqual(3);
      }
    });
  }

  for (const algorithm of ['sliding-window', 'sliding-log'] as const) {
    it(`${algorithm}: any window of 1 s holds at most limit`, async () => {
      for (const seed of [4, 5, 6]) {
        const { used, booked } = await drive(algorithm, seed);
        expect(booked).toBeGreaterThan(50);
        expect(busiest(used, 1000)).toBeLessThanOrEqual(10);
      }
    });
  }

  it('fixed-window: any aligned window holds at most limit', async () => {
    for (const seed of [7, 8, 9]) {
      const { used, booked } = await drive('fixed-window', seed);
      expect(booked).toBeGreaterThan(50);
      expect(busiestAligned(used, 1000)).toBeLessThanOrEqual(10);
    }
  });
});
