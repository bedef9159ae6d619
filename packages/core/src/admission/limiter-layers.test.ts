import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes, SluiceError } from '../shared/errors.js';
import { Limiter } from './limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import { resourceKey, splitKey, tenantKey } from '../store/storage-key.js';
import type { AdjustRequest, ConsumeRequest, ConsumeResult, ReserveRequest, ReserveResult } from '../store/store.js';

class CountingStore extends MemoryStore {
  calls = 0;
  override consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.calls++;
    return super.consume(request);
  }
}

const oneEvery100ms = { algorithm: 'gcra', limit: 10, windowMs: 1000, burst: 1 } as const;

describe('local pre-filter', () => {
  it('denies a key known to be over its limit without a store call until its retry-after', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limiter = new Limiter({ resources: { api: oneEvery100ms }, store, clock });
    await limiter.try('api');
    await limiter.try('api');
    expect(store.calls).toBe(2);
    clock.advance(40);
    const local = await limiter.try('api');
    expect(local).toMatchObject({ allowed: false, reason: 'rate_limited', source: 'prefilter', retryAfterMs: 60 });
    expect(store.calls).toBe(2);
    // Another key is not affected.
    expect((await limiter.try('api', { key: 'b' })).allowed).toBe(true);
    clock.advance(60);
    expect((await limiter.try('api')).allowed).toBe(true);
    expect(store.calls).toBe(4);
    await limiter.close();
    await store.close();
  });

  it('forgets a key when this process refunds it', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limiter = new Limiter({ resources: { api: oneEvery100ms }, store, clock });
    await limiter.try('api');
    expect((await limiter.try('api')).allowed).toBe(false);
    await limiter.adjust('api', { delta: -1 });
    // The store decides again (and admits: the refund gave the permit back).
    expect((await limiter.try('api')).allowed).toBe(true);
    expect(store.calls).toBe(3);
    await limiter.close();
    await store.close();
  });

  it('can be turned off per resource', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limiter = new Limiter({ resources: { api: { limits: oneEvery100ms, prefilter: false } }, store, clock });
    for (let i = 0; i < 5; i++) await limiter.try('api');
    expect(store.calls).toBe(5);
    await limiter.close();
    await store.close();
  });
});

describe('circuit breaker', () => {
  const resources = {
    'api:flaky': {
      limits: { algorithm: 'token-bucket', limit: 1000 },
      breaker: { minimumCalls: 4, failureRateThreshold: 0.5, openDurationMs: 1000, halfOpenProbes: 1 },
    },
  } as const;

  it('opens after failures, rejects fast with its own reason, and recovers through a probe', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const limiter = new Limiter({ resources, store, clock });
    const failing = () => Promise.reject(new Error('503'));
    for (let i = 0; i < 4; i++) await expect(limiter.call('api:flaky', failing)).rejects.toThrow('503');
    expect(limiter.breakerOf('api:flaky')!.state).toBe('open');
    const calls = store.calls;
    const d = await limiter.try('api:flaky');
    expect(d).toMatchObject({ allowed: false, reason: 'circuit_open', source: 'breaker', retryAfterMs: 1000 });
    expect(store.calls).toBe(calls);
    const err = await limiter.call('api:flaky', () => Promise.resolve('never')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SluiceError);
    expect((err as SluiceError).code).toBe(ErrorCodes.LIMITED);
    expect((err as SluiceError).decision?.reason).toBe('circuit_open');
    clock.advance(1000);
    expect(await limiter.call('api:flaky', () => Promise.resolve('ok'))).toBe('ok');
    expect(limiter.breakerOf('api:flaky')!.state).toBe('closed');
    await limiter.close();
    await store.close();
  });

  it('does not make acquire wait behind an open breaker', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({ resources, clock });
    for (let i = 0; i < 4; i++) limiter.record('api:flaky', { success: false, durationMs: 1 });
    const d = await limiter.acquire('api:flaky', { maxWaitMs: 10_000 });
    expect(d.reason).toBe('circuit_open');
    await limiter.close();
  });

  it('releases a concurrency permit after call, also when the call fails', async () => {
    const limiter = new Limiter({ resources: { pool: { algorithm: 'concurrency', limit: 1 } } });
    await expect(limiter.call('pool', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await limiter.call('pool', () => Promise.resolve(1))).toBe(1);
    expect((await limiter.try('pool')).allowed).toBe(true);
    await limiter.close();
  });
});

