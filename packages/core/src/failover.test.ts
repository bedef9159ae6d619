import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { ErrorCodes, SluiceError } from './errors.js';
import { Limiter } from './limiter.js';
import { MemoryStore } from './memory-store.js';
import type { AdjustRequest, ConsumeRequest, ConsumeResult, LeaseRequest } from './store.js';

/** A store that can be switched off like a Redis that went away. */
class FlakyStore extends MemoryStore {
  down = false;
  calls = 0;
  #fail(): void {
    if (this.down) throw new SluiceError(ErrorCodes.STORE_TIMEOUT, 'timed out');
  }
  override async consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls++;
    this.#fail();
    return super.consume(request);
  }
  override async adjust(request: AdjustRequest): Promise<void> {
    this.#fail();
    return super.adjust(request);
  }
  override async release(request: LeaseRequest): Promise<boolean> {
    this.#fail();
    return super.release(request);
  }
  override async ping(): Promise<void> {
    this.#fail();
  }
}

function setup(onStoreFailure?: 'local' | 'open' | 'closed') {
  const clock = new ManualClock();
  const store = new FlakyStore({ clock });
  const logs: string[] = [];
  const switches: boolean[] = [];
  const limiter = new Limiter({
    resources: { api: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } },
    store,
    clock,
    ...(onStoreFailure ? { onStoreFailure } : {}),
    failover: { peers: 4, logger: { info: (_o, m) => logs.push(`info ${m}`), warn: (_o, m) => logs.push(`warn ${m}`) } },
    observer: { storeSwitched: (e) => switches.push(e.healthy) },
  });
  return { clock, store, limiter, logs, switches };
}

describe('store failure policies', () => {
  it('local: falls back to a fair share of the limit, then returns to the store', async () => {
    const { clock, store, limiter, logs, switches } = setup('local');
    expect((await limiter.try('api')).source).toBeUndefined();
    store.down = true;
    let admitted = 0;
    for (let i = 0; i < 60; i++) {
      const d = await limiter.try('api', { key: 'k' });
      expect(d.source === 'fallback' || d.source === 'prefilter').toBe(true);
      if (d.allowed) admitted++;
    }
    // 100 shared by 4 live clients: this one may admit 25 while the store is away.
    expect(admitted).toBe(25);
    const callsWhileDown = store.calls;
    await limiter.try('api', { key: 'other' });
    expect(store.calls).toBe(callsWhileDown);
    store.down = false;
    await clock.advanceAsync(600);
    const back = await limiter.try('api', { key: 'k' });
    expect(back.source).toBeUndefined();
    expect(back.allowed).toBe(true);
    expect(switches).toEqual([false, true]);
    expect(logs).toEqual([
      'warn rate-limit store unavailable: deciding by store-failure policy',
      'info rate-limit store is back: global decisions resumed',
    ]);
    await limiter.close();
    expect(clock.pendingTimers).toBe(1); // the store's own sweep timer
    await store.close();
  });

  it('open admits and closed denies while the store is away', async () => {
    for (const policy of ['open', 'closed'] as const) {
      const { store, limiter } = setup(policy);
      store.down = true;
      const d = await limiter.try('api');
      expect(d.allowed).toBe(policy === 'open');
      expect(d.source).toBe('fallback');
      if (policy === 'closed') expect(d.reason).toBe('store_unavailable');
      await limiter.close();
      await store.close();
    }
  });

  it('returns fallback leases to the fallback after the store is back', async () => {
    const clock = new ManualClock();
    const store = new FlakyStore({ clock });
    const limiter = new Limiter({ resources: { pool: { algorithm: 'concurrency', limit: 2 } }, store, clock });
    store.down = true;
    const d = await limiter.try('pool');
    expect(d.leaseId).toMatch(/^local:/);
    store.down = false;
    await clock.advanceAsync(100);
    expect(await limiter.release('pool', { leaseId: d.leaseId! })).toBe(true);
    await limiter.close();
    await store.close();
  });

  it('passes bad-input errors through instead of falling back', async () => {
    const { limiter, store } = setup('open');
    await expect(limiter.try('api', { cost: 1000 })).rejects.toMatchObject({ code: ErrorCodes.COST_EXCEEDS_LIMIT });
    await limiter.close();
    await store.close();
  });
});
