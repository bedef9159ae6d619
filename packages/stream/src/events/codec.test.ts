import { describe, expect, it } from 'vitest';
import { StreamErrorCodes, isStreamError } from '../errors.js';
import {
  EVENT_BYTES,
  EVENT_HEADER_BYTES,
  EVENT_HEADER_BYTES_V1,
  EventOutcome,
  LAYOUT_VERSION,
  MAX_EVENTS_PER_BATCH,
  batchLayout,
  decodeEvents,
  encodeEvents,
  eventCount,
  hashRange,
  hashValue,
  type BatchLayout,
  type GatewayEvent,
} from './codec.js';

const LAYOUT: BatchLayout = { partitions: 8, version: LAYOUT_VERSION };
/** A batch of the current format, as gateways write it. */
const enc = (events: readonly GatewayEvent[]): Uint8Array => encodeEvents(events, LAYOUT);

function event(overrides: Partial<GatewayEvent> = {}): GatewayEvent {
  return {
    resource: hashValue('api'),
    path: hashValue('/orders/:id'),
    user: hashValue('alice'),
    ip: hashValue('10.0.0.1'),
    tenant: 0,
    timestampMs: 1_764_000_000_123,
    status: 200,
    outcome: EventOutcome.PASSED,
    ...overrides,
  };
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isStreamError(err) ? err.code : 'not a StreamError';
  }
  return undefined;
}

describe('hashValue', () => {
  it('is FNV-1a 32 over UTF-8 bytes (reference vectors)', () => {
    expect(hashValue('a')).toBe(0xe40c292c);
    expect(hashValue('foobar')).toBe(0xbf9cf968);
  });

  it('hashes non-ASCII text as its UTF-8 bytes', () => {
    const reference = (s: string): number => {
      let h = 0x811c9dc5;
      for (const b of new TextEncoder().encode(s)) h = Math.imul(h ^ b, 0x01000193);
      return h >>> 0 || 1;
    };
    for (const s of ['é', '用户', '🚀 rocket', 'a\ud800b', '\udc00']) expect(hashValue(s)).toBe(reference(s));
  });

  it('hashes a range like the slice it stands for', () => {
    for (const s of ['/orders/42?x=1', 'é/用户/🚀', 'abc']) {
      for (let a = 0; a <= s.length; a++)
        for (let b = a; b <= s.length + 1; b++) expect(hashRange(s, a, b)).toBe(hashValue(s.slice(a, b)));
    }
  });

  it('returns 0 only for the empty string', () => {
    expect(hashValue('')).toBe(0);
    for (let i = 0; i < 10_000; i++) expect(hashValue(`u${i}`)).not.toBe(0);
  });
});

