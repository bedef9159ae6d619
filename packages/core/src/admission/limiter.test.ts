import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import type { Decision } from '../shared/decision.js';
import { ErrorCodes } from '../shared/errors.js';
import { Limiter, type LimiterOptions } from './limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import type { ConsumeRequest, ConsumeResult, LimitStore } from '../store/store.js';

/** A memory store that counts the round trips the limiter makes. */
class CountingStore extends MemoryStore {
  calls = 0;
  override consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls++;
    return super.consume(request);
  }
}

function setup(resources: LimiterOptions['resources'], extra: Partial<LimiterOptions> = {}) {
  const clock = new ManualClock(1000);
  const store = new CountingStore({ clock });
  const limiter = new Limiter({ resources, store, clock, random: () => 0, ...extra });
  return { clock, store, limiter };
}

const oneEvery100ms = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 1 } as const;

describe('Limiter.try', () => {
  it('returns decisions and never throws when limited', async () => {
    const { limiter } = setup({ 'api:x': oneEvery100ms });
    expect((await limiter.try('api:x')).allowed).toBe(true);
    const d = await limiter.try('api:x');
    expect(d).toMatchObject({ allowed: false, reason: 'rate_limited', retryAfterMs: 100, limit: 10 });
    expect((await limiter.try('api:x', { key: 'other-tenant' })).allowed).toBe(true);
    await limiter.close();
  });

  it('rejects bad input with typed errors naming the field', async () => {
    const { limiter } = setup({ 'api:x': oneEvery100ms });
    await expect(limiter.try('api:nope')).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_RESOURCE });
    await expect(limiter.try('api:x', { cost: -1 })).rejects.toMatchObject({ code: ErrorCodes.INVALID_COST, field: 'cost' });
    await expect(limiter.try('api:x', { key: 'k'.repeat(300) })).rejects.toMatchObject({ code: ErrorCodes.INVALID_KEY });
    expect(() => new Limiter({ resources: { 'bad|name': oneEvery100ms } })).toThrow(
      expect.objectContaining({ field: 'resource' }) as Error,
    );
    expect(() => new Limiter({ resources: { a: { algorithm: 'gcra', limit: 0 } } })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_POLICY, field: 'resources.a[0].limit' }) as Error,
    );
    await limiter.close();
  });
});

