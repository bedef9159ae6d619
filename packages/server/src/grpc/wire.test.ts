import { describe, expect, it } from 'vitest';
import { loadRlsDefinition } from '../../test/proto.js';
import { invalidUtf8Field } from './utf8.js';
import type { RlsResponse } from '../envoy/rls.js';
import { rng } from '../../test/rng.js';
import { WireError } from './protobuf.js';
import {
  readOverallCode,
  readRateLimitRequest,
  writeRateLimitRequest,
  writeRateLimitResponse,
  type RateLimitRequestMessage,
} from './wire.js';

const method = loadRlsDefinition().ShouldRateLimit!;

/** envoy.type.v3.RateLimitUnit numbers by the names proto-loader gives them. */
const UNIT_NUMBERS: Readonly<Record<string, number>> = { UNKNOWN: 0, SECOND: 1, MINUTE: 2, HOUR: 3, DAY: 4, MONTH: 5, YEAR: 6 };

interface LoaderRequest {
  domain: string;
  hits_addend: number;
  descriptors: {
    entries: { key: string; value: string }[];
    limit: { requests_per_unit: number; unit: string | number } | null;
    hits_addend: { value: string } | null;
  }[];
}

/** What proto-loader decodes (keepCase, defaults, longs and enums as strings) as the typed message. */
function typed(o: LoaderRequest): RateLimitRequestMessage {
  return {
    domain: o.domain,
    hitsAddend: o.hits_addend,
    descriptors: o.descriptors.map((d) => ({
      entries: d.entries.map((e) => ({ key: e.key, value: e.value })),
      limit:
        d.limit === null
          ? undefined
          : {
              requestsPerUnit: d.limit.requests_per_unit,
              unit: typeof d.limit.unit === 'string' ? UNIT_NUMBERS[d.limit.unit]! : d.limit.unit,
            },
      hitsAddend: d.hits_addend === null ? undefined : BigInt(d.hits_addend.value),
    })),
  };
}

/** proto-loader's decoding of `bytes`, as the typed message. */
const decoded = (bytes: Buffer): RateLimitRequestMessage => typed(method.requestDeserialize(bytes) as LoaderRequest);

/** A response as proto-loader takes it (keepCase, enums by name, durations as seconds and nanos). */
function loaderResponse(r: RlsResponse): object {
  return {
    overall_code: r.overallCode,
    statuses: r.statuses.map((s) => ({
      code: s.code,
      ...(s.currentLimit === undefined
        ? {}
        : {
            current_limit: {
              name: s.currentLimit.name,
              requests_per_unit: s.currentLimit.requestsPerUnit,
              unit: s.currentLimit.unit.toUpperCase(),
            },
          }),
      limit_remaining: s.limitRemaining,
      ...(s.durationUntilResetMs === undefined
        ? {}
        : {
            duration_until_reset: {
              seconds: Math.floor(s.durationUntilResetMs / 1000),
              nanos: Math.round((s.durationUntilResetMs % 1000) * 1e6),
            },
          }),
    })),
  };
}

function requestOf(next: () => number): object {
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const str = () => pick(['', 'a', 'user', 'ü', '🙂x', 'k'.repeat(int(40))]);
  return {
    domain: str(),
    hits_addend: pick([0, 1, 7, 4294967295]),
    descriptors: Array.from({ length: int(4) }, () => ({
      entries: Array.from({ length: int(4) }, () => ({ key: str(), value: str() })),
      ...(next() < 0.3
        ? { limit: { requests_per_unit: pick([0, 1, 5, 4294967295]), unit: pick(['SECOND', 'YEAR', 'UNKNOWN']) } }
        : {}),
      ...(next() < 0.3 ? { hits_addend: { value: pick(['0', '1', '4503599627370497', '18446744073709551615']) } } : {}),
    })),
  };
}

/** What proto-loader makes of bytes: the object, or that it refused them. */
function reference(bytes: Buffer): { object?: unknown; refused?: true } {
  try {
    return { object: decoded(bytes) };
  } catch {
    return { refused: true };
  }
}

function mine(bytes: Buffer): { object?: unknown; invalidUtf8?: string | undefined; refused?: true } {
  try {
    const r = readRateLimitRequest(bytes);
    return { object: r.request, invalidUtf8: r.invalidUtf8 };
  } catch (err) {
    expect(err).toBeInstanceOf(WireError);
    return { refused: true };
  }
}

/**
 * Whatever the decoder accepts, proto-loader accepts and decodes alike (it accepts more: see
 * wire.ts); the decoder finds the same invalid UTF-8 as the walk of utf8.ts.
 */
function compare(bytes: Buffer): boolean {
  const got = mine(bytes);
  if (got.refused) return false;
  const want = reference(bytes);
  const context = bytes.toString('hex');
  expect(want.refused, context).toBeUndefined();
  expect(got.invalidUtf8, context).toBe(invalidUtf8Field(bytes));
  if (got.invalidUtf8 === undefined) expect(got.object, context).toEqual(want.object);
  return true;
}

