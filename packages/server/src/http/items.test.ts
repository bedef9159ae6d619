import { describe, expect, it } from 'vitest';
import { ServerError } from '../errors.js';
import { decodeBody, itemSchemas } from './items.js';

const schemas = itemSchemas({ maxKeyLength: 8, maxWaitMs: 1000, maxBatch: 3 });

function code(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (e instanceof ServerError) return e.code;
    throw e;
  }
  throw new Error('expected a ServerError');
}

describe('decodeBody', () => {
  it('decodes one item', () => {
    expect(decodeBody({ resource: 'a', key: 'k', cost: 2 }, schemas.check, 3)).toEqual({
      batch: false,
      item: { ok: true, value: { resource: 'a', key: 'k', cost: 2 } },
    });
  });

  it('answers a bad item with its own error, naming the field', () => {
    const d = decodeBody({ resource: 'a', cost: -1 }, schemas.check, 3);
    expect(d.batch).toBe(false);
    if (d.batch || d.item.ok) throw new Error('expected an error');
    expect(d.item.error).toMatchObject({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'cost' });
  });

  it('rejects unknown fields, wrong types and values beyond the bounds', () => {
    const bad = [
      { resource: 'a', extra: 1 },
      { resource: 1 },
      { resource: '' },
      { resource: 'a', key: '123456789' },
      { resource: 'a', cost: 1.5 },
      { resource: 'a', cost: 1e300 },
      { resource: 'a', priority: 'not a tier' },
      { resource: 'a', tenant: '' },
    ];
    for (const body of bad) {
      const d = decodeBody(body, schemas.check, 3);
      expect(!d.batch && !d.item.ok, JSON.stringify(body)).toBe(true);
    }
    const wait = decodeBody({ resource: 'a', maxWaitMs: 1001 }, schemas.acquire, 3);
    expect(!wait.batch && !wait.item.ok).toBe(true);
    const del = decodeBody({ resource: 'a', delta: 2 ** 60 }, schemas.adjust, 3);
    expect(!del.batch && !del.item.ok).toBe(true);
  });

  it('decodes a batch item by item', () => {
    const d = decodeBody({ items: [{ resource: 'a' }, { resource: 'b', nope: true }, 'x'] }, schemas.check, 3);
    if (!d.batch) throw new Error('expected a batch');
    expect(d.items.map((i) => i.ok)).toEqual([true, false, false]);
  });

  it('fails a malformed batch as a whole', () => {
    expect(code(() => decodeBody({ items: [{ resource: 'a' }], more: 1 }, schemas.check, 3))).toBe('SLUICE_ERR_INVALID_REQUEST');
    expect(code(() => decodeBody({ items: {} }, schemas.check, 3))).toBe('SLUICE_ERR_INVALID_REQUEST');
    expect(code(() => decodeBody({ items: [] }, schemas.check, 3))).toBe('SLUICE_ERR_INVALID_REQUEST');
    expect(code(() => decodeBody({ items: [{}, {}, {}, {}] }, schemas.check, 3))).toBe('SLUICE_ERR_BATCH_TOO_LARGE');
    for (const body of [null, [], 'x', 3])
      expect(code(() => decodeBody(body, schemas.check, 3))).toBe('SLUICE_ERR_INVALID_REQUEST');
  });
});
