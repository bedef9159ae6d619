import { ManualClock, isSluiceError } from '@sluice/core';
import {
  BatchKind,
  EventOutcome,
  batchKind,
  decodeEvents,
  decodeTallies,
  hashValue,
  partitionOf,
  type EventTransport,
  type RejectionTally,
  type Subscription,
} from '@sluice/stream';
import { describe, expect, it } from 'vitest';
import { Probe, type ProbeOptions } from './probe.js';

const WALL = 1_764_000_000_000;
const R = hashValue('orders');
const SEARCH = hashValue('/search');

/** A transport that records publishes; `mode` decides how they settle. */
class RecordingTransport implements EventTransport {
  readonly name = 'recording';
  readonly published: { partition: number; batch: Uint8Array }[] = [];
  readonly waiting: (() => void)[] = [];
  mode: 'accept' | 'reject' | 'hang' = 'accept';

  constructor(readonly partitions = 4) {}

  publish(partition: number, batch: Uint8Array): Promise<void> {
    this.published.push({ partition, batch });
    if (this.mode === 'reject') return Promise.reject(new Error('stream down'));
    if (this.mode === 'hang') return new Promise((resolve) => this.waiting.push(resolve));
    return Promise.resolve();
  }
  consume(): Promise<Subscription> {
    throw new Error('not used');
  }
  broadcast(): Promise<void> {
    throw new Error('not used');
  }
  subscribeDecisions(): Promise<Subscription> {
    throw new Error('not used');
  }
  async close(): Promise<void> {}

  tallies(): (RejectionTally & { partition: number })[] {
    return this.published
      .filter((p) => batchKind(p.batch) === BatchKind.TALLIES)
      .flatMap((p) => decodeTallies(p.batch).map((t) => ({ ...t, partition: p.partition })));
  }
}

