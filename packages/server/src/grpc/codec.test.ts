import { describe, expect, it } from 'vitest';
import { MAX_OVERRIDE_REQUESTS_PER_UNIT } from '../bounds/bounds.js';
import { ServerError } from '../errors.js';
import { decodeRlsRequest as decodeBytes } from './codec.js';
import { loadRlsDefinition } from '../../test/proto.js';

const bounds = { maxDescriptors: 4, maxKeyLength: 16 };
const entry = (key: string, value: string) => ({ key, value });
const method = loadRlsDefinition().ShouldRateLimit!;

/** Decodes a request given as proto-loader takes it, encoded by proto-loader. */
const decodeRlsRequest = (request: object, b: typeof bounds) => decodeBytes(method.requestSerialize(request), b);

function field(raw: object): string | undefined {
  try {
    decodeRlsRequest(raw, bounds);
  } catch (e) {
    if (e instanceof ServerError) return e.field;
    throw e;
  }
  throw new Error('expected a ServerError');
}

describe('decodeRlsRequest', () => {
  it('decodes what proto-loader encodes', () => {
    const r = decodeRlsRequest(
      {
        domain: 'edge',
        hits_addend: 0,
        descriptors: [
          { entries: [entry('a', '1'), entry('b', '')], limit: null, hits_addend: null },
          { entries: [entry('a', '2')], limit: { requests_per_unit: 5, unit: 'MINUTE' }, hits_addend: { value: '7' } },
        ],
      },
      bounds,
    );
    expect(r).toEqual({
      domain: 'edge',
      hitsAddend: 0,
      descriptors: [
        { entries: [entry('a', '1'), entry('b', '')] },
        { entries: [entry('a', '2')], limit: { requestsPerUnit: 5, unit: 'minute' }, hitsAddend: 7 },
      ],
    });
  });

  it('caps huge hits addends just above any admissible cost', () => {
    const r = decodeRlsRequest(
      {
        domain: 'd',
        hits_addend: 4294967295,
        descriptors: [{ entries: [entry('a', 'b')], hits_addend: { value: '18446744073709551615' } }],
      },
      bounds,
    );
    expect(r.hitsAddend).toBe(1_000_000_001);
    expect(r.descriptors[0]!.hitsAddend).toBe(1_000_000_001);
  });

  it('caps the requests_per_unit of an override at the largest limit a fixed window counts', () => {
    const limit = (requests_per_unit: number) =>
      decodeRlsRequest(
        {
          domain: 'd',
          hits_addend: 0,
          descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit, unit: 'SECOND' } }],
        },
        bounds,
      ).descriptors[0]!.limit;
    expect(limit(4294967295)).toEqual({ requestsPerUnit: MAX_OVERRIDE_REQUESTS_PER_UNIT, unit: 'second' });
    expect(limit(MAX_OVERRIDE_REQUESTS_PER_UNIT + 1)!.requestsPerUnit).toBe(MAX_OVERRIDE_REQUESTS_PER_UNIT);
    expect(limit(MAX_OVERRIDE_REQUESTS_PER_UNIT)!.requestsPerUnit).toBe(MAX_OVERRIDE_REQUESTS_PER_UNIT);
    expect(limit(7)!.requestsPerUnit).toBe(7);
  });

  it('rejects what envoy validation rules and the bounds exclude, naming the field', () => {
    const ok = { domain: 'd', hits_addend: 0, descriptors: [{ entries: [entry('a', 'b')] }] };
    expect(field({ ...ok, domain: '' })).toBe('domain');
    expect(field({ ...ok, domain: 'x'.repeat(17) })).toBe('domain');
    expect(field({ ...ok, descriptors: [{ entries: [] }] })).toBe('descriptors[0].entries');
    expect(field({ ...ok, descriptors: [{ entries: [entry('', 'v')] }] })).toBe('descriptors[0].entries[0].key');
    expect(field({ ...ok, descriptors: Array.from({ length: 5 }, () => ok.descriptors[0]) })).toBe('descriptors');
    expect(field({ ...ok, descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit: 0, unit: 'SECOND' } }] })).toBe(
      'descriptors[0].limit.requests_per_unit',
    );
    expect(
      field({ ...ok, descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit: 1, unit: 'UNKNOWN' } }] }),
    ).toBe('descriptors[0].limit.unit');
    expect(field({ ...ok, descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit: 1, unit: 42 } }] })).toBe(
      'descriptors[0].limit.unit',
    );
    // An empty message is a request with every field at its default: an empty domain.
    expect(field({})).toBe('domain');
  });

  it('refuses bytes that are not a RateLimitRequest, and strings that are not UTF-8, with their codes', () => {
    expect(() => decodeBytes(Buffer.from('0a0561', 'hex'), bounds)).toThrow(
      expect.objectContaining({ code: 'SLUICE_ERR_MALFORMED_BODY' }) as Error,
    );
    const bytes = Buffer.from(method.requestSerialize({ domain: 'd', descriptors: [{ entries: [entry('k', 'ww')] }] }));
    bytes[bytes.lastIndexOf(Buffer.from('ww'))] = 0xff;
    expect(() => decodeBytes(bytes, bounds)).toThrow(
      expect.objectContaining({ code: 'SLUICE_ERR_INVALID_REQUEST', field: 'descriptors[0].entries[0].value' }) as Error,
    );
  });
});