describe('readRateLimitRequest', () => {
  it('reads what proto-loader encodes into the message proto-loader decodes', () => {
    const next = rng(1);
    for (let i = 0; i < 2000; i++) {
      const bytes = method.requestSerialize(requestOf(next));
      const got = readRateLimitRequest(bytes);
      expect(got.invalidUtf8).toBeUndefined();
      expect(got.request).toEqual(decoded(bytes));
    }
  });

  it('accepts only mutated and random bytes proto-loader accepts, decodes them alike, and finds the same invalid UTF-8', () => {
    const next = rng(2);
    let accepted = 0;
    const int = (n: number) => Math.floor(next() * n);
    for (let i = 0; i < 20_000; i++) {
      let bytes: Buffer;
      if (i % 4 === 0) {
        bytes = Buffer.from(Array.from({ length: int(64) }, () => int(256)));
      } else {
        bytes = Buffer.from(method.requestSerialize(requestOf(next)));
        for (let m = 1 + int(3); m > 0 && bytes.length > 0; m--) {
          const at = int(bytes.length);
          const kind = int(3);
          if (kind === 0) bytes[at] = int(256);
          else if (kind === 1) bytes = bytes.subarray(0, at);
          else bytes = Buffer.concat([bytes.subarray(0, at), Buffer.from([int(256)]), bytes.subarray(at)]);
        }
      }
      if (compare(bytes)) accepted++;
    }
    // The mutations left many messages well-formed: the comparison was not vacuous.
    expect(accepted).toBeGreaterThan(2000);
  });

  it('refuses what protobufjs lets through: a string past the end, a wrong wire type, a group', () => {
    for (const hex of ['0a0561', '1801' + '0a0161'.replace('0a', '08'), '0a02', '1b0c']) {
      expect(() => readRateLimitRequest(Buffer.from(hex, 'hex')), hex).toThrow(WireError);
    }
  });

  it('names the first string that is not UTF-8', () => {
    const bytes = Buffer.from(
      method.requestSerialize({
        domain: 'd',
        descriptors: [
          {
            entries: [
              { key: 'k', value: 'vv' },
              { key: 'k', value: 'ww' },
            ],
          },
        ],
      }),
    );
    const at = bytes.lastIndexOf(Buffer.from('ww'));
    bytes[at] = 0xff;
    expect(readRateLimitRequest(bytes).invalidUtf8).toBe('descriptors[0].entries[1].value');
    expect(invalidUtf8Field(bytes)).toBe('descriptors[0].entries[1].value');
  });

  it('keeps unknown enum numbers and the full range of uint64', () => {
    // descriptors[0] (17 bytes): limit { unit: 9 }, hits_addend { value: 2^64 - 1 }
    const bytes = Buffer.from('1211' + '12021009' + '1a0b08' + 'ff'.repeat(9) + '01', 'hex');
    const r = readRateLimitRequest(bytes).request;
    expect(r.descriptors[0]!.limit).toEqual({ requestsPerUnit: 0, unit: 9 });
    expect(r.descriptors[0]!.hitsAddend).toBe(18446744073709551615n);
    expect(r).toEqual(decoded(bytes));
  });
});

describe('writeRateLimitResponse', () => {
  it('encodes what proto-loader encodes from the same answer: the same message once decoded', () => {
    const next = rng(3);
    const int = (n: number) => Math.floor(next() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    for (let i = 0; i < 3000; i++) {
      const response: RlsResponse = {
        overallCode: pick(['OK', 'OVER_LIMIT'] as const),
        statuses: Array.from({ length: int(4) }, () => ({
          code: pick(['OK', 'OVER_LIMIT'] as const),
          limitRemaining: pick([0, 1, 499, 4294967295]),
          ...(next() < 0.7
            ? {
                currentLimit: {
                  requestsPerUnit: pick([0, 1, 500, 1_000_000_000]),
                  unit: pick(['second', 'minute', 'hour', 'day', 'month', 'year'] as const),
                  name: pick(['', 'specific_limit', 'ünï']),
                },
              }
            : {}),
          ...(next() < 0.7 ? { durationUntilResetMs: pick([0, 1, 999, 1000, 1234.5678, 86_400_000 * 400]) } : {}),
        })),
      };
      const mine = method.responseDeserialize(writeRateLimitResponse(response));
      const theirs = method.responseDeserialize(method.responseSerialize(loaderResponse(response)));
      expect(mine, JSON.stringify(response)).toEqual(theirs);
    }
  });
});

describe('writeRateLimitRequest', () => {
  it('encodes a request proto-loader decodes to the same domain and entries', () => {
    const next = rng(4);
    for (let i = 0; i < 2000; i++) {
      const { domain, descriptors } = requestOf(next) as {
        domain: string;
        descriptors: { entries: { key: string; value: string }[] }[];
      };
      const request = { domain, descriptors: descriptors.map((d) => ({ entries: d.entries })) };
      const got = decoded(writeRateLimitRequest(request));
      expect(got, JSON.stringify(request)).toEqual({
        domain,
        hitsAddend: 0,
        descriptors: request.descriptors.map((d) => ({ entries: d.entries, limit: undefined, hitsAddend: undefined })),
      });
    }
  });
});

describe('readOverallCode', () => {
  it('reads the overall_code of responses proto-loader encodes, whatever else they hold', () => {
    const next = rng(5);
    const codes = ['UNKNOWN', 'OK', 'OVER_LIMIT'] as const;
    for (let i = 0; i < 500; i++) {
      const code = i % 3;
      const statuses = Array.from({ length: Math.floor(next() * 3) }, () => ({
        code: codes[Math.floor(next() * 3)],
        limit_remaining: Math.floor(next() * 1000),
        current_limit: { name: 'n', requests_per_unit: 5, unit: 'SECOND' },
      }));
      const bytes = method.responseSerialize({ overall_code: codes[code], statuses, raw_body: Buffer.from('x') });
      expect(readOverallCode(bytes)).toBe(code);
    }
  });

  it('refuses bytes that are not a message', () => {
    for (const hex of ['08', '0a0561', '0d0000', '1b']) {
      expect(() => readOverallCode(Buffer.from(hex, 'hex')), hex).toThrow(WireError);
    }
  });
});
