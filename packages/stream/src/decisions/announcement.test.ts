import { describe, expect, it } from 'vitest';
import { StreamError, StreamErrorCodes } from '../errors.js';
import { batchKind } from '../events/tallies.js';
import { ANNOUNCEMENT_KIND, decodeAnnouncement, encodeAnnouncement, type AggregatorAnnouncement } from './announcement.js';
import { decodeDecisions } from './codec.js';

function announcement(over: Partial<AggregatorAnnouncement> = {}): AggregatorAnnouncement {
  return {
    id: 'host-a:4242:9f3c',
    group: 'sluice-aggregators',
    partitions: 12,
    layoutVersion: 1,
    ownership: 'memory',
    issuedAtMs: 1_764_000_000_123,
    announceMs: 1000,
    owned: [0, 3, 8, 11],
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

describe('aggregator announcements', () => {
  it('round-trips every field at its bounds', () => {
    const cases = [
      announcement(),
      announcement({ ownership: 'redis', owned: [], partitions: 1, layoutVersion: 255, issuedAtMs: 0, announceMs: 1 }),
      announcement({
        ownership: 'other',
        id: 'é'.repeat(128),
        group: 'g'.repeat(64),
        partitions: 1024,
        owned: Array.from({ length: 1024 }, (_, i) => i),
        issuedAtMs: 2 ** 53 - 1,
        announceMs: 3_600_000,
      }),
    ];
    for (const a of cases) {
      const bytes = encodeAnnouncement(a);
      expect(batchKind(bytes)).toBe(ANNOUNCEMENT_KIND);
      expect(decodeAnnouncement(bytes)).toEqual(a);
    }
    // 24-byte header, the id, the group, one bit per partition.
    expect(encodeAnnouncement(announcement()).length).toBe(24 + 16 + 18 + 2);
  });

  it('is refused by the decision decoder and the other way round', () => {
    expect(codeOf(() => decodeDecisions(encodeAnnouncement(announcement())))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeAnnouncement(new Uint8Array([0x53, 0x4c, 0x44, 1, 0, 0, 0, 0])))).toBe(StreamErrorCodes.MALFORMED);
  });

  it('refuses to encode fields out of range', () => {
    const bad: Partial<AggregatorAnnouncement>[] = [
      { partitions: 0 },
      { partitions: 1025 },
      { layoutVersion: 0 },
      { layoutVersion: 256 },
      { ownership: 'etcd' as AggregatorAnnouncement['ownership'] },
      { issuedAtMs: -1 },
      { announceMs: 0 },
      { announceMs: 3_600_001 },
      { id: '' },
      { id: 'x'.repeat(129) },
      { group: '' },
      { group: 'g'.repeat(65) },
      { owned: [12] },
      { owned: [-1] },
      { owned: [1.5] },
    ];
    for (const b of bad) expect(codeOf(() => encodeAnnouncement(announcement(b)))).toBe(StreamErrorCodes.INVALID_RECORD);
  });

  it('rejects truncated, padded, foreign and out-of-range input', () => {
    const bytes = encodeAnnouncement(announcement());
    for (const n of [0, 3, 23, 24, bytes.length - 1]) {
      expect(codeOf(() => decodeAnnouncement(bytes.subarray(0, n)))).toBe(StreamErrorCodes.MALFORMED);
    }
    expect(codeOf(() => decodeAnnouncement(new Uint8Array([...bytes, 0])))).toBe(StreamErrorCodes.MALFORMED);
    expect(codeOf(() => decodeAnnouncement('SLA' as unknown as Uint8Array))).toBe(StreamErrorCodes.MALFORMED);
    const at = (offset: number, value: number): Uint8Array => {
      const b = bytes.slice();
      b[offset] = value;
      return b;
    };
    // version, partitions 0, layout 0, ownership 3, timestamp past 2^53, announceMs 0, id length 0, group length 0, reserved,
    // a bit for partition 12 of 12 (the last bitmap byte), an id that is not UTF-8.
    const noPartitions = bytes.slice();
    noPartitions.fill(0, 4, 6);
    const noInterval = bytes.slice();
    noInterval.fill(0, 16, 20);
    const cases = [
      at(3, 2),
      noPartitions,
      at(6, 0),
      at(7, 3),
      at(8, 0xff),
      noInterval,
      at(21, 0),
      at(22, 0),
      at(23, 1),
      at(bytes.length - 1, bytes[bytes.length - 1]! | 0x10),
      at(24, 0xff),
    ];
    for (const b of cases) expect(codeOf(() => decodeAnnouncement(b))).toBe(StreamErrorCodes.MALFORMED);
  });
});