describe('Limiter.acquire', () => {
  it('serves each waiter as the call it made: a tenant’s wait draws on its own quota', async () => {
    const { clock, limiter } = setup({
      api: {
        limits: oneEvery100ms,
        tenants: { a: { algorithm: 'fixed-window', limit: 2, windowMs: 3_600_000 } },
      },
    });
    expect((await limiter.try('api', { key: 'k', tenant: 'a' })).allowed).toBe(true);
    // Tenant a's second and last permit and a call of tenant b (no quota) wait on the same key.
    const a = limiter.acquire('api', { key: 'k', tenant: 'a', maxWaitMs: 1000 });
    const b = limiter.acquire('api', { key: 'k', tenant: 'b', maxWaitMs: 1000 });
    for (let i = 0; i < 10; i++) {
      await Promise.resolve();
      clock.advance(50);
      await new Promise((r) => setImmediate(r));
    }
    expect(await a).toMatchObject({ allowed: true });
    expect(await b).toMatchObject({ allowed: true });
    // Each waiter was decided as its own call: tenant a's two permits are spent (served as
    // tenant b's call, the wait would have taken none of a's quota).
    clock.advance(1000);
    expect(await limiter.try('api', { key: 'other', tenant: 'a' })).toMatchObject({ allowed: false, limitId: 'tenant:0' });
    expect(await limiter.try('api', { key: 'other', tenant: 'b' })).toMatchObject({ allowed: true });
    await limiter.close();
  });

  it('ends a wait whose deadline passed while the store was deciding for it', async () => {
    /** Holds each consume until the test lets it go, as a slow store would. */
    class SlowStore extends MemoryStore {
      held: (() => void)[] = [];
      override async consume(request: ConsumeRequest): Promise<ConsumeResult> {
        await new Promise<void>((r) => this.held.push(r));
        return super.consume(request);
      }
    }
    const clock = new ManualClock(1000);
    const store = new SlowStore({ clock });
    const limiter = new Limiter({
      resources: { 'db:pool': { algorithm: 'concurrency', limit: 1, permitTtlMs: 60_000 } },
      store,
      clock,
      random: () => 0,
      concurrencyPollMs: 50,
    });
    const settle = async () => {
      for (let i = 0; i < 20; i++) await Promise.resolve();
    };
    const first = limiter.acquire('db:pool', { maxWaitMs: 0 });
    await settle();
    store.held.shift()!();
    expect((await first).allowed).toBe(true);
    let answer: Decision | undefined;
    void limiter.acquire('db:pool', { maxWaitMs: 100 }).then((d) => (answer = d));
    await settle();
    // The first attempt is denied at once; the pump polls again 50 ms later and that call is slow.
    store.held.shift()!();
    await settle();
    clock.advance(50);
    await settle();
    expect(store.held).toHaveLength(1);
    // The deadline passes while that call is in flight, then the store denies it.
    clock.advance(100);
    await settle();
    expect(answer).toBeUndefined();
    store.held.shift()!();
    await settle();
    expect(answer).toMatchObject({ allowed: false, reason: 'wait_timeout' });
    await limiter.close();
  });

  it('waits for the retry-after and serves waiters in arrival order, one store call each', async () => {
    const { clock, store, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    store.calls = 0;
    const order: number[] = [];
    const waits = [1, 2, 3].map((n) =>
      limiter.acquire('db:a', { maxWaitMs: 1000 }).then((d) => {
        order.push(n);
        return d;
      }),
    );
    await clock.advanceAsync(350);
    const decisions = await Promise.all(waits);
    expect(order).toEqual([1, 2, 3]);
    expect(decisions.every((d) => d.allowed)).toBe(true);
    expect(decisions.map((d) => d.waitedMs)).toEqual([100, 200, 300]);
    // Three direct attempts (nobody was queued yet), then per waiter at most one denied call at
    // its turn and one granted call: waiters do not poll.
    expect(store.calls).toBeLessThanOrEqual(9);
    await limiter.close();
  });

  it('gives up at once when the retry-after exceeds the wait bound', async () => {
    const { limiter } = setup({ 'db:a': { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } });
    await limiter.try('db:a');
    const d = await limiter.acquire('db:a', { maxWaitMs: 500 });
    expect(d).toMatchObject({ allowed: false, reason: 'wait_timeout', waitedMs: 0 });
    await limiter.close();
  });

  it('answers queued waiters whose deadline cannot be met', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    const first = limiter.acquire('db:a', { maxWaitMs: 1000 });
    const second = limiter.acquire('db:a', { maxWaitMs: 150 });
    await clock.advanceAsync(300);
    expect((await first).allowed).toBe(true);
    expect(await second).toMatchObject({ allowed: false, reason: 'wait_timeout' });
    await limiter.close();
  });

  it('rejects an aborted wait and serves the next waiter', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    const ctl = new AbortController();
    const aborted = limiter.acquire('db:a', { signal: ctl.signal });
    const next = limiter.acquire('db:a');
    await clock.advanceAsync(10);
    ctl.abort(new Error('user went away'));
    await expect(aborted).rejects.toMatchObject({ code: ErrorCodes.ABORTED });
    await clock.advanceAsync(100);
    expect((await next).allowed).toBe(true);
    await expect(limiter.acquire('db:a', { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: ErrorCodes.ABORTED });
    await limiter.close();
  });

  it('denies with queue_full past the per-key bound', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms }, { maxWaitersPerKey: 2 });
    await limiter.try('db:a');
    const queued = [limiter.acquire('db:a'), limiter.acquire('db:a')];
    await clock.advanceAsync(1);
    const third = await limiter.acquire('db:a');
    expect(third).toMatchObject({ allowed: false, reason: 'queue_full' });
    await clock.advanceAsync(300);
    expect((await Promise.all(queued)).every((d) => d.allowed)).toBe(true);
    await limiter.close();
  });

  it('serves the waiters of different clients in turn', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    const order: string[] = [];
    const wait = (client: string, n: number) =>
      limiter.acquire('db:a', { client, maxWaitMs: 10_000 }).then((d) => d.allowed && order.push(`${client}${n}`));
    const waits = [wait('a', 1), wait('a', 2), wait('a', 3), wait('b', 1), wait('a', 4), wait('b', 2)];
    await clock.advanceAsync(1000);
    await Promise.all(waits);
    expect(order).toEqual(['a1', 'b1', 'a2', 'b2', 'a3', 'a4']);
    await limiter.close();
  });

  it('makes room in a full queue for a client holding fewer places', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms }, { maxWaitersPerKey: 3 });
    await limiter.try('db:a');
    const greedy = [1, 2, 3].map(() => limiter.acquire('db:a', { client: 'greedy', maxWaitMs: 10_000 }));
    await clock.advanceAsync(1);
    const other = limiter.acquire('db:a', { client: 'other', maxWaitMs: 10_000 });
    // The greedy client's newest place went to the other client; a second newcomer of the
    // greedy client is refused, not given a place.
    expect(await greedy[2]).toMatchObject({ allowed: false, reason: 'queue_full' });
    expect(await limiter.acquire('db:a', { client: 'greedy' })).toMatchObject({ reason: 'queue_full' });
    await clock.advanceAsync(1000);
    expect(await other).toMatchObject({ allowed: true });
    expect((await Promise.all(greedy.slice(0, 2))).map((d) => d.allowed)).toEqual([true, true]);
    await limiter.close();
  });

  it('bounds the waiters of one client over all keys', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms }, { maxWaitersPerClient: 2 });
    await Promise.all(['k1', 'k2', 'k3'].map((key) => limiter.try('db:a', { key })));
    const queued = ['k1', 'k2'].map((key) => limiter.acquire('db:a', { key, client: 'c', maxWaitMs: 10_000 }));
    await clock.advanceAsync(1);
    expect(await limiter.acquire('db:a', { key: 'k3', client: 'c' })).toMatchObject({ reason: 'queue_full' });
    const someoneElse = limiter.acquire('db:a', { key: 'k3', client: 'd', maxWaitMs: 10_000 });
    await clock.advanceAsync(200);
    expect((await Promise.all([...queued, someoneElse])).map((d) => d.allowed)).toEqual([true, true, true]);
    // Served waiters free their client's places.
    await Promise.all(['k1', 'k2'].map((key) => limiter.try('db:a', { key })));
    const again = ['k1', 'k2'].map((key) => limiter.acquire('db:a', { key, client: 'c', maxWaitMs: 10_000 }));
    await clock.advanceAsync(200);
    expect((await Promise.all(again)).map((d) => d.allowed)).toEqual([true, true]);
    await expect(limiter.acquire('db:a', { client: 'x'.repeat(257) })).rejects.toMatchObject({ field: 'client' });
    await limiter.close();
  });

  it('makes room in a full table of waiting keys for a client holding few, from the one holding the most', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms }, { maxWaitingKeys: 4, maxWaitersPerClient: 3 });
    const keys = ['a1', 'a2', 'a3', 'b1', 'v'];
    await Promise.all(keys.map((key) => limiter.try('db:a', { key })));
    const a = ['a1', 'a2', 'a3'].map((key) => limiter.acquire('db:a', { key, client: 'a', maxWaitMs: 10_000 }));
    const b = limiter.acquire('db:a', { key: 'b1', client: 'b', maxWaitMs: 10_000 });
    await clock.advanceAsync(1);
    // The table is full; the victim takes the newest key of the client holding the most.
    const victim = limiter.acquire('db:a', { key: 'v', client: 'v', maxWaitMs: 10_000 });
    expect(await a[2]).toMatchObject({ allowed: false, reason: 'queue_full' });
    await clock.advanceAsync(200);
    expect(await victim).toMatchObject({ allowed: true });
    expect((await Promise.all([a[0]!, a[1]!, b])).map((d) => d.allowed)).toEqual([true, true, true]);
    await limiter.close();
  });

  it('turns away a newcomer to a full table of waiting keys when it is already fair to it', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms }, { maxWaitingKeys: 2 });
    await Promise.all(['a', 'b', 'c'].map((key) => limiter.try('db:a', { key })));
    const held = ['a', 'b'].map((key) => limiter.acquire('db:a', { key, client: key, maxWaitMs: 10_000 }));
    await clock.advanceAsync(1);
    expect(await limiter.acquire('db:a', { key: 'c', client: 'c', maxWaitMs: 10_000 })).toMatchObject({ reason: 'queue_full' });
    await clock.advanceAsync(200);
    expect((await Promise.all(held)).map((d) => d.allowed)).toEqual([true, true]);
    await limiter.close();
  });

  it('listens once on a signal shared by many waits', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    const ctl = new AbortController();
    const waits = Array.from({ length: 20 }, () => limiter.acquire('db:a', { signal: ctl.signal, maxWaitMs: 10_000 }));
    await clock.advanceAsync(1);
    expect(getEventListeners(ctl.signal, 'abort')).toHaveLength(1);
    ctl.abort();
    const settled = await Promise.allSettled(waits);
    expect(settled.every((s) => s.status === 'rejected')).toBe(true);
    expect(getEventListeners(ctl.signal, 'abort')).toHaveLength(0);
    // Waits that end otherwise take the listener with the last of them.
    const kept = new AbortController();
    const served = [1, 2].map(() => limiter.acquire('db:a', { signal: kept.signal, maxWaitMs: 10_000 }));
    await clock.advanceAsync(1);
    expect(getEventListeners(kept.signal, 'abort')).toHaveLength(1);
    await clock.advanceAsync(1000);
    expect((await Promise.all(served)).map((d) => d.allowed)).toEqual([true, true]);
    expect(getEventListeners(kept.signal, 'abort')).toHaveLength(0);
    await limiter.close();
  });

  it('wakes a concurrency waiter when a permit is released', async () => {
    const { clock, limiter } = setup(
      { 'db:pool': { algorithm: 'concurrency', limit: 1, permitTtlMs: 60_000 } },
      { concurrencyPollMs: 10_000 },
    );
    const held = await limiter.acquire('db:pool');
    expect(held.permitId).toBeDefined();
    let granted: Decision | undefined;
    const waiting = limiter.acquire('db:pool', { maxWaitMs: 30_000 }).then((d) => (granted = d));
    await clock.advanceAsync(5);
    expect(granted).toBeUndefined();
    expect(await limiter.release('db:pool', { permitId: held.permitId! })).toBe(true);
    await clock.advanceAsync(0);
    await waiting;
    expect(granted).toMatchObject({ allowed: true, waitedMs: 5 });
    await limiter.close();
  });

  it('answers a permitId only for a held permit, and renews and releases it by that id', async () => {
    const { limiter } = setup({ 'db:pool': { algorithm: 'concurrency', limit: 1, permitTtlMs: 60_000 }, 'api:a': oneEvery100ms });
    const held = await limiter.try('db:pool');
    expect(held.permitId).toEqual(expect.any(String));
    const plain = await limiter.try('api:a');
    expect(Object.hasOwn(plain, 'permitId')).toBe(false);
    await expect(limiter.release('db:pool', {} as never)).rejects.toMatchObject({
      code: 'SLUICE_ERR_INVALID_OPTIONS',
      field: 'permitId',
    });
    expect(await limiter.renew('db:pool', { permitId: held.permitId! })).toBe(true);
    expect(await limiter.release('db:pool', { permitId: held.permitId! })).toBe(true);
    expect(await limiter.release('db:pool', { permitId: held.permitId! })).toBe(false);
    await limiter.close();
  });

  it('rejects waiters with SLUICE_ERR_CLOSED on close and leaves no timers', async () => {
    const { clock, limiter } = setup({ 'db:a': oneEvery100ms });
    await limiter.try('db:a');
    const waiting = limiter.acquire('db:a');
    await clock.advanceAsync(1);
    await limiter.close();
    await expect(waiting).rejects.toMatchObject({ code: ErrorCodes.CLOSED });
    // Only the store's sweep timer is left, and it belongs to the store the test created.
    expect(clock.pendingTimers).toBe(1);
    await expect(limiter.try('db:a')).rejects.toMatchObject({ code: ErrorCodes.CLOSED });
  });
});

