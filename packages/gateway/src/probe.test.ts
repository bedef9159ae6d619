import { ManualClock, isSluiceError } from '@sluice/core';
import {
  EventOutcome,
  LAYOUT_VERSION,
  MemoryTransport,
  batchLayout,
  decodeEvents,
  hashValue,
  partitionOf,
  type AggregatorAnnouncement,
  type BatchHandler,
  type EventTransport,
  type GatewayEvent,
  type Subscription,
} from '@sluice/stream';
import { describe, expect, it, vi } from 'vitest';
import { Probe } from './probe.js';

const WALL = 1_764_000_000_000;

/** A transport whose publishes the test settles by hand. */
class FakeTransport implements EventTransport {
  readonly name = 'fake';
  readonly published: { partition: number; batch: Uint8Array }[] = [];
  readonly waiting: { resolve: () => void; reject: (err: Error) => void }[] = [];
  mode: 'accept' | 'hang' | 'reject' | 'throw' = 'accept';

  constructor(readonly partitions = 4) {}

  publish(partition: number, batch: Uint8Array): Promise<void> {
    if (this.mode === 'throw') throw new Error('down');
    this.published.push({ partition, batch });
    if (this.mode === 'accept') return Promise.resolve();
    if (this.mode === 'reject') return Promise.reject(new Error('stream down'));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
  consume(_p: number, _g: string, _h: BatchHandler): Promise<Subscription> {
    throw new Error('not used');
  }
  broadcast(): Promise<void> {
    throw new Error('not used');
  }
  subscribeDecisions(): Promise<Subscription> {
    throw new Error('not used');
  }
  async close(): Promise<void> {}

  events(): GatewayEvent[] {
    return this.published.flatMap((p) => decodeEvents(p.batch));
  }
}

function setup(options: Partial<ConstructorParameters<typeof Probe>[0]> = {}, partitions = 4) {
  const clock = new ManualClock(0);
  let wall = WALL;
  const transport = new FakeTransport(partitions);
  const probe = new Probe({ transport, clock, wallClock: () => wall, ...options });
  return {
    probe,
    clock,
    transport,
    advance: (ms: number) => {
      clock.advance(ms);
      wall += ms;
    },
  };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));
const R = hashValue('orders');

