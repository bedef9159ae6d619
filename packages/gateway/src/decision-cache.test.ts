import { ManualClock, isSluiceError } from '@sluice/core';
import {
  MemoryTransport,
  encodeAnnouncement,
  encodeDecisions,
  hashValue,
  type AggregatorAnnouncement,
  type GovernanceDecision,
} from '@sluice/stream';
import { describe, expect, it, vi } from 'vitest';
import { DecisionCache } from './decision-cache.js';

const WALL = 1_764_000_000_000;

function block(overrides: Partial<GovernanceDecision> = {}): GovernanceDecision {
  return {
    action: 'block',
    dimension: 'user',
    value: hashValue('mallory'),
    ttlMs: 3000,
    retryAfterMs: 2000,
    ruleId: 'r1',
    issuedAtMs: WALL,
    ...overrides,
  };
}

function setup(options: ConstructorParameters<typeof DecisionCache>[0] = {}) {
  const clock = new ManualClock(1000);
  let wall = WALL;
  const cache = new DecisionCache({ clock, wallClock: () => wall, ...options });
  return {
    cache,
    clock,
    advance: (ms: number) => {
      clock.advance(ms);
      wall += ms;
    },
  };
}

describe('DecisionCache', () => {
  it('blocks a value until its TTL lapses when no refresh arrives', () => {
    const { cache, advance } = setup();
    expect(cache.apply(block())).toBe(true);
    expect(cache.lookup('user', hashValue('mallory'))).toMatchObject({ ruleId: 'r1', retryAfterMs: 2000, remainingMs: 3000 });
    expect(cache.lookup('user', hashValue('alice'))).toBeUndefined();
    expect(cache.lookup('ip', hashValue('mallory'))).toBeUndefined();
    advance(2999);
    expect(cache.lookup('user', hashValue('mallory'))?.remainingMs).toBe(1);
    advance(1);
    expect(cache.lookup('user', hashValue('mallory'))).toBeUndefined();
    expect(cache.stats).toMatchObject({ size: 0, expired: 1, blocks: 1 });
  });

  it('extends a block on refresh and never shortens it', () => {
    const { cache, advance } = setup();
    cache.apply(block());
    advance(2000);
    cache.apply(block({ issuedAtMs: WALL + 2000 }));
    advance(2000);
    expect(cache.lookup('user', hashValue('mallory'))?.remainingMs).toBe(1000);
    cache.apply(block({ ttlMs: 100, issuedAtMs: WALL + 4000 }));
    expect(cache.lookup('user', hashValue('mallory'))?.remainingMs).toBe(1000);
    advance(1000);
    expect(cache.lookup('user', hashValue('mallory'))).toBeUndefined();
  });

  it('removes a block on lift', () => {
    const { cache } = setup();
    cache.apply(block());
    cache.apply(block({ dimension: 'ip', value: 7 }));
    expect(cache.apply(block({ action: 'lift', ttlMs: 0 }))).toBe(true);
    expect(cache.lookup('user', hashValue('mallory'))).toBeUndefined();
    expect(cache.lookup('ip', 7)).toBeDefined();
    expect(cache.stats).toMatchObject({ size: 1, lifts: 1 });
  });

  it('caps a TTL at maxTtlMs', () => {
    const { cache, advance } = setup({ maxTtlMs: 5000 });
    cache.apply(block({ ttlMs: 3_600_000 }));
    advance(5000);
    expect(cache.lookup('user', hashValue('mallory'))).toBeUndefined();
  });

  it('ignores a block that had lapsed before it arrived', () => {
    const { cache } = setup({ maxClockSkewMs: 500 });
    expect(cache.apply(block({ issuedAtMs: WALL - 3501 }))).toBe(false);
    expect(cache.apply(block({ issuedAtMs: WALL - 3400 }))).toBe(true);
    expect(cache.stats).toMatchObject({ stale: 1, blocks: 1, size: 1 });
  });

  it('matches the block with the longest remaining time and never matches 0', () => {
    const { cache } = setup();
    cache.apply(block({ dimension: 'resource', value: 11, ttlMs: 1000, ruleId: 'short' }));
    cache.apply(block({ dimension: 'tenant', value: 55, ttlMs: 4000, ruleId: 'long' }));
    expect(cache.match(11, 22, 33, 44, 55)?.ruleId).toBe('long');
    expect(cache.match(11, 0, 0, 0, 0)?.ruleId).toBe('short');
    expect(cache.match(0, 0, 0, 0, 0)).toBeUndefined();
    expect(cache.match(55, 11, 0, 0, 0)).toBeUndefined();
    expect(cache.lookup('resource', 0)).toBeUndefined();
  });

  it('stays within maxEntries under a flood of distinct blocks, keeping the most recently refreshed', () => {
    const { cache } = setup({ maxEntries: 100 });
    for (let i = 1; i <= 10_000; i++) cache.apply(block({ value: i }));
    expect(cache.size).toBe(100);
    expect(cache.stats.evicted).toBe(9900);
    expect(cache.lookup('user', 10_000)).toBeDefined();
    expect(cache.lookup('user', 9901)).toBeDefined();
    expect(cache.lookup('user', 9900)).toBeUndefined();
  });

  it('evicts an expired block before a live one', () => {
    const { cache, advance } = setup({ maxEntries: 2 });
    cache.apply(block({ value: 1, ttlMs: 100 }));
    cache.apply(block({ value: 2, ttlMs: 5000 }));
    advance(200);
    cache.apply(block({ value: 3, issuedAtMs: WALL + 200 }));
    expect(cache.lookup('user', 2)).toBeDefined();
    expect(cache.lookup('user', 3)).toBeDefined();
    expect(cache.stats.evicted).toBe(0);
  });

  it('sweeps expired blocks in the background', () => {
    const { cache, clock, advance } = setup({ sweepIntervalMs: 1000 });
    for (let i = 1; i <= 50; i++) cache.apply(block({ value: i, ttlMs: 1500 }));
    advance(1000);
    expect(cache.size).toBe(50);
    advance(1000);
    expect(cache.size).toBe(0);
    expect(cache.stats.expired).toBe(50);
    expect(clock.pendingTimers).toBe(0);
  });

  it('counts and skips malformed decision messages', () => {
    const { cache } = setup();
    expect(cache.applyMessage(new TextEncoder().encode('{"action":"block"}'))).toBe(0);
    expect(cache.applyMessage(encodeDecisions([block()]).subarray(0, 20))).toBe(0);
    expect(cache.applyMessage(encodeDecisions([block(), block({ dimension: 'ip', value: 9 })]))).toBe(2);
    expect(cache.stats).toMatchObject({ malformed: 2, size: 2 });
  });

  it('hands aggregator announcements to onAnnouncement, counted apart from decisions', () => {
    const seen: AggregatorAnnouncement[] = [];
    const { cache } = setup({ onAnnouncement: (a) => seen.push(a) });
    const a: AggregatorAnnouncement = {
      id: 'agg-1',
      group: 'sluice-aggregators',
      partitions: 4,
      layoutVersion: 1,
      ownership: 'redis',
      issuedAtMs: WALL,
      announceMs: 1000,
      owned: [1, 2],
    };
    const bytes = encodeAnnouncement(a);
    expect(cache.applyMessage(bytes)).toBe(0);
    expect(seen).toEqual([a]);
    // A truncated announcement is malformed like any other message.
    expect(cache.applyMessage(bytes.subarray(0, bytes.length - 1))).toBe(0);
    expect(cache.stats).toMatchObject({ announcements: 1, malformed: 1, size: 0 });
  });

  it('receives broadcast decisions through a transport until closed', async () => {
    const transport = new MemoryTransport({ partitions: 1 });
    const cache = new DecisionCache();
    try {
      await cache.subscribe(transport);
      await transport.broadcast(encodeDecisions([block({ issuedAtMs: Date.now() })]));
      await transport.broadcast(new Uint8Array([1, 2, 3]));
      await vi.waitFor(() => expect(cache.stats.malformed).toBe(1));
      expect(cache.lookup('user', hashValue('mallory'))).toBeDefined();
      await cache.close();
      await transport.broadcast(encodeDecisions([block({ value: 5, issuedAtMs: Date.now() })]));
      await new Promise((resolve) => setImmediate(resolve));
      expect(cache.lookup('user', 5)).toBeUndefined();
    } finally {
      await cache.close();
      await transport.close();
    }
  });

  it("checks decision ages on the store clock when given this host's measured skew", () => {
    // This host's clock runs 5 s ahead of the store's; the aggregator stamped the block on the
    // store's clock just now. Without the skew the block looks 5 s old (over 3 s TTL + 1 s).
    const skewed = setup({ wallClock: () => WALL + 5000, maxClockSkewMs: 1000 });
    expect(skewed.cache.apply(block())).toBe(false);
    expect(skewed.cache.stats.stale).toBe(1);
    const corrected = setup({ wallClock: () => WALL + 5000, maxClockSkewMs: 1000, clockSkew: { offsetMs: -5000 } });
    expect(corrected.cache.apply(block())).toBe(true);
    // And the other way: a clock 5 s behind would keep a block that lapsed 1 s ago.
    const lapsed = block({ issuedAtMs: WALL - 5000 });
    expect(setup({ wallClock: () => WALL - 5000, maxClockSkewMs: 1000 }).cache.apply(lapsed)).toBe(true);
    const behind = setup({ wallClock: () => WALL - 5000, maxClockSkewMs: 1000, clockSkew: { offsetMs: 5000 } });
    expect(behind.cache.apply(lapsed)).toBe(false);
  });

  it('rejects malformed options', () => {
    for (const options of [
      { maxEntries: 0 },
      { maxTtlMs: 1.5 },
      { sweepIntervalMs: -1 },
      { wallClock: 3 as unknown as () => number },
      { clockSkew: { offsetMs: '5' } as never },
    ]) {
      try {
        new DecisionCache(options);
        expect.unreachable();
      } catch (err) {
        expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      }
    }
  });
});
