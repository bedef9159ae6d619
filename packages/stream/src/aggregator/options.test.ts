import { isSluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { MemoryTransport } from '../transports/memory.js';
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
      leaseTtlMs: 3000,
      maxValues: 10_000,
    });
    expect(o.id.length).toBeGreaterThan(0);
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('names the field of a malformed option', () => {
    expect(field({ tickMs: 0 })).toBe('tickMs');
    expect(field({ maxValues: 1.5 })).toBe('maxValues');
    expect(field({ ttlMs: 1000, refreshMs: 1000 })).toBe('ttlMs');
    expect(field({ group: 'a b' })).toBe('group');
    expect(field({ id: 'x'.repeat(129) })).toBe('id');
    expect(field({ transport: {} as never })).toBe('transport');
    expect(field({ rules: null as never })).toBe('rules');
    expect(field({ sampleEvery: 1 })).toBe('sampleEvery');
    expect(field({})).toBeUndefined();
  });
});
