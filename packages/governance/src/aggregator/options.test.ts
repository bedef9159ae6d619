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

  it('takes the ownership store and its TTL', () => {
    const store = new MemoryOwnershipStore();
    const compiled = compileAggregatorOptions({ transport, rules: {}, ownership: store, ownershipTtlMs: 6000 });
    expect(compiled.ownership).toBe(store);
    expect(compiled.ownershipTtlMs).toBe(6000);
    expect(field({ ownershipTtlMs: 10 })).toBe('ownershipTtlMs');
  });
});
