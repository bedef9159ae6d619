import { describe, expect, it } from 'vitest';
import { ManualClock } from '../shared/clock.js';
import { ErrorCodes } from '../shared/errors.js';
import { Limiter } from './limiter.js';
import { MemoryStore } from '../store/memory-store.js';
import type { LimiterObserver } from '../shared/observer.js';
import type { ConsumeRequest, ConsumeResult, ReserveRequest, ReserveResult } from '../store/store.js';

/** Counts the store calls made for each caller key. */
class CountingStore extends MemoryStore {
  readonly calls = new Map<string, number>();
  override consume(request: ConsumeRequest): Promise<ConsumeResult> {
    this.#count(request.parts?.key ?? '');
    return super.consume(request);
  }
  override reserve(request: ReserveRequest): Promise<ReserveResult> {
    this.#count(request.parts?.key ?? '');
    return super.reserve(request);
  }
  #count(key: string): void {
    this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
  }
}

const window = { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 } as const;
const hotKeys = {
  windowMs: 1000,
  threshold: { rate: 200 },
  action: 'lease',
  coolAfterMs: 2000,
} as const;

describe('hot keys in the limiter', () => {
  it('leases a key once it is hot, cutting its store calls, and goes back to the store once it cools', async () => {
    const clock = new ManualClock();
    const store = new CountingStore({ clock });
    const changes: unknown[] = [];
    const observer: LimiterObserver = { hotKey: (e) => changes.push(e) };
    const limiter = new Limiter({ resources: { pay: { limits: window, hotKeys } }, store, clock, observer });
    // 199 calls in the first window: below 200 a second, one store call each.
    for (let i = 0; i < 199; i++) await limiter.try('pay', { key: 'channel-1' });
    expect(store.calls.get('channel-1')).toBe(199);
    expect(limiter.hotKeys('pay')[0]?.keys[0]).toMatchObject({ key: 'channel-1', mitigation: undefined });
    // From the 200th on, calls are served from leased batches.
    for (let ms = 0; ms < 500; ms++) {
      for (let i = 0; i < 2; i++) expect((await limiter.try('pay', { key: 'channel-1' })).allowed).toBe(true);
      clock.advance(1);
    }
    const leased = store.calls.get('channel-1')! - 199;
    expect(leased).toBeLessThan(100);
    expect(changes).toEqual([{ resource: 'pay', key: 'channel-1', mitigation: 'lease', active: true }]);
    expect(limiter.hotKeys('pay')[0]).toMatchObject({ mitigated: 1, keys: [{ key: 'channel-1', mitigation: 'lease' }] });
    expect(limiter.trySync('pay', { key: 'channel-1' })?.source).toBe('lease');
    // A cold key beside it is not leased.
    await limiter.try('pay', { key: 'channel-2' });
    expect(store.calls.get('channel-2')).toBe(1);
    // Quiet for longer than coolAfterMs and two windows: the next call lets the key go.
    clock.advance(5000);
    const before = store.calls.get('channel-1')!;
    await limiter.try('pay', { key: 'channel-1' });
    await limiter.try('pay', { key: 'channel-1' });
    expect(store.calls.get('channel-1')! - before).toBe(2);
    expect(changes.at(-1)).toEqual({ resource: 'pay', key: 'channel-1', mitigation: 'lease', active: false });
    await limiter.close();
    await store.close();
  });

  it('never admits more than the limit while a key switches between leased and not', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    const limits = { algorithm: 'fixed-window', limit: 300, windowMs: 60_000 } as const;
    let switches = 0;
    const observer: LimiterObserver = { hotKey: () => switches++ };
    const a = new Limiter({
      resources: { pay: { limits, hotKeys: { ...hotKeys, threshold: { rate: 100 }, coolAfterMs: 200 } } },
      store,
      clock,
      observer,
    });
    const b = new Limiter({ resources: { pay: { limits } }, store, clock });
    let allowed = 0;
    // Bursts and pauses (all in one minute's window), so the key turns hot and cools again.
    for (let burst = 0; burst < 6; burst++) {
      for (let ms = 0; ms < 150; ms++) {
        if ((await a.try('pay', { key: 'k' })).allowed) allowed++;
        if (ms % 3 === 0 && (await b.try('pay', { key: 'k' })).allowed) allowed++;
        clock.advance(1);
      }
      clock.advance(5000);
    }
    await a.close();
    await b.close();
    expect(switches).toBeGreaterThanOrEqual(3);
    expect(allowed).toBeLessThanOrEqual(300);
    expect(allowed).toBeGreaterThan(250);
    await store.close();
  });

  it('keeps counting across rule updates of the same sketch shape and forgets a removed resource', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({ resources: { pay: { limits: window, hotKeys: true } }, clock });
    for (let i = 0; i < 5; i++) await limiter.try('pay', { key: 'a' });
    limiter.setLimits('pay', { limits: { ...window, limit: 10 }, hotKeys: { threshold: { share: 0.9 }, action: 'lease' } });
    await limiter.try('pay', { key: 'a' });
    expect(limiter.hotKeys()[0]).toMatchObject({ resource: 'pay', calls: 6 });
    limiter.setResources({ other: window });
    expect(limiter.hotKeys()).toEqual([]);
    await limiter.close();
  });

  it('refuses hot-key leases where leases cannot work', () => {
    const lease = { threshold: { rate: 1 }, action: 'lease' } as const;
    for (const options of [
      { limits: { algorithm: 'concurrency', limit: 5 }, hotKeys: lease },
      { limits: window, lease: true, hotKeys: lease },
      { limits: window, split: 4, hotKeys: lease },
      { limits: window, priority: { coreShare: 0.2 }, hotKeys: lease },
    ] as const) {
      expect(() => new Limiter({ resources: { r: options } })).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'resources.r.hotKeys.action' }),
      );
    }
  });
});

describe('hot keys of a leased resource', () => {
  it('counts the calls trySync answers from the lease, and those left to try once', async () => {
    const clock = new ManualClock();
    const limiter = new Limiter({ resources: { pay: { limits: window, lease: true, hotKeys: true } }, clock });
    let calls = 0;
    for (let i = 0; i < 50; i++) {
      if (limiter.trySync('pay', { key: 'k' }) === undefined) await limiter.try('pay', { key: 'k' });
      calls++;
    }
    expect(limiter.hotKeys('pay')[0]?.keys[0]).toMatchObject({ key: 'k', calls, mitigation: undefined });
    await limiter.close();
  });
});
