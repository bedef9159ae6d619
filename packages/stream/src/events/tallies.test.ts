import { describe, expect, it } from 'vitest';
import { StreamError, StreamErrorCodes } from '../errors.js';
import {
  EVENT_HEADER_BYTES_V1,
  EventOutcome,
  batchLayout,
  decodeEvents,
  encodeEvents,
  hashValue,
  type BatchLayout,
} from './codec.js';
import {
  BatchKind,
  MAX_TALLIES_PER_BATCH,
  TALLY_BYTES,
  TALLY_HEADER_BYTES,
  batchKind,
  decodeTallies,
  encodeTallies,
  type RejectionTally,
} from './tallies.js';

const T = 1_764_000_000_123;
const LAYOUT: BatchLayout = { partitions: 16, version: 1 };
/** A tally batch of the current format, as gateways write it. */
const encT = (tallies: readonly RejectionTally[]): Uint8Array => encodeTallies(tallies, LAYOUT);

function tally(over: Partial<RejectionTally> = {}): RejectionTally {
  return {
    resource: hashValue('api'),
    path: hashValue('/search'),
    dimension: 'path',
    value: hashValue('/search'),
    count: 412,
    lastMs: T,
    spanMs: 9,
    ...over,
  };
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err instanceof StreamError ? err.code : 'not a StreamError';
  }
}

describe('rejection tallies', () => {
  it('round-trips every field in 32 bytes per record', () => {
    const tallies = [
      tally(),
      tally({ dimension: 'user', value: 0xffff_ffff, path: 0, count: 0xffff_ffff, spanMs: 0 }),
      tally({ dimension: 'tenant', value: 1, lastMs: 2 ** 53 - 1, spanMs: 0xffff_ffff }),
      tally({ dimension: 'resource', value: hashValue('api') }),
      tally({ dimension: 'ip', value: 77, count: 1 }),
    ];
    const bytes = encT(tallies);
    expect(bytes.length).toBe(TALLY_HEADER_BYTES + tallies.length * TALLY_BYTES);
    expect(TALLY_BYTES).toBe(32);
    expect(decodeTallies(bytes)).toEqual(tallies);
    // A view into a larger buffer decodes the same.
    const big = new Uint8Array(bytes.length + 7);
    big.set(bytes, 3);
    expect(decodeTallies(big.subarray(3, 3 + bytes.length))).toEqual(tallies);
  });

  it('tells tally batches from event batches, and neither decoder reads the other', () => {
    const tallies = encT([tally()]);
    const events = encodeEvents([
      { resource: 1, path: 2, user: 0, ip: 0, tenant: 0, timestampMs: T, status: 200, outcome: EventOutcome.PASSED },
    ]);
    expect(batchKind(tallies)).toBe(BatchKind.TALLIES);
    expect(batchKind(events)).toBe(BatchKind.EVENTS);
    expect(batchKind(new TextEncoder().encode('{"x":1}'))).toBe(0);
    expect(batchKind(new Uint8Array([0x53]))).toBe(0);
    expect(codeOf(() => decodeEvents(tallies))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeTallies(events))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('refuses to encode out-of-range fields and oversized batches', () => {
    const bad: Partial<RejectionTally>[] = [
      { resource: 0 },
      { resource: 2 ** 32 },
      { path: -1 },
      { value: 0 },
      { dimension: 'method' as RejectionTally['dimension'] },
      { count: 0 },
      { count: 2 ** 32 },
      { count: 1.5 },
      { lastMs: -1 },
      { lastMs: 2 ** 53 },
      { spanMs: T + 1 },
      { spanMs: -1 },
    ];
    for (const b of bad) expect(codeOf(() => encT([tally(), tally(b)]))).toBe(StreamErrorCodes.INVALID_RECORD);
    const max = Array.from({ length: MAX_TALLIES_PER_BATCH }, () => tally());
    expect(decodeTallies(encT(max))).toHaveLength(MAX_TALLIES_PER_BATCH);
    expect(codeOf(() => encT([...max, tally()]))).toBe(StreamErrorCodes.BATCH_TOO_LARGE);
  });

  it('rejects truncated, foreign, oversized and out-of-range input', () => {
    const bytes = encT([tally(), tally()]);
    for (const n of [0, 3, TALLY_HEADER_BYTES - 1, TALLY_HEADER_BYTES, bytes.length - 1]) {
      expect(codeOf(() => decodeTallies(bytes.subarray(0, n)))).toBe(StreamErrorCodes.MALFORMED);
    }
    expect(codeOf(() => decodeTallies(new Uint8Array([...bytes, 0])))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeTallies('SLR' as unknown as Uint8Array))).toBe(StreamErrorCodes.MALFORMED);
    for (const version of [0, 3]) {
      const wrongVersion = bytes.slice();
      wrongVersion[3] = version;
      expect(codeOf(() => decodeTallies(wrongVersion))).toBe(StreamErrorCodes.MALFORMED);
    }
    const huge = new Uint8Array(TALLY_HEADER_BYTES);
    huge.set([0x53, 0x4c, 0x52, 2, 0xff, 0xff, 0xff, 0xff, 0, 16, 1, 0]);
    expect(codeOf(() => decodeTallies(huge))).toBe(StreamErrorCodes.MALFORMED);
    const at = (offset: number, value: number): Uint8Array => {
      const b = encT([tally()]);
      b[TALLY_HEADER_BYTES + offset] = value;
      return b;
    };
    const zero = (offset: number): Uint8Array => {
      const b = encT([tally()]);
      b.fill(0, TALLY_HEADER_BYTES + offset, TALLY_HEADER_BYTES + offset + 4);
      return b;
    };
    // resource 0, value 0, dimension 0 and 6, reserved bytes, count 0, timestamp past 2^53, span past the epoch.
    const early = encT([tally({ lastMs: 5, spanMs: 5 })]);
    early[TALLY_HEADER_BYTES + 31] = 6;
    const cases = [zero(0), zero(8), at(12, 0), at(12, 6), at(13, 1), at(15, 1), zero(16), at(20, 0xff), early];
    for (const b of cases) expect(codeOf(() => decodeTallies(b))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('carries the layout in format 2 and still reads format 1', () => {
    expect(batchLayout(encT([tally()]))).toEqual(LAYOUT);
    const v1 = encodeTallies([tally()]);
    expect(v1[3]).toBe(1);
    expect(v1.length).toBe(EVENT_HEADER_BYTES_V1 + TALLY_BYTES);
    expect(batchLayout(v1)).toBeUndefined();
    expect(decodeTallies(v1)).toEqual([tally()]);
  });
});