describe('Limiter.adjust and setLimits', () => {
  it('charges the real cost afterwards', async () => {
    const { limiter } = setup({ llm: { algorithm: 'token-bucket', limit: 1000, windowMs: 60_000 } });
    await limiter.try('llm', { cost: 100 });
    await limiter.adjust('llm', { delta: 250 });
    expect((await limiter.try('llm', { cost: 0 })).remaining).toBe(650);
    await limiter.adjust('llm', { delta: -50 });
    expect((await limiter.try('llm', { cost: 0 })).remaining).toBe(700);
    await limiter.close();
  });

  it('carries state over a rule update instead of resetting', async () => {
    const { limiter } = setup({ api: { algorithm: 'fixed-window', limit: 10, windowMs: 60_000 } });
    await limiter.try('api', { cost: 8 });
    limiter.setLimits('api', { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 });
    expect((await limiter.try('api')).allowed).toBe(false);
    limiter.setLimits('api', { algorithm: 'sliding-log', limit: 20, windowMs: 60_000 });
    expect((await limiter.try('api')).remaining).toBe(11);
    await limiter.close();
  });

  it('refuses a removed resource and carries its state over when it is set again', async () => {
    const policy = { algorithm: 'fixed-window', limit: 10, windowMs: 60_000 } as const;
    const { limiter } = setup({ api: policy });
    await limiter.try('api', { key: 'k', cost: 7 });
    expect(limiter.removeLimits('api')).toBe(true);
    expect(limiter.removeLimits('api')).toBe(false);
    expect(limiter.has('api')).toBe(false);
    await expect(limiter.try('api', { key: 'k' })).rejects.toMatchObject({ code: ErrorCodes.UNKNOWN_RESOURCE });
    limiter.setLimits('api', policy);
    expect((await limiter.try('api', { key: 'k' })).remaining).toBe(2);
    await limiter.close();
  });
});

