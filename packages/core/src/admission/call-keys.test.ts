import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../shared/errors.js';
import { resourceKey } from '../store/storage-key.js';
import { CallKeys, SPARSE_EVERY } from './call-keys.js';

describe('call keys', () => {
  it('encode a key as storage-key.ts does, the same each time it is seen', () => {
    const keys = new CallKeys(256);
    for (const key of ['user-1', '@acme', '%x', '#3']) {
      const first = keys.of('api', key);
      expect(first).toEqual({ sub: key, key: resourceKey('api', key), parts: { resource: 'api', key } });
      expect(keys.of('api', key)).toBe(first);
    }
    expect(keys.of('api', undefined)).toEqual({ sub: '', key: 'api', parts: { resource: 'api', key: '' } });
    // The same caller key on another resource is another state.
    expect(keys.of('other', 'user-1').key).toBe('other|user-1');
  });

  it('refuse an invalid key every time it is given', () => {
    const keys = new CallKeys(8);
    for (let i = 0; i < 2; i++) {
      expect(() => keys.of('api', '')).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
      expect(() => keys.of('api', 'x'.repeat(9))).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
      expect(() => keys.of('api', 'a\uD800')).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
      expect(() => keys.of('api', 42)).toThrow(expect.objectContaining({ code: ErrorCodes.INVALID_KEY }));
    }
    expect(keys.size).toBe(0);
  });

  it('hold at most twice their bound, keeping a key in use across a turn', () => {
    const keys = new CallKeys(256, 100);
    const hot = keys.of('api', 'hot');
    for (let i = 0; i < 1000; i++) {
      keys.of('api', `flood-${i}`);
      if (i % 50 === 0) expect(keys.of('api', 'hot')).toBe(hot);
      expect(keys.size).toBeLessThanOrEqual(200);
    }
    expect(keys.of('api', 'flood-999').key).toBe('api|flood-999');
  });

  it('keep one missed key in SPARSE_EVERY while most lookups miss, and every one again once keys come back', () => {
    const keys = new CallKeys(256, 100);
    // The first judgement, at the 101st lookup, finds that none of the 100 before it hit.
    for (let i = 0; i < 100; i++) keys.of('api', `first-${i}`);
    expect(keys.sparse).toBe(false);
    expect(keys.size).toBe(100);
    for (let i = 0; i <= 10 * SPARSE_EVERY; i++) keys.of('api', `flood-${i}`);
    expect(keys.sparse).toBe(true);
    // The 100 first keys (now the old generation) and one in SPARSE_EVERY of the flood's.
    expect(keys.size).toBe(100 + 10);
    // Missed or not, a key is encoded as before.
    expect(keys.of('api', 'flood-3')).toEqual({
      sub: 'flood-3',
      key: resourceKey('api', 'flood-3'),
      parts: { resource: 'api', key: 'flood-3' },
    });

    // Ten keys called in turn are kept, a few calls each later. The cache judges itself at the
    // lookups its young generation cannot answer: such lookups after stretches of hits turn it
    // whole, and a new key is then kept at once.
    for (let i = 0; i < 20 * SPARSE_EVERY; i++) keys.of('api', `back-${i % 10}`);
    for (let j = 0; j < 3; j++) {
      for (let i = 0; i < 100; i++) keys.of('api', `back-${i % 10}`);
      keys.of('api', `new-${j}`);
    }
    expect(keys.sparse).toBe(false);
    const fresh = keys.of('api', 'fresh');
    expect(keys.of('api', 'fresh')).toBe(fresh);
  });

  it('stay sparse through one stretch of hits, and leave a key found in the old generation where it is', () => {
    const keys = new CallKeys(256, 100);
    const first = Array.from({ length: 100 }, (_, i) => keys.of('api', `first-${i}`));
    // Misses only: sparse from the first judgement. The first key kept then turns the generations,
    // so the 100 first keys are the old one.
    for (let i = 0; i < SPARSE_EVERY; i++) keys.of('api', `flood-${i}`);
    expect(keys.sparse).toBe(true);
    expect(keys.size).toBe(100 + 1);
    // A stretch of hits as long as a judgement's lookups, each on the old generation: found there,
    // not moved to the young one (which would hold them twice).
    for (let i = 0; i < 100; i++) expect(keys.of('api', `first-${i}`)).toBe(first[i]);
    expect(keys.size).toBe(100 + 1);
    // The moving share weighs that stretch a quarter: still sparse once the misses are back.
    for (let i = 0; i < 200; i++) keys.of('api', `again-${i}`);
    expect(keys.sparse).toBe(true);
  });
});