describe('hot-key splitting', () => {
  it('spreads a key over sub-keys whose shares add up to the limit', async () => {
    const clock = new ManualClock();
    const keys = new Set<string>();
    class KeySpy extends MemoryStore {
      override consume(request: ConsumeRequest): Promise<ConsumeResult> {
        keys.add(request.key);
        return super.consume(request);
      }
    }
    const store = new KeySpy({ clock });
    let seed = 1;
    const limiter = new Limiter({
      resources: { 'api:hot': { limits: { algorithm: 'fixed-window', limit: 103, windowMs: 60_000 }, split: 4 } },
      store,
      clock,
      random: () => (seed = (seed * 16807) % 2147483647) / 2147483647,
    });
    let admitted = 0;
    for (let i = 0; i < 300; i++) {
      const d = await limiter.try('api:hot', { key: 'tenant' });
      if (d.allowed) {
        admitted++;
        expect(d.limit).toBe(103);
      }
    }
    expect(admitted).toBe(103);
    expect([...keys].sort()).toEqual(['api:hot|#0|tenant', 'api:hot|#1|tenant', 'api:hot|#2|tenant', 'api:hot|#3|tenant']);
    await expect(limiter.try('api:hot', { key: 'tenant', cost: 30 })).rejects.toMatchObject({
      code: ErrorCodes.COST_EXCEEDS_LIMIT,
    });
    await limiter.close();
    await store.close();
  });
});

describe('store requests carry what their storage key is made of', () => {
  it('names the resource, caller key, tenant and share, matching the storage key, for checks, leases and refunds', async () => {
    const clock = new ManualClock();
    const seen: { key: string; parts: unknown }[] = [];
    class PartsSpy extends MemoryStore {
      override consume(request: ConsumeRequest): Promise<ConsumeResult> {
        seen.push({ key: request.key, parts: request.parts });
        return super.consume(request);
      }
      override reserve(request: ReserveRequest): Promise<ReserveResult> {
        seen.push({ key: request.key, parts: request.parts });
        return super.reserve(request);
      }
      override adjust(request: AdjustRequest): Promise<void> {
        seen.push({ key: request.key, parts: request.parts });
        return super.adjust(request);
      }
    }
    const store = new PartsSpy({ clock });
    const fixed = { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } as const;
    const limiter = new Limiter({
      resources: {
        api: { limits: fixed, tenants: { acme: fixed } },
        hot: { limits: fixed, split: 2 },
        leased: { limits: fixed, lease: { ttlMs: 1000 } },
      },
      store,
      clock,
      random: () => 0,
    });
    await limiter.try('api', { key: '@odd|key' });
    await limiter.try('api', { tenant: 'acme' });
    await limiter.try('hot', { key: 'k' });
    await limiter.try('leased', { key: 'u' });
    await limiter.adjust('api', { key: 'k', delta: -1 });
    await limiter.close();
    expect(seen).toEqual(
      expect.arrayContaining([
        { key: resourceKey('api', '@odd|key'), parts: { resource: 'api', key: '@odd|key' } },
        { key: tenantKey('api', 'acme'), parts: { resource: 'api', key: '', tenant: 'acme' } },
        { key: 'api', parts: { resource: 'api', key: '' } },
        { key: splitKey('hot', 'k', 0), parts: { resource: 'hot', key: 'k', part: 0 } },
        { key: resourceKey('leased', 'u'), parts: { resource: 'leased', key: 'u' } },
        { key: resourceKey('api', 'k'), parts: { resource: 'api', key: 'k' } },
      ]),
    );
    // The lease's leftovers go back (on close) under the same parts.
    expect(seen.filter((s) => s.key === resourceKey('leased', 'u')).length).toBeGreaterThanOrEqual(2);
    await store.close();
  });
});
