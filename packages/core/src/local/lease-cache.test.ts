import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { Limiter } from '../admission/limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import type { ReserveRequest, ReserveResult } from '../store/store.js';

class CountingStore extends MemoryStore {
  reserves = 0;
  override reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.reserves++;
    return super.reserve(request);
  }
}

/** A MemoryStore that notes when (on its manual clock) each reservation was asked for. */
class StampingStore extends MemoryStore {
  readonly sentAt: number[] = [];
  readonly #clock: ManualClock;
  constructor(clock: ManualClock) {
    super({ clock });
    this.#clock = clock;
  }
  override reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.sentAt.push(this.#clock.now());
    return super.reserve(request);
  }
}

const bucket = { algorithm: 'token-bucket', limit: 10_000, windowMs: 1000 } as const;

describe('leases', () => {
  it('serves most decisions locally from batches taken in one round trip', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limiter = new Limiter({ resources: { hot: { limits: bucket, lease: true } }, store, clock });
    let allowed = 0;
    for (let ms = 0; ms < 500; ms++) {
      for (let i = 0; i < 5; i++) if ((await limiter.try('hot')).allowed) allowed++;
      clock.advance(1);
    }
    expect(allowed).toBe(2500);
    // About 50 ms of demand per batch: far fewer round trips than decisions.
    expect(store.reserves).toBeLessThan(100);
    expect(limiter.trySync('hot')?.source).toBe('lease');
    await limiter.close();
    await store.close();
  });

  it('returns leftovers to the store on close and when their TTL passes', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limits = { limits: { algorithm: 'fixed-window', limit: 1000, windowMs: 60_000 }, lease: { ttlMs: 100 } } as const;
    const a = new Limiter({ resources: { api: limits }, store, clock });
    const peek = new Limiter({ resources: { api: { algorithm: 'fixed-window', limit: 1000, windowMs: 60_000 } }, store, clock });
    for (let i = 0; i < 300; i++) {
      await a.try('api');
      if (i % 10 === 0) clock.advance(1);
    }
    const heldBefore = (await peek.try('api', { cost: 0 })).remaining;
    expect(heldBefore).toBeLessThan(700);
    clock.advance(250);
    await clock.advanceAsync(200);
    expect((await peek.try('api', { cost: 0 })).remaining).toBe(700);
    await a.try('api', { cost: 5 });
    await a.close();
    expect((await peek.try('api', { cost: 0 })).remaining).toBe(695);
    await peek.close();
    await store.close();
  });

  it('keeps several processes sharing one limit within limit + burst, and near the limit', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    const policy = { limits: { algorithm: 'token-bucket', limit: 1000, windowMs: 1000, burst: 100 }, lease: true } as const;
    const fleet = Array.from({ length: 4 }, () => new Limiter({ resources: { db: policy }, store, clock }));
    const admittedAt: number[] = [];
    for (let ms = 0; ms < 5000; ms++) {
      for (const limiter of fleet) {
        for (let i = 0; i < 3; i++) if ((await limiter.try('db')).allowed) admittedAt.push(ms);
      }
      clock.advance(1);
      if (ms % 50 === 0) await clock.advanceAsync(0);
    }
    let maxInSecond = 0;
    let lo = 0;
    for (let hi = 0; hi < admittedAt.length; hi++) {
      while (admittedAt[hi]! - admittedAt[lo]! >= 1000) lo++;
      maxInSecond = Math.max(maxInSecond, hi - lo + 1);
    }
    expect(maxInSecond).toBeLessThanOrEqual(1100);
    // Demand is 12/ms against 1/ms: at least 0.97 of the limit is used.
    expect(admittedAt.length).toBeGreaterThanOrEqual(0.97 * 5000);
    for (const l of fleet) await l.close();
    await store.close();
  });

  it('holds a sliding window on the times leased permits are served, by every process', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    const policy = { limits: { algorithm: 'sliding-window', limit: 200, windowMs: 1000 }, lease: true } as const;
    const fleet = Array.from({ length: 4 }, () => new Limiter({ resources: { db: policy }, store, clock }));
    const servedAt: [number, number][] = [];
    for (let ms = 0; ms < 6000; ms++) {
      // Demand comes and goes, so batches are often left half used when their TTL ends.
      const busy = Math.floor(ms / 700) % 2 === 0;
      for (const [p, limiter] of fleet.entries()) {
        if (!busy && (ms + p) % 7 !== 0) continue;
        if ((await limiter.try('db')).allowed) servedAt.push([clock.now(), 1]);
      }
      clock.advance(1);
      if (ms % 20 === 0) await clock.advanceAsync(0);
    }
    let busiest = 0;
    let lo = 0;
    for (let hi = 0; hi < servedAt.length; hi++) {
      while (servedAt[lo]![0] <= servedAt[hi]![0] - 1000) lo++;
      busiest = Math.max(busiest, hi - lo + 1);
    }
    expect(busiest).toBeLessThanOrEqual(200);
    expect(servedAt.length).toBeGreaterThan(0.7 * 200 * 6);
    for (const l of fleet) await l.close();
    await store.close();
  });

  it('returns the unused permits of a batch on a sliding window, and no others', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    const window = { algorithm: 'sliding-window', limit: 1000, windowMs: 60_000 } as const;
    const leased = new Limiter({ resources: { api: { limits: window, lease: { ttlMs: 100 } } }, store, clock });
    const plain = new Limiter({ resources: { api: window }, store, clock });
    const peek = async () => (await plain.try('api', { cost: 0 })).remaining;
    for (let i = 0; i < 50; i++) await plain.try('api');
    for (let i = 0; i < 300; i++) {
      await leased.try('api');
      if (i % 10 === 0) clock.advance(1);
    }
    expect(await peek()).toBeLessThan(650);
    // Demand stops: once the batches' TTL has passed, what they did not serve is back.
    clock.advance(250);
    await clock.advanceAsync(200);
    expect(await peek()).toBe(650);
    await leased.close();
    await plain.close();
    await store.close();
  });

  it('serves the caller of a refill that answered after its TTL, and returns the rest of that batch', async () => {
    const clock = new ManualClock();
    class SlowStore extends MemoryStore {
      override async reserve(request: ReserveRequest): Promise<ReserveResult> {
        const r = await super.reserve(request);
        clock.advance(1000);
        return r;
      }
    }
    const store = new SlowStore({ clock });
    const window = { algorithm: 'sliding-window', limit: 1000, windowMs: 60_000 } as const;
    const leased = new Limiter({ resources: { api: { limits: window, lease: { ttlMs: 100 } } }, store, clock });
    const plain = new Limiter({ resources: { api: window }, store, clock });
    for (let i = 0; i < 50; i++) {
      clock.advance(1);
      leased.trySync('api');
    }
    expect((await leased.try('api', { cost: 3 })).allowed).toBe(true);
    await clock.advanceAsync(0);
    expect((await plain.try('api', { cost: 0 })).remaining).toBe(997);
    await leased.close();
    await plain.close();
    await store.close();
  });

  it('takes the next batch ahead, so a steady caller is served without waiting for refills', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 100_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { hot: { limits: window, lease: true } }, store, clock });
    await limiter.try('hot');
    let misses = 0;
    let allowed = 0;
    for (let ms = 0; ms < 500; ms++) {
      for (let i = 0; i < 5; i++) {
        let d = limiter.trySync('hot');
        if (d === undefined) {
          misses++;
          d = await limiter.try('hot');
        }
        if (d.allowed) allowed++;
      }
      clock.advance(1);
      // A request handler yields between requests: the background refill completes.
      await Promise.resolve();
    }
    expect(allowed).toBe(2500);
    expect(store.reserves).toBeLessThan(100);
    // Only the first batches, sized before demand is known, can run out before their successor.
    expect(misses).toBeLessThanOrEqual(3);
    await limiter.close();
    // Close returned the current and the spare batch: the store counts exactly the decisions made.
    const peek = new Limiter({ resources: { hot: window }, store, clock });
    expect((await peek.try('hot', { cost: 0 })).remaining).toBe(100_000 - 2501);
    await peek.close();
    await store.close();
  });

  it('takes the next batch ahead when the current one will expire before the next call', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    const take = async () => {
      const d = limiter.trySync('api');
      if (d !== undefined) return true;
      await limiter.try('api');
      return false;
    };
    // A busy moment sizes the batch for 50 calls a ms...
    for (let ms = 0; ms < 20; ms++) {
      for (let i = 0; i < 50; i++) await take();
      clock.advance(1);
      await clock.advanceAsync(0);
    }
    // ...then one call every 10 ms: each batch now expires long before it is used up.
    let misses = 0;
    let calls = 0;
    for (let ms = 0; ms < 2000; ms += 10) {
      if (!(await take())) misses++;
      calls++;
      clock.advance(10);
      await clock.advanceAsync(0);
    }
    // Each batch's TTL (200 ms) ends within a call of the last one: its successor is already in place.
    expect(calls).toBe(200);
    expect(misses).toBe(0);
    await limiter.close();
    // Leftovers of the expired batches and the last ones went back: the store counts the calls.
    const peek = new Limiter({ resources: { api: window }, store, clock });
    expect((await peek.try('api', { cost: 0 })).remaining).toBe(1_000_000 - 20 * 50 - 200);
    await peek.close();
    await store.close();
  });

  it('does not take batches ahead for a key called less often than a batch lives', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    for (let i = 0; i < 20; i++) {
      if (limiter.trySync('api') === undefined) await limiter.try('api');
      clock.advance(300);
      await clock.advanceAsync(0);
    }
    // One refill per call (each finds its batch expired), none ahead that would go back unused.
    expect(store.reserves).toBe(20);
    await limiter.close();
    await store.close();
  });

  it('sizes batches to outlast four refill round trips when the store is slow', async () => {
    const clock = new ManualClock();
    const sizes: number[] = [];
    class SlowStore extends MemoryStore {
      override async reserve(request: ReserveRequest): Promise<ReserveResult> {
        sizes.push(request.max);
        // The reply takes 20 ms: four round trips are 80 ms, more than the 50 ms target.
        await new Promise<void>((resolve) => clock.setTimer(resolve, 20));
        return super.reserve(request);
      }
    }
    const store = new SlowStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    let lateMisses = 0;
    for (let ms = 0; ms < 2000; ms++) {
      // 2 calls a ms: 100 permits would be 50 ms of demand, 160 are 80 ms.
      for (let i = 0; i < 2; i++) {
        if (limiter.trySync('api') === undefined) {
          if (ms >= 1000) lateMisses++;
          void limiter.try('api');
        }
      }
      await clock.advanceAsync(1);
    }
    const late = sizes.slice(-5);
    expect(Math.min(...late)).toBeGreaterThanOrEqual(155);
    expect(Math.max(...late)).toBeLessThanOrEqual(170);
    // Each batch is taken ahead when half of the last one (two round trips of demand) is left.
    expect(lateMisses).toBe(0);
    const closing = limiter.close();
    await clock.advanceAsync(100);
    await closing;
    await store.close();
  });

  it('gathers the batches many keys take ahead into one store call a millisecond', async () => {
    const clock = new ManualClock();
    const store = new StampingStore(clock);
    const sentAt = store.sentAt;
    const window = { algorithm: 'fixed-window', limit: 10_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    const keys = Array.from({ length: 100 }, (_, i) => ({ key: `user-${i}` }));
    let misses = 0;
    // For 1 s, key i is called every (1 + i % 7) ticks of 0.1 ms, from a tick of its own: each
    // takes a batch ahead every 50 ms or so, the keys at different times.
    for (let tick = 0; tick < 10_000; tick++) {
      for (const [i, k] of keys.entries()) {
        const from = (i * 37) % 500;
        if (tick < from || (tick - from) % (1 + (i % 7)) !== 0) continue;
        if (limiter.trySync('api', k) === undefined) {
          if (tick >= 1000) misses++;
          await limiter.try('api', k);
        }
      }
      await clock.advanceAsync(0.1);
    }
    const late = sentAt.filter((t) => t >= 100);
    // Over the last 900 ms, the keys' refills fell on at most one instant a millisecond, about
    // three at each; sent as each key ran low, they fell on nearly as many instants as there
    // were refills (1,679 of 1,786 when this was written).
    expect(late.length).toBeGreaterThan(1000);
    expect(new Set(late).size).toBeLessThanOrEqual(late.length / 2);
    expect(new Set(late).size).toBeLessThanOrEqual(901);
    // Gathering delays no caller: every batch still lands before its key needs it.
    expect(misses).toBe(0);
    await limiter.close();
    await store.close();
  });

  it('sends a batch taken ahead at once for a key whose batch lasts about a millisecond', async () => {
    const clock = new ManualClock();
    const triggered: number[] = [];
    const store = new StampingStore(clock);
    const sent = store.sentAt;
    const window = { algorithm: 'fixed-window', limit: 10_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { hot: { limits: window, lease: { maxBatch: 200 } } }, store, clock });
    let misses = 0;
    // 100 calls every 0.1 ms: a batch of 200 lasts 0.2 ms.
    for (let tick = 0; tick < 2000; tick++) {
      for (let i = 0; i < 100; i++) {
        const before = sent.length;
        if (limiter.trySync('hot') === undefined) {
          if (tick >= 100) misses++;
          await limiter.try('hot');
        } else if (sent.length > before) {
          triggered.push(clock.now());
        }
      }
      await clock.advanceAsync(0.1);
    }
    // Each batch was taken ahead by the call that found the lease running out, in that call.
    expect(triggered.length).toBeGreaterThan(500);
    expect(misses).toBe(0);
    await limiter.close();
    await store.close();
  });

  it('sends a gathered batch at once when a caller has to wait for it', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    // A steady caller: 2 calls a ms, so the batch lasts tens of ms and the next one is gathered.
    for (let ms = 0; ms < 200; ms++) {
      for (let i = 0; i < 2; i++) if (limiter.trySync('api') === undefined) await limiter.try('api');
      await clock.advanceAsync(1);
    }
    const reserves = store.reserves;
    // Use the batch up: the next one, taken ahead on the way, is gathered and waits (the clock stands still).
    for (let served = 0; served < 10_000 && limiter.trySync('api') !== undefined; served++);
    // A call the lease cannot serve waits for the gathered refill, which goes without the clock moving.
    const big = await limiter.try('api', { cost: 1000 });
    expect(big.allowed).toBe(true);
    expect(store.reserves).toBeGreaterThan(reserves);
    await limiter.close();
    await store.close();
  });

  it('serves the permits it holds as allowed after a refill for a larger cost was denied', async () => {
    const store = new MemoryStore();
    const limits = { algorithm: 'token-bucket', limit: 10, windowMs: 3_600_000 } as const;
    const a = new Limiter({ resources: { api: { limits, lease: { maxShare: 1 } } }, store });
    const other = new Limiter({ resources: { api: limits }, store });
    expect((await other.try('api', { cost: 8 })).allowed).toBe(true);
    expect((await a.try('api')).allowed).toBe(true);
    // The lease holds the last permit; two do not fit, and the store has none left.
    expect((await a.try('api', { cost: 2 })).allowed).toBe(false);
    const d = a.trySync('api');
    expect(d).toMatchObject({ allowed: true, reason: 'allowed', remaining: 0, source: 'lease' });
    await a.close();
    await other.close();
    await store.close();
  });

  it("keeps a tenant's quota on a leased resource, also for trySync", async () => {
    const limiter = new Limiter({
      resources: {
        api: {
          limits: { algorithm: 'fixed-window', limit: 1000, windowMs: 60_000 },
          lease: { maxShare: 1 },
          tenants: { acme: { algorithm: 'fixed-window', limit: 3, windowMs: 60_000 } },
        },
      },
    });
    let admitted = 0;
    for (let i = 0; i < 10; i++) {
      const d = limiter.trySync('api', { tenant: 'acme' }) ?? (await limiter.try('api', { tenant: 'acme' }));
      if (d.allowed) admitted++;
    }
    expect(admitted).toBe(3);
    // Calls without a tenant still use the resource's lease.
    expect((await limiter.try('api')).allowed).toBe(true);
    expect(limiter.trySync('api')).toMatchObject({ allowed: true, source: 'lease' });
    await limiter.close();
  });

  it('does not deny a key locally after a refill taken ahead failed', async () => {
    const clock = new ManualClock();
    let fail = false;
    class FlakyStore extends MemoryStore {
      override reserve(request: ReserveRequest): Promise<ReserveResult> {
        if (!fail) return super.reserve(request);
        fail = false;
        return Promise.reject(new SluiceError(ErrorCodes.STORE_TIMEOUT, 'Redis did not answer'));
      }
    }
    const store = new FlakyStore({ clock });
    const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
    const limiter = new Limiter({ resources: { api: { limits: window, lease: true } }, store, clock });
    expect((await limiter.try('api')).allowed).toBe(true);
    fail = true;
    const seen: string[] = [];
    for (let i = 0; i < 200; i++) {
      const d = limiter.trySync('api') ?? (await limiter.try('api'));
      seen.push(`${d.allowed} ${d.source}`);
      await clock.advanceAsync(0);
    }
    // The refill taken ahead failed and the next one, taken when the key was served again, did
    // not: no call was denied (200 calls are four times the batch).
    expect(fail).toBe(false);
    expect(seen.filter((x) => x !== 'true lease' && x !== 'true store')).toEqual([]);
    await limiter.close();
    await store.close();
  });

  it('finds a lease by the caller key in trySync, and validates what it was given as try does', async () => {
    const limiter = new Limiter({
      resources: { api: { limits: { algorithm: 'fixed-window', limit: 1000, windowMs: 60_000 }, lease: { maxShare: 1 } } },
    });
    // Keys that start with a kind marker are escaped in the storage key, keys alike otherwise are not merged.
    for (const key of ['@acme', '%@acme', 'user-1', undefined]) {
      expect(limiter.trySync('api', { key })).toBeUndefined();
      expect((await limiter.try('api', { key })).allowed).toBe(true);
      expect(limiter.trySync('api', { key })).toMatchObject({ allowed: true, source: 'lease' });
    }
    expect(limiter.trySync('api')).toMatchObject({ source: 'lease' });
    // An empty key is refused, though the resource-wide key (no key) has a lease to answer from.
    expect(() => limiter.trySync('api', { key: '' })).toThrow(expect.objectContaining({ code: 'SLUICE_ERR_INVALID_KEY' }));
    await expect(limiter.try('api', { key: '' })).rejects.toMatchObject({ code: 'SLUICE_ERR_INVALID_KEY' });
    expect(limiter.trySync('api', { key: 'user-1', cost: 3, priority: 'core' })).toMatchObject({ source: 'lease' });
    expect(limiter.trySync('api', { key: 'user-2' })).toBeUndefined();
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return (e as { code?: string }).code;
      }
      return undefined;
    };
    expect(code(() => limiter.trySync('api', { key: 'k'.repeat(300) }))).toBe(ErrorCodes.INVALID_KEY);
    expect(code(() => limiter.trySync('api', { key: 'a\uD800' }))).toBe(ErrorCodes.INVALID_KEY);
    expect(code(() => limiter.trySync('api', { key: 5 as unknown as string }))).toBe(ErrorCodes.INVALID_KEY);
    expect(code(() => limiter.trySync('api', { key: 'user-1', cost: -1 }))).toBe(ErrorCodes.INVALID_COST);
    expect(code(() => limiter.trySync('api', { key: 'user-1', cost: 1001 }))).toBe(ErrorCodes.COST_EXCEEDS_LIMIT);
    expect(code(() => limiter.trySync('api', { key: 'user-1', priority: 'vip' as 'core' }))).toBe(ErrorCodes.INVALID_OPTIONS);
    expect(code(() => limiter.trySync('nope', { key: 'user-1' }))).toBe(ErrorCodes.UNKNOWN_RESOURCE);
    await limiter.close();
    expect(code(() => limiter.trySync('api', { key: 'user-1' }))).toBe(ErrorCodes.CLOSED);
  });

  it('rejects leases on concurrency limits', () => {
    expect(() => new Limiter({ resources: { pool: { limits: { algorithm: 'concurrency', limit: 3 }, lease: true } } })).toThrow(
      /cannot be leased/,
    );
  });
});
