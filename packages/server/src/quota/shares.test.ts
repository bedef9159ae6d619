import { describe, expect, it } from 'vitest';
import { compileLimits } from '@sluice/core';
import { capacityOf, fairShares, permitsFor, ratePerSecond, strategyFor, wantsOf } from './shares.js';

describe('fairShares', () => {
  it('gives each what it wants when all fit', () => {
    expect(fairShares(100, [10, 10, 30])).toEqual([10, 10, 30]);
  });

  it('keeps small wants whole and splits the rest evenly (max-min)', () => {
    expect(fairShares(100, [10, 200, 10])).toEqual([10, 80, 10]);
    expect(fairShares(90, [100, 100, 100])).toEqual([30, 30, 30]);
    const s = fairShares(100, [20, 50, 70]);
    expect(s).toEqual([20, 40, 40]);
  });

  it('never hands out more than the capacity', () => {
    for (const wants of [
      [1, 2, 3],
      [500, 1],
      [0, 0],
      [33.3, 33.3, 33.3, 33.3],
    ]) {
      const total = fairShares(100, wants).reduce((a, b) => a + b, 0);
      expect(total).toBeLessThanOrEqual(100 + 1e-9);
    }
  });
});

describe('wantsOf', () => {
  it('adds headroom to demand, and a floor for a subscriber with none yet', () => {
    expect(wantsOf(100, [0, 40], { floorDivisor: 4, headroom: 1.25 })).toEqual([12.5, 50]);
  });
});

describe('ratePerSecond', () => {
  it('is the tightest limit over its window', () => {
    const limits = compileLimits([
      { algorithm: 'sliding-window', limit: 200, windowMs: 2000 },
      { algorithm: 'fixed-window', limit: 6000, windowMs: 60_000 },
    ]);
    expect(ratePerSecond(limits)).toBe(100);
  });
});

describe('strategyFor', () => {
  it('serves the rate in small fills, admitting no more than what is held within the TTL', () => {
    for (const rate of [0.5, 1, 7, 12, 45, 1000]) {
      for (const ttlMs of [1000, 2500, 60_000]) {
        const need = permitsFor(rate, ttlMs);
        const full = strategyFor(rate, need, ttlMs);
        expect(full.kind).toBe('token-bucket');
        expect(capacityOf(full, ttlMs)).toBe(need);
        if (full.kind === 'token-bucket') {
          // About the rate: within a tenth plus one fill of it.
          expect((full.tokensPerFill * 1000) / full.fillIntervalMs).toBeGreaterThanOrEqual(rate * 0.99);
          expect(full.maxTokens).toBeLessThanOrEqual(Math.max(1, Math.ceil(rate / 10)));
        }
        for (const held of [0, 1, Math.floor(need / 3), need - 1]) {
          expect(capacityOf(strategyFor(rate, held, ttlMs), ttlMs)).toBeLessThanOrEqual(held);
        }
      }
    }
    expect(strategyFor(10, 0, 1000)).toEqual({ kind: 'deny-all' });
  });
});
