import { describe, expect, it } from 'vitest';
import { compileLimits } from '@sluice/core';
import { SimBucket } from '../../test/rlqs-client.js';
import { arrivalGapMs, rng } from '../../test/rng.js';
import {
  BURST_SECONDS,
  capacityOf,
  DEFAULT_SHARE_SETTINGS,
  fairShares,
  MIN_BURST,
  permitsFor,
  ratePerSecond,
  strategyFor,
  wantsOf,
  type Strategy,
} from './shares.js';

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
          // The burst: a quarter of a second of the rate, or MIN_BURST tokens, or one refill.
          expect(full.maxTokens).toBeLessThanOrEqual(Math.max(MIN_BURST, Math.ceil(rate * BURST_SECONDS), full.tokensPerFill));
        }
        for (const held of [0, 1, Math.floor(need / 3), need - 1]) {
          expect(capacityOf(strategyFor(rate, held, ttlMs), ttlMs)).toBeLessThanOrEqual(held);
        }
      }
    }
    expect(strategyFor(10, 0, 1000)).toEqual({ kind: 'deny-all' });
  });

  it('holds no more for a share under 1 a second than its rate over MIN_BURST seconds', () => {
    expect(permitsFor(0.1, 1000)).toBe(1);
    expect(permitsFor(0.5, 1000)).toBe(2);
    expect(permitsFor(1, 1000)).toBe(MIN_BURST + 1);
  });

  it('admits random (Poisson) arrivals at the demand its share was sized for, not only evenly spaced ones', () => {
    for (const demand of [1, 3, 9, 30, 100, 1000]) {
      for (const ttlMs of [1000, 2500]) {
        const rate = demand * DEFAULT_SHARE_SETTINGS.headroom;
        const s = strategyFor(rate, permitsFor(rate, ttlMs), ttlMs);
        const admitted = poissonAdmitted(s, demand, 20_000, rng(demand * 7919 + ttlMs));
        expect(admitted, `demand ${demand}/s, ttl ${ttlMs} ms`).toBeGreaterThanOrEqual(0.93);
      }
    }
  });
});

/**
 * The fraction of `n` Poisson arrivals at `perSecond` that an Envoy admits under an assignment of
 * `s` that never expires: decided by the tests' simulated Envoy (its bucket starts full and is
 * filled in whole refills).
 */
function poissonAdmitted(s: Strategy, perSecond: number, n: number, random: () => number): number {
  const bucket = new SimBucket(1, { name: 'poisson' }, { noAssignment: 'deny', expired: 'deny' });
  bucket.apply({ bucket_action: 'quota_assignment_action', quota_assignment_action: assignmentOf(s) }, 0);
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += arrivalGapMs(random, perSecond);
    bucket.decide(t);
  }
  return bucket.allowedSince / n;
}

/** `s` as a `QuotaAssignmentAction` decodes (@grpc/proto-loader's form), with no time to live. */
function assignmentOf(s: Strategy): object {
  if (s.kind === 'deny-all') {
    return { assignment_time_to_live: null, rate_limit_strategy: { strategy: 'blanket_rule', blanket_rule: 'DENY_ALL' } };
  }
  const ms = s.fillIntervalMs;
  return {
    assignment_time_to_live: null,
    rate_limit_strategy: {
      strategy: 'token_bucket',
      token_bucket: {
        max_tokens: s.maxTokens,
        tokens_per_fill: { value: s.tokensPerFill },
        fill_interval: { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 },
      },
    },
  };
}