describe('Probe', () => {
  it('sends a full batch at once and a partial one after the flush interval', async () => {
    const { probe, transport, advance } = setup({ batchSize: 10, flushIntervalMs: 10 });
    for (let i = 1; i <= 25; i++) expect(probe.emit(R, 7, i, 9, 0, 200, EventOutcome.PASSED)).toBe(true);
    expect(transport.published).toHaveLength(2);
    advance(9);
    expect(transport.published).toHaveLength(2);
    advance(1);
    expect(transport.published).toHaveLength(3);
    await flush();
    expect(probe.stats).toMatchObject({ sent: 25, batches: 3, buffered: 0, inFlight: 0 });
    const events = transport.events();
    expect(events.map((e) => e.user)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    expect(events[0]).toEqual({ resource: R, path: 7, user: 1, ip: 9, tenant: 0, timestampMs: WALL, status: 200, outcome: 0 });
    // Format 2: a 12-byte header carrying the transport's partition count.
    expect(transport.published.map((p) => p.batch.length)).toEqual([12 + 320, 12 + 320, 12 + 160]);
    for (const p of transport.published) expect(batchLayout(p.batch)).toEqual({ partitions: 4, version: LAYOUT_VERSION });
  });

  it('writes format 1 (no layout) for aggregators of 0.1 when asked, and refuses other formats', async () => {
    const { probe, transport, advance } = setup({ batchSize: 10, batchFormat: 1 });
    for (let i = 1; i <= 12; i++) probe.emit(R, 7, i, 9, 0, 200, EventOutcome.PASSED);
    advance(10);
    await flush();
    expect(transport.published.map((p) => p.batch.length)).toEqual([8 + 320, 8 + 64]);
    expect(transport.published.map((p) => p.batch[3])).toEqual([1, 1]);
    expect(transport.events().map((e) => e.user)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    for (const batchFormat of [0, 3, '2']) {
      let code: string | undefined;
      try {
        setup({ batchFormat: batchFormat as 1 });
      } catch (err) {
        code = isSluiceError(err) ? err.code : 'other';
      }
      expect(code).toBe('SLUICE_ERR_INVALID_OPTIONS');
    }
  });

  it('counts and reports an aggregator announcement that splits the stream otherwise', () => {
    const seen: unknown[] = [];
    const { probe } = setup({ observer: { layoutMismatch: (a, own) => seen.push([a, own]) } }, 8);
    const announcement = (partitions: number, layoutVersion = LAYOUT_VERSION): AggregatorAnnouncement => ({
      id: 'agg-1',
      group: 'sluice-aggregators',
      partitions,
      layoutVersion,
      ownership: 'redis',
      issuedAtMs: WALL,
      announceMs: 1000,
      owned: [0],
    });
    expect(probe.checkAnnouncement(announcement(8))).toBeUndefined();
    expect(probe.stats.layoutMismatches).toBe(0);
    expect(probe.checkAnnouncement(announcement(4))).toEqual({
      aggregator: 'agg-1',
      partitions: 4,
      layoutVersion: LAYOUT_VERSION,
    });
    expect(probe.checkAnnouncement(announcement(8, LAYOUT_VERSION + 1))).toEqual({
      aggregator: 'agg-1',
      partitions: 8,
      layoutVersion: LAYOUT_VERSION + 1,
    });
    expect(probe.stats.layoutMismatches).toBe(2);
    expect(probe.stats.lastMismatch).toEqual({ aggregator: 'agg-1', partitions: 8, layoutVersion: LAYOUT_VERSION + 1 });
    expect(seen[0]).toEqual([
      { aggregator: 'agg-1', partitions: 4, layoutVersion: LAYOUT_VERSION },
      { partitions: 8, version: LAYOUT_VERSION },
    ]);
  });

  it('puts each resource on its partition, and spreads it over `spread` partitions in time', async () => {
    const { probe, transport } = setup({ batchSize: 1 }, 8);
    const resources = Array.from({ length: 20 }, (_, i) => hashValue(`r${i}`));
    for (const r of resources) probe.emit(r, 0, 0, 0, 0, 200, 0);
    await flush();
    for (const p of transport.published) expect(p.partition).toBe(partitionOf(decodeEvents(p.batch)[0]!.resource, 8));

    const spread = setup({ batchSize: 1, spread: 4, saltMs: 1000 }, 8);
    for (let i = 0; i < 8; i++) {
      spread.probe.emit(R, 0, 0, 0, 0, 200, 0);
      spread.advance(1000);
    }
    const parts = new Set(spread.transport.published.map((p) => p.partition));
    expect(parts.size).toBe(4);
    for (const p of parts) expect((p - (R % 8) + 8) % 8).toBeLessThan(4);
  });

  it('keeps at most maxInFlight publishes outstanding and drops beyond maxBufferedEvents', async () => {
    const { probe, transport } = setup({ batchSize: 10, maxInFlight: 2, maxBufferedEvents: 100 });
    transport.mode = 'hang';
    let accepted = 0;
    for (let i = 0; i < 1000; i++) if (probe.emit(R, 0, i + 1, 0, 0, 200, 0)) accepted++;
    expect(accepted).toBe(100);
    expect(transport.published).toHaveLength(2);
    expect(probe.stats).toMatchObject({ buffered: 100, inFlight: 2 });
    expect(probe.stats.dropped.buffer_full).toBe(900);
    // The stream recovers: waiting batches go out, the buffer empties, new events are accepted.
    transport.mode = 'accept';
    for (const w of transport.waiting.splice(0)) w.resolve();
    await vi.waitFor(() => expect(probe.stats.buffered).toBe(0));
    expect(probe.stats.sent).toBe(100);
    expect(probe.emit(R, 0, 1, 0, 0, 200, 0)).toBe(true);
  });

  it('counts rejected and throwing publishes as dropped, never throws', async () => {
    const { probe, transport } = setup({ batchSize: 5 });
    transport.mode = 'reject';
    for (let i = 0; i < 10; i++) probe.emit(R, 0, 0, 0, 0, 200, 0);
    transport.mode = 'throw';
    for (let i = 0; i < 5; i++) probe.emit(R, 0, 0, 0, 0, 200, 0);
    await vi.waitFor(() => expect(probe.stats.publishErrors).toBe(3));
    expect(probe.stats.dropped.publish_error).toBe(15);
    expect(probe.stats).toMatchObject({ sent: 0, buffered: 0, inFlight: 0 });
  });

  it('times each publish on its clock, answered or failed', async () => {
    const times: [number, boolean][] = [];
    const { probe, transport, advance } = setup({
      batchSize: 2,
      observer: { published: (ms, error) => times.push([ms, error !== undefined]) },
    });
    transport.mode = 'hang';
    for (let i = 0; i < 4; i++) probe.emit(R, 0, i + 1, 0, 0, 200, 0);
    advance(7);
    transport.waiting[0]!.resolve();
    await flush();
    advance(5);
    transport.waiting[1]!.reject(new Error('stream down'));
    await vi.waitFor(() => expect(times).toHaveLength(2));
    expect(times).toEqual([
      [7, false],
      [12, true],
    ]);
  });

  it('drops events with fields out of range instead of poisoning a batch', async () => {
    const { probe, transport } = setup({ batchSize: 3 });
    expect(probe.emit(0, 0, 0, 0, 0, 200, 0)).toBe(false);
    expect(probe.emit(R, 0, 0, 0, 0, 1000, 0)).toBe(false);
    expect(probe.emit(R, 0, 0, 0, 0, 200, 2)).toBe(false);
    for (let i = 0; i < 3; i++) probe.emit(R, 0, 0, 0, 0, 200, 1);
    await flush();
    expect(probe.stats.dropped.invalid).toBe(3);
    expect(transport.events()).toHaveLength(3);
  });

  it('keeps the timestamp of recorded event objects', async () => {
    const { probe, transport } = setup({ batchSize: 1 });
    const e: GatewayEvent = { resource: R, path: 1, user: 2, ip: 3, tenant: 4, timestampMs: 123, status: 503, outcome: 1 };
    probe.record(e);
    await flush();
    expect(transport.events()).toEqual([e]);
  });

  it('flushes on close and drops what the stream did not take within the bound', async () => {
    const ok = setup({ batchSize: 100 });
    for (let i = 0; i < 5; i++) ok.probe.emit(R, 0, 0, 0, 0, 200, 0);
    await ok.probe.close();
    expect(ok.probe.stats).toMatchObject({ sent: 5, buffered: 0 });
    expect(ok.probe.emit(R, 0, 0, 0, 0, 200, 0)).toBe(false);
    expect(ok.probe.stats.dropped.closed).toBe(1);

    const slow = setup({ batchSize: 10, maxInFlight: 1, closeTimeoutMs: 500 });
    slow.transport.mode = 'hang';
    for (let i = 0; i < 30; i++) slow.probe.emit(R, 0, 0, 0, 0, 200, 0);
    const closing = slow.probe.close();
    await slow.clock.advanceAsync(500);
    await closing;
    expect(slow.probe.stats.dropped.closed).toBe(20);
    expect(slow.probe.stats.inFlight).toBe(1);
    slow.transport.waiting[0]!.resolve();
    await vi.waitFor(() => expect(slow.probe.stats.sent).toBe(10));
    expect(slow.probe.stats.buffered).toBe(0);
  });

  it('delivers decodable batches through the memory transport', async () => {
    const transport = new MemoryTransport({ partitions: 2 });
    const probe = new Probe({ transport, batchSize: 50 });
    const received: GatewayEvent[] = [];
    const subs = await Promise.all(
      [0, 1].map((p) => transport.consume(p, 'test', async (batch) => void received.push(...decodeEvents(batch)))),
    );
    try {
      for (let i = 1; i <= 120; i++) probe.emit(hashValue(`res${i % 3}`), 0, i, 0, 0, 200, 0);
      await probe.close();
      await vi.waitFor(() => expect(received).toHaveLength(120));
      expect(new Set(received.map((e) => e.user)).size).toBe(120);
    } finally {
      await Promise.all(subs.map((s) => s.stop()));
      await transport.close();
    }
  });

  it('rejects malformed options', () => {
    const transport = new FakeTransport(4);
    for (const o of [{ batchSize: 0 }, { batchSize: 10_001 }, { maxInFlight: 0 }, { spread: 5 }, { flushIntervalMs: -1 }]) {
      try {
        new Probe({ transport, ...o });
        expect.unreachable();
      } catch (err) {
        expect(isSluiceError(err, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      }
    }
    expect(() => new Probe({ transport: undefined as unknown as EventTransport })).toThrow(
      expect.objectContaining({ field: 'transport' }) as Error,
    );
  });
});