function setup(options: Partial<ProbeOptions> = {}) {
  const clock = new ManualClock(0);
  let wall = WALL;
  const transport = new RecordingTransport();
  const probe = new Probe({ transport, clock, wallClock: () => wall, flushIntervalMs: 10, ...options });
  const advance = (ms: number) => {
    clock.advance(ms);
    wall += ms;
  };
  return { probe, transport, advance };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('Probe rejection counters', () => {
  it('counts rejections per block, resource and path, and sends one tally each per flush', async () => {
    const { probe, transport, advance } = setup();
    const other = hashValue('billing');
    for (let i = 0; i < 500; i++) {
      expect(probe.reject(R, SEARCH, 'path', SEARCH)).toBe(true);
      if (i === 249) advance(4);
    }
    for (let i = 0; i < 30; i++) probe.reject(other, hashValue('/pay'), 'user', 77);
    probe.reject(R, SEARCH, 'user', 77);
    // Nothing is sent per request: the counters go out with the flush.
    expect(transport.published).toHaveLength(0);
    advance(10);
    await settle();
    const tallies = transport.tallies();
    expect(tallies).toHaveLength(3);
    expect(tallies).toContainEqual({
      resource: R,
      path: SEARCH,
      dimension: 'path',
      value: SEARCH,
      count: 500,
      lastMs: WALL + 4,
      spanMs: 4,
      partition: partitionOf(R, 4),
    });
    expect(tallies.find((t) => t.resource === other)).toMatchObject({ dimension: 'user', value: 77, count: 30, spanMs: 0 });
    expect(tallies.find((t) => t.resource === R && t.dimension === 'user')).toMatchObject({ count: 1 });
    for (const t of tallies) expect(t.partition).toBe(partitionOf(t.resource, 4));
    expect(probe.stats).toMatchObject({ rejected: 531, rejectedDropped: 0, tallyBatches: transport.published.length, sent: 0 });
    // The next interval starts from zero.
    probe.reject(R, SEARCH, 'path', SEARCH);
    advance(10);
    await settle();
    expect(transport.tallies().slice(3)).toMatchObject([{ count: 1, lastMs: WALL + 14, spanMs: 0 }]);
  });

  it('sends tallies beside events, in batches of their own', async () => {
    const { probe, transport, advance } = setup();
    probe.emit(R, hashValue('/orders'), 0, 0, 0, 200, EventOutcome.PASSED);
    probe.reject(R, SEARCH, 'path', SEARCH);
    advance(10);
    await settle();
    const kinds = transport.published.map((p) => batchKind(p.batch)).sort();
    expect(kinds).toEqual([BatchKind.EVENTS, BatchKind.TALLIES]);
    const events = transport.published
      .filter((p) => batchKind(p.batch) === BatchKind.EVENTS)
      .flatMap((p) => decodeEvents(p.batch));
    expect(events).toHaveLength(1);
    expect(probe.stats).toMatchObject({ sent: 1, batches: 1, rejected: 1, tallyBatches: 1 });
  });

  it('bounds the counters: past maxTallies new blocks are not counted, known ones still are', async () => {
    const { probe, transport, advance } = setup({ maxTallies: 3 });
    for (let v = 1; v <= 5; v++) expect(probe.reject(R, SEARCH, 'ip', v)).toBe(v <= 3);
    expect(probe.reject(R, SEARCH, 'ip', 2)).toBe(true);
    advance(10);
    await settle();
    expect(transport.tallies().map((t) => [t.value, t.count])).toEqual([
      [1, 1],
      [2, 2],
      [3, 1],
    ]);
    expect(probe.stats).toMatchObject({ rejected: 4, rejectedDropped: 2 });
  });

  it('keeps counting while earlier tallies wait to be published, then sends the sum', async () => {
    const { probe, transport, advance } = setup({ maxTallies: 1 });
    transport.mode = 'hang';
    probe.reject(R, SEARCH, 'path', SEARCH);
    advance(10);
    expect(transport.published).toHaveLength(1);
    // One record is waiting (the bound): the counter keeps the new rejections instead of sealing them.
    for (let i = 0; i < 9; i++) probe.reject(R, SEARCH, 'path', SEARCH);
    advance(10);
    advance(10);
    expect(transport.published).toHaveLength(1);
    transport.mode = 'accept';
    transport.waiting.shift()!();
    await settle();
    advance(10);
    await settle();
    expect(transport.tallies().map((t) => t.count)).toEqual([1, 9]);
    expect(probe.stats).toMatchObject({ rejected: 10, rejectedDropped: 0 });
  });

  it('counts rejections whose tally failed to publish, or came after close, as dropped', async () => {
    const seen = { tallied: 0, uncounted: 0 };
    const { probe, transport, advance } = setup({
      observer: { rejectionsTallied: (n) => void (seen.tallied += n), rejectionsUncounted: (n) => void (seen.uncounted += n) },
    });
    transport.mode = 'reject';
    for (let i = 0; i < 7; i++) probe.reject(R, SEARCH, 'path', SEARCH);
    advance(10);
    await settle();
    expect(probe.stats).toMatchObject({ rejected: 0, rejectedDropped: 7, publishErrors: 1 });
    expect(probe.stats.dropped.publish_error).toBe(0);
    transport.mode = 'accept';
    probe.reject(R, SEARCH, 'path', SEARCH);
    await probe.close();
    expect(probe.stats).toMatchObject({ rejected: 1 });
    expect(probe.reject(R, SEARCH, 'path', SEARCH)).toBe(false);
    expect(probe.stats.rejectedDropped).toBe(8);
    expect(seen).toEqual({ tallied: 1, uncounted: 8 });
  });

  it('counts nothing with countRejected: false, and validates its options', async () => {
    const { probe, transport, advance } = setup({ countRejected: false });
    expect(probe.reject(R, SEARCH, 'path', SEARCH)).toBe(false);
    advance(10);
    await settle();
    expect(transport.published).toHaveLength(0);
    expect(probe.stats).toMatchObject({ rejected: 0, rejectedDropped: 0 });
    const transport2 = new RecordingTransport();
    for (const bad of [{ maxTallies: 0 }, { maxTallies: 10_001 }, { countRejected: 'yes' as unknown as boolean }]) {
      let err: unknown;
      try {
        new Probe({ transport: transport2, ...bad });
      } catch (e) {
        err = e;
      }
      expect(isSluiceError(err) && err.code).toBe('SLUICE_ERR_INVALID_OPTIONS');
    }
  });
});
