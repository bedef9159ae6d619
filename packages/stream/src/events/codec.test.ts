import { describe, expect, it } from 'vitest';
import { StreamErrorCodes, isStreamError } from '../errors.js';
import {
  EVENT_BYTES,
  EVENT_HEADER_BYTES,
  EventOutcome,
  MAX_EVENTS_PER_BATCH,
  decodeEvents,
  encodeEvents,
  eventCount,
  hashRange,
  hashValue,
  type GatewayEvent,
} from './codec.js';

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
    const bytes = encodeEvents(events);
    expect(bytes.length).toBe(EVENT_HEADER_BYTES + 3 * EVENT_BYTES);
    expect(decodeEvents(bytes)).toEqual(events);
  });

  it('uses 32 bytes per event', () => {
    expect(encodeEvents([]).length).toBe(EVENT_HEADER_BYTES);
    expect(encodeEvents(Array.from({ length: 100 }, () => event())).length).toBe(EVENT_HEADER_BYTES + 3200);
  });

  it('decodes a batch that sits inside a larger buffer', () => {
    const bytes = encodeEvents([event()]);
    const big = new Uint8Array(bytes.length + 10);
    big.set(bytes, 5);
    expect(decodeEvents(big.subarray(5, 5 + bytes.length))).toEqual([event()]);
  });

  it('accepts the maximum batch and refuses one more event', () => {
    const max = Array.from({ length: MAX_EVENTS_PER_BATCH }, (_, i) => event({ user: i }));
    expect(eventCount(encodeEvents(max))).toBe(MAX_EVENTS_PER_BATCH);
    expect(codeOf(() => encodeEvents([...max, event()]))).toBe(StreamErrorCodes.BATCH_TOO_LARGE);
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
    for (const b of bad) expect(codeOf(() => encodeEvents([event(), event(b)]))).toBe(StreamErrorCodes.INVALID_RECORD);
  });

  it('rejects truncated input', () => {
    const bytes = encodeEvents([event(), event()]);
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
    const bytes = encodeEvents([event()]);
    const wrongVersion = bytes.slice();
    wrongVersion[3] = 2;
    expect(codeOf(() => decodeEvents(wrongVersion))).toBe(StreamErrorCodes.MALFORMED);
    const decisionKind = bytes.slice();
    decisionKind[2] = 0x44;
    expect(codeOf(() => decodeEvents(decisionKind))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeEvents('SL' as unknown as Uint8Array))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects a header that claims more events than the bound without allocating them', () => {
    const bytes = new Uint8Array(EVENT_HEADER_BYTES);
    bytes.set([0x53, 0x4c, 0x45, 1, 0xff, 0xff, 0xff, 0xff]);
    expect(codeOf(() => decodeEvents(bytes))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('rejects records with out-of-range fields', () => {
    const at = (offset: number, value: number): Uint8Array => {
      const bytes = encodeEvents([event()]);
      bytes[EVENT_HEADER_BYTES + offset] = value;
      return bytes;
    };
    const zeroResource = encodeEvents([event()]);
    zeroResource.fill(0, EVENT_HEADER_BYTES, EVENT_HEADER_BYTES + 4);
    for (const bytes of [zeroResource, at(20, 0xff), at(28, 0xff), at(30, 2), at(31, 1)]) {
      expect(codeOf(() => decodeEvents(bytes))).toBe(StreamErrorCodes.MALFORMED);
    }
  });
});
