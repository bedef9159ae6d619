import { isSluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { MemoryTransport } from '@sluice/stream';
import { MemoryOwnershipStore } from '../ownership/store.js';
import { compileAggregatorOptions, type AggregatorOptions } from './options.js';

const transport = new MemoryTransport({ partitions: 1 });

function field(o: Partial<AggregatorOptions>): string | undefined {
  try {
    compileAggregatorOptions({ transport, rules: {}, ...o });
  } catch (e) {
    if (isSluiceError(e, 'SLUICE_ERR_INVALID_OPTIONS')) return e.field;
    throw e;
  }
  return undefined;
}

describe('compileAggregatorOptions', () => {
  it('fills the defaults', () => {
    const o = compileAggregatorOptions({ transport, rules: {} });
    expect(o).toMatchObject({
      group: 'sluice-aggregators',
      tickMs: 100,
      refreshMs: 1000,
      ttlMs: 3000,
      ownershipTtlMs: 3000,
      maxValues: 10_000,
    });
    expect(o.id.length).toBeGreaterThan(0);
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('reads the store clock when given the measured skew of this host', () => {
    const skew = { offsetMs: -5000 };
    const o = compileAggregatorOptions({ transport, rules: {}, now: () => 1_000_000, clockSkew: skew });
    expect(o.now()).toBe(995_000);
    // The offset is read at each call: the monitor keeps measuring.
    skew.offsetMs = 250;
    expect(o.now()).toBe(1_000_250);
    expect(compileAggregatorOptions({ transport, rules: {}, now: () => 7 }).now()).toBe(7);
    expect(field({ clockSkew: { offsetMs: null } as never })).toBe('clockSkew');
  });

  it('names the field of a malformed option', () => {
    expect(field({ tickMs: 0 })).toBe('tickMs');
    expect(field({ maxValues: 1.5 })).toBe('maxValues');
    expect(field({ ttlMs: 1000, refreshMs: 1000 })).toBe('ttlMs');
    expect(field({ group: 'a b' })).toBe('group');
    // What no transport takes as a consumer group is refused at start.
    expect(field({ group: 'edge.aggregators' })).toBe('group');
    expect(field({ group: 'edge:aggregators' })).toBe('group');
    expect(field({ group: 'edge_aggregators-2' })).toBeUndefined();
    expect(field({ id: 'x'.repeat(129) })).toBe('id');
    expect(field({ transport: {} as never })).toBe('transport');
    expect(field({ rules: null as never })).toBe('rules');
    expect(field({ sampleEvery: 1 })).toBe('sampleEvery');
    expect(field({})).toBeUndefined();
  });

  it('requires an ownership choice on a transport other processes may read', () => {
    const broker = { name: 'redis', partitions: 4, consume: () => Promise.reject(new Error('unused')) } as never;
    let refused: unknown;
    try {
      compileAggregatorOptions({ transport: broker, rules: {} });
    } catch (e) {
      refused = e;
    }
    expect(isSluiceError(refused, 'SLUICE_ERR_INVALID_OPTIONS') && refused.field).toBe('ownership');
    expect((refused as Error).message).toMatch(/required with the redis transport.*RedisOwnershipStore.*'single-instance'/);
    // The explicit choices: a store, or a memory store of this aggregator's own.
    const store = new MemoryOwnershipStore();
    expect(compileAggregatorOptions({ transport: broker, rules: {}, ownership: store }).ownership).toBe(store);
    expect(compileAggregatorOptions({ transport: broker, rules: {}, ownership: 'single-instance' }).ownership).toBeUndefined();
    expect(field({ ownership: 'shared' as never })).toBe('ownership');
    expect(field({ ownership: {} as never })).toBe('ownership');
    // In process, the memory default stays.
    expect(compileAggregatorOptions({ transport, rules: {} }).ownership).toBeUndefined();
  });

  it('announces every second by default, never with 0', () => {
    expect(compileAggregatorOptions({ transport, rules: {} }).announceMs).toBe(1000);
    expect(compileAggregatorOptions({ transport, rules: {}, announceMs: 0 }).announceMs).toBe(0);
    expect(field({ announceMs: 50 })).toBe('announceMs');
    expect(field({ announceMs: 1.5 })).toBe('announceMs');
  });

  it('takes the ownership store and its TTL', () => {
    const store = new MemoryOwnershipStore();
    const compiled = compileAggregatorOptions({ transport, rules: {}, ownership: store, ownershipTtlMs: 6000 });
    expect(compiled.ownership).toBe(store);
    expect(compiled.ownershipTtlMs).toBe(6000);
    expect(field({ ownershipTtlMs: 10 })).toBe('ownershipTtlMs');
  });
});
