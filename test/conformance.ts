/**
 * The one conformance suite every store runs: the in-memory store with a manual clock, Redis
 * and Redis Cluster with real time. Windows are long (60 s) wherever an assertion must not be
 * disturbed by the milliseconds real calls take, and calls that must share a fixed window start
 * clear of its end; tests that need time to pass use short windows and `advance`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ALGORITHMS,
  DEFAULT_BOOKING,
  ErrorCodes,
  combineStatuses,
  compileLimits,
  type Algorithm,
  type Decision,
  type LimitPolicy,
  type LimitStore,
} from '@sluice/core';
import { clearOfWindowEnd } from './wait-for.js';

/** A store under test and how to let its time pass. */
export interface ConformanceTarget {
  name: string;
  makeStore(): LimitStore | Promise<LimitStore>;
  /** Lets `ms` of store time pass: a manual clock advances, a real store sleeps. */
  advance(ms: number): Promise<void>;
  /** True when time also passes between calls (real servers). */
  realTime: boolean;
}

const RATE_ALGORITHMS = ALGORITHMS.filter((a) => a !== 'concurrency');
/** A booking's token in these tests: its maker's, one per id. */
const tokenOf = (id: string): string => `the-own-token-of-${id}`;
const MINUTE = 60_000;

let keySeq = 0;

