import { describe, expect, it } from 'vitest';
import { StreamErrorCodes, isStreamError } from '../errors.js';
import { hashValue } from './codec.js';
import { partitionOf, saltSlotOf } from './partition.js';

describe('partitionOf', () => {
  it('is the resource hash mod the partition count without salt', () => {
    expect(partitionOf(10, 4)).toBe(2);
    expect(partitionOf(0xffffffff, 7)).toBe(0xffffffff % 7);
    expect(partitionOf(12345, 1)).toBe(0);
  });

  it('keeps every resource inside the range', () => {
    for (let i = 0; i < 1000; i++) {
      const p = partitionOf(hashValue(`r${i}`), 16, i % 5);
      expect(p).toBeGreaterThanOrEqual(0);
      expect(p).toBeLessThan(16);
    }
  });

  it('spreads a hot resource over `spread` consecutive partitions as the salt rotates', () => {
    const h = hashValue('hot');
    const seen = new Set<number>();
    for (let now = 0; now < 10_000; now += 100) seen.add(partitionOf(h, 16, saltSlotOf(now, 1000, 4)));
    expect(seen.size).toBe(4);
    const base = h % 16;
    expect([...seen].sort((a, b) => a - b)).toEqual([0, 1, 2, 3].map((s) => (base + s) % 16).sort((a, b) => a - b));
  });

  it('refuses a partition count or slot out of range', () => {
    for (const [p, s] of [
      [0, 0],
      [1025, 0],
      [2.5, 0],
      [4, -1],
      [4, 0.5],
    ] as const) {
      try {
        partitionOf(1, p, s);
        expect.unreachable();
      } catch (err) {
        expect(isStreamError(err, StreamErrorCodes.INVALID_RECORD)).toBe(true);
      }
    }
  });
});

describe('saltSlotOf', () => {
  it('is floor(now / saltMs) mod spread, and 0 without spread', () => {
    expect(saltSlotOf(5_500, 1000, 4)).toBe(1);
    expect(saltSlotOf(5_500, 1000, 1)).toBe(0);
    expect(saltSlotOf(5_500, 0, 4)).toBe(0);
    expect(saltSlotOf(-1500, 1000, 4)).toBe(2);
  });
});
