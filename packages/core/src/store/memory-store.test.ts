import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes } from '../shared/errors.js';
import { MemoryStore } from './memory-store.js';
import { compileLimits } from '../shared/policy.js';

const shortLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 100 });
const longLived = compileLimits({ algorithm: 'gcra', limit: 1, windowMs: 60_000 });

describe('MemoryStore', () => {
  it('bounds the number of keys under a flood of distinct keys; keys without a slot never get more than their limit', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, maxKeys: 1000, sweepIntervalMs: 0 });
    const take = (key: string) => store.consumeSync({ key, limits: longLived, cost: 1, permitId: '' });
    let allowed = 0;
    for (let i = 0; i < 20_000; i++) if (take(`flood:${i}`).allowed) allowed++;
    // The first 1000 keys hold slots; the others were decided on the summary and charged there.
    expect(allowed).toBeGreaterThanOrEqual(1000);
    expect(store.stats).toMatchObject({ keys: 1000, evicted: 0, demoted: 0, refused: 0, summarized: allowed - 1000 });
    // Every key took its one permit at most once: held or summarized, none is admitted again.
    for (let i = 0; i < 20_000; i++) expect(take(`flood:${i}`).allowed).toBe(false);
    // A key the summary bounds is told the truth: it is denied until its bound comes to rest.
    clock.advance(60_000);
    expect(take('flood:19999').allowed).toBe(true);
    await store.close();
  });

  it('makes room from keys at rest, and decides a new key on the summary while every key held counts', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock, maxKeys: 3, sweepIntervalMs: 0 });
    const take = (key: string, limits = longLived) => store.consume({ key, limits, cost: 1, permitId: '' });
    await take('idle', shortLived);
    await take('b');
    await take('c');
    clock.advance(200);
    expect((await take('d')).allowed).toBe(true);
    expect(store.stats).toMatchObject({ keys: 3, evicted: 1, refused: 0 });
    // b, c and d hold live state: a new key is charged on the summary, and none of them is reset.
    expect((await take('e')).allowed).toBe(true);
    const again = await take('e');
    expect(again.statuses[0]).toMatchObject({ allowed: false, remaining: 0, limit: 1 });
    expect(again.statuses[0]!.retryAfterMs).toBeGreaterThan(59_000);
    for (const k of ['b', 'c', 'd']) expect((await take(k)).allowed).toBe(false);
    expect(store.stats).toMatchObject({ keys: 3, evicted: 1, refused: 0, summarized: 1 });
    clock.advance(60_000);
    expect((await take('e')).allowed).toBe(true);
    await store.close();
  });

  it('keeps held permits through a flood of permits, and refuses new permits with the time room comes', async () => {
    const clock = new ManualClock();
    const observed: string[] = [];
    const store = new MemoryStore({
      clock,
      maxKeys: 10,
      sweepIntervalMs: 0,
      observer: { keyTableFull: (e) => observed.push(e.outcome) },
    });
    const pool = compileLimits({ algorithm: 'concurrency', limit: 2, permitTtlMs: 30_000 });
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l1' })).allowed).toBe(true);
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l2' })).allowed).toBe(true);
    clock.advance(1000);
    for (let i = 0; i < 100; i++) await store.consume({ key: `flood${i}`, limits: pool, cost: 1, permitId: 'x' });
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l3' })).allowed).toBe(false);
    expect(await store.renew({ key: 'pool', limits: pool, permitId: 'l1' })).toBe(true);
    expect(await store.release({ key: 'pool', limits: pool, permitId: 'l2' })).toBe(true);
    expect((await store.consume({ key: 'pool', limits: pool, cost: 1, permitId: 'l3' })).allowed).toBe(true);
    // Held permits cannot be summarized: a new key with a concurrency limit waits for a slot, told
    // when the first held key comes to rest (the flood's permits, 30 s after they were taken).
    const refused = await store.consume({ key: 'late', limits: pool, cost: 1, permitId: 'y' });
    expect(refused.allowed).toBe(false);
    expect(refused.statuses[0]!.retryAfterMs).toBeGreaterThanOrEqual(30_000);
    expect(store.stats).toMatchObject({ keys: 10, evicted: 0, refused: 91 + 1 });
    expect(observed.filter((o) => o === 'refused')).toHaveLength(92);
    // A rate key still finds a place: decided and charged on the summary.
    expect((await store.consume({ key: 'new', limits: longLived, cost: 1, permitId: '' })).allowed).toBe(true);
    expect((await store.consume({ key: 'new', limits: longLived, cost: 1, permitId: '' })).allowed).toBe(false);
    expect(observed.filter((o) => o === 'summarized')).toHaveLength(2);
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