describe('event codec', () => {
  it('round-trips a batch with every field at its bounds', () => {
    const events = [
      event(),
      event({ path: 0, user: 0, ip: 0, tenant: 0, status: 0, outcome: EventOutcome.ERROR, timestampMs: 0 }),
      event({ resource: 0xffffffff, path: 0xffffffff, tenant: 1, status: 999, timestampMs: Number.MAX_SAFE_INTEGER }),
    ];
    const bytes = enc(events);
    expect(bytes.length).toBe(EVENT_HEADER_BYTES + 3 * EVENT_BYTES);
    expect(decodeEvents(bytes)).toEqual(events);
  });

  it('uses 32 bytes per event', () => {
    expect(enc([]).length).toBe(EVENT_HEADER_BYTES);
    expect(enc(Array.from({ length: 100 }, () => event())).length).toBe(EVENT_HEADER_BYTES + 3200);
  });

  it('decodes a batch that sits inside a larger buffer', () => {
    const bytes = enc([event()]);
    const big = new Uint8Array(bytes.length + 10);
    big.set(bytes, 5);
    expect(decodeEvents(big.subarray(5, 5 + bytes.length))).toEqual([event()]);
  });

  it('accepts the maximum batch and refuses one more event', () => {
    const max = Array.from({ length: MAX_EVENTS_PER_BATCH }, (_, i) => event({ user: i }));
    expect(eventCount(enc(max))).toBe(MAX_EVENTS_PER_BATCH);
    expect(codeOf(() => enc([...max, event()]))).toBe(StreamErrorCodes.BATCH_TOO_LARGE);
  });

  it('refuses events with fields out of range', () => {
    const bad: Partial<GatewayEvent>[] = [
      { resource: 0 },
      { resource: -1 },
      { path: 2 ** 32 },
      { user: 1.5 },
      { ip: Number.NaN },
      { tenant: -3 },
      { timestampMs: -1 },
      { timestampMs: 2 ** 53 },
      { status: 1000 },
      { outcome: 2 },
    ];
    for (const b of bad) expect(codeOf(() => enc([event(), event(b)]))).toBe(StreamErrorCodes.INVALID_RECORD);
  });

  it('rejects truncated input', () => {
    const bytes = enc([event(), event()]);
    for (const n of [0, 3, EVENT_HEADER_BYTES - 1, EVENT_HEADER_BYTES, bytes.length - 1]) {
      expect(codeOf(() => decodeEvents(bytes.subarray(0, n)))).toBe(
        n === EVENT_HEADER_BYTES ? StreamErrorCodes.MALFORMED : StreamErrorCodes.MALFORMED,
      );
    }
    expect(codeOf(() => decodeEvents(new Uint8Array([...bytes, 0])))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects foreign input', () => {
    const json = new TextEncoder().encode(JSON.stringify({ events: [event()] }));
    expect(codeOf(() => decodeEvents(json))).toBe(StreamErrorCodes.MALFORMED);
    const bytes = enc([event()]);
    for (const version of [0, 3]) {
      const wrongVersion = bytes.slice();
      wrongVersion[3] = version;
      expect(codeOf(() => decodeEvents(wrongVersion))).toBe(StreamErrorCodes.MALFORMED);
    }
    const decisionKind = bytes.slice();
    decisionKind[2] = 0x44;
    expect(codeOf(() => decodeEvents(decisionKind))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeEvents('SL' as unknown as Uint8Array))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects a header that claims more events than the bound without allocating them', () => {
    const bytes = new Uint8Array(EVENT_HEADER_BYTES);
    bytes.set([0x53, 0x4c, 0x45, 2, 0xff, 0xff, 0xff, 0xff, 0, 8, 1, 0]);
    expect(codeOf(() => decodeEvents(bytes))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects records with out-of-range fields', () => {
    const at = (offset: number, value: number): Uint8Array => {
      const bytes = enc([event()]);
      bytes[EVENT_HEADER_BYTES + offset] = value;
      return bytes;
    };
    const zeroResource = enc([event()]);
    zeroResource.fill(0, EVENT_HEADER_BYTES, EVENT_HEADER_BYTES + 4);
    for (const bytes of [zeroResource, at(20, 0xff), at(28, 0xff), at(30, 2), at(31, 1)]) {
      expect(codeOf(() => decodeEvents(bytes))).toBe(StreamErrorCodes.MALFORMED);
    }
  });

  it("carries the writer's layout in format 2 and reads it back", () => {
    const bytes = enc([event()]);
    expect(bytes[3]).toBe(2);
    expect(batchLayout(bytes)).toEqual(LAYOUT);
    expect(batchLayout(encodeEvents([event()], { partitions: 1024, version: 255 }))).toEqual({ partitions: 1024, version: 255 });
    for (const layout of [
      { partitions: 0, version: 1 },
      { partitions: 1025, version: 1 },
      { partitions: 8, version: 0 },
      { partitions: 8, version: 256 },
    ]) {
      expect(codeOf(() => encodeEvents([event()], layout))).toBe(StreamErrorCodes.INVALID_RECORD);
    }
  });

  it('still reads format 1 (no layout), as 0.1 gateways write it', () => {
    const v1 = encodeEvents([event(), event({ user: 0 })]);
    expect(v1[3]).toBe(1);
    expect(v1.length).toBe(EVENT_HEADER_BYTES_V1 + 2 * EVENT_BYTES);
    expect(decodeEvents(v1)).toEqual([event(), event({ user: 0 })]);
    expect(batchLayout(v1)).toBeUndefined();
    // A format 1 batch relabelled as format 2 is refused, not misread.
    const relabelled = v1.slice();
    relabelled[3] = 2;
    expect(codeOf(() => decodeEvents(relabelled))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('refuses a format 2 header with a layout out of range or its reserved byte set', () => {
    const at = (offset: number, value: number): Uint8Array => {
      const bytes = enc([event()]);
      bytes[offset] = value;
      return bytes;
    };
    // partitions 0, partitions 1025 (0x0401), layout version 0, reserved byte.
    const zeroPartitions = enc([event()]);
    zeroPartitions.fill(0, 8, 10);
    const over = enc([event()]);
    over.set([0x04, 0x01], 8);
    for (const bytes of [zeroPartitions, over, at(10, 0), at(11, 1)]) {
      expect(codeOf(() => decodeEvents(bytes))).toBe(StreamErrorCodes.MALFORMED);
    }
  });
});
