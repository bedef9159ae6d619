import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { ErrorCodes } from './errors.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits } from './policy.js';

const shortLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 100 });
const longLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 60_000 });

describe('MemoryStore', () => {
  it('bounds the number of keys under a flood of distinct keys, refusing new ones while every key counts', async () => {
    const store = new MemoryStore({ clock: new ManualClock(), maxKeys: 1000 });
    let allowed = 0;
    for (let i = 0; i < 20_000; i++) {
      if ((await store.consume({ key: `flood:${i}`, limits: longLived, cost: 1, permitId: '' })).allowed) allowed++;
    }
    expect(allowed).toBe(1000);
    expect(store.stats).toMatchObject({ keys: 1000, evicted: 0, refused: 19_000 });
    await store.close();
  });

  it('makes room from keys at rest only: a full table of live keys keeps every state', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, maxKeys: 3, sweepIntervalMs: 0 });
    const take = (key: string, limits = longLived) => store.consume({ key, limits, cost: 1, permitId: '' });
    await take('idle', shortLived);
    await take('b');
    await take('c');
    clock.advance(200);
    expect((await take('d')).allowed).toBe(true);
    expect(store.stats).toMatchObject({ keys: 3, evicted: 1, refused: 0 });
    // b, c and d hold live state: a new key is denied, and none of them is reset.
    const refused = await take('e');
    expect(refused.allowed).toBe(false);
    expect(refused.statuses[0]).toMatchObject({ allowed: false, remaining: 0, limit: 1 });
    expect(refused.statuses[0]!.retryAfterMs).toBeGreaterThan(0);
    for (const k of ['b', 'c', 'd']) expect((await take(k)).allowed).toBe(false);
    expect(store.stats).toMatchObject({ keys: 3, evicted: 1, refused: 1 });
    // Once the live keys come to rest (within a sixteenth of their lifetime), new keys get room.
    clock.advance(60_000 + 60_000 / 16);
    expect((await take('e')).allowed).toBe(true);
    await store.close();
  });

  it('keeps concurrency leases through a flood, and reserves and adjusts nothing for refused keys', async () => {
    const clock = new ManualClock();
    const observed: string[] = [];
    const store = new MemoryStore({
      clock,
      maxKeys: 10,
      sweepIntervalMs: 0,
      observer: { keyTableFull: (e) => observed.push(e.outcome) },
    });
    const pool = compileLimits({ algorithm: 'concurrency', limit: 2, leaseTtlMs: 30_000 });
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l1' })).allowed).toBe(true);
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l2' })).allowed).toBe(true);
    for (let i = 0; i < 100; i++) await store.consume({ key: `flood${i}`, limits: longLived, cost: 1, permitId: '' });
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l3' })).allowed).toBe(false);
    expect(await store.renew({ key: 'pool', limits: pool, permitId: 'l1' })).toBe(true);
    // The deprecated name of a store request's permit id is still read.
    expect(await store.release({ key: 'pool', limits: pool, leaseId: 'l2' })).toBe(true);
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l3' })).allowed).toBe(true);
    const reserved = await store.reserve({ key: 'new', limits: longLived, min: 1, max: 1 });
    expect(reserved).toMatchObject({ allowed: false, granted: 0 });
    await store.adjust({ key: 'new', limits: longLived, delta: 1 });
    expect(store.stats).toMatchObject({ keys: 10, evicted: 0, refused: 91 + 2 });
    expect(observed.filter((o) => o === 'refused')).toHaveLength(93);
    await store.close();
  });

  it('sweeps idle keys in the background and stops its timer on close', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, sweepIntervalMs: 1000 });
    for (let i = 0; i < 100; i++) await store.consume({ key: `k${i}`, limits: shortLived, cost: 1, permitId: '' });
    expect(store.stats.keys).toBe(100);
    clock.advance(1000);
    expect(store.stats.keys).toBe(0);
    expect(clock.pendingTimers).toBe(1);
    await store.close();
    expect(clock.pendingTimers).toBe(0);
    await expect(store.consume({ key: 'x', limits: shortLived, cost: 1, permitId: '' })).rejects.toMatchObject({
      code: ErrorCodes.CLOSED,
    });
  });

  it('rejects bad options with a typed error', () => {
    expect(() => new MemoryStore({ maxKeys: 0 })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'maxKeys' }) as Error,
    );
  });
});