describe('owned resources', () => {
  it('closes the store it created, not one it was given', async () => {
    const store: LimitStore = new MemoryStore();
    const limiter = new Limiter({ resources: { a: oneEvery100ms }, store });
    await limiter.close();
    expect((await store.consume({ key: 'k', limits: limiter.limitsOf('a'), cost: 1, permitId: '' })).allowed).toBe(true);
    await store.close();
  });
});

describe('store ownership', () => {
  it('closes a store given with closeStore: true, and leaves one given without it open', async () => {
    const owned = new MemoryStore();
    const shared = new MemoryStore();
    const closes: string[] = [];
    for (const [name, store] of [
      ['owned', owned],
      ['shared', shared],
    ] as const) {
      const close = store.close.bind(store);
      store.close = async () => {
        closes.push(name);
        await close();
      };
    }
    const a = new Limiter({ store: owned, closeStore: true, resources: { r: { algorithm: 'gcra', limit: 1 } } });
    const b = new Limiter({ store: shared, resources: { r: { algorithm: 'gcra', limit: 1 } } });
    await a.close();
    await b.close();
    expect(closes).toEqual(['owned']);
    await shared.close();
    expect(() => new Limiter({ store: shared, closeStore: 'yes' as never, resources: {} })).toThrow(/closeStore/);
  });
});
