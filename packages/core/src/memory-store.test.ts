import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { ErrorCodes } from './errors.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits } from './policy.js';

const shortLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 100 });
const longLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 60_000 });

describe('MemoryStore', () => {
  it('bounds the number of keys under a flood of distinct keys', async () => {
    const store = new MemoryStore({ clock: new ManualClock(), maxKeys: 1000 });
    for (let i = 0; i < 20_000; i++) await store.consume({ key: `flood:${i}`, limits: longLived, cost: 1, leaseId: '' });
    expect(store.stats.keys).toBe(1000);
    expect(store.stats.evicted).toBe(19_000);
    await store.close();
  });

  it('evicts expired keys before active ones, and active ones least recently used first', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, maxKeys: 3, sweepIntervalMs: 0 });
    const take = (key: string, limits = longLived) => store.consume({ key, limits, cost: 1, leaseId: '' });
    await take('idle', shortLived);
    await take('b');
    await take('c');
    clock.advance(200);
    await take('d');
    expect(store.stats).toMatchObject({ keys: 3, expired: 1, evicted: 0 });
    // b, c and d still hold their state.
    for (const k of ['b', 'c', 'd']) expect((await take(k)).allowed).toBe(false);
    await take('e');
    expect(store.stats.evicted).toBe(1);
    // 'b' was the least recently used: its state is gone.
    expect((await take('b')).allowed).toBe(true);
    await store.close();
  });

  it('sweeps idle keys in the background and stops its timer on close', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, sweepIntervalMs: 1000 });
    for (let i = 0; i < 100; i++) await store.consume({ key: `k${i}`, limits: shortLived, cost: 1, leaseId: '' });
    expect(store.stats.keys).toBe(100);
    clock.advance(1000);
    expect(store.stats.keys).toBe(0);
    expect(clock.pendingTimers).toBe(1);
    await store.close();
    expect(clock.pendingTimers).toBe(0);
    await expect(store.consume({ key: 'x', limits: shortLived, cost: 1, leaseId: '' })).rejects.toMatchObject({
      code: ErrorCodes.CLOSED,
    });
  });

  it('rejects bad options with a typed error', () => {
    expect(() => new MemoryStore({ maxKeys: 0 })).toThrow(
      expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'maxKeys' }) as Error,
    );
  });
});
