import { describe, expect, it } from 'vitest';
import { SpaceSaving, WindowedSpaceSaving } from './space-saving.js';

/** A small deterministic generator (mulberry32), so the streams below are the same every run. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('SpaceSaving', () => {
  it('counts exactly while the keys fit', () => {
    const s = new SpaceSaving(4);
    for (const k of ['a', 'b', 'a', 'c', 'a', 'b']) s.add(k, 1);
    expect(s.get('a')).toEqual({ count: 3, error: 0 });
    expect(s.get('b')).toEqual({ count: 2, error: 0 });
    expect(s.total).toBe(6);
  });

  it('holds at most its capacity and a new key inherits the smallest count as its error', () => {
    const s = new SpaceSaving(2);
    s.add('a', 5);
    s.add('b', 2);
    s.add('c', 1);
    expect(s.size).toBe(2);
    expect(s.get('b')).toBeUndefined();
    expect(s.get('c')).toEqual({ count: 3, error: 2 });
  });

  it('keeps every key heavier than total/capacity, with counts bracketing the truth', () => {
    const random = rng(7);
    const s = new SpaceSaving(16);
    const truth = new Map<string, number>();
    for (let i = 0; i < 20_000; i++) {
      // Two heavy keys (30% and 10%) among 5,000 light ones.
      const r = random();
      const key = r < 0.3 ? 'heavy' : r < 0.4 ? 'warm' : `k${Math.floor(random() * 5000)}`;
      truth.set(key, (truth.get(key) ?? 0) + 1);
      s.add(key, 1);
    }
    for (const [key, n] of truth) {
      const c = s.get(key);
      if (n > s.total / 16) expect(c, key).toBeDefined();
      if (c !== undefined) {
        expect(c.count).toBeGreaterThanOrEqual(n);
        expect(c.count - c.error).toBeLessThanOrEqual(n);
      }
    }
    expect(s.size).toBe(16);
  });
});

describe('WindowedSpaceSaving', () => {
  it('estimates over a sliding window and forgets a key two windows after its last call', () => {
    const w = new WindowedSpaceSaving(8, 1000);
    for (let i = 0; i < 100; i++) w.add('a', 1, 0);
    expect(w.estimate('a', 500)).toEqual({ count: 100, guaranteed: 100 });
    // Half of the previous window is still covered 500 ms into the next one.
    expect(w.estimate('a', 1500).count).toBeCloseTo(50);
    expect(w.total(1500)).toBeCloseTo(50);
    expect(w.estimate('a', 2000).count).toBe(0);
    expect(w.top(5, 2000)).toEqual([]);
  });

  it('forgets everything after a gap of two windows or more', () => {
    const w = new WindowedSpaceSaving(8, 1000);
    w.add('a', 10, 0);
    w.add('b', 1, 5500);
    expect(w.estimate('a', 5500).count).toBe(0);
    expect(w.top(5, 5500).map((e) => e.key)).toEqual(['b']);
  });

  it('reports the heaviest keys first', () => {
    const w = new WindowedSpaceSaving(8, 1000);
    for (const [k, n] of [
      ['x', 3],
      ['y', 7],
      ['z', 5],
    ] as const)
      w.add(k, n, 0);
    expect(w.top(2, 10).map((e) => e.key)).toEqual(['y', 'z']);
  });
});
