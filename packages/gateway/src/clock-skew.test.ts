import { ManualClock } from '@sluice/core';
import { EventOutcome, MemoryTransport, decodeEvents, hashValue, type GatewayEvent } from '@sluice/stream';
import { describe, expect, it, vi } from 'vitest';
import { Gateway } from './gateway.js';

const WALL = 1_764_000_000_000;

describe('a gateway given its measured clock skew', () => {
  it('stamps events and checks block ages on the store clock, not its own', async () => {
    const transport = new MemoryTransport({ partitions: 1 });
    const events: GatewayEvent[] = [];
    const sub = await transport.consume(0, 'test', async (batch) => void events.push(...decodeEvents(batch)));
    // This host's clock runs 5 s ahead of the store's; its monitor measured -5000 ms.
    const skew = { offsetMs: -5000 };
    const options = {
      transport,
      clock: new ManualClock(0),
      wallClock: () => WALL + 5000,
      probe: { batchSize: 1 },
      cache: { maxClockSkewMs: 1000 },
    };
    const corrected = new Gateway({ ...options, clockSkew: skew });
    const uncorrected = new Gateway(options);
    try {
      // A block stamped on the store's clock just now, with a 1 s TTL.
      const fresh = {
        action: 'block',
        dimension: 'user',
        value: hashValue('mallory'),
        ttlMs: 1000,
        retryAfterMs: 1000,
        ruleId: 'r1',
        issuedAtMs: WALL,
      } as const;
      expect(uncorrected.cache.apply(fresh)).toBe(false);
      expect(corrected.cache.apply(fresh)).toBe(true);
      corrected.probe!.emit(hashValue('orders'), 0, 1, 0, 0, 200, EventOutcome.PASSED);
      await vi.waitFor(() => expect(events).toHaveLength(1));
      expect(events[0]!.timestampMs).toBe(WALL);
    } finally {
      await corrected.close();
      await uncorrected.close();
      await sub.stop();
      await transport.close();
    }
  });
});