export function runConformance(target: ConformanceTarget): void {
  describe(`conformance: ${target.name}`, () => {
    let store: LimitStore;
    beforeAll(async () => {
      store = await target.makeStore();
    });
    afterAll(async () => {
      await store.close();
    });

    const newKey = () => `conf:${process.pid}:${Date.now().toString(36)}:${keySeq++}`;

    /** Asks the store and folds the statuses like the limiter does. */
    async function consume(key: string, policies: LimitPolicy[] | LimitPolicy, cost = 1, permitId = ''): Promise<Decision> {
      const limits = compileLimits(policies);
      const hasConcurrency = limits.some((l) => l.algorithm === 'concurrency');
      const id = hasConcurrency && permitId === '' ? `lease-${keySeq++}` : permitId;
      const r = await store.consume({ key, limits, cost, permitId: id });
      expect(r.statuses).toHaveLength(limits.length);
      expect(Number.isFinite(r.now)).toBe(true);
      return combineStatuses(r.statuses, hasConcurrency ? id : undefined);
    }

    /**
     * Before calls that must share one window of each fixed-window limit among `policies`, on a
     * real clock: waits when less than `marginMs` is left of it. Redis runs fixed windows from
     * multiples of their length on its clock (this machine's), so an end may fall between two
     * calls a few ms apart, and the second would find the limit unused.
     */
    async function inOneFixedWindow(policies: LimitPolicy[] | LimitPolicy, marginMs = 5000): Promise<void> {
      if (!target.realTime) return;
      for (const p of [policies].flat()) if (p.algorithm === 'fixed-window') await clearOfWindowEnd(p.windowMs ?? 1000, marginMs);
    }

    describe.each(RATE_ALGORITHMS)('%s', (algorithm: Algorithm) => {
      const policy = (limit: number, windowMs = MINUTE): LimitPolicy => ({ algorithm, limit, windowMs });

      it('admits up to the limit, then denies with a retry-after within the window', async () => {
        const key = newKey();
        await inOneFixedWindow(policy(5));
        for (let i = 0; i < 5; i++) {
          const d = await consume(key, policy(5));
          expect(d.allowed).toBe(true);
          expect(d.remaining).toBe(4 - i);
          expect(d.limit).toBe(5);
          expect(d.reason).toBe('allowed');
        }
        const denied = await consume(key, policy(5));
        expect(denied.allowed).toBe(false);
        expect(denied.reason).toBe('rate_limited');
        expect(denied.remaining).toBe(0);
        expect(denied.retryAfterMs).toBeGreaterThan(0);
        // The sliding window counter assumes a slice's calls were spread over the slice, so its
        // retry-after may exceed the window by up to one slice.
        expect(denied.retryAfterMs).toBeLessThanOrEqual(MINUTE * 1.1);
        expect(denied.resetAfterMs).toBeGreaterThanOrEqual(denied.retryAfterMs);
      });

      it('charges the cost of a call and never partially', async () => {
        const key = newKey();
        // A window far longer than the test, of an odd length: a fixed window is aligned to
        // multiples of its length on the store's clock, and a minute's boundary falling between
        // these calls would start the count again.
        const p = policy(5, 6 * 24 * 3600_000 + 12_345);
        expect((await consume(key, p, 3)).remaining).toBe(2);
        const tooBig = await consume(key, p, 3);
        expect(tooBig.allowed).toBe(false);
        expect(tooBig.remaining).toBe(2);
        expect((await consume(key, p, 2)).allowed).toBe(true);
        expect((await consume(key, p, 0)).remaining).toBe(0);
      });

      it('admits again once the retry-after has passed', async () => {
        const key = newKey();
        const p = policy(2, 400);
        await consume(key, p);
        await consume(key, p);
        let denied = await consume(key, p);
        // Real time may refill a little between calls; exhaust whatever came back.
        while (denied.allowed) denied = await consume(key, p);
        expect(denied.retryAfterMs).toBeGreaterThan(0);
        expect(denied.retryAfterMs).toBeLessThanOrEqual(400 * 1.1);
        await target.advance(denied.retryAfterMs + 5);
        expect((await consume(key, p)).allowed).toBe(true);
      });

      it('adjusts by the real cost: extra charges and refunds', async () => {
        const key = newKey();
        await inOneFixedWindow(policy(10));
        const limits = compileLimits(policy(10));
        await consume(key, policy(10), 2);
        await store.adjust({ key, limits, delta: 2 });
        expect((await consume(key, policy(10), 1)).remaining).toBe(5);
        await store.adjust({ key, limits, delta: -3 });
        expect((await consume(key, policy(10), 1)).remaining).toBe(7);
      });

      it('carries usage over when the limit changes', async () => {
        const key = newKey();
        await inOneFixedWindow(policy(10));
        await consume(key, policy(10), 6);
        const d = await consume(key, policy(20), 1);
        expect(d.limit).toBe(20);
        expect(d.remaining).toBe(13);
      });

      it.each(RATE_ALGORITHMS.filter((a) => a !== algorithm))(
        'carries usage over when the algorithm changes to %s',
        async (to) => {
          const key = newKey();
          await inOneFixedWindow(policy(10));
          await consume(key, { ...policy(10), id: 'main' }, 6);
          const d = await consume(key, { algorithm: to, limit: 10, windowMs: MINUTE, id: 'main' }, 1);
          expect(d.allowed).toBe(true);
          expect(d.remaining).toBe(3);
        },
      );
    });

    describe('several limits on one key', () => {
      const limits: LimitPolicy[] = [
        { algorithm: 'token-bucket', limit: 10, windowMs: MINUTE },
        { algorithm: 'fixed-window', limit: 3, windowMs: 10 * MINUTE },
      ];

      it('is all-or-nothing: a denial by one limit charges none', async () => {
        const key = newKey();
        await inOneFixedWindow(limits);
        for (let i = 0; i < 3; i++) expect((await consume(key, limits)).allowed).toBe(true);
        const denied = await consume(key, limits);
        expect(denied.allowed).toBe(false);
        expect(denied.limitId).toBe('1');
        const bucket = denied.statuses.find((s) => s.algorithm === 'token-bucket')!;
        expect(bucket.allowed).toBe(true);
        expect(bucket.remaining).toBe(7);
        const again = await consume(key, limits);
        expect(again.statuses.find((s) => s.algorithm === 'token-bucket')!.remaining).toBe(7);
      });

      it('reports the limit with the fewest permits left when allowed', async () => {
        const key = newKey();
        const d = await consume(key, limits);
        expect(d.limitId).toBe('1');
        expect(d.remaining).toBe(2);
        expect(d.statuses.map((s) => s.remaining)).toEqual([9, 2]);
      });
    });

    describe('concurrency', () => {
      const policy: LimitPolicy = { algorithm: 'concurrency', limit: 2, permitTtlMs: MINUTE };

      it('holds at most the limit, and a release frees a permit', async () => {
        const key = newKey();
        const limits = compileLimits(policy);
        const a = await consume(key, policy, 1, 'a');
        const b = await consume(key, policy, 1, 'b');
        expect([a.allowed, b.allowed]).toEqual([true, true]);
        expect(a.permitId).toBe('a');
        expect(b.remaining).toBe(0);
        const c = await consume(key, policy, 1, 'c');
        expect(c.allowed).toBe(false);
        expect(c.reason).toBe('concurrency_limited');
        expect(c.retryAfterMs).toBeGreaterThan(0);
        expect(await store.release({ key, limits, permitId: 'a' })).toBe(true);
        expect(await store.release({ key, limits, permitId: 'a' })).toBe(false);
        expect((await consume(key, policy, 1, 'c')).allowed).toBe(true);
        expect(await store.renew({ key, limits, permitId: 'b' })).toBe(true);
        expect(await store.renew({ key, limits, permitId: 'nope' })).toBe(false);
      });

      it('counts the cost of each lease', async () => {
        const key = newKey();
        const p: LimitPolicy = { algorithm: 'concurrency', limit: 5, permitTtlMs: MINUTE };
        expect((await consume(key, p, 3, 'x')).remaining).toBe(2);
        expect((await consume(key, p, 3, 'y')).allowed).toBe(false);
        expect((await consume(key, p, 2, 'z')).allowed).toBe(true);
      });

      it('frees abandoned leases when they expire, and renewing extends them', async () => {
        const key = newKey();
        // Real stores let more time pass than `advance` asks for (a loaded machine stalls for
        // a second or more). Each check holds however much longer the waits take, except the
        // "still held" one, which leaves 1.9 s of room between the renewal and itself.
        const p: LimitPolicy = { algorithm: 'concurrency', limit: 1, permitTtlMs: 4000 };
        const limits = compileLimits(p);
        expect((await consume(key, p, 1, 'held')).allowed).toBe(true);
        await target.advance(2100);
        expect(await store.renew({ key, limits, permitId: 'held' })).toBe(true);
        await target.advance(2100);
        // More than the first TTL has passed: held only because it was renewed.
        expect((await consume(key, p, 1, 'other')).allowed).toBe(false);
        await target.advance(4050);
        expect(await store.renew({ key, limits, permitId: 'held' })).toBe(false);
        expect((await consume(key, p, 1, 'other')).allowed).toBe(true);
      }, 30_000);

      it('takes no lease when a rate limit on the same key denies', async () => {
        const key = newKey();
        const both: LimitPolicy[] = [
          { algorithm: 'concurrency', limit: 5, permitTtlMs: MINUTE },
          { algorithm: 'fixed-window', limit: 1, windowMs: 10 * MINUTE },
        ];
        await inOneFixedWindow(both);
        expect((await consume(key, both, 1, 'l1')).allowed).toBe(true);
        const denied = await consume(key, both, 1, 'l2');
        expect(denied.allowed).toBe(false);
        expect(denied.statuses[0]!.remaining).toBe(4);
        expect(await store.release({ key, limits: compileLimits(both), permitId: 'l2' })).toBe(false);
      });
    });

    describe.each(RATE_ALGORITHMS)('bookings on %s', (algorithm: Algorithm) => {
      // Spans of seconds: real time passing between calls (a busy machine) stays well inside them.
      const policy: LimitPolicy =
        algorithm === 'gcra' || algorithm === 'token-bucket'
          ? { algorithm, limit: 10, windowMs: 20_000, burst: 5 }
          : { algorithm, limit: 5, windowMs: 3000 };
      const bounds = { ...DEFAULT_BOOKING, claimWindowMs: 5000 };

      it('books in line once full, answers the same booking to its id, claims it once due and cancels', async () => {
        if (store.book === undefined || store.cancel === undefined) throw new Error(`${target.name} cannot book`);
        const key = newKey();
        const limits = compileLimits(policy);
        // Up to the plain call, in one window: past its end the slot booked is the running window,
        // which has room for `next` and the plain call.
        await inOneFixedWindow(policy, 1000);
        const book = (id: string, create = true) => store.book!({ key, limits, cost: 1, id, token: tokenOf(id), create, bounds });
        let bookedId = 'a0';
        let first = await book(bookedId);
        for (let i = 1; first.outcome === 'admitted' && i < 20; i++) first = await book((bookedId = `a${i}`));
        expect(first.outcome).toBe('booked');
        expect(first.allowed).toBe(false);
        const slot = first.booking!;
        expect(slot.start).toBeGreaterThan(first.now);
        expect(slot.end).toBeGreaterThan(slot.start);
        // The next booking is in line behind the first; the same id is the same booking.
        const next = await book('next');
        expect(next.outcome).toBe('booked');
        expect(next.booking!.start).toBeGreaterThanOrEqual(slot.start);
        const same = await book('next', false);
        expect(same.outcome).toBe('booked');
        expect(same.booking).toEqual(next.booking);
        expect((await book('nobody', false)).outcome).toBe('missing');
        // A plain call is behind the bookings.
        expect((await store.consume({ key, limits, cost: 1, permitId: '' })).allowed).toBe(false);
        expect(await store.cancel({ key, limits, id: 'next', token: tokenOf('next') })).toBe(true);
        expect(await store.cancel({ key, limits, id: 'next', token: tokenOf('next') })).toBe(false);
        // Early (by the store's clock): still booked. A fixed window's slot is the next window,
        // which a real clock may already have reached.
        let claimed = await book(bookedId, false);
        if (claimed.now < slot.start) {
          expect(claimed.outcome).toBe('booked');
          await target.advance(slot.start - claimed.now + 20);
          claimed = await book(bookedId, false);
        }
        expect(claimed.outcome).toBe('claimed');
        expect(claimed.allowed).toBe(true);
        expect((await book(bookedId, false)).outcome).toBe('missing');
      });

      it("refuses a claim, cancel or booking under another's token, and keeps the booking whole", async () => {
        const key = newKey();
        const limits = compileLimits(policy);
        // In one window throughout: past its end the victim's slot is the running window, where
        // the victim is admitted, or its booking claimed.
        await inOneFixedWindow(policy, 1000);
        const call = (id: string, token: string, create = true) =>
          store.book!({ key, limits, cost: 1, id, token, create, bounds });
        let first = await call('a0', tokenOf('a0'));
        for (let i = 1; first.outcome === 'admitted' && i < 20; i++) first = await call(`a${i}`, tokenOf(`a${i}`));
        const victim = await call('job-42', tokenOf('job-42'));
        expect(victim.outcome).toBe('booked');
        const refused = { code: ErrorCodes.BOOKING_TOKEN };
        for (const token of ['', 'an-attackers-own-token']) {
          await expect(call('job-42', token, false)).rejects.toMatchObject(refused);
          await expect(call('job-42', token, true)).rejects.toMatchObject(refused);
          await expect(store.cancel!({ key, limits, id: 'job-42', token })).rejects.toMatchObject(refused);
        }
        // Still the maker's, unchanged.
        const same = await call('job-42', tokenOf('job-42'), false);
        expect(same.outcome).toBe('booked');
        expect(same.booking).toEqual(victim.booking);
        expect(await store.cancel!({ key, limits, id: 'job-42', token: tokenOf('job-42') })).toBe(true);
      });
    });

    it('keeps keys apart', async () => {
      const k1 = newKey();
      const k2 = newKey();
      const p: LimitPolicy = { algorithm: 'gcra', limit: 1, windowMs: MINUTE };
      expect((await consume(k1, p)).allowed).toBe(true);
      expect((await consume(k1, p)).allowed).toBe(false);
      expect((await consume(k2, p)).allowed).toBe(true);
    });

    it('handles keys with unusual characters', async () => {
      const p: LimitPolicy = { algorithm: 'token-bucket', limit: 1, windowMs: MINUTE };
      for (const odd of ['{brace}', 'a}b{c', 'space and ünïcödé', 'x'.repeat(200), '']) {
        const key = `${newKey()}|${odd}`;
        expect((await consume(key, p)).allowed).toBe(true);
        expect((await consume(key, p)).allowed).toBe(false);
      }
    });
  });
}
